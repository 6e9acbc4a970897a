// What the hip and cuda drivers share: a device over a vendor's driver library, reached
// through the small GpuApi interface that each driver implements (runtime/hip, runtime/cuda).
//
//   GpuDevice      buffers in device memory (host access by synchronous copies), executables
//                  from GPU payloads (payload.h: the image of the device's arch, every kernel
//                  checked against the device's limits at load), HostCommandBuffers replayed
//                  on the device's stream at submit (submit.cpp), host timeline semaphores
//   GpuBuffer      one device allocation
//   GpuExecutable  one loaded module and a function per kernel
//
// A submission runs on the submitting thread: it waits for its wait semaphore, queues every
// command on the stream (a barrier is free: the stream runs commands in order), waits for the
// stream, then reads the dispatches' status words (one i32 per dispatch, zeroed by the
// submission) and signals, or fails, the signal semaphore. Kernels of `ref` executables (those
// the backend left tensor-level) run on the interpreter between the stream's commands, once
// the stream has finished the commands before them.
#pragma once

#include <algorithm>
#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/gpu/payload.h"
#include "runtime/hal.h"
#include "runtime/host/host.h"
#include "runtime/recycler.h"

namespace kiln::hal::gpu {

// dlopen of a vendor library: the path in environment variable `env` when it is set, else
// `fallback`; a library that cannot be opened is an error that says what to install (`hint`).
// Libraries are never closed (drivers keep process-wide state).
Result<void*> openLibrary(const char* env, const char* fallback, const std::string& hint);

// The limits kernels are checked against, read from the device.
struct GpuLimits {
  std::array<uint32_t, 3> maxBlock{};  // threads per workgroup along x, y, z
  uint32_t maxThreadsPerBlock = 0;     // threads per workgroup in all
  std::array<uint32_t, 3> maxGrid{};   // workgroups along x, y, z
  uint32_t sharedBytes = 0;            // static + dynamic shared memory per workgroup
  std::vector<uint32_t> subgroupSizes; // wave/warp sizes the device runs
};

struct GpuDeviceInfo {
  std::string name; // "NVIDIA H100 80GB HBM3"
  std::string arch; // "sm_90", "gfx942": what payload images are chosen by
  uint64_t memoryBytes = 0;
  std::string description; // kiln devices' line
  GpuLimits limits;
};

// The calls the shared device makes into a vendor library, each on the device's one stream
// where it is queued. Failures are errors that name the device and the call, with the
// library's own text for its error code.
class GpuApi {
public:
  virtual ~GpuApi() = default;
  // Makes the device current on the calling thread (hipSetDevice, cuCtxSetCurrent).
  virtual Status bind() = 0;
  virtual Result<uint64_t> allocate(uint64_t bytes) = 0;
  virtual void release(uint64_t address) = 0;
  // Synchronous host transfers.
  virtual Status upload(uint64_t dst, const void* src, uint64_t bytes) = 0;
  virtual Status download(void* dst, uint64_t src, uint64_t bytes) = 0;
  // Queued on the stream.
  virtual Status copy(uint64_t dst, uint64_t src, uint64_t bytes) = 0;
  virtual Status fill(uint64_t dst, uint8_t pattern, uint64_t bytes) = 0;
  virtual Status launch(void* function, const std::string& kernel, const Workgroups& grid,
                        const std::array<uint32_t, 3>& block, uint32_t dynamicSharedBytes,
                        std::vector<uint64_t>& kernargs) = 0;
  // Waits until the stream has run everything queued on it.
  virtual Status finish() = 0;
  // The image's module, loaded (HSA code object, or PTX through the JIT).
  virtual Result<void*> loadModule(const kiln::gpu::GpuImage& image) = 0;
  virtual void unloadModule(void* module) = 0;
  // Kernel `k`'s function in `module`, ready to launch with k.dynamicSharedBytes.
  virtual Result<void*> function(void* module, const kiln::gpu::GpuKernelInfo& k) = 0;
  // Timing events for profiles: one recorded on the stream now, and the seconds between two
  // that have completed.
  virtual Result<void*> recordEvent() = 0;
  virtual Result<double> elapsed(void* start, void* stop) = 0;
  virtual void destroyEvent(void* event) = 0;
};

class GpuDevice;

class GpuBuffer : public Buffer {
public:
  GpuBuffer(std::shared_ptr<GpuDevice> device, uint64_t address, uint64_t bytes)
      : device_(std::move(device)), address_(address), bytes_(bytes) {}
  ~GpuBuffer() override;
  Device& device() override;
  uint64_t byteSize() const override { return bytes_; }
  Status write(uint64_t offset, const void* src, uint64_t bytes) override;
  Status read(uint64_t offset, void* dst, uint64_t bytes) const override;
  uint8_t* map() override { return nullptr; }
  uint64_t address() const { return address_; }
  const GpuDevice& owner() const { return *device_; }

private:
  std::shared_ptr<GpuDevice> device_;
  uint64_t address_;
  uint64_t bytes_;
};

class GpuExecutable : public Executable {
public:
  static Result<std::unique_ptr<GpuExecutable>> load(std::shared_ptr<GpuDevice> device,
                                                     const std::string& payload);
  ~GpuExecutable() override;
  const std::string& target() const override { return target_; }
  size_t numKernels() const override { return image_.kernels.size(); }
  const std::string& kernelName(size_t index) const override { return image_.kernels[index].name; }
  const kiln::gpu::GpuKernelInfo& kernel(size_t index) const { return image_.kernels[index]; }
  void* function(size_t index) const { return functions_[index]; }
  const GpuDevice& owner() const { return *device_; }

private:
  explicit GpuExecutable(std::shared_ptr<GpuDevice> device) : device_(std::move(device)) {}
  std::shared_ptr<GpuDevice> device_;
  std::string target_;
  kiln::gpu::GpuImage image_;
  void* module_ = nullptr;
  std::vector<void*> functions_;
};

class GpuDevice : public Device, public std::enable_shared_from_this<GpuDevice> {
public:
  // `target` is the executable target its driver names ("amdgpu", "cuda").
  GpuDevice(DeviceId id, std::string target, GpuDeviceInfo info, std::unique_ptr<GpuApi> api);
  ~GpuDevice() override;

  const DeviceId& id() const override { return id_; }
  std::string description() const override { return info_.description; }
  DeviceLimits limits() const override { return {info_.memoryBytes, info_.memoryBytes}; }
  MemoryStats memoryStats() const override;
  void resetPeak() override;
  Result<std::unique_ptr<Buffer>> allocate(uint64_t bytes) override;
  // Target `target` (the driver's) or "ref" (run by the interpreter).
  Result<std::unique_ptr<Executable>> loadExecutable(const std::string& target,
                                                     const std::string& payload) override;
  std::unique_ptr<CommandBuffer> createCommandBuffer() override;
  std::unique_ptr<Semaphore> createSemaphore(uint64_t initial) override;
  Status submit(CommandBuffer& cb, const Semaphore* wait, uint64_t waitValue, Semaphore& signal,
                uint64_t signalValue) override;
  // Events around each dispatch time it on the device; the profile is filled once the
  // submission's stream has finished.
  bool setProfiler(DispatchProfiler* profiler) override {
    std::lock_guard<std::recursive_mutex> lock(queueMu_);
    profiler_ = profiler;
    return true;
  }

  const GpuDeviceInfo& info() const { return info_; }
  const std::string& executableTarget() const { return target_; }
  GpuApi& api() const { return *api_; }
  Loc loc() const { return Loc::named(id_.str()); }
  // "hip[0] (AMD Instinct MI300X)", how errors name the device.
  std::string displayName() const { return id_.str() + " (" + info_.name + ")"; }
  // Host reads and writes wait for the queue (a submission in progress on another thread);
  // recursive, as the interpreter's kernels read and write buffers inside a submission.
  std::recursive_mutex& queueMutex() const { return queueMu_; }
  void released(uint64_t bytes);
  // A destroyed buffer's memory (queue lock held): kept for a later allocation of its size
  // class (runtime/recycler.h), up to half the device's memory, else released.
  void recycle(uint64_t address, uint64_t bytes);
  // Allocations are whole granules (cuMemAlloc aligns to 256 bytes at least), so that a freed
  // buffer serves every later one of its size class; at least one, so that an empty tensor
  // still has an address of its own.
  static constexpr uint64_t kGranule = 256;
  static uint64_t granules(uint64_t bytes) {
    return (std::max<uint64_t>(bytes, 1) + kGranule - 1) / kGranule * kGranule;
  }

private:
  using Command = host::HostCommandBuffer::Command;
  struct Timing {
    const Command* command;
    void* start;
    void* stop;
  };
  Status run(const std::vector<Command>& commands, std::vector<Timing>& timings);
  Status queueDispatch(const Command& c, uint64_t statusAddress);
  Result<uint64_t> statusWords(size_t count);
  Status checkStatus(const std::vector<Command>& commands);

  DeviceId id_;
  std::string target_;
  GpuDeviceInfo info_;
  std::unique_ptr<GpuApi> api_;

  mutable std::recursive_mutex queueMu_; // the stream, the status words and the profiler
  uint64_t statusAddress_ = 0;           // one i32 per dispatch of a submission
  size_t statusCapacity_ = 0;
  DispatchProfiler* profiler_ = nullptr;

  mutable std::mutex statsMu_;
  MemoryStats stats_;
  Recycler<uint64_t> recycler_;
};

} // namespace kiln::hal::gpu
