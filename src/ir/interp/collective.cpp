// The collectives' semantics on host tensors (collective.h), and the interpreter's kernels.
#include "ir/interp/collective.h"

#include <cmath>
#include <cstring>

#include "ir/interp/kernels.h"

namespace kiln {

namespace {

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The elementwise reduction of every operand, in operand order.
Result<HostTensor> reduceAll(const std::string& reduce, const std::vector<HostTensor>& in,
                             const Loc& loc) {
  const HostTensor& first = in[0];
  HostTensor out = HostTensor::uninitialized(first.elem(), first.shape());
  const int64_t n = first.numElements();
  const bool max = reduce == "max";
  if (!max && reduce != "sum")
    return error(loc, "collective: reduce \"" + reduce + "\" is not \"sum\" or \"max\"");
  if (isFloat(first.elem())) {
    for (int64_t i = 0; i < n; ++i) {
      double acc = first.getF(i);
      for (size_t k = 1; k < in.size(); ++k) {
        double v = in[k].getF(i);
        if (!max)
          acc += v;
        else if (std::isnan(acc) || std::isnan(v))
          acc = NAN;
        else
          acc = std::max(acc, v);
      }
      out.setF(i, acc);
    }
    return out;
  }
  for (int64_t i = 0; i < n; ++i) {
    int64_t acc = first.getI(i);
    for (size_t k = 1; k < in.size(); ++k) {
      int64_t v = in[k].getI(i);
      // Wraps: the sum in 64 bits, truncated to the element type by setI.
      acc = max ? std::max(acc, v)
                : static_cast<int64_t>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(v));
    }
    out.setI(i, acc);
  }
  return out;
}

// The product of shape[0, axis) and of shape(axis, rank).
std::pair<int64_t, int64_t> outerInner(const std::vector<int64_t>& shape, int64_t axis) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d)
    (d < axis ? outer : inner) *= d == axis ? 1 : shape[static_cast<size_t>(d)];
  return {outer, inner};
}

} // namespace

Result<std::vector<HostTensor>> computeCollective(OpKind kind, const std::string& reduce,
                                                  int64_t axis, const std::vector<HostTensor>& in,
                                                  const Loc& loc) {
  const std::string name(opInfo(kind).name);
  if (in.empty()) return error(loc, name + ": no operands");
  const HostTensor& first = in[0];
  for (size_t k = 1; k < in.size(); ++k)
    if (in[k].elem() != first.elem() || in[k].shape() != first.shape())
      return error(loc, name + ": operand " + std::to_string(k) + " has shape " +
                            shapeText(in[k].shape()) + ", operand 0 " + shapeText(first.shape()) +
                            "; every device contributes a tensor of one type");
  const int64_t n = static_cast<int64_t>(in.size());
  const int64_t rank = first.rank();
  if (kind != OpKind::AllReduce) {
    if (axis < -rank || axis >= rank)
      return error(loc, name + ": axis " + std::to_string(axis) + " is out of range for rank " +
                            std::to_string(rank));
    if (axis < 0) axis += rank;
  }
  const size_t bytes = static_cast<size_t>(elemTypeBytes(first.elem()));
  switch (kind) {
  case OpKind::AllReduce: {
    KILN_TRY(HostTensor sum, reduceAll(reduce, in, loc));
    return std::vector<HostTensor>(in.size(), sum);
  }
  case OpKind::AllGather: {
    std::vector<int64_t> shape = first.shape();
    shape[static_cast<size_t>(axis)] *= n;
    HostTensor out = HostTensor::uninitialized(first.elem(), shape);
    auto [outer, inner] = outerInner(first.shape(), axis);
    const size_t row =
        static_cast<size_t>(first.shape()[static_cast<size_t>(axis)] * inner) * bytes;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < n; ++k)
        if (row)
          std::memcpy(out.mutableData() + (static_cast<size_t>(o * n + k)) * row,
                      in[static_cast<size_t>(k)].data() + static_cast<size_t>(o) * row, row);
    return std::vector<HostTensor>(in.size(), out);
  }
  case OpKind::ReduceScatter: {
    int64_t dim = first.shape()[static_cast<size_t>(axis)];
    if (dim % n != 0)
      return error(loc, name + ": dim " + std::to_string(axis) + " of size " + std::to_string(dim) +
                            " does not divide into " + std::to_string(n) + " pieces");
    KILN_TRY(HostTensor sum, reduceAll(reduce, in, loc));
    std::vector<int64_t> shape = first.shape();
    shape[static_cast<size_t>(axis)] = dim / n;
    auto [outer, inner] = outerInner(first.shape(), axis);
    const size_t piece = static_cast<size_t>(dim / n * inner) * bytes;
    std::vector<HostTensor> out;
    for (int64_t k = 0; k < n; ++k) {
      HostTensor t = HostTensor::uninitialized(first.elem(), shape);
      for (int64_t o = 0; o < outer; ++o)
        if (piece)
          std::memcpy(t.mutableData() + static_cast<size_t>(o) * piece,
                      sum.data() + static_cast<size_t>(o * n + k) * piece, piece);
      out.push_back(std::move(t));
    }
    return out;
  }
  default: return error(loc, name + " is not a collective");
  }
}

namespace interp {

static KernelResult collectiveKernel(const KernelCtx& c) {
  const Attrs& a = c.op.attrs();
  return computeCollective(c.op.kind(), a.has("reduce") ? a.getStr("reduce") : "",
                           a.has("axis") ? a.getInt("axis") : 0, c.in, c.op.loc());
}

KernelResult kernelAllReduce(const KernelCtx& c) { return collectiveKernel(c); }
KernelResult kernelAllGather(const KernelCtx& c) { return collectiveKernel(c); }
KernelResult kernelReduceScatter(const KernelCtx& c) { return collectiveKernel(c); }

} // namespace interp

} // namespace kiln
