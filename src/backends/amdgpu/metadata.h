// What an HSA code object says about its kernels: the NT_AMDGPU_METADATA note (a MessagePack
// map, code object v5) that LLVM writes and the HIP runtime reads. The amdgpu backend reads it
// back after linking to check each kernel against the kernel ABI and the target's limits, and
// to report registers, LDS and scratch (kiln compile --emit=kernels).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/core/diag.h"

namespace kiln::amdgpu {

struct KernelMetadata {
  std::string name;          // .name: the kernel function
  std::string symbol;        // .symbol: its kernel descriptor ("NAME.kd")
  uint64_t kernargBytes = 0; // .kernarg_segment_size
  uint64_t ldsBytes = 0;     // .group_segment_fixed_size
  uint64_t privateBytes = 0; // .private_segment_fixed_size (scratch per work-item)
  uint32_t vgprs = 0, sgprs = 0, agprs = 0;
  uint32_t vgprSpills = 0, sgprSpills = 0;
  uint32_t wavefrontSize = 0;
  uint32_t maxFlatWorkgroupSize = 0;
};

struct CodeObjectMetadata {
  uint16_t machine = 0;          // ELF e_machine (EM_AMDGPU = 224)
  std::string target;            // amdhsa.target: "amdgcn-amd-amdhsa--gfx942"
  std::vector<uint64_t> version; // amdhsa.version: {1, 2} for code object v5
  std::vector<KernelMetadata> kernels;
};

// Parses the ELF image `elf`; a file that is not an AMDGPU ELF or has no readable metadata
// note is an error (never a crash).
Result<CodeObjectMetadata> readCodeObjectMetadata(const std::string& elf);

} // namespace kiln::amdgpu
