// The `cpu` driver: one device, cpu[0], whose lowered kernels are x86-64 code compiled ahead of
// time by the CPU backend (src/backends/cpu) into a shared object inside the executable's
// payload (payload.h), called through the entry-point ABI of abi.h. Workgroups are split into
// chunks run in parallel by a thread pool. Kernels the backend left tensor-level run on the
// reference interpreter, exactly as on ref. Buffers are host memory (RefBuffer).
//
// Loading never uses LLVM: the shared object is written to a memfd (or a temporary file) and
// dlopen'ed. An executable whose code needs CPU features the host lacks is refused.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/cpu/abi.h"
#include "runtime/cpu/payload.h"
#include "runtime/cpu/shared_object.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/ref/ref.h"
#include "runtime/sim/sim.h"

namespace kiln::cpu {
// The host CPU's model name (cpuid brand string), for device descriptions.
std::string hostCpuModel();
} // namespace kiln::cpu

namespace kiln::hal::cpu {

Driver* cpuDriver();

// A loaded cpu payload: the kernels' IR (a RefExecutable, for grids and for the kernels the
// interpreter runs) plus the shared object and one entry point per lowered kernel.
class CpuExecutable : public ref::RefExecutable {
public:
  static Result<std::unique_ptr<CpuExecutable>> load(const std::string& payload);
  const kiln::cpu::CpuKernelInfo& info(size_t kernel) const { return payload_.kernels[kernel]; }
  // The entry point of kernel `kernel`, or null when it is not lowered.
  KilnCpuKernelFn entry(size_t kernel) const { return entries_[kernel]; }
  const std::string& compiledFor() const { return payload_.cpu; }
  // sim::kernelGrid of kernel `kernel`, remembered per symbol binding: it walks the kernel's
  // IR, which a dispatch should not pay for every time.
  Result<sim::Grid> grid(size_t kernel, const SymbolBinding& dims) const;

private:
  mutable std::mutex gridMu_;
  mutable std::map<std::pair<size_t, SymbolBinding>, sim::Grid> grids_;
  kiln::cpu::CpuPayload payload_;
  std::unique_ptr<SharedObject> code_;
  std::vector<KilnCpuKernelFn> entries_;
};

class CpuDevice : public ref::RefDevice {
public:
  // `threads` < 1 means cpuThreadCount().
  explicit CpuDevice(int64_t ordinal, int threads = 0);
  std::string description() const override;
  Result<std::unique_ptr<Executable>> loadExecutable(const std::string& target,
                                                     const std::string& payload) override;
  int threads() const { return pool_.threads(); }

protected:
  Status dispatchLowered(const ref::RefExecutable& exe, const Func& f,
                         const ref::RefCommandBuffer::Command& c) override;

private:
  ThreadPool pool_;
};

} // namespace kiln::hal::cpu
