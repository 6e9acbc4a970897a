// The hardware abstraction layer: the six interfaces every runtime driver implements.
//
//   Driver        enumerates the devices of one kind (ref, cpu, vulkan, hip, sim) and opens them
//   Device        allocates buffers, loads executables, creates command buffers and
//                 semaphores, runs submissions on its queue, reports limits and memory use
//   Buffer        device memory; host transfers go through read/write (map for drivers
//                 whose memory the host can see)
//   Executable    the kernels of one target, loaded from a module's payload (opaque bytes
//                 to the runtime); a dispatch names "kernel N of executable E"
//   CommandBuffer a recorded list of dispatch / copy / fill / barrier commands
//   Semaphore     a timeline: a 64-bit value that only grows, waited for and signaled;
//                 a failure state carries the error of the work that failed
//
// Every call that can fail on user input or on a failing kernel returns a Result/Status;
// nothing here aborts. The runtime library links no LLVM and no compiler pass.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/core/device.h"
#include "ir/core/diag.h"
#include "ir/core/elem_type.h"

namespace kiln::hal {

// `kind[ordinal]`, such as ref[0]: the IR's DeviceTarget, so the compiler's placement and
// the runtime name devices with one type. parseDeviceId accepts any kind (a driver that is
// not built in is reported when it is opened); parseDeviceTarget knows the kinds.
using DeviceId = DeviceTarget;

// Parses "ref" (ordinal 0) or "ref[2]"; errors are located at `where` (a flag, a file).
Result<DeviceId> parseDeviceId(const std::string& text, const Loc& where);

class Device;

class Buffer {
public:
  virtual ~Buffer() = default;
  virtual Device& device() = 0;
  virtual uint64_t byteSize() const = 0;
  // Host access: a range outside the buffer is an error.
  virtual Status write(uint64_t offset, const void* src, uint64_t bytes) = 0;
  virtual Status read(uint64_t offset, void* dst, uint64_t bytes) const = 0;
  // Host-visible memory of the whole buffer, or null when the driver's memory is not
  // host-visible (then use read/write).
  virtual uint8_t* map() = 0;
};

class Executable {
public:
  virtual ~Executable() = default;
  virtual const std::string& target() const = 0;
  virtual size_t numKernels() const = 0;
  virtual const std::string& kernelName(size_t index) const = 0;
};

// What a kernel sees of one buffer: the buffer and the tensor it holds there (the cpu ABI
// passes the shape as the argument's extents; the interpreter views the buffer as a tensor).
struct Binding {
  Buffer* buffer = nullptr;
  ElemType elem = ElemType::F32;
  std::vector<int64_t> shape;
};

// A dispatch's grid: workgroups along x, y and z.
using Workgroups = std::array<int64_t, 3>;

class CommandBuffer {
public:
  virtual ~CommandBuffer() = default;
  // Runs kernel `kernel` of `exe` over `workgroups` (ignored by kernels that are not lowered),
  // handing it `pushConstants` (the values of the symbols it reads, in the launch's `push`
  // order) and `bindings` (its buffers: inputs, then outputs). As in IREE's HAL, nothing here
  // knows the compiler's IR. Buffers of another device are an error at run time.
  virtual void dispatch(const Executable& exe, size_t kernel, Workgroups workgroups,
                        std::vector<int64_t> pushConstants, std::vector<Binding> bindings) = 0;
  virtual void copy(Buffer& src, uint64_t srcOffset, Buffer& dst, uint64_t dstOffset,
                    uint64_t bytes) = 0;
  virtual void fill(Buffer& dst, uint64_t offset, uint64_t bytes, uint8_t pattern) = 0;
  // Commands after a barrier see the effects of every command before it.
  virtual void barrier() = 0;
  virtual size_t numCommands() const = 0;
};

class Semaphore {
public:
  virtual ~Semaphore() = default;
  virtual uint64_t value() const = 0;
  // Raises the value (never lowers it) and wakes waiters.
  virtual void signal(uint64_t value) = 0;
  // Puts the semaphore in the failed state: every wait returns these diagnostics.
  virtual void fail(Diags why) = 0;
  // Blocks until value() >= target or the semaphore failed.
  virtual Status wait(uint64_t target) const = 0;
};

struct DeviceLimits {
  uint64_t maxBufferBytes = 0;
  uint64_t memoryBytes = 0;
};

struct MemoryStats {
  uint64_t bytesInUse = 0;
  uint64_t peakBytes = 0;
  uint64_t allocations = 0;
};

// Receives the time of every dispatch a device runs while it is set (Device::setProfiler):
// the executor's profile (runtime/profile.h). Called on the thread that submitted the work.
class DispatchProfiler {
public:
  virtual ~DispatchProfiler() = default;
  virtual void record(const Executable& exe, size_t kernel, const Workgroups& workgroups,
                      double seconds) = 0;
};

class Device {
public:
  virtual ~Device() = default;
  virtual const DeviceId& id() const = 0;
  virtual std::string description() const = 0;
  virtual DeviceLimits limits() const = 0;
  virtual MemoryStats memoryStats() const = 0;
  virtual void resetPeak() = 0;

  virtual Result<std::unique_ptr<Buffer>> allocate(uint64_t bytes) = 0;
  // A buffer over `bytes` of host memory at `data`, which the caller keeps alive and which
  // kernels read and write directly (a donated argument's storage), or null when this
  // device cannot use that memory (not host memory, or not aligned as its buffers are).
  virtual std::unique_ptr<Buffer> importHost(uint8_t* data, uint64_t bytes) {
    (void)data, (void)bytes;
    return nullptr;
  }
  // `payload` is the executable's bytes in the module; `target` names its format.
  virtual Result<std::unique_ptr<Executable>> loadExecutable(const std::string& target,
                                                             const std::string& payload) = 0;
  virtual std::unique_ptr<CommandBuffer> createCommandBuffer() = 0;
  virtual std::unique_ptr<Semaphore> createSemaphore(uint64_t initial) = 0;
  // Runs `cb` on the device's queue once `wait` reaches `waitValue`, then signals `signal`
  // to `signalValue` (or fails it with the commands' error, which is also returned when the
  // driver runs synchronously).
  virtual Status submit(CommandBuffer& cb, const Semaphore* wait, uint64_t waitValue,
                        Semaphore& signal, uint64_t signalValue) = 0;
  // Blocks until every submission so far has run (a driver whose queue runs asynchronously
  // must not touch a caller's semaphore or buffers afterwards); an error when it cannot tell.
  virtual Status waitIdle() { return ok(); }
  // Whether submit returns before the work has run (the caller then keeps what it reads
  // alive until the signal semaphore says so).
  virtual bool asynchronous() const { return false; }
  // Times each dispatch it runs from now on into `profiler` (null: stop), or returns false
  // when the driver cannot time dispatches one by one (its queue runs them asynchronously).
  virtual bool setProfiler(DispatchProfiler* profiler) {
    (void)profiler;
    return false;
  }
};

struct DeviceInfo {
  DeviceId id;
  std::string description;
};

class Driver {
public:
  virtual ~Driver() = default;
  virtual const std::string& name() const = 0;
  // The executable target the compiler builds for this driver's devices (ref: "ref").
  virtual std::string target() const = 0;
  // Whether its devices load executables of `target`: their own, and for cpu and vulkan also
  // "ref" (the kernels their backend could not lower, run by the interpreter).
  virtual bool loads(const std::string& target) const { return target == this->target(); }
  virtual std::vector<DeviceInfo> enumerate() = 0;
  // Why enumerate() finds no device when its system library or driver is missing ("the
  // Vulkan loader could not be opened ..."), else empty.
  virtual std::string unavailableReason() { return ""; }
  virtual Result<std::shared_ptr<Device>> open(int64_t ordinal) = 0;
};

} // namespace kiln::hal
