// Interpreter kernels for data movement: reshape, transpose, broadcast, concat, split,
// slice, gather, gather_elements, scatter_nd, pad, triu, tril and transfer. Elements are copied
// bit-exactly; only scatter_nd reductions compute.
#include <algorithm>
#include <cmath>
#include <set>

#include "ir/interp/kernels.h"

namespace kiln::interp {
namespace {

std::string rangeStr(int64_t dim) {
  return "[" + std::to_string(-dim) + ", " + std::to_string(dim) + ")";
}

// An index tensor's element `i` as an index into a dim of size `dim` (negative values
// count from the end), or a run-time error naming the index and the valid range.
Result<int64_t> indexAt(const KernelCtx& c, const HostTensor& idx, int64_t i, int64_t dim) {
  int64_t v = idx.getI(i);
  if (v < -dim || v >= dim)
    return opError(c, "index " + std::to_string(v) + " is out of range " + rangeStr(dim));
  return v < 0 ? v + dim : v;
}

Status expectIndexTensor(const KernelCtx& c, size_t operand) {
  if (!isInteger(c.in[operand].elem()))
    return opError(c, "operand " + std::to_string(operand) +
                          " holds indices and must be an integer tensor, got " +
                          std::string(elemTypeName(c.in[operand].elem())));
  return ok();
}

// Sizes of the dims before `axis` and after it.
int64_t outerSize(const std::vector<int64_t>& shape, int64_t axis) {
  return product(std::vector<int64_t>(shape.begin(), shape.begin() + axis));
}
int64_t innerSize(const std::vector<int64_t>& shape, int64_t axis) {
  return product(std::vector<int64_t>(shape.begin() + axis + 1, shape.end()));
}

KernelResult triangle(const KernelCtx& c, bool upper) {
  const HostTensor& x = c.in[0];
  if (x.rank() < 2) return opError(c, "needs rank 2 or more, got " + shapeStr(x.shape()));
  int64_t k = c.op.attrs().getInt("k", 0);
  KILN_TRY(HostTensor out, newTensor(c, x.elem(), x.shape()));
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < x.numElements(); ++i) {
    unravel(i, x.shape(), idx);
    int64_t diag = idx[idx.size() - 1] - idx[idx.size() - 2];
    if (upper ? diag >= k : diag <= k) copyElem(out, i, x, i);
  }
  return std::vector<HostTensor>{out};
}

} // namespace

KernelResult kernelReshape(const KernelCtx& c) {
  const HostTensor& x = c.in[0];
  KILN_TRY(auto dims, declaredDims(c, 0));
  int64_t known = 1;
  std::optional<size_t> unknownAt;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (!dims[i]) {
      if (unknownAt) return opError(c, "the result type has more than one `?` dim");
      unknownAt = i;
    } else if (__builtin_mul_overflow(known, *dims[i], &known)) {
      return opError(c, "the result type has too many elements");
    }
  }
  std::vector<int64_t> shape;
  for (const auto& d : dims) shape.push_back(d.value_or(0));
  int64_t total = x.numElements();
  if (unknownAt) {
    if (known == 0 || total % known != 0)
      return opError(c, "cannot infer the `?` dim: " + std::to_string(total) +
                            " elements do not divide into dims of product " +
                            std::to_string(known));
    shape[*unknownAt] = total / known;
  } else if (known != total) {
    return opError(c, "operand has " + std::to_string(total) + " elements, the result shape " +
                          shapeStr(shape) + " has " + std::to_string(known));
  }
  KILN_TRY(HostTensor out, newTensor(c, x.elem(), shape));
  if (x.byteSize()) std::memcpy(out.mutableData(), x.data(), x.byteSize());
  return std::vector<HostTensor>{out};
}

KernelResult kernelTranspose(const KernelCtx& c) {
  const HostTensor& x = c.in[0];
  std::vector<int64_t> perm = c.op.attrs().getInts("perm");
  std::vector<bool> seen(static_cast<size_t>(x.rank()), false);
  bool valid = static_cast<int64_t>(perm.size()) == x.rank();
  for (size_t i = 0; valid && i < perm.size(); ++i) {
    valid = perm[i] >= 0 && perm[i] < x.rank() && !seen[static_cast<size_t>(perm[i])];
    if (valid) seen[static_cast<size_t>(perm[i])] = true;
  }
  if (!valid)
    return opError(c, "perm " + shapeStr(perm) + " is not a permutation of " +
                          std::to_string(x.rank()) + " dims");
  std::vector<int64_t> shape, srcStrides, inStrides = x.strides();
  for (int64_t p : perm) {
    shape.push_back(x.shape()[static_cast<size_t>(p)]);
    srcStrides.push_back(inStrides[static_cast<size_t>(p)]);
  }
  KILN_TRY(HostTensor out, newTensor(c, x.elem(), shape));
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < out.numElements(); ++i) {
    unravel(i, shape, idx);
    copyElem(out, i, x, dot(idx, srcStrides));
  }
  return std::vector<HostTensor>{out};
}

KernelResult kernelBroadcast(const KernelCtx& c) {
  const HostTensor& x = c.in[0];
  KILN_TRY(auto dims, declaredDims(c, 0));
  if (x.rank() > static_cast<int64_t>(dims.size()))
    return opError(c, "cannot broadcast " + shapeStr(x.shape()) + " to a lower rank");
  size_t lead = dims.size() - x.shape().size();
  std::vector<int64_t> shape;
  for (size_t i = 0; i < dims.size(); ++i) {
    // A `?` dim takes the operand's size (or 1 where the operand has no such dim).
    int64_t src = i >= lead ? x.shape()[i - lead] : 1;
    int64_t d = dims[i].value_or(src);
    if (i >= lead && src != d && src != 1)
      return opError(c, "cannot broadcast " + shapeStr(x.shape()) + " along dim " +
                            std::to_string(i) + " to size " + std::to_string(d));
    shape.push_back(d);
  }
  KILN_TRY(HostTensor out, newTensor(c, x.elem(), shape));
  std::vector<int64_t> strides = broadcastStrides(x.shape(), shape), idx;
  for (int64_t i = 0; i < out.numElements(); ++i) {
    unravel(i, shape, idx);
    copyElem(out, i, x, dot(idx, strides));
  }
  return std::vector<HostTensor>{out};
}

KernelResult kernelConcat(const KernelCtx& c) {
  KILN_CHECK(expectSameElem(c));
  const HostTensor& first = c.in[0];
  KILN_TRY(int64_t axis, normAxis(c, c.op.attrs().getInt("axis", 0), first.rank()));
  std::vector<int64_t> shape = first.shape();
  shape[static_cast<size_t>(axis)] = 0;
  for (size_t k = 0; k < c.in.size(); ++k) {
    const HostTensor& t = c.in[k];
    bool fits = t.rank() == first.rank();
    for (int64_t d = 0; fits && d < t.rank(); ++d)
      fits =
          d == axis || t.shape()[static_cast<size_t>(d)] == first.shape()[static_cast<size_t>(d)];
    if (!fits)
      return opError(c, "operand " + std::to_string(k) + " has shape " + shapeStr(t.shape()) +
                            ", which does not match " + shapeStr(first.shape()) + " outside axis " +
                            std::to_string(axis));
    shape[static_cast<size_t>(axis)] += t.shape()[static_cast<size_t>(axis)];
  }
  KILN_TRY(HostTensor out, newTensor(c, first.elem(), shape));
  int64_t outer = outerSize(shape, axis), inner = innerSize(shape, axis);
  size_t bytes = static_cast<size_t>(elemTypeBytes(first.elem()));
  int64_t outRow = shape[static_cast<size_t>(axis)] * inner, at = 0;
  for (const HostTensor& t : c.in) {
    int64_t row = t.shape()[static_cast<size_t>(axis)] * inner;
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(out.mutableData() + static_cast<size_t>(o * outRow + at) * bytes,
                  t.data() + static_cast<size_t>(o * row) * bytes,
                  static_cast<size_t>(row) * bytes);
    at += row;
  }
  return std::vector<HostTensor>{out};
}

KernelResult kernelSplit(const KernelCtx& c) {
  const HostTensor& x = c.in[0];
  KILN_TRY(int64_t axis, normAxis(c, c.op.attrs().getInt("axis", 0), x.rank()));
  std::vector<int64_t> sizes = c.op.attrs().getInts("sizes");
  int64_t dim = x.shape()[static_cast<size_t>(axis)], sum = 0;
  for (int64_t s : sizes)
    if (s < 0 || __builtin_add_overflow(sum, s, &sum))
      return opError(c, "sizes " + shapeStr(sizes) + " are not valid piece sizes");
  if (sum != dim || sizes.size() != c.op.numResults())
    return opError(c, "sizes " + shapeStr(sizes) + " must sum to dim " + std::to_string(axis) +
                          " (" + std::to_string(dim) + ") with one piece per result (" +
                          std::to_string(c.op.numResults()) + ")");
  int64_t outer = outerSize(x.shape(), axis), inner = innerSize(x.shape(), axis);
  size_t bytes = static_cast<size_t>(elemTypeBytes(x.elem()));
  std::vector<HostTensor> results;
  int64_t at = 0;
  for (int64_t s : sizes) {
    std::vector<int64_t> shape = x.shape();
    shape[static_cast<size_t>(axis)] = s;
    KILN_TRY(HostTensor out, newTensor(c, x.elem(), shape));
    int64_t row = s * inner;
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(out.mutableData() + static_cast<size_t>(o * row) * bytes,
                  x.data() + static_cast<size_t>(o * dim * inner + at) * bytes,
                  static_cast<size_t>(row) * bytes);
    at += row;
    results.push_back(std::move(out));
  }
  return results;
}

KernelResult kernelSlice(const KernelCtx& c) {
  const HostTensor& x = c.in[0];
  const Attrs& a = c.op.attrs();
  std::vector<int64_t> starts = a.getInts("starts"), ends = a.getInts("ends");
  std::vector<int64_t> axes = a.getInts("axes"), steps = a.getInts("steps");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return opError(c, "starts, ends, axes and steps must have the same length");
  std::vector<int64_t> shape = x.shape();
  std::vector<int64_t> first(shape.size(), 0), step(shape.size(), 1);
  std::set<int64_t> seen;
  for (size_t i = 0; i < starts.size(); ++i) {
    KILN_TRY(int64_t ax, normAxis(c, axes[i], x.rank()));
    if (!seen.insert(ax).second)
      return opError(c, "axis " + std::to_string(axes[i]) + " is listed twice");
    int64_t d = shape[static_cast<size_t>(ax)], s = starts[i], e = ends[i], st = steps[i];
    if (st == 0) return opError(c, "step 0 on axis " + std::to_string(axes[i]));
    if (s < 0) s += d;
    if (e < 0) e += d;
    int64_t count;
    if (st > 0) {
      s = std::clamp<int64_t>(s, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
      count = e > s ? (e - s - 1) / st + 1 : 0;
    } else {
      s = std::clamp<int64_t>(s, -1, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
      int64_t back = st == INT64_MIN ? INT64_MAX : -st;
      count = s > e ? (s - e - 1) / back + 1 : 0;
    }
    first[static_cast<size_t>(ax)] = s;
    step[static_cast<size_t>(ax)] = st;
    shape[static_cast<size_t>(ax)] = count;
  }
  KILN_TRY(HostTensor out, newTensor(c, x.elem(), shape));
  std::vector<int64_t> inStrides = x.strides(), idx;
  for (int64_t i = 0; i < out.numElements(); ++i) {
    unravel(i, shape, idx);
    int64_t src = 0;
    for (size_t d = 0; d < idx.size(); ++d) src += (first[d] + idx[d] * step[d]) * inStrides[d];
    copyElem(out, i, x, src);
  }
  return std::vector<HostTensor>{out};
}

KernelResult kernelGather(const KernelCtx& c) {
  const HostTensor& x = c.in[0];
  const HostTensor& idx = c.in[1];
  KILN_CHECK(expectIndexTensor(c, 1));
  KILN_TRY(int64_t axis, normAxis(c, c.op.attrs().getInt("axis", 0), x.rank()));
  int64_t dim = x.shape()[static_cast<size_t>(axis)];
  std::vector<int64_t> pos;
  for (int64_t j = 0; j < idx.numElements(); ++j) {
    KILN_TRY(int64_t p, indexAt(c, idx, j, dim));
    pos.push_back(p);
  }
  std::vector<int64_t> shape(x.shape().begin(), x.shape().begin() + axis);
  shape.insert(shape.end(), idx.shape().begin(), idx.shape().end());
  shape.insert(shape.end(), x.shape().begin() + axis + 1, x.shape().end());
  KILN_TRY(HostTensor out, newTensor(c, x.elem(), shape));
  int64_t outer = outerSize(x.shape(), axis), inner = innerSize(x.shape(), axis);
  auto nidx = static_cast<int64_t>(pos.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < nidx; ++j)
      for (int64_t in = 0; in < inner; ++in)
        copyElem(out, (o * nidx + j) * inner + in, x,
                 (o * dim + pos[static_cast<size_t>(j)]) * inner + in);
  return std::vector<HostTensor>{out};
}

KernelResult kernelGatherElements(const KernelCtx& c) {
  const HostTensor& x = c.in[0];
  const HostTensor& idx = c.in[1];
  KILN_CHECK(expectIndexTensor(c, 1));
  KILN_TRY(int64_t axis, normAxis(c, c.op.attrs().getInt("axis", 0), x.rank()));
  bool fits = idx.rank() == x.rank();
  for (int64_t d = 0; fits && d < x.rank(); ++d)
    fits = d == axis || idx.shape()[static_cast<size_t>(d)] <= x.shape()[static_cast<size_t>(d)];
  if (!fits)
    return opError(c, "index shape " + shapeStr(idx.shape()) + " does not fit data shape " +
                          shapeStr(x.shape()));
  KILN_TRY(HostTensor out, newTensor(c, x.elem(), idx.shape()));
  std::vector<int64_t> inStrides = x.strides(), pos;
  auto ax = static_cast<size_t>(axis);
  for (int64_t i = 0; i < idx.numElements(); ++i) {
    unravel(i, idx.shape(), pos);
    KILN_TRY(pos[ax], indexAt(c, idx, i, x.shape()[ax]));
    copyElem(out, i, x, dot(pos, inStrides));
  }
  return std::vector<HostTensor>{out};
}

KernelResult kernelScatterNd(const KernelCtx& c) {
  const HostTensor& data = c.in[0];
  const HostTensor& idx = c.in[1];
  const HostTensor& upd = c.in[2];
  KILN_CHECK(expectIndexTensor(c, 1));
  if (upd.elem() != data.elem())
    return opError(c, "updates have element type " + std::string(elemTypeName(upd.elem())) +
                          ", data has " + std::string(elemTypeName(data.elem())));
  std::string red = c.op.attrs().getStr("reduction", "none");
  if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min")
    return opError(c, "reduction must be none, add, mul, max or min, got \"" + red + "\"");
  if (idx.rank() < 1) return opError(c, "indices must have rank 1 or more");
  int64_t k = idx.shape().back();
  if (k > data.rank())
    return opError(c, "index tuples of length " + std::to_string(k) + " exceed data rank " +
                          std::to_string(data.rank()));
  std::vector<int64_t> updShape(idx.shape().begin(), idx.shape().end() - 1);
  updShape.insert(updShape.end(), data.shape().begin() + k, data.shape().end());
  if (upd.shape() != updShape)
    return opError(c, "updates have shape " + shapeStr(upd.shape()) + ", expected " +
                          shapeStr(updShape));
  KILN_TRY(HostTensor out, newTensor(c, data.elem(), data.shape()));
  if (data.byteSize()) std::memcpy(out.mutableData(), data.data(), data.byteSize());
  std::vector<int64_t> strides = data.strides();
  int64_t tuples = product(std::vector<int64_t>(idx.shape().begin(), idx.shape().end() - 1));
  int64_t slice = product(std::vector<int64_t>(data.shape().begin() + k, data.shape().end()));
  bool flt = isFloat(data.elem());
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t base = 0;
    for (int64_t j = 0; j < k; ++j) {
      KILN_TRY(int64_t p, indexAt(c, idx, t * k + j, data.shape()[static_cast<size_t>(j)]));
      base += p * strides[static_cast<size_t>(j)];
    }
    for (int64_t e = 0; e < slice; ++e) {
      int64_t dst = base + e, src = t * slice + e;
      if (red == "none") {
        copyElem(out, dst, upd, src);
      } else if (flt) {
        double a = out.getF(dst), b = upd.getF(src);
        out.setF(dst, red == "add"   ? a + b
                      : red == "mul" ? a * b
                      : red == "max" ? fmaxNan(a, b)
                                     : fminNan(a, b));
      } else {
        int64_t a = out.getI(dst), b = upd.getI(src);
        out.setI(dst, red == "add"   ? wrapAdd(a, b)
                      : red == "mul" ? wrapMul(a, b)
                      : red == "max" ? std::max(a, b)
                                     : std::min(a, b));
      }
    }
  }
  return std::vector<HostTensor>{out};
}

KernelResult kernelPad(const KernelCtx& c) {
  const HostTensor& x = c.in[0];
  std::vector<int64_t> pads = c.op.attrs().getInts("pads");
  std::string mode = c.op.attrs().getStr("mode", "constant");
  double value = c.op.attrs().getFloat("value", 0);
  auto rank = static_cast<size_t>(x.rank());
  if (pads.size() != 2 * rank)
    return opError(c, "pads has " + std::to_string(pads.size()) + " entries, expected " +
                          std::to_string(2 * rank));
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return opError(c, "mode must be constant, reflect or edge, got \"" + mode + "\"");
  // Bounding pads keeps `index - pad` below from overflowing.
  for (int64_t p : pads)
    if (p < -(int64_t(1) << 62) || p > (int64_t(1) << 62))
      return opError(c, "pad " + std::to_string(p) + " is out of range");
  std::vector<int64_t> shape(rank);
  for (size_t d = 0; d < rank; ++d) {
    int64_t n;
    if (__builtin_add_overflow(x.shape()[d], pads[d], &n) ||
        __builtin_add_overflow(n, pads[d + rank], &n) || n < 0)
      return opError(c, "pads " + shapeStr(pads) + " do not fit shape " + shapeStr(x.shape()));
    if (mode != "constant" && n > 0 && x.shape()[d] == 0)
      return opError(c, "cannot " + mode + "-pad empty dim " + std::to_string(d));
    shape[d] = n;
  }
  KILN_TRY(HostTensor out, newTensor(c, x.elem(), shape));
  std::vector<int64_t> inStrides = x.strides(), idx;
  for (int64_t i = 0; i < out.numElements(); ++i) {
    unravel(i, shape, idx);
    int64_t src = 0;
    bool inside = true;
    for (size_t d = 0; d < rank; ++d) {
      int64_t n = x.shape()[d], p = idx[d] - pads[d];
      if (p < 0 || p >= n) {
        if (mode == "constant") {
          inside = false;
          break;
        }
        if (mode == "edge" || n == 1) {
          p = std::clamp<int64_t>(p, 0, n - 1);
        } else {
          // Mirror without repeating the edge: the pattern has period 2(n-1).
          int64_t period = 2 * (n - 1);
          p = ((p % period) + period) % period;
          if (p >= n) p = period - p;
        }
      }
      src += p * inStrides[d];
    }
    if (inside)
      copyElem(out, i, x, src);
    else if (isFloat(x.elem()))
      out.setF(i, value);
    else
      out.setI(i, isBool(x.elem()) ? value != 0
                                   : static_cast<int64_t>(roundToElem(ElemType::I64, value)));
  }
  return std::vector<HostTensor>{out};
}

KernelResult kernelTriu(const KernelCtx& c) { return triangle(c, true); }
KernelResult kernelTril(const KernelCtx& c) { return triangle(c, false); }

// Devices do not exist in the interpreter: a transfer is the identity.
KernelResult kernelTransfer(const KernelCtx& c) { return std::vector<HostTensor>{c.in[0]}; }

} // namespace kiln::interp
