// The `ref` driver: devices ref[0..N-1] whose kernels are tensor-level functions run by the
// reference interpreter. The `sim` driver (sim[0]) is the same device with one difference:
// its executables may hold lowered kernels (kernel IR), which it runs on the kernel-IR
// simulator (runtime/sim/sim.h) thread by thread, after checking that the dispatch's grid is
// the one the kernel's prologue computes. Each device has its own memory; a kernel that binds
// a buffer of another device fails at run time (never a silent copy). Memory, command buffers
// and the synchronous queue are the host devices' (runtime/host/host.h).
//
// N is 8 unless the environment sets KILN_REF_DEVICES (1 to 64): ref devices cost nothing
// until opened, and 8 lets an 8-stage pipeline run without setting anything.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ir/core/ir.h"
#include "ir/io/weights.h"
#include "runtime/hal.h"
#include "runtime/host/host.h"

namespace kiln::hal::ref {

Driver* refDriver();
Driver* simDriver();

// The payload is kiln IR text: one function per kernel, in kernel order; tensor-level for
// target "ref", tensor-level or lowered (kernel IR) for target "sim". Each kernel's push
// constants are its pushConstantSymbols (ir/core/push_constants.h), bound back to their names.
class RefExecutable : public Executable {
public:
  static Result<std::unique_ptr<RefExecutable>> load(const std::string& target,
                                                     const std::string& payload);
  const std::string& target() const override { return target_; }
  size_t numKernels() const override { return kernels_.size(); }
  const std::string& kernelName(size_t index) const override { return kernels_[index]->name(); }
  const Func& kernel(size_t index) const { return *kernels_[index]; }
  bool lowered(size_t index) const { return lowered_[index]; }
  // The symbol values a dispatch of kernel `index` pushes, by name.
  Result<SymbolBinding> bindPushConstants(size_t index, const std::vector<int64_t>& values,
                                          const Loc& loc) const;
  WeightStore& weights() const { return *weights_; }

private:
  std::string target_;
  std::unique_ptr<Module> module_;
  std::vector<const Func*> kernels_;
  std::vector<bool> lowered_;
  std::vector<std::vector<std::string>> push_; // per kernel
  std::unique_ptr<WeightStore> weights_;
};

// Checks dispatch `c` of a tensor-level kernel of `exe` on `device` without running it: the
// kernel exists and is not lowered, the push constants match, and every binding is a buffer
// of `device` large enough for its tensor.
Status checkInterpreted(const Device& device, const RefExecutable& exe,
                        const host::HostCommandBuffer::Command& c);

// Runs the tensor-level kernel of dispatch `c` on `device` with the interpreter: the kernel's
// arguments are the first bindings, its results are written to the rest. Host buffers are
// read in place; any other buffer is read into host memory with Buffer::read, and results are
// written with Buffer::write, so every driver whose devices load `ref` executables (ref, cpu,
// vulkan) runs them with this. The caller orders it after the device work that writes its
// inputs.
Status runInterpreted(const Device& device, const RefExecutable& exe,
                      const host::HostCommandBuffer::Command& c);

class RefDevice : public host::HostDevice {
public:
  // `kind` is "ref" or "sim" (the target its executables have).
  RefDevice(std::string kind, int64_t ordinal) : HostDevice(DeviceId{std::move(kind), ordinal}) {}
  std::string description() const override;
  Result<std::unique_ptr<Executable>> loadExecutable(const std::string& target,
                                                     const std::string& payload) override;

protected:
  Status dispatch(const host::HostCommandBuffer::Command& c) override;

private:
  Status simulate(const RefExecutable& exe, const host::HostCommandBuffer::Command& c);
};

} // namespace kiln::hal::ref
