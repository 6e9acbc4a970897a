// What a collective computes, on host tensors: the reference interpreter's kernels for
// all_reduce, all_gather and reduce_scatter, and the executor's `collective` for devices whose
// buffers it reads through the host (ref, cpu, sim, and each rank's share under MPI) use this
// one function, so every device agrees bit for bit.
//
// Operands combine in operand order: float sums accumulate in f64 and round once to the
// element type (so the result does not depend on how the operands are grouped), integer sums
// wrap in the element type, max propagates NaN.
#pragma once

#include <string>
#include <vector>

#include "ir/core/diag.h"
#include "ir/core/host_tensor.h"
#include "ir/core/ops.h"

namespace kiln {

// `kind` is AllReduce, AllGather or ReduceScatter; `reduce` "sum" or "max" (ignored by
// AllGather); `axis` the gathered or scattered dim (ignored by AllReduce). Returns one tensor
// per operand. Errors (operands that differ, a dim that does not divide) are located at `loc`.
Result<std::vector<HostTensor>> computeCollective(OpKind kind, const std::string& reduce,
                                                  int64_t axis, const std::vector<HostTensor>& in,
                                                  const Loc& loc);

} // namespace kiln
