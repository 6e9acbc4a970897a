// The contract between the CPU backend (src/backends/cpu, which emits the code) and the cpu
// driver (src/runtime/cpu, which runs it). Both sides include this header; nothing else
// couples them.
//
// A cpu executable's payload (target "cpu") is a CpuPayload (payload.h): the kernels'
// IR text (the runtime computes grids from it and runs kernels that were not lowered with
// the interpreter), the CPU features the code needs, and one ELF shared object, linked by
// lld, that exports one entry point per lowered kernel:
//
//   int32_t kiln_cpu_kernel_<index>(const KilnCpuArgs* args, int64_t begin, int64_t end);
//
// It runs workgroups begin..end-1 of the grid in linear order (x fastest, then y, then z);
// every thread of a workgroup is run by the calling CPU thread. Disjoint ranges may run
// concurrently on different threads. It returns 0, or one of the KilnCpuStatus codes.
// The shared object depends on nothing but libc/libm symbols.
#pragma once

#include <cstdint>

extern "C" {

struct KilnCpuArgs {
  void* const* buffers;   // one per kernel argument: inputs, then outputs
  const int64_t* extents; // every buffer argument's dims, concatenated in argument order
  const int64_t* symbols; // the values of the kernel's symbols, in CpuKernelInfo::symbols order
  int64_t grid[3];        // workgroups along x, y, z
};

enum KilnCpuStatus : int32_t {
  kKilnCpuOk = 0,
  kKilnCpuIndexDivByZero = 1,  // ifloordiv / iceildiv / imod by zero
  kKilnCpuBadLoopStep = 2,     // a `for` whose step is not positive
  kKilnCpuIndexOutOfRange = 3, // an index computed from data (gather, scatter) is out of bounds
};

using KilnCpuKernelFn = int32_t (*)(const KilnCpuArgs*, int64_t, int64_t);

} // extern "C"

// What a status means, for the error of the kernel that returned it (the cpu driver) or
// stored it in its status word (the hip and cuda drivers, gpu/payload.h).
inline const char* kilnCpuStatusMessage(int32_t s) {
  switch (s) {
  case kKilnCpuIndexDivByZero: return "index arithmetic divides by zero";
  case kKilnCpuBadLoopStep: return "loop step is not positive";
  case kKilnCpuIndexOutOfRange:
    return "an index read from tensor data (a gather or scatter index) is out of range";
  default: return "failed with an unknown status";
  }
}
