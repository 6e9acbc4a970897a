// LLVM emission: lowered kernels (kernel IR, see docs/codegen.md) to LLVM IR.
//
// emitCpuKernel is the CPU backend's, emitGpuKernel the AMDGPU and NVPTX backends' (both on
// kernel_emitter.h). For the CPU, one kernel becomes
// one function with the entry-point ABI of src/runtime/cpu/abi.h: it loops over the
// workgroups it is given, and inside a workgroup over the workgroup's threads. Barriers
// split the threads' work into phases: every thread runs phase 1, then every thread runs
// phase 2, and so on; a `for` that contains a barrier is uniform (every thread takes the
// same trip count, which kernel IR requires) and becomes one loop around its phases.
// Values that live from one phase into a later one are kept per thread in stack arrays;
// `private` buffers are one stack array slice per thread, `shared` buffers one stack array
// per workgroup, zero-filled when the workgroup starts (as in the sim device).
//
// Scalars: f64 and f32 are LLVM double/float; f16 and bf16 values are floats rounded to
// their precision after every operation (so arithmetic matches the interpreter, which
// rounds once per op); i1..i64 are LLVM integers (u8 is i8 with unsigned meaning);
// indices are i64. Each `compute` has exactly the reference interpreter's semantics;
// transcendental functions are computed in f64 through libm, like the interpreter.
#pragma once

#include <string>
#include <vector>

#include "ir/core/diag.h"
#include "ir/core/ir.h"

namespace llvm {
class Module;
}

namespace kiln::llvmgen {

struct EmittedKernel {
  std::string symbol;               // the entry point's name
  std::vector<std::string> symbols; // module symbols it reads, in KilnCpuArgs::symbols order
};

// Emits the lowered kernel `kernel` into `m` as `symbol` (ABI: runtime/cpu/abi.h).
// `syms` gives the symbols' declared ranges (value bounds choose cheaper index math).
// An op the emitter does not know is an error located at the op. The buffers are noalias
// unless `buffersMayAlias` (a kernel that writes a donated argument in place is launched with
// one buffer as both an input and its output).
Result<EmittedKernel> emitCpuKernel(llvm::Module& m, const Func& kernel, const SymbolTable& syms,
                                    const std::string& symbol, bool buffersMayAlias = false);

enum class GpuArch { Amdgpu, Nvptx };

struct GpuEmitOptions {
  GpuArch arch = GpuArch::Amdgpu;
  int64_t waveSize = 64; // threads of a wave (AMDGPU: 64 or 32) or warp (NVPTX: 32)
  // One buffer is bound as several arguments (a donated input written in place): the
  // buffers are then not noalias.
  bool buffersMayAlias = false;
};

struct EmittedGpuKernel {
  std::string entry;
  std::vector<std::string> symbols; // push constants, in the kernarg block's order
  std::vector<bool> written;        // per buffer argument: the kernel stores to it
  uint64_t staticSharedBytes = 0;   // AMDGPU: LDS globals
  uint64_t dynamicSharedBytes = 0;  // NVPTX: dynamic shared memory to launch with
  int64_t subgroup = 1;
  uint32_t workgroup[3] = {1, 1, 1};
};

// Emits the lowered kernel `kernel` into `m` (whose target triple and data layout are set) as
// the GPU kernel `entry`, with the kernel ABI of runtime/gpu/payload.h. An op or a subgroup
// size the target cannot run is an error located at the op.
Result<EmittedGpuKernel> emitGpuKernel(llvm::Module& m, const Func& kernel, const SymbolTable& syms,
                                       const std::string& entry, const GpuEmitOptions& o);

} // namespace kiln::llvmgen
