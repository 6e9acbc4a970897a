// The CPU backend: lowered kernels to x86-64 code in one shared object, the payload of a
// cpu executable (runtime/cpu/payload.h).
//
// `--target=cpu` compiles for the host CPU (its name and every feature LLVM detects,
// AVX-512 included where present); `cpu:x86-64-v2`, `cpu:x86-64-v3` and `cpu:x86-64-v4`
// compile for those levels, so a module can be built on one machine for others. The code
// records the features it needs among those the runtime can check; the cpu driver refuses
// to load it on a CPU that lacks one.
#pragma once

#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/kernel_cache.h"
#include "backends/llvm/machine.h"
#include "ir/core/ir.h"
#include "passes/compile_timer.h"
#include "runtime/cpu/payload.h"
#include "target/target.h"

namespace kiln::cpu {

struct CpuTargetSpec {
  std::string name;                  // "cpu", "cpu:x86-64-v3"
  llvmgen::MachineSpec machine;      // what LLVM compiles for
  std::vector<std::string> required; // checkable features the code may use
};

// The names --target= accepts for the CPU backend.
const std::vector<std::string>& cpuTargetNames();
bool isCpuTargetName(const std::string& name);
Result<CpuTargetSpec> resolveCpuTarget(const std::string& name);

// The x86-64 level a CPU target name stands for: "cpu" is the best level the host supports
// (x86-64-v4 with AVX-512, v3 with AVX2 and FMA, else v2); a named level is itself.
Result<std::string> cpuTargetLevel(const std::string& name);
// The codegen target description (`tile`/`lower` strategy) for a CPU target name: the
// table's row for a named level; for "cpu", the row of the best level the host supports
// (x86-64-v4 with AVX-512, v3 with AVX2 and FMA, else v2), named "cpu".
Result<TargetDesc> cpuCodegenTarget(const std::string& name);

// What --emit= can show of the CPU code besides the executable itself.
enum class CpuOutput { Executable, LlvmIr, Assembly };

struct CpuCompiled {
  CpuPayload payload; // for CpuOutput::Executable
  std::string text;   // LLVM IR or assembly otherwise
};

struct CpuCompileOptions {
  CompileTimer* timer = nullptr; // phases, counts, per-kernel LLVM times, progress
  unsigned jobs = 0;             // threads compiling kernels (0: the hardware's)
  KernelCache* cache = nullptr;  // object code of kernels compiled before (Executable only)
  // LLVM levels per kernel kind (--opt-level; backends/opt_level.h): empty is $KILN_OPT_LEVEL,
  // else the default rule.
  std::string optLevel;
};

// Compiles the lowered kernel functions `kernels` of `m` to code; kernel N of the payload is
// kernels[N], reading its push constants in pushConstantSymbols order (ir/core/push_constants.h).
// Kernels with the same code share one entry point. The result does not depend on co.jobs or
// on what the cache holds.
Result<CpuCompiled> compileCpuKernels(const Module& m, const std::vector<const Func*>& kernels,
                                      const std::string& target,
                                      CpuOutput output = CpuOutput::Executable,
                                      const CpuCompileOptions& co = {});

// The cpu target backend: the codegen pipeline on cpuCodegenTarget's description, the
// executable from compileCpuKernels (--emit=llvm|asm: its text instead). Default target:
// "cpu" (the host).
const TargetBackend* cpuBackend();

// Links relocatable objects, in order, into a shared object with lld (compiler-rt's builtins
// supply the f16 conversions); the image's bytes.
Result<std::string> linkSharedObject(const std::vector<std::string>& objects);

} // namespace kiln::cpu
