// The cpu driver's thread pool: N threads (the caller plus N-1 workers) run the chunks of
// one range of work, handed out through an atomic counter. A worker that finished a run
// watches for the next one for a few microseconds (so back-to-back dispatches do not pay a
// futex wake-up each), then sleeps on a condition variable; nothing throws (a worker thread
// that cannot be started only makes the pool smaller).
//
// N is, in order: setCpuThreads (the CLI's --cpu-threads), the environment's
// KILN_CPU_THREADS, std::thread::hardware_concurrency.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
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
  void workerLoop();
  void work();

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
  int64_t total_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  std::vector<std::thread> workers_;
};

} // namespace kiln::hal::cpu
