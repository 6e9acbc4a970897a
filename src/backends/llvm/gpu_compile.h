// compileGpuKernels: lowered kernels -> LLVM IR (emitGpuKernel) -> O3 -> code for one GPU
// architecture, the compile driver the amdgpu and cuda backends share.
//
// Kernels with the same identity (backends/kernel_identity.h) compile once. Each distinct
// kernel is its own LLVM module in its own LLVMContext, optimized on a thread of parallelFor,
// with a diagnostic handler that turns LLVM's errors (an LDS overflow, which LLVM's default
// handler would end the process with) into this kernel's error; a fatal error or crash inside
// LLVM is caught (runRecoverably). AMDGPU: one ELF object per kernel, linked by lld into one
// HSA code object whose metadata note is read back and checked against the kernel ABI and the
// target's limits. NVPTX: the optimized modules are linked into one and printed as one PTX
// module. With a KernelCache, per-kernel objects (AMDGPU) or optimized bitcode (NVPTX) are
// reused across compiles. The output is the same for any thread count.
#pragma once

#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/kernel_cache.h"
#include "backends/llvm/emit.h"
#include "backends/llvm/machine.h"
#include "ir/core/ir.h"
#include "passes/compile_timer.h"
#include "runtime/gpu/payload.h"
#include "target/target.h"

namespace kiln::llvmgen {

struct GpuTargetSpec {
  std::string name; // the codegen target: "amdgpu:gfx942", "cuda:sm_90"
  std::string arch; // "gfx942", "sm_90"
  GpuArch kind = GpuArch::Amdgpu;
  MachineSpec machine; // triple and CPU (LLVM's name of the architecture)
  int64_t waveSize = 64;
  TargetDesc desc;
};

// The spec of a GPU codegen target name (an error for names that are not amdgpu:* or cuda:*).
Result<GpuTargetSpec> resolveGpuTarget(const std::string& name);

enum class GpuOutput { Executable, LlvmIr, Assembly };

struct GpuCompileOptions {
  CompileTimer* timer = nullptr;
  unsigned jobs = 0;
  KernelCache* cache = nullptr;
  GpuOutput output = GpuOutput::Executable;
  std::string* text = nullptr; // LlvmIr / Assembly: every distinct kernel's text, in order
};

// The image of `kernels` (functions of `m`, in kernel order) for `spec`.
Result<gpu::GpuImage> compileGpuKernels(const Module& m, const std::vector<const Func*>& kernels,
                                        const GpuTargetSpec& spec, const GpuCompileOptions& o);

// The amdgpu and cuda backends: codegen targets `PREFIX:ARCH` of the target table, executables
// holding one GpuImage. A subclass checks the linked image (finish).
class LlvmGpuBackend : public TargetBackend {
public:
  LlvmGpuBackend(std::string name, std::string prefix, std::string defaultTarget)
      : name_(std::move(name)), prefix_(std::move(prefix)), default_(std::move(defaultTarget)) {}
  const std::string& name() const override { return name_; }
  bool acceptsTarget(const std::string& target) const override;
  std::string targetNames() const override;
  bool runsTensorKernels() const override { return false; }
  Status addCodegenPasses(PassManager& pm, const BackendOptions& o,
                          const std::vector<DeviceTarget>& devices) const override;
  Result<std::string> serialize(const Module& m, const std::vector<const Func*>& kernels,
                                const BackendOptions& o) const override;
  Result<std::string> codeReport(const Module& m, const std::vector<const Func*>& kernels,
                                 const std::string& target) const override;
  // The image for `target` (kiln compile --emit=kernels reads its kernels' stats).
  Result<gpu::GpuImage> compile(const Module& m, const std::vector<const Func*>& kernels,
                                const std::string& target, const GpuCompileOptions& o) const;

protected:
  // Checks (and completes the stats of) the linked image.
  virtual Status finish(gpu::GpuImage& img, const GpuTargetSpec& spec) const = 0;

private:
  std::string name_, prefix_, default_;
};

} // namespace kiln::llvmgen
