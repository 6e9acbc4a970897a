// sim: a device that runs kernel IR by simulating workgroups and threads.
//
// It exists to prove `lower` correct independently of any backend, and it is slow on
// purpose: every op of every thread is interpreted. Threads of a workgroup run as
// resumable phases split at barriers (a thread's state is its program counter, its
// values and its loop stack), so a barrier is honoured exactly: every thread of the
// workgroup reaches it before any continues, and a barrier that only some threads reach
// is reported. Shared buffers exist once per workgroup, private ones once per thread.
// An out-of-bounds access, a division by zero in index arithmetic or an index overflow
// is an error naming the kernel, the op, the index and the thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ir/core/host_tensor.h"
#include "ir/core/ir.h"
#include "ir/interp/interp.h"
#include "ir/io/weights.h"

namespace kiln::sim {

// One kernel argument: a buffer in host memory, written in place.
struct BufferRef {
  HostTensor tensor;
};

struct Grid {
  int64_t x = 1, y = 1, z = 1;
};

// The grid a kernel asks for: evaluates its uniform prologue (the ops before
// `kernel_config`) under the symbol values.
Result<Grid> kernelGrid(const Func& kernel, const SymbolBinding& dims);

// Runs every workgroup of `grid` (in order) over the bindings (one per kernel argument,
// each of the argument's element type and of its dims under `dims`).
Status runKernel(const Func& kernel, std::span<BufferRef> bindings, const SymbolBinding& dims,
                 Grid grid);

// Counters of the last runs on this thread, for tests and reports.
struct SimStats {
  int64_t kernels = 0;
  int64_t workgroups = 0;
  int64_t threads = 0;
  int64_t barriers = 0;
  int64_t hostOps = 0; // dispatches whose kernel was not lowered, run by the interpreter
};

// The test driver: interprets the tensor-level function `f` with the reference
// interpreter, except that every `dispatch` whose kernel is lowered runs on the
// simulator (bindings: operands, then freshly allocated results). A dispatch whose kernel
// is still tensor-level is interpreted (counted in stats.hostOps).
Result<std::vector<HostTensor>> runOnSim(const Func& f, const std::vector<HostTensor>& inputs,
                                         WeightStore& weights, SimStats* stats = nullptr);

} // namespace kiln::sim
