// ThreadPool: workers wait for a new run's generation, take chunks from an atomic counter
// until the range is exhausted, then report done; the caller works alongside them.
#include "runtime/cpu/thread_pool.h"

#include <cstdlib>
#include <system_error>

namespace kiln::hal::cpu {

namespace {
std::atomic<int> gThreads{0};
constexpr int kMaxThreads = 1024;
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
  for (int i = 1; i < threads; ++i) {
    try {
      workers_.emplace_back([this] { workerLoop(); });
    } catch (const std::system_error&) {
      break; // fewer threads, still correct
    }
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::work() {
  for (;;) {
    int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (begin >= total_) return;
    int64_t end = total_ - begin < chunk_ ? total_ : begin + chunk_;
    (*fn_)(begin, end);
  }
}

void ThreadPool::workerLoop() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    lock.unlock();
    work();
    lock.lock();
    if (--active_ == 0) done_.notify_one();
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    total_ = total;
    chunk_ = chunk;
    next_.store(0, std::memory_order_relaxed);
    active_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  work();
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return active_ == 0; });
  fn_ = nullptr;
}

} // namespace kiln::hal::cpu
