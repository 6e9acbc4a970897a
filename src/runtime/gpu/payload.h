// The payload of a GPU executable compiled through LLVM: target "amdgpu" (HSA code objects,
// run by the hip driver) and target "cuda" (PTX, run by the cuda driver). The amdgpu and
// nvptx backends (src/backends/amdgpu, src/backends/nvptx) fill a GpuPayload; the drivers
// parse it strictly (a malformed container or an inconsistent field is an error, never a
// crash) and never look into compiler IR.
//
// The kernel ABI, the same on both targets. A kernel is launched over the dispatch's grid
// (workgroups along x, y, z) with `workgroupSize` threads per workgroup and takes its
// arguments in one kernarg block laid out as an LLVM kernel's parameters are:
//
//   offset 0               one 8-byte device pointer per buffer argument (inputs, then outputs)
//   then                   every buffer argument's extents as i64, in argument and dim order
//   then                   the values of the kernel's symbols as i64, in `symbols` order (the
//                          launch's push constants)
//   then                   an 8-byte device pointer to the dispatch's status word (i32)
//
// so kernargBytes = 8 * (args + sum of ranks + symbols + 1). The status word starts 0; a
// kernel that finds an error it cannot report otherwise (an index computed from data out of
// range, a division by zero in index math, a loop step that is not positive) stores one of
// runtime/cpu/abi.h's KilnCpuStatus codes there and stops its thread; the driver checks the
// word after the work completes and fails the submission's semaphore with the error.
//
// Shared memory: `staticSharedBytes` are declared by the code (AMDGPU LDS globals); on CUDA
// a kernel's shared buffers live in its dynamic shared memory, `dynamicSharedBytes` at launch,
// which above 48 KiB the driver opts into with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/core/diag.h"
#include "ir/core/elem_type.h"

namespace kiln::gpu {

// How an image's code is stored.
enum class GpuCodeKind : uint8_t {
  HsaCodeObject = 1, // an AMDGPU ELF shared object (code object v5), for hipModuleLoadData
  Ptx = 2,           // PTX text (NUL-terminated in `code`), JIT-compiled by cuModuleLoadDataEx
};

struct GpuArgInfo {
  ElemType elem = ElemType::F32;
  int64_t rank = 0;
  bool written = false; // the kernel stores to it
};

// What the backend read back from the compiled code (AMDGPU: the code object's metadata
// note; PTX: unknown until the JIT runs, so zeros). For reports (kiln compile --emit=kernels)
// and load-time checks.
struct GpuKernelStats {
  uint32_t vgprs = 0;
  uint32_t sgprs = 0;
  uint32_t privateBytes = 0; // scratch per thread (spills and private arrays)
  bool spills = false;       // registers spilled to scratch memory
};

struct GpuKernelInfo {
  std::string name;                 // the kernel function (what launches name)
  std::string entry;                // its symbol in the code object / .entry in the PTX
  std::vector<GpuArgInfo> args;     // buffers: inputs, then outputs
  std::vector<std::string> symbols; // its push constants, in the launch's `push` order
  std::array<uint32_t, 3> workgroupSize = {1, 1, 1};
  uint32_t staticSharedBytes = 0;
  uint32_t dynamicSharedBytes = 0;
  uint32_t subgroupSize = 0; // the wave/warp size the code assumes (32 or 64)
  uint64_t kernargBytes = 0; // as the ABI above computes it
  GpuKernelStats stats;
};

// The code for one architecture ("gfx942", "sm_90") and its kernels, in kernel order.
struct GpuImage {
  std::string arch;
  GpuCodeKind kind = GpuCodeKind::HsaCodeObject;
  std::string code;
  std::vector<GpuKernelInfo> kernels;
};

// One executable: one image per architecture it was compiled for; every image holds the
// same kernels (names, in the same order). A driver picks the image of its device's arch.
struct GpuPayload {
  std::string target; // "amdgpu" or "cuda"
  std::vector<GpuImage> images;
};

// The ABI's kernarg bytes for a kernel with `args` and `symbols` push constants.
uint64_t kernargBytes(const std::vector<GpuArgInfo>& args, size_t symbols);

std::string serializeGpuPayload(const GpuPayload& p);
Result<GpuPayload> parseGpuPayload(const std::string& bytes);

// The image for `arch`, or an error naming the module's archs and the device's.
Result<const GpuImage*> imageForArch(const GpuPayload& p, const std::string& arch,
                                     const std::string& device);

} // namespace kiln::gpu
