// ThreadPool: workers watch for a new run's generation (spinning briefly, then sleeping on a
// condition variable), take chunks from the front of their own share of the range, then
// from the other threads' shares, until the range is exhausted, then report done; the
// caller works alongside them, on share 0.
#include "runtime/cpu/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <system_error>

namespace kiln::hal::cpu {

namespace {
std::atomic<int> gThreads{0};
constexpr int kMaxThreads = 1024;
// How long an idle thread watches for more work before sleeping: a few microseconds.
constexpr int kSpins = 4096;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}
} // namespace

void setCpuThreads(int n) { gThreads = n < 1 ? 0 : (n > kMaxThreads ? kMaxThreads : n); }

int cpuThreadCount() {
  if (int n = gThreads.load(); n > 0) return n;
  if (const char* env = std::getenv("KILN_CPU_THREADS"); env && *env) {
    char* end = nullptr;
    long n = std::strtol(env, &end, 10);
    if (*end == '\0' && n >= 1 && n <= kMaxThreads) return static_cast<int>(n);
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw > kMaxThreads ? kMaxThreads : hw);
}

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) threads = 1;
  shares_ = std::make_unique<Share[]>(static_cast<size_t>(threads));
  for (int i = 1; i < threads; ++i) {
    try {
      workers_.emplace_back([this, i] { workerLoop(i); });
    } catch (const std::system_error&) {
      break; // fewer threads, still correct
    }
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::work(int self) {
  int n = threads();
  for (int i = 0; i < n; ++i) {
    Share& s = shares_[static_cast<size_t>((self + i) % n)];
    for (;;) {
      int64_t begin = s.next.fetch_add(chunk_, std::memory_order_relaxed);
      if (begin >= s.end) break;
      (*fn_)(begin, s.end - begin < chunk_ ? s.end : begin + chunk_);
    }
  }
}

void ThreadPool::workerLoop(int self) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = seen;
    for (int i = 0; i < kSpins; ++i) {
      g = generation_.load(std::memory_order_acquire);
      if (g != seen || stop_.load(std::memory_order_relaxed)) break;
      cpuRelax();
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleepers_;
      wake_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
      --sleepers_;
      g = generation_.load(std::memory_order_acquire);
    }
    if (stop_.load()) return;
    seen = g;
    work(self);
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

void ThreadPool::run(int64_t total, int64_t chunk,
                     const std::function<void(int64_t, int64_t)>& fn) {
  if (total <= 0) return;
  if (chunk < 1) chunk = 1;
  std::lock_guard<std::mutex> runLock(runMu_);
  if (workers_.empty() || total <= chunk) {
    for (int64_t b = 0; b < total; b += chunk) fn(b, total - b < chunk ? total : b + chunk);
    return;
  }
  fn_ = &fn;
  chunk_ = chunk;
  // Thread t's share: the t-th of n nearly equal contiguous parts (the first total % n one
  // item longer).
  int64_t n = threads(), base = total / n, extra = total % n;
  for (int64_t t = 0; t < n; ++t) {
    Share& s = shares_[static_cast<size_t>(t)];
    s.next.store(base * t + std::min(t, extra), std::memory_order_relaxed);
    s.end = base * (t + 1) + std::min(t + 1, extra);
  }
  active_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  bool sleeping = false;
  {
    // Raised under mu_, so that a worker about to sleep either sees it or is woken.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
    sleeping = sleepers_ > 0;
  }
  if (sleeping) wake_.notify_all();
  work(0);
  for (int i = 0; i < kSpins && active_.load(std::memory_order_acquire) != 0; ++i) cpuRelax();
  if (active_.load(std::memory_order_acquire) != 0) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return active_.load(std::memory_order_acquire) == 0; });
  }
  fn_ = nullptr;
}

} // namespace kiln::hal::cpu
