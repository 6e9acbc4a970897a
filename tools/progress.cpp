// ProgressLine (progress.h).
#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace kiln::cli {

namespace {
constexpr std::chrono::milliseconds kDelay{2000}; // a shorter compile shows nothing
constexpr std::chrono::milliseconds kRedraw{100}; // redraws at most this often
} // namespace

ProgressLine::ProgressLine(bool forced)
    : terminal_(isatty(STDERR_FILENO) == 1), forced_(forced),
      start_(std::chrono::steady_clock::now()) {
  enabled_ = forced_ || terminal_;
}

void ProgressLine::update(const std::string& phase, size_t done, size_t total) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (terminal_) {
    if (!forced_ && now - start_ < kDelay) return;
    bool last = total > 0 && done == total;
    if (drawn_ && phase == lastPhase_ && !last && now - last_ < kRedraw) return;
  }
  last_ = now;
  lastPhase_ = phase;
  std::string text = "kiln compile: " + phase;
  if (total > 0) text += " (" + std::to_string(done) + "/" + std::to_string(total) + " kernels)";
  if (terminal_) {
    std::fprintf(stderr, "\r\033[K%s", text.c_str());
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressLine::finish() {
  if (drawn_ && terminal_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  drawn_ = false;
}

} // namespace kiln::cli
