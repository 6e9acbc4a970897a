// HostSemaphore: the value only grows; a failure wakes every waiter with its error.
#include "runtime/semaphore.h"

namespace kiln::hal {

uint64_t HostSemaphore::value() const {
  std::lock_guard<std::mutex> lock(mu_);
  return value_;
}

void HostSemaphore::signal(uint64_t value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (value > value_) value_ = value;
  }
  cv_.notify_all();
}

void HostSemaphore::fail(Diags why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = true;
    why_ = std::move(why);
  }
  cv_.notify_all();
}

Status HostSemaphore::wait(uint64_t target) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return failed_ || value_ >= target; });
  if (failed_) return why_;
  return ok();
}

} // namespace kiln::hal
