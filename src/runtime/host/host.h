// What the host-memory drivers (ref, sim, cpu) share: buffers of 64-byte-aligned host memory
// with a cache of freed memory, a command buffer that records commands, and a queue that runs
// them synchronously on the submitting thread (or, with setAsync, on a thread of the device's
// own, so that several devices of one process run at once). Each driver derives its device from
// HostDevice and supplies executable loading and dispatch; copies, fills and barriers are run here.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/hal.h"
#include "runtime/recycler.h"

namespace kiln::hal::host {

class HostDevice;

// Host memory aligned to kHostAlignment bytes (a cache line, one AVX-512 vector): the cpu
// driver's compiled kernels may rely on it.
constexpr uint64_t kHostAlignment = 64;
struct HostMemoryFree {
  bool owned = true;     // false: imported memory the caller frees
  uint64_t capacity = 0; // bytes allocated (owned memory): at least the buffer's size
  void operator()(uint8_t* p) const;
};
using HostMemory = std::unique_ptr<uint8_t, HostMemoryFree>;

class HostBuffer : public Buffer {
public:
  HostBuffer(HostDevice& device, HostMemory data, uint64_t bytes)
      : device_(device), data_(std::move(data)), bytes_(bytes) {}
  ~HostBuffer() override;
  Device& device() override;
  uint64_t byteSize() const override { return bytes_; }
  Status write(uint64_t offset, const void* src, uint64_t bytes) override;
  Status read(uint64_t offset, void* dst, uint64_t bytes) const override;
  uint8_t* map() override { return data_.get(); }

private:
  HostDevice& device_;
  HostMemory data_;
  uint64_t bytes_;
};

class HostCommandBuffer : public CommandBuffer {
public:
  struct Command {
    enum Kind { Dispatch, Copy, Fill, Barrier };
    Kind kind = Barrier;
    const Executable* exe = nullptr;
    size_t kernel = 0;
    Workgroups workgroups{};
    std::vector<int64_t> pushConstants;
    std::vector<Binding> bindings;
    Buffer* src = nullptr;
    Buffer* dst = nullptr;
    uint64_t srcOffset = 0, dstOffset = 0, bytes = 0;
    uint8_t pattern = 0;
  };
  void dispatch(const Executable& exe, size_t kernel, Workgroups workgroups,
                std::vector<int64_t> pushConstants, std::vector<Binding> bindings) override;
  void copy(Buffer& src, uint64_t srcOffset, Buffer& dst, uint64_t dstOffset,
            uint64_t bytes) override;
  void fill(Buffer& dst, uint64_t offset, uint64_t bytes, uint8_t pattern) override;
  void barrier() override;
  size_t numCommands() const override { return commands_.size(); }
  const std::vector<Command>& commands() const { return commands_; }

private:
  std::vector<Command> commands_;
};

// Binding `role i` (input 0, buffer 2) of a dispatch of `kernel` on `device`: a buffer of
// `device` that holds its tensor. Every driver that runs the interpreter's kernels uses it.
Status checkBinding(const Device& device, const Binding& b, const std::string& kernel,
                    const char* role, size_t i);

// A host read or write (`what`: "a host read") of `bytes` at `offset` of a buffer of `size`
// bytes on `device`: an error when it leaves the buffer. Drivers whose buffers are not host
// memory (vulkan, hip, cuda) check their transfers with it.
Status checkHostAccess(const Device& device, uint64_t size, uint64_t offset, uint64_t bytes,
                       const char* what);

class HostDevice : public Device {
public:
  explicit HostDevice(DeviceId id) : id_(std::move(id)) {}
  ~HostDevice() override;
  const DeviceId& id() const override { return id_; }
  DeviceLimits limits() const override;
  MemoryStats memoryStats() const override;
  void resetPeak() override;

  Result<std::unique_ptr<Buffer>> allocate(uint64_t bytes) override;
  // Host memory aligned to kHostAlignment; not counted in memoryStats (the caller owns it).
  std::unique_ptr<Buffer> importHost(uint8_t* data, uint64_t bytes) override;
  std::unique_ptr<CommandBuffer> createCommandBuffer() override;
  std::unique_ptr<Semaphore> createSemaphore(uint64_t initial) override;
  Status submit(CommandBuffer& cb, const Semaphore* wait, uint64_t waitValue, Semaphore& signal,
                uint64_t signalValue) override;
  // The queue runs on the submitting thread while a profiler is set (even with setAsync), so
  // a dispatch's time is its kernel's.
  bool setProfiler(DispatchProfiler* profiler) override {
    if (profiler) (void)waitIdle();
    profiler_ = profiler;
    return true;
  }
  // Asynchronous queue: submit copies the commands to the device's queue thread and returns;
  // the signal semaphore is raised (or failed) when they have run. Set before the first
  // submission.
  void setAsync(bool on) { async_ = on; }
  Status waitIdle() override;
  bool asynchronous() const override { return async_ && !profiler_; }

  // A buffer's memory back from its destructor: kept for a later allocation of the same
  // rounded size (up to kMaxCachedBytes in all; a call allocates the same sizes as the last
  // one, and fresh memory costs a page fault per page), else freed. memoryStats counts live
  // buffers only.
  void recycle(HostMemory memory, uint64_t bytes);
  static constexpr uint64_t kMaxCachedBytes = uint64_t(1) << 30;

protected:
  // Runs one recorded dispatch on the submitting thread (or the queue thread).
  virtual Status dispatch(const HostCommandBuffer::Command& c) = 0;
  // Runs what is queued and ends the queue thread; a derived device whose dispatch uses its
  // own members calls it in its destructor.
  void stopQueue();

private:
  struct Job {
    std::vector<HostCommandBuffer::Command> commands;
    Semaphore* signal = nullptr;
    uint64_t value = 0;
  };
  Status execute(const HostCommandBuffer::Command& c);
  // Runs `commands` (under queue_), then signals or fails `signal`.
  Status runCommands(const std::vector<HostCommandBuffer::Command>& commands, Semaphore& signal,
                     uint64_t value);
  void queueLoop();

  DeviceId id_;
  std::mutex queue_;
  mutable std::mutex statsMu_; // guards stats_
  MemoryStats stats_;
  // Freed memory by rounded size, the newest first (warm in the caches).
  Recycler<HostMemory> recycler_{kMaxCachedBytes, Recycler<HostMemory>::Order::NewestFirst};
  DispatchProfiler* profiler_ = nullptr;
  bool async_ = false;
  std::mutex jobsMu_;
  std::condition_variable jobsCv_; // a job queued, the queue idle, or stopping
  std::deque<Job> jobs_;
  bool busy_ = false, stopping_ = false;
  std::thread worker_;
};

} // namespace kiln::hal::host
