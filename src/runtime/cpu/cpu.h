// The `cpu` driver: one device, cpu[0], whose lowered kernels are x86-64 code compiled ahead of
// time by the CPU backend (src/backends/cpu) into a shared object inside the executable's
// payload (payload.h), called through the entry-point ABI of abi.h over the grid and push
// constants of each dispatch. Workgroups are split into chunks run in parallel by a thread
// pool. Kernels the backend left tensor-level come in a second executable of target `ref`,
// which the device also loads and runs on the reference interpreter, exactly as on ref.
// Memory and the queue are the host devices' (runtime/host/host.h).
//
// Loading never uses LLVM, the IR parser or the simulator: the shared object is written to a
// memfd (or a temporary file) and dlopen'ed. An executable whose code needs CPU features the
// host lacks is refused.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/cpu/abi.h"
#include "runtime/cpu/payload.h"
#include "runtime/cpu/shared_object.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/host/host.h"

namespace kiln::cpu {
// The host CPU's model name (cpuid brand string), for device descriptions.
std::string hostCpuModel();
} // namespace kiln::cpu

namespace kiln::hal::cpu {

Driver* cpuDriver();

// A loaded cpu payload: the shared object and one entry point per kernel.
class CpuExecutable : public Executable {
public:
  static Result<std::unique_ptr<CpuExecutable>> load(const std::string& payload);
  const std::string& target() const override { return target_; }
  size_t numKernels() const override { return payload_.kernels.size(); }
  const std::string& kernelName(size_t index) const override {
    return payload_.kernels[index].name;
  }
  const kiln::cpu::CpuKernelInfo& info(size_t kernel) const { return payload_.kernels[kernel]; }
  KilnCpuKernelFn entry(size_t kernel) const { return entries_[kernel]; }
  const std::string& compiledFor() const { return payload_.cpu; }

private:
  std::string target_ = "cpu";
  kiln::cpu::CpuPayload payload_;
  std::unique_ptr<SharedObject> code_;
  std::vector<KilnCpuKernelFn> entries_;
};

class CpuDevice : public host::HostDevice {
public:
  // `threads` < 1 means cpuThreadCount(); `async`: the queue runs on a thread of its own
  // (several cpu devices of one process then run at once).
  explicit CpuDevice(int64_t ordinal, int threads = 0, bool async = false);
  ~CpuDevice() override;
  std::string description() const override;
  // Target "cpu" (compiled kernels) or "ref" (kernels run by the interpreter).
  Result<std::unique_ptr<Executable>> loadExecutable(const std::string& target,
                                                     const std::string& payload) override;
  int threads() const { return pool_.threads(); }

protected:
  Status dispatch(const host::HostCommandBuffer::Command& c) override;

private:
  Status run(const CpuExecutable& exe, const host::HostCommandBuffer::Command& c);

  ThreadPool pool_;
};

} // namespace kiln::hal::cpu
