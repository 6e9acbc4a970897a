// The `ref` driver: devices ref[0..N-1] whose kernels are tensor-level functions run by the
// reference interpreter. The `sim` driver (sim[0]) is the same device with one difference:
// its executables may hold lowered kernels (kernel IR), which it runs on the kernel-IR
// simulator (runtime/sim/sim.h) thread by thread. Each device has its own memory; a kernel that
// binds a buffer of another device fails at run time (never a silent copy). Submissions run
// synchronously on the calling thread, in submission order. The cpu driver
// (runtime/cpu/cpu.h) derives from RefDevice and overrides dispatchLowered to call compiled code.
//
// N is 8 unless the environment sets KILN_REF_DEVICES (1 to 64): ref devices cost nothing
// until opened, and 8 lets an 8-stage pipeline run without setting anything.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "ir/ir.h"
#include "ir/weights.h"
#include "runtime/hal.h"

namespace kiln::hal::ref {

Driver* refDriver();
Driver* simDriver();

class RefDevice;

// Host memory aligned to kHostAlignment bytes (a cache line, one AVX-512 vector): the cpu
// driver's compiled kernels may rely on it.
constexpr uint64_t kHostAlignment = 64;
struct HostMemoryFree {
  bool owned = true; // false: imported memory the caller frees
  void operator()(uint8_t* p) const;
};
using HostMemory = std::unique_ptr<uint8_t, HostMemoryFree>;

class RefBuffer : public Buffer {
public:
  RefBuffer(RefDevice& device, HostMemory data, uint64_t bytes)
      : device_(device), data_(std::move(data)), bytes_(bytes) {}
  ~RefBuffer() override;
  Device& device() override;
  uint64_t byteSize() const override { return bytes_; }
  Status write(uint64_t offset, const void* src, uint64_t bytes) override;
  Status read(uint64_t offset, void* dst, uint64_t bytes) const override;
  uint8_t* map() override { return data_.get(); }

private:
  RefDevice& device_;
  HostMemory data_;
  uint64_t bytes_;
};

// The payload is kiln IR text: one function per kernel, in kernel order; tensor-level for
// target "ref", tensor-level or lowered (kernel IR) for target "sim".
// Derived executables (cpu) call parse() on their IR text and add what they need.
class RefExecutable : public Executable {
public:
  static Result<std::unique_ptr<RefExecutable>> load(const std::string& target,
                                                     const std::string& payload);
  // Parses and verifies `irText`; kernel-level ops are allowed for targets "sim" and "cpu".
  Status parse(const std::string& target, const std::string& irText);
  const std::string& target() const override { return target_; }
  size_t numKernels() const override { return kernels_.size(); }
  const std::string& kernelName(size_t index) const override { return kernels_[index]->name(); }
  const Func& kernel(size_t index) const { return *kernels_[index]; }
  WeightStore& weights() const { return *weights_; }

private:
  std::string target_ = "ref";
  std::unique_ptr<Module> module_;
  std::vector<const Func*> kernels_;
  std::unique_ptr<WeightStore> weights_;
};

class RefCommandBuffer : public CommandBuffer {
public:
  struct Command {
    enum Kind { Dispatch, Copy, Fill, Barrier };
    Kind kind = Barrier;
    const Executable* exe = nullptr;
    size_t kernel = 0;
    std::vector<Binding> inputs, outputs;
    SymbolBinding dims;
    Buffer* src = nullptr;
    Buffer* dst = nullptr;
    uint64_t srcOffset = 0, dstOffset = 0, bytes = 0;
    uint8_t pattern = 0;
  };
  void dispatch(const Executable& exe, size_t kernel, std::vector<Binding> inputs,
                std::vector<Binding> outputs, SymbolBinding dims) override;
  void copy(Buffer& src, uint64_t srcOffset, Buffer& dst, uint64_t dstOffset,
            uint64_t bytes) override;
  void fill(Buffer& dst, uint64_t offset, uint64_t bytes, uint8_t pattern) override;
  void barrier() override;
  size_t numCommands() const override { return commands_.size(); }
  const std::vector<Command>& commands() const { return commands_; }

private:
  std::vector<Command> commands_;
};

class RefDevice : public Device {
public:
  // `kind` is "ref", "sim" or "cpu" (the target its executables have).
  RefDevice(std::string kind, int64_t ordinal) : id_{std::move(kind), ordinal} {}
  const DeviceId& id() const override { return id_; }
  std::string description() const override;
  DeviceLimits limits() const override;
  MemoryStats memoryStats() const override;
  void resetPeak() override;

  Result<std::unique_ptr<Buffer>> allocate(uint64_t bytes) override;
  // Host memory aligned to kHostAlignment; not counted in memoryStats (the caller owns it).
  std::unique_ptr<Buffer> importHost(uint8_t* data, uint64_t bytes) override;
  Result<std::unique_ptr<Executable>> loadExecutable(const std::string& target,
                                                     const std::string& payload) override;
  std::unique_ptr<CommandBuffer> createCommandBuffer() override;
  std::unique_ptr<Semaphore> createSemaphore(uint64_t initial) override;
  Status submit(CommandBuffer& cb, const Semaphore* wait, uint64_t waitValue, Semaphore& signal,
                uint64_t signalValue) override;

  // A buffer's memory back from its destructor: kept for a later allocation of the same
  // rounded size (up to kMaxCachedBytes in all; a call allocates the same sizes as the last
  // one, and fresh memory costs a page fault per page), else freed. memoryStats counts live
  // buffers only.
  void recycle(HostMemory memory, uint64_t bytes);
  static constexpr uint64_t kMaxCachedBytes = uint64_t(1) << 30;

protected:
  // Runs a lowered kernel (kernel IR) `f` of `exe`: sim runs it on the simulator; the cpu
  // device overrides this to call its compiled entry point.
  virtual Status dispatchLowered(const RefExecutable& exe, const Func& f,
                                 const RefCommandBuffer::Command& c);
  Status checkResident(const Binding& b, const std::string& kernel, const char* role, size_t i);

private:
  Status execute(const RefCommandBuffer::Command& c);
  Status dispatchNow(const RefCommandBuffer::Command& c);

  DeviceId id_;
  std::mutex queue_;
  mutable std::mutex statsMu_; // guards stats_ and the cache
  MemoryStats stats_;
  std::map<uint64_t, std::vector<HostMemory>> cache_; // freed memory by rounded size
  uint64_t cachedBytes_ = 0;
};

} // namespace kiln::hal::ref
