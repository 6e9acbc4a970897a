// The payload of a cpu executable (target "cpu"): what the CPU backend writes into a
// .kmod and the cpu driver reads back. Serialized as a small binary container (magic,
// then length-prefixed fields); a malformed payload is an error, never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/core/diag.h"
#include "ir/core/elem_type.h"

namespace kiln::cpu {

// One kernel argument as the ABI sees it: a buffer of `elem` whose `rank` extents it reads.
struct CpuArgInfo {
  ElemType elem = ElemType::F32;
  int64_t rank = 0;
};

struct CpuKernelInfo {
  std::string name;                 // the kernel function's name (what launches name)
  std::string symbol;               // the exported entry point (kiln_cpu_kernel_<hash>)
  std::vector<std::string> symbols; // its push constants (the launch's `push`), in order
  std::vector<CpuArgInfo> args;     // its buffers: inputs, then outputs
};

// Every kernel is lowered: those the backend could not lower go into a `ref` executable.
struct CpuPayload {
  std::string cpu;                    // LLVM CPU name the code was compiled for ("x86-64-v3")
  std::vector<std::string> features;  // host features the code needs ("avx2", "fma", ...)
  std::vector<CpuKernelInfo> kernels; // in kernel order
  std::string sharedObject;           // the ELF image (empty when there is no kernel)
};

// The CPU features the runtime can check on the host (cpuid), in LLVM's spelling: the
// backend records only these, the driver refuses a payload needing one the host lacks.
const std::vector<std::string>& checkableCpuFeatures();
bool hostHasCpuFeature(const std::string& feature);

std::string serializeCpuPayload(const CpuPayload& p);
Result<CpuPayload> parseCpuPayload(const std::string& bytes);

} // namespace kiln::cpu
