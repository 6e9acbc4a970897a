// The reference interpreter's internal interface: the context a kernel receives, the
// helpers kernels share (guarded allocation, axis normalisation, broadcasting, index
// arithmetic), and one kernel declaration per op, generated from ops.def so that an op
// without a kernel fails to link.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "ir/core/host_tensor.h"
#include "ir/core/ir.h"
#include "ir/io/weights.h"

namespace kiln::interp {

// What one op evaluation sees. Before a kernel runs, the operand count, the element
// classes the op's traits demand (float-only, numeric, i1) and the operands' sizes have
// been checked; kernels check everything else they rely on.
struct KernelCtx {
  const Op& op;
  const std::vector<HostTensor>& in;
  const SymbolBinding& binding;
  WeightStore* weights;
};

using KernelResult = Result<std::vector<HostTensor>>;
using Kernel = KernelResult (*)(const KernelCtx&);

#define KILN_OP(id, ...) KernelResult kernel##id(const KernelCtx& c);
#include "ir/core/ops.def"
#undef KILN_OP

// The largest result the interpreter allocates, in elements.
inline constexpr int64_t kMaxElements = int64_t(1) << 31;

// An error at the op's location whose message starts with the op's name.
Diag opError(const KernelCtx& c, const std::string& message);
std::string shapeStr(const std::vector<int64_t>& shape);

// A zero-filled tensor; an error when a dim is negative or the tensor would exceed
// kMaxElements (so hostile shapes never reach the allocator).
Result<HostTensor> newTensor(const KernelCtx& c, ElemType elem, const std::vector<int64_t>& shape);

// `axis` in [-rank, rank) mapped to [0, rank).
Result<int64_t> normAxis(const KernelCtx& c, int64_t axis, int64_t rank);

// The declared dims of result `i` evaluated under the binding; nullopt for `?` dims.
Result<std::vector<std::optional<int64_t>>> declaredDims(const KernelCtx& c, size_t i);
// Like declaredDims but every dim must be known.
Result<std::vector<int64_t>> declaredShape(const KernelCtx& c, size_t i);

// numpy broadcasting of concrete shapes.
Result<std::vector<int64_t>> broadcastShapes(const KernelCtx& c,
                                             const std::vector<std::vector<int64_t>>& shapes);
// Element strides that read a tensor of shape `in` broadcast to `out` (0 on stretched
// dims), one per dim of `out`. `in` must broadcast to `out`.
std::vector<int64_t> broadcastStrides(const std::vector<int64_t>& in,
                                      const std::vector<int64_t>& out);

// Multi-index of flat index `flat` in a C-order tensor of `shape`.
void unravel(int64_t flat, const std::vector<int64_t>& shape, std::vector<int64_t>& idx);
inline int64_t dot(const std::vector<int64_t>& idx, const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (size_t i = 0; i < idx.size(); ++i) off += idx[i] * strides[i];
  return off;
}
int64_t product(const std::vector<int64_t>& shape);

// Copies element `si` of `src` to element `di` of `dst` (same element type), bit-exact.
inline void copyElem(HostTensor& dst, int64_t di, const HostTensor& src, int64_t si) {
  auto bytes = static_cast<size_t>(elemTypeBytes(src.elem()));
  std::memcpy(dst.mutableData() + static_cast<size_t>(di) * bytes,
              src.data() + static_cast<size_t>(si) * bytes, bytes);
}

// All operands share one element type.
Status expectSameElem(const KernelCtx& c);

// Wrapping int64 arithmetic (two's complement, no UB).
inline int64_t wrapAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrapSub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
inline int64_t wrapMul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// IEEE-aware max/min used by every op that takes a maximum: NaN wins, and +0.0 is
// larger than -0.0.
double fmaxNan(double a, double b);
double fminNan(double a, double b);

// Lowest and highest value of an integer element type (for empty max/min and padding).
int64_t intLowest(ElemType t);
int64_t intHighest(ElemType t);

} // namespace kiln::interp
