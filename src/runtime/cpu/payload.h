// The payload of a cpu executable (target "cpu"): what the CPU backend writes into a
// .kmod and the cpu driver reads back. Serialized as a small binary container (magic,
// then length-prefixed fields); a malformed payload is an error, never a crash.
#pragma once

#include <string>
#include <vector>

#include "ir/diag.h"

namespace kiln::cpu {

struct CpuKernelInfo {
  std::string name;                 // the kernel function's name in `ir`
  bool lowered = false;             // false: a tensor-level kernel the interpreter runs
  std::string symbol;               // the exported entry point (kiln_cpu_kernel_N) when lowered
  std::vector<std::string> symbols; // module symbols the code reads, in KilnCpuArgs order
};

struct CpuPayload {
  std::string cpu;                    // LLVM CPU name the code was compiled for ("x86-64-v3")
  std::vector<std::string> features;  // host features the code needs ("avx2", "fma", ...)
  std::string ir;                     // every kernel as kiln IR text, in kernel order
  std::vector<CpuKernelInfo> kernels; // one per function of `ir`, same order
  std::string sharedObject;           // the ELF image (empty when no kernel is lowered)
};

// The CPU features the runtime can check on the host (cpuid), in LLVM's spelling: the
// backend records only these, the driver refuses a payload needing one the host lacks.
const std::vector<std::string>& checkableCpuFeatures();
bool hostHasCpuFeature(const std::string& feature);

std::string serializeCpuPayload(const CpuPayload& p);
Result<CpuPayload> parseCpuPayload(const std::string& bytes);

} // namespace kiln::cpu
