// CompileTimer: where one compile's time goes (kiln compile --time-passes) and how far it is
// (kiln compile --progress). The compile driver, the pass manager and the backends record
// phases into it; the CLI prints the table and draws the progress line.
//
// Phases nest: a ScopedPhase opened while another is open is its child, and the table lists
// phases in the order they began, indented by depth. Kernel times (LLVM optimization and code
// generation per kernel) and kernel progress may be recorded from worker threads; phases are
// opened and closed by the thread that drives the compile.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace kiln {

class CompileTimer {
public:
  // Called when a phase begins and when a kernel of the current phase finishes: the phase's
  // name and its kernels done of total (total 0: the phase counts no kernels).
  using ProgressFn = std::function<void(const std::string& phase, size_t done, size_t total)>;

  void setProgress(ProgressFn fn) { progress_ = std::move(fn); }

  // Opens a phase (prefer ScopedPhase); returns its slot for closePhase.
  size_t openPhase(std::string name, size_t kernels = 0);
  void closePhase(size_t slot);
  // A phase timed elsewhere (the pass manager's passes), a child of the open phase.
  void addPhase(std::string name, double ms);
  // A counted fact ("kernels before deduplication"); a repeated name adds up.
  void addCount(const std::string& name, int64_t n);
  int64_t count(const std::string& name) const;
  // One kernel's LLVM optimization and code generation (thread-safe); `group` (the cpu
  // backend: its optimization level, "O3") sums the times per group in the table.
  void addKernel(std::string name, double optimizeMs, double codegenMs, std::string group = "");
  // A kernel of the open phase is done (thread-safe).
  void kernelDone();

  // The table: phases with milliseconds and share of the total, the counts, and the slowest
  // `slowest` kernels.
  std::string table(size_t slowest = 5) const;

private:
  struct Phase {
    std::string name;
    int depth = 0;
    double ms = 0;
    std::chrono::steady_clock::time_point begin;
    bool open = false;
  };
  struct Kernel {
    std::string name;
    double optimizeMs = 0;
    double codegenMs = 0;
    std::string group;
  };
  std::vector<Phase> phases_;
  std::vector<size_t> stack_; // open phases, innermost last
  std::vector<std::pair<std::string, int64_t>> counts_;
  std::vector<Kernel> kernels_;
  mutable std::mutex mu_; // kernels_, done_, progress calls from workers
  ProgressFn progress_;
  std::string current_;
  size_t done_ = 0, total_ = 0;
};

// Times a phase for its lifetime; does nothing when `timer` is null.
class ScopedPhase {
public:
  ScopedPhase(CompileTimer* timer, std::string name, size_t kernels = 0)
      : timer_(timer), slot_(timer ? timer->openPhase(std::move(name), kernels) : 0) {}
  ~ScopedPhase() {
    if (timer_) timer_->closePhase(slot_);
  }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

private:
  CompileTimer* timer_;
  size_t slot_;
};

} // namespace kiln
