// The cuda backend (see nvptx_backend.h).
#include "backends/nvptx/nvptx_backend.h"

#include "backends/llvm/gpu_compile.h"

namespace kiln::nvptx {

namespace {

class CudaBackend : public llvmgen::LlvmGpuBackend {
public:
  CudaBackend() : LlvmGpuBackend("cuda", "cuda:", "cuda:sm_90") {}

protected:
  // The PTX names every kernel as an entry point for the right architecture. (Registers and
  // spills are known only once the driver's JIT has compiled it.)
  Status finish(gpu::GpuImage& img, const llvmgen::GpuTargetSpec& spec) const override {
    Loc where = Loc::named("<cuda backend>");
    if (img.code.find(".target " + spec.arch) == std::string::npos)
      return error(where, "internal: the PTX is not for " + spec.arch);
    for (const gpu::GpuKernelInfo& k : img.kernels)
      if (img.code.find(".entry " + k.entry + "(") == std::string::npos)
        return error(where, "internal: kernel @" + k.name + " (" + k.entry +
                                ") is not an entry point of the PTX");
    return ok();
  }
};

} // namespace

const TargetBackend* cudaBackend() {
  static const CudaBackend b;
  return &b;
}

} // namespace kiln::nvptx
