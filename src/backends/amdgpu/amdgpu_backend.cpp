// The amdgpu backend (see amdgpu_backend.h): the shared GPU compile driver plus the checks of
// the linked code object's metadata.
#include "backends/amdgpu/amdgpu_backend.h"

#include <map>

#include "backends/amdgpu/metadata.h"
#include "backends/llvm/gpu_compile.h"

namespace kiln::amdgpu {

namespace {

class AmdgpuBackend : public llvmgen::LlvmGpuBackend {
public:
  AmdgpuBackend() : LlvmGpuBackend("amdgpu", "amdgpu:", "amdgpu:gfx942") {}

protected:
  // Every kernel is in the code object's metadata with the ABI's kernarg block (no hidden
  // arguments), its LDS within the target's limit and its workgroup size allowed.
  Status finish(gpu::GpuImage& img, const llvmgen::GpuTargetSpec& spec) const override {
    KILN_TRY(CodeObjectMetadata md, readCodeObjectMetadata(img.code));
    Loc where = Loc::named("<amdgpu backend>");
    if (md.target.find(spec.arch) == std::string::npos)
      return error(where, "internal: the code object is for '" + md.target + "', not " + spec.arch);
    std::map<std::string, const KernelMetadata*> byName;
    for (const KernelMetadata& k : md.kernels) byName[k.name] = &k;
    for (gpu::GpuKernelInfo& k : img.kernels) {
      auto it = byName.find(k.entry);
      if (it == byName.end())
        return error(where, "internal: kernel @" + k.name + " (" + k.entry +
                                ") is missing from the code object's metadata");
      const KernelMetadata& km = *it->second;
      if (km.kernargBytes != k.kernargBytes)
        return error(where, "internal: kernel @" + k.name + " takes " +
                                std::to_string(km.kernargBytes) +
                                " kernarg bytes in the code object; the kernel ABI says " +
                                std::to_string(k.kernargBytes));
      if (km.ldsBytes > spec.desc.sharedMemoryBytes)
        return error(where, "kernel @" + k.name + " uses " + std::to_string(km.ldsBytes) +
                                " bytes of LDS; " + spec.name + " has " +
                                std::to_string(spec.desc.sharedMemoryBytes));
      uint64_t threads = uint64_t(k.workgroupSize[0]) * k.workgroupSize[1] * k.workgroupSize[2];
      if (km.maxFlatWorkgroupSize && km.maxFlatWorkgroupSize < threads)
        return error(where, "internal: kernel @" + k.name + " was compiled for at most " +
                                std::to_string(km.maxFlatWorkgroupSize) + " threads");
      if (km.wavefrontSize && km.wavefrontSize != k.subgroupSize)
        return error(where, "internal: kernel @" + k.name + " runs waves of " +
                                std::to_string(km.wavefrontSize) + ", not " +
                                std::to_string(k.subgroupSize));
      k.staticSharedBytes = static_cast<uint32_t>(km.ldsBytes);
      k.stats.vgprs = km.vgprs;
      k.stats.sgprs = km.sgprs;
      k.stats.privateBytes = static_cast<uint32_t>(km.privateBytes);
      // Registers spilled to scratch memory. SGPRs spill into VGPR lanes and, on gfx90a and
      // gfx942, VGPRs into AGPRs: neither reaches memory, and the kernel's scratch stays 0.
      k.stats.spills = km.vgprSpills + km.sgprSpills > 0 && km.privateBytes > 0;
    }
    return ok();
  }
};

} // namespace

const TargetBackend* amdgpuBackend() {
  static const AmdgpuBackend b;
  return &b;
}

} // namespace kiln::amdgpu
