// HostDevice: memory accounting with the freed-buffer cache, and the queue (synchronous, or
// on a thread of the device's own).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "runtime/host/host.h"
#include "runtime/semaphore.h"

namespace kiln::hal::host {

namespace {
// Host memory; this bound keeps a hostile size from reaching the allocator.
constexpr uint64_t kMaxBufferBytes = uint64_t(16) << 30;

// A buffer may reuse a freed allocation up to this many times its size (recycler.h).
constexpr uint64_t kMaxSlack = 2;

// At least one byte, so that empty tensors still have a distinct address; aligned_alloc
// wants a multiple of the alignment.
uint64_t roundedSize(uint64_t bytes) {
  return ((bytes ? bytes : 1) + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
}
} // namespace

DeviceLimits HostDevice::limits() const { return {kMaxBufferBytes, kMaxBufferBytes}; }

MemoryStats HostDevice::memoryStats() const {
  std::lock_guard<std::mutex> lock(statsMu_);
  return stats_;
}

void HostDevice::resetPeak() {
  std::lock_guard<std::mutex> lock(statsMu_);
  stats_.peakBytes = stats_.bytesInUse;
}

void HostDevice::recycle(HostMemory memory, uint64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(statsMu_);
    stats_.bytesInUse -= bytes;
  }
  uint64_t capacity = memory.get_deleter().capacity;
  (void)recycler_.keep(capacity, std::move(memory)); // not kept: freed here
}

Result<std::unique_ptr<Buffer>> HostDevice::allocate(uint64_t bytes) {
  Loc loc = Loc::named(id_.str());
  if (bytes > kMaxBufferBytes)
    return error(loc, "cannot allocate " + std::to_string(bytes) + " bytes (the limit is " +
                          std::to_string(kMaxBufferBytes) + ")");
  uint64_t rounded = roundedSize(bytes);
  HostMemory data;
  if (std::optional<HostMemory> kept = recycler_.takeFitting(rounded, kMaxSlack * rounded))
    data = std::move(*kept); // its deleter keeps its capacity
  else
    data = HostMemory(static_cast<uint8_t*>(std::aligned_alloc(kHostAlignment, rounded)),
                      HostMemoryFree{true, rounded});
  if (!data) return error(loc, "out of memory allocating " + std::to_string(bytes) + " bytes");
  {
    std::lock_guard<std::mutex> lock(statsMu_);
    stats_.bytesInUse += bytes;
    stats_.allocations += 1;
    if (stats_.bytesInUse > stats_.peakBytes) stats_.peakBytes = stats_.bytesInUse;
  }
  return std::unique_ptr<Buffer>(std::make_unique<HostBuffer>(*this, std::move(data), bytes));
}

std::unique_ptr<Buffer> HostDevice::importHost(uint8_t* data, uint64_t bytes) {
  if (!data || reinterpret_cast<uintptr_t>(data) % kHostAlignment != 0) return nullptr;
  return std::make_unique<HostBuffer>(*this, HostMemory(data, HostMemoryFree{false}), bytes);
}

std::unique_ptr<CommandBuffer> HostDevice::createCommandBuffer() {
  return std::make_unique<HostCommandBuffer>();
}

std::unique_ptr<Semaphore> HostDevice::createSemaphore(uint64_t initial) {
  return std::make_unique<HostSemaphore>(initial);
}

HostDevice::~HostDevice() { stopQueue(); }

void HostDevice::stopQueue() {
  {
    std::lock_guard<std::mutex> lock(jobsMu_);
    stopping_ = true;
  }
  jobsCv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

Status HostDevice::runCommands(const std::vector<HostCommandBuffer::Command>& commands,
                               Semaphore& signal, uint64_t value) {
  std::lock_guard<std::mutex> lock(queue_);
  for (const HostCommandBuffer::Command& c : commands) {
    Status s = execute(c);
    if (!s.ok()) {
      signal.fail(s.diags());
      return s;
    }
  }
  signal.signal(value);
  return ok();
}

void HostDevice::queueLoop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(jobsMu_);
      jobsCv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return; // stopping, and everything queued has run
      job = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = true;
    }
    (void)runCommands(job.commands, *job.signal, job.value); // a failure fails the semaphore
    {
      std::lock_guard<std::mutex> lock(jobsMu_);
      busy_ = false;
    }
    jobsCv_.notify_all();
  }
}

Status HostDevice::waitIdle() {
  std::unique_lock<std::mutex> lock(jobsMu_);
  jobsCv_.wait(lock, [&] { return jobs_.empty() && !busy_; });
  return ok();
}

Status HostDevice::submit(CommandBuffer& cb, const Semaphore* wait, uint64_t waitValue,
                          Semaphore& signal, uint64_t signalValue) {
  auto* hcb = dynamic_cast<HostCommandBuffer*>(&cb);
  if (!hcb)
    return error(Loc::named(id_.str()), "command buffer was not created by a host-memory device");
  // A wait for a value nobody signaled yet could never end on a queue that runs on the
  // caller's thread, so it is refused instead of blocking forever.
  if (wait && wait->value() < waitValue)
    return error(Loc::named(id_.str()), "submission waits for semaphore value " +
                                            std::to_string(waitValue) + ", which is not signaled");
  if (wait) KILN_CHECK(wait->wait(waitValue));
  if (async_ && !profiler_) {
    bool queued = false;
    {
      std::lock_guard<std::mutex> lock(jobsMu_);
      if (!worker_.joinable()) {
        try {
          worker_ = std::thread([this] { queueLoop(); });
        } catch (const std::system_error&) {
          async_ = false; // no thread: run on the caller's, as without setAsync
        }
      }
      if (worker_.joinable()) {
        jobs_.push_back(Job{hcb->commands(), &signal, signalValue});
        queued = true;
      }
    }
    if (queued) {
      jobsCv_.notify_all();
      return ok();
    }
  }
  return runCommands(hcb->commands(), signal, signalValue);
}

Status checkHostAccess(const Device& device, uint64_t size, uint64_t offset, uint64_t bytes,
                       const char* what) {
  if (offset > size || bytes > size - offset)
    return error(Loc::named(device.id().str()), std::string(what) + " of " + std::to_string(bytes) +
                                                    " bytes at " + std::to_string(offset) +
                                                    " is outside a buffer of " +
                                                    std::to_string(size) + " bytes");
  return ok();
}

Status checkBinding(const Device& device, const Binding& b, const std::string& kernel,
                    const char* role, size_t i) {
  const DeviceId& id = device.id();
  Loc loc = Loc::named(id.str());
  std::string what = std::string(role) + " " + std::to_string(i);
  if (!b.buffer) return error(loc, "kernel @" + kernel + ": " + what + " has no buffer");
  if (&b.buffer->device() != &device)
    return error(loc, "kernel @" + kernel + " on " + id.str() + ": " + what + " is a buffer of " +
                          b.buffer->device().id().str() + "; it must be transferred to " +
                          id.str() + " first");
  int64_t n = 1;
  for (int64_t d : b.shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      return error(loc, "kernel @" + kernel + ": " + what + " has an invalid shape");
  uint64_t need = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(n), elemTypeBytes(b.elem), &need) ||
      need > b.buffer->byteSize())
    return error(loc, "kernel @" + kernel + ": " + what + " needs " + std::to_string(need) +
                          " bytes but its buffer has " + std::to_string(b.buffer->byteSize()));
  return ok();
}

Status HostDevice::execute(const HostCommandBuffer::Command& c) {
  Loc loc = Loc::named(id_.str());
  switch (c.kind) {
  case HostCommandBuffer::Command::Dispatch: {
    if (!profiler_) return dispatch(c);
    auto start = std::chrono::steady_clock::now();
    Status s = dispatch(c);
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    profiler_->record(*c.exe, c.kernel, c.workgroups, took.count());
    return s;
  }
  case HostCommandBuffer::Command::Copy: {
    if (&c.dst->device() != this)
      return error(loc, "copy into a buffer of " + c.dst->device().id().str() + " submitted to " +
                            id_.str());
    uint8_t* src = c.src->map();
    if (!src) return error(loc, "copy from a buffer the host cannot map");
    if (c.srcOffset > c.src->byteSize() || c.bytes > c.src->byteSize() - c.srcOffset)
      return error(loc, "copy reads outside its source buffer");
    return c.dst->write(c.dstOffset, src + c.srcOffset, c.bytes);
  }
  case HostCommandBuffer::Command::Fill: {
    if (&c.dst->device() != this)
      return error(loc, "fill of a buffer of " + c.dst->device().id().str() + " submitted to " +
                            id_.str());
    if (c.dstOffset > c.dst->byteSize() || c.bytes > c.dst->byteSize() - c.dstOffset)
      return error(loc, "fill writes outside its buffer");
    std::memset(c.dst->map() + c.dstOffset, c.pattern, c.bytes);
    return ok();
  }
  case HostCommandBuffer::Command::Barrier: return ok();
  }
  return ok();
}

} // namespace kiln::hal::host
