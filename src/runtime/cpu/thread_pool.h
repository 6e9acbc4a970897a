// The cpu driver's thread pool: N threads (the caller plus N-1 workers) run the chunks of
// one range of work. Thread t first takes the chunks of its own share, the t-th of N
// contiguous parts of the range (the caller is thread 0), through that share's atomic
// counter, then helps with the other shares: the same workgroups of a grid run on the same
// thread call after call and kernel after kernel, so a block's outputs stay in the cache
// of the core that wrote them (one counter for the whole range handed each block to
// whichever thread came first: a 72 x 16 x 3136 GEMM's 13 blocks ran no faster on two
// threads than on one, 0.134 against 0.131 ms; 0.108-0.117 ms now). A worker that
// finished a run watches for the next one for a few microseconds (so back-to-back
// dispatches do not pay a futex wake-up each), then sleeps on a condition variable; nothing
// throws (a worker thread that cannot be started only makes the pool smaller).
//
// N is, in order: setCpuThreads (the CLI's --cpu-threads), the environment's
// KILN_CPU_THREADS, std::thread::hardware_concurrency.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::hal::cpu {

// The process-wide thread count for cpu devices opened after this call (n < 1: unset).
void setCpuThreads(int n);
int cpuThreadCount();

class ThreadPool {
public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, total) in chunks of at most `chunk` items, on every thread
  // of the pool including the caller, and returns when all chunks are done. One run at a
  // time: concurrent callers wait for each other.
  void run(int64_t total, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn);

private:
  void workerLoop(int self);
  void work(int self);

  std::mutex runMu_; // one run at a time
  std::mutex mu_;    // guards sleepers_ and the condition variables' waits
  std::condition_variable wake_, done_;
  std::atomic<uint64_t> generation_{0}; // one per run; workers join each exactly once
  std::atomic<bool> stop_{false};
  std::atomic<int> active_{0}; // workers that have not finished the current run
  int sleepers_ = 0;           // workers blocked on wake_
  // The current run, written before generation_ is raised (release) and read after it is
  // seen (acquire).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t chunk_ = 1;
  // Thread t's share of the range: [next, end), taken from the front by t first and by the
  // other threads once theirs are done.
  struct alignas(64) Share {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  std::unique_ptr<Share[]> shares_;
  std::vector<std::thread> workers_;
};

} // namespace kiln::hal::cpu
