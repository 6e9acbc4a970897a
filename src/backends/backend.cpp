// The target backend table.
#include "backends/backend.h"

#include <set>

#include "backends/ref/ref_backend.h"
#include "backends/sim/sim_backend.h"
#include "ir/text/printer.h"
#include "passes/codegen.h"
#ifdef KILN_HAVE_LLVM
#include "backends/amdgpu/amdgpu_backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/nvptx/nvptx_backend.h"
#endif
#ifdef KILN_HAVE_SPIRV
#include "backends/vulkan/vulkan_backend.h"
#endif

namespace kiln {

const std::vector<const TargetBackend*>& targetBackends() {
  // One row per backend; the GPU backends add theirs here.
  static const std::vector<const TargetBackend*> all = {
      refBackend(),           simBackend(),
#ifdef KILN_HAVE_LLVM
      cpu::cpuBackend(),      amdgpu::amdgpuBackend(),
      nvptx::cudaBackend(),
#endif
#ifdef KILN_HAVE_SPIRV
      spirv::vulkanBackend(),
#endif
  };
  return all;
}

const TargetBackend* lookupTargetBackend(const std::string& name) {
  for (const TargetBackend* b : targetBackends())
    if (b->name() == name) return b;
  return nullptr;
}

Result<std::string> kernelsReport(const Module& m, const TargetDesc& target) {
  std::string out = kernelReport(m, target);
  std::vector<const Func*> kernels;
  for (const auto& f : m.funcs())
    if (isLoweredKernel(*f)) kernels.push_back(f.get());
  for (const TargetBackend* b : targetBackends())
    if (b->acceptsTarget(target.name)) {
      KILN_TRY(std::string code, b->codeReport(m, kernels, target.name));
      out += code;
    }
  return out;
}

std::string kernelIrText(const Module& m, const std::vector<const Func*>& kernels) {
  std::set<const Func*> keep(kernels.begin(), kernels.end());
  PrintOptions o;
  o.locs = true;
  o.funcFilter = [&](const Func& f) { return keep.count(&f) > 0; };
  return printModule(m, o);
}

} // namespace kiln
