// ProgressLine: the one-line progress indicator of kiln compile (phase, kernels done of
// total) on stderr. On a terminal it appears once the compile has run for two seconds and is
// redrawn in place, then erased at the end; elsewhere (a pipe, a CI log) it prints nothing
// unless forced (--progress), which prints every update from the start, one line each.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace kiln::cli {

class ProgressLine {
public:
  explicit ProgressLine(bool forced);
  ~ProgressLine() { finish(); }
  bool enabled() const { return enabled_; }
  void update(const std::string& phase, size_t done, size_t total);
  // Erases the line (on a terminal) if one was drawn.
  void finish();

private:
  bool enabled_ = false;
  bool terminal_ = false;
  bool forced_ = false;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_;
  std::string lastPhase_;
};

} // namespace kiln::cli
