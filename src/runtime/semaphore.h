// A timeline semaphore in host memory (mutex + condition variable), shared by drivers
// whose queues the host drives (ref, cpu, sim).
#pragma once

#include <condition_variable>
#include <mutex>

#include "runtime/hal.h"

namespace kiln::hal {

class HostSemaphore : public Semaphore {
public:
  explicit HostSemaphore(uint64_t initial) : value_(initial) {}
  uint64_t value() const override;
  void signal(uint64_t value) override;
  void fail(Diags why) override;
  Status wait(uint64_t target) const override;

private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  uint64_t value_;
  bool failed_ = false;
  Diags why_;
};

} // namespace kiln::hal
