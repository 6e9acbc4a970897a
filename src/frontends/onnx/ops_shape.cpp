// Converters for ONNX shape and data-movement ops: Shape, Size, Reshape, Flatten, Squeeze,
// Unsqueeze, Transpose, Concat, Split, Slice, Gather*, Scatter*, Expand, Tile, Pad,
// ConstantOfShape, Range, Trilu, DepthToSpace, SpaceToDepth. Shape arguments are read
// symbolically (shape_values.h), so PyTorch's dynamic-shape subgraphs become typed dims.
#include <cmath>
#include <limits>

#include "frontends/onnx/context.h"
#include "frontends/onnx/shape_values.h"
#include "ir/core/shape_rules.h"

namespace kiln::onnx {

namespace {

Attrs axisAttr(int64_t axis) {
  Attrs a;
  a.set("axis", axis);
  return a;
}

Result<Val> transpose(Ctx& c, const Val& x, const std::vector<int64_t>& perm) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == int64_t(i);
  if (identity) return x;
  Attrs a;
  a.set("perm", perm);
  return c.op(OpKind::Transpose, {x}, std::move(a));
}

Shape dims(const Val& x) { return x.type().shape(); }

Status shapeOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  int64_t r = x.rank();
  KILN_TRY(int64_t start, c.attrInt("start", 0));
  KILN_TRY(int64_t end, c.attrInt("end", r));
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, start, r);
  KILN_TRY(Val s, shapeValue(c, x, start, end));
  c.setOutput(0, s);
  return ok();
}

Status sizeOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  SymExpr n = SymExpr::constant(1);
  for (int64_t i = 0; i < x.rank(); ++i) {
    KILN_TRY(SymExpr d, dimExpr(c, x.type(), i));
    n = n * d;
  }
  if (auto v = n.constantValue()) {
    HostTensor t(ElemType::I64, {});
    t.setI(0, *v);
    c.setOutput(0, c.constant(t));
    return ok();
  }
  KILN_TRY(Val s, shapeValue(c, x, 0, x.rank()));
  Attrs a;
  a.set("axes", std::vector<int64_t>{0});
  a.set("keepdims", int64_t(0));
  KILN_TRY(Val p, c.op(OpKind::ReduceProd, {s}, std::move(a)));
  p.sym = std::vector<SymExpr>{n};
  c.setOutput(0, p);
  return ok();
}

Status reshapeOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  std::vector<SymExpr> target;
  if (c.opset() < 5) {
    KILN_TRY(auto v, c.attrInts("shape"));
    for (int64_t d : v) target.push_back(SymExpr::constant(d));
  } else {
    KILN_TRY(target, c.symInts(1, "the target shape"));
  }
  KILN_TRY(int64_t allowZero, c.attrInt("allowzero", 0));
  KILN_TRY(Shape s, reshapeDims(c, x.type(), target, allowZero != 0));
  KILN_TRY(Val y, reshapeTo(c, x, s));
  c.setOutput(0, y);
  return ok();
}

Result<SymExpr> product(const Ctx& c, const Type& t, int64_t from, int64_t to) {
  SymExpr n = SymExpr::constant(1);
  for (int64_t i = from; i < to; ++i) {
    KILN_TRY(SymExpr d, dimExpr(c, t, i));
    n = n * d;
  }
  return simplify(c, n);
}

Status flattenOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(int64_t axis, c.attrInt("axis", 1));
  if (axis < 0) axis += x.rank();
  if (axis < 0 || axis > x.rank()) return c.err("axis is out of range");
  KILN_TRY(SymExpr a, product(c, x.type(), 0, axis));
  KILN_TRY(SymExpr b, product(c, x.type(), axis, x.rank()));
  KILN_TRY(Val y, reshapeTo(c, x, {Dim(a), Dim(b)}));
  c.setOutput(0, y);
  return ok();
}

// Axes from the attribute (before `inputFrom`) or from input 1.
Result<std::optional<std::vector<int64_t>>> axesArg(Ctx& c, int inputFrom, size_t input = 1) {
  if (c.opset() < inputFrom) {
    if (!c.attr("axes")) return std::optional<std::vector<int64_t>>{};
    KILN_TRY(auto v, c.attrInts("axes"));
    return std::optional<std::vector<int64_t>>{v};
  }
  if (!c.hasInput(input)) return std::optional<std::vector<int64_t>>{};
  KILN_TRY(auto v, c.constInts(input, "axes"));
  return std::optional<std::vector<int64_t>>{v};
}

Status squeezeOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(auto axes, axesArg(c, 13));
  std::vector<bool> drop(static_cast<size_t>(x.rank()), false);
  if (axes) {
    for (int64_t a : *axes) {
      KILN_TRY(int64_t n, normAxis(c, a, x.rank()));
      const Dim& d = x.type().dim(n);
      if (d.isStatic() && d.value() != 1)
        return c.err("cannot squeeze dim " + std::to_string(a) + " of size " + d.str());
      drop[static_cast<size_t>(n)] = true;
    }
  } else {
    for (int64_t i = 0; i < x.rank(); ++i) {
      const Dim& d = x.type().dim(i);
      drop[static_cast<size_t>(i)] = d.isStatic() && d.value() == 1;
    }
  }
  Shape s;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (!drop[static_cast<size_t>(i)]) s.push_back(x.type().dim(i));
  KILN_TRY(Val y, reshapeTo(c, x, s));
  c.setOutput(0, y);
  return ok();
}

Status unsqueezeOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(auto axes, axesArg(c, 13));
  if (!axes) return c.err("needs axes");
  int64_t outRank = x.rank() + static_cast<int64_t>(axes->size());
  std::vector<bool> ones(static_cast<size_t>(outRank), false);
  for (int64_t a : *axes) {
    KILN_TRY(int64_t n, normAxis(c, a, outRank));
    if (ones[static_cast<size_t>(n)]) return c.err("axis " + std::to_string(a) + " repeats");
    ones[static_cast<size_t>(n)] = true;
  }
  Shape s;
  int64_t k = 0;
  for (int64_t i = 0; i < outRank; ++i)
    s.push_back(ones[static_cast<size_t>(i)] ? Dim(1) : x.type().dim(k++));
  KILN_TRY(Val y, reshapeTo(c, x, s));
  c.setOutput(0, y);
  return ok();
}

Status transposeOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  std::vector<int64_t> def;
  for (int64_t i = x.rank() - 1; i >= 0; --i) def.push_back(i);
  KILN_TRY(auto perm, c.attrInts("perm", def));
  KILN_TRY(Val y, transpose(c, x, perm));
  c.setOutput(0, y);
  return ok();
}

Status concatOp(Ctx& c) {
  std::vector<Val> xs;
  for (size_t i = 0; i < c.numInputs(); ++i) {
    KILN_TRY(Val x, c.input(i));
    xs.push_back(x);
  }
  if (xs.empty()) return c.err("needs at least one input");
  for (const Val& x : xs)
    if (x.rank() != xs[0].rank())
      return c.err("inputs of rank " + std::to_string(xs[0].rank()) + " and " +
                   std::to_string(x.rank()) + " cannot be joined");
  KILN_TRY(int64_t axis, c.attrInt("axis", 0));
  KILN_TRY(axis, normAxis(c, axis, xs[0].rank()));
  // Empty pieces add nothing (PyTorch emits them), and concat of one is that one.
  std::vector<Val> parts;
  for (const Val& x : xs) {
    const Dim& d = x.type().dim(axis);
    if (!(d.isStatic() && d.value() == 0)) parts.push_back(x);
  }
  if (parts.empty()) parts.push_back(xs[0]);
  Val y;
  if (parts.size() == 1) {
    y = parts[0];
  } else {
    KILN_TRY(y, c.op(OpKind::Concat, parts, axisAttr(axis)));
  }
  if (!y.value && xs[0].rank() == 1) {
    std::vector<SymExpr> all;
    bool known = true;
    for (const Val& x : parts) {
      auto s = Ctx::symOf(x);
      if (!s)
        known = false;
      else
        all.insert(all.end(), s->begin(), s->end());
    }
    if (known) y.sym = all;
  }
  c.setOutput(0, y);
  return ok();
}

Status splitOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(int64_t axis, c.attrInt("axis", 0));
  KILN_TRY(axis, normAxis(c, axis, x.rank()));
  std::vector<int64_t> sizes;
  if (c.opset() < 13) {
    KILN_TRY(sizes, c.attrInts("split"));
  } else if (c.hasInput(1)) {
    KILN_TRY(sizes, c.constInts(1, "split sizes"));
  }
  const Dim& d = x.type().dim(axis);
  if (sizes.empty()) {
    auto n = static_cast<int64_t>(c.numOutputs());
    if (!d.isStatic()) return c.err("cannot split a symbolic dim into equal parts");
    int64_t len = d.value(), piece = (len + n - 1) / n;
    for (int64_t i = 0; i < n; ++i)
      sizes.push_back(std::max<int64_t>(0, std::min(piece, len - i * piece)));
  }
  if (sizes.size() != c.numOutputs())
    return c.err(std::to_string(sizes.size()) + " split sizes for " +
                 std::to_string(c.numOutputs()) + " outputs");
  Attrs a = axisAttr(axis);
  a.set("sizes", sizes);
  std::vector<Value*> in{x.v};
  KILN_TRY(Val first, c.op(OpKind::Split, {x}, std::move(a)));
  Op* op = first.v->def();
  if (!op || op->kind() != OpKind::Split) {
    c.setOutput(0, first);
    return ok();
  }
  for (size_t i = 0; i < op->numResults(); ++i) c.setOutput(i, Val{op->result(i), {}, {}});
  return ok();
}

// Slice along one axis where the bounds are symbolic: a gather of a range of indices.
// A start that is not a constant (a KV-cache offset, or a negative start on a symbolic
// dim) is added at run time: `startRuntime` is its 0-D value when it comes from data.
Result<Val> symbolicSlice(Ctx& c, const Val& x, int64_t axis, SymExpr start, SymExpr end,
                          int64_t step, std::optional<Val> startRuntime) {
  KILN_TRY(SymExpr dim, dimExpr(c, x.type(), axis));
  if (step <= 0) return c.err("a slice with a negative step along a symbolic dim is not supported");
  std::optional<Val> startVal;
  if (auto sv = start.constantValue(); sv && *sv < 0) {
    if (auto dv = dim.constantValue()) {
      start = SymExpr::constant(std::max<int64_t>(0, *sv + *dv));
    } else {
      // dim + start, at least 0, from the run-time size of the dim.
      start = simplify(c, SymExpr::max(dim + start, SymExpr::constant(0)));
      Attrs da;
      da.set("axis", axis);
      KILN_TRY(Val d, c.op(OpKind::Dim, {x}, std::move(da)));
      KILN_TRY(d, c.op(OpKind::Add, {d, c.scalar(ElemType::I64, double(*sv))}));
      KILN_TRY(d, c.op(OpKind::Max, {d, c.scalar(ElemType::I64, 0)}));
      startVal = d;
    }
  } else if (!sv) {
    if (!startRuntime) return c.err("the slice start depends on run-time data");
    startVal = startRuntime;
  }
  if (auto ev = end.constantValue(); ev && *ev < 0) end = dim + end;
  // A constant end clamps to the dim (x[:INT64_MAX]). A symbolic end that the symbols'
  // ranges do not show to be within the dim is taken as within it (mask[p:p+t] of a
  // buffer): if it is not at run time, the gather's index check fails loudly instead of
  // the slice silently shrinking.
  SymExpr clamped = simplify(c, SymExpr::min(end, dim));
  end = end.isConstant() || clamped == dim ? clamped : simplify(c, end);
  if (start == SymExpr::constant(0) && step == 1 && end == dim) return x; // x[:n], n the dim
  SymExpr len = simplify(c, SymExpr::max(SymExpr::ceilDiv(end - start, SymExpr::constant(step)),
                                         SymExpr::constant(0)));
  Attrs ra;
  ra.set("start", startVal ? 0.0 : static_cast<double>(*start.constantValue()));
  ra.set("delta", static_cast<double>(step));
  KILN_TRY(Val idx, c.op(OpKind::Range, {}, std::move(ra), {Type(ElemType::I64, {Dim(len)})}));
  if (startVal) {
    KILN_TRY(Val sv64, c.cast(*startVal, ElemType::I64));
    KILN_TRY(idx, c.op(OpKind::Add, {idx, sv64}));
  }
  return c.op(OpKind::Gather, {x, idx}, axisAttr(axis));
}

Status sliceOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  std::vector<SymExpr> starts, ends;
  std::vector<int64_t> axes, steps;
  if (c.opset() < 10) {
    KILN_TRY(auto s, c.attrInts("starts"));
    KILN_TRY(auto e, c.attrInts("ends"));
    KILN_TRY(axes, c.attrInts("axes"));
    for (int64_t v : s) starts.push_back(SymExpr::constant(v));
    for (int64_t v : e) ends.push_back(SymExpr::constant(v));
  } else {
    KILN_TRY(starts, c.symInts(1, "slice starts"));
    KILN_TRY(ends, c.symInts(2, "slice ends"));
    if (c.hasInput(3)) {
      KILN_TRY(axes, c.constInts(3, "slice axes"));
    }
    if (c.hasInput(4)) {
      KILN_TRY(steps, c.constInts(4, "slice steps"));
    }
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return c.err("starts, ends, axes and steps differ in length");
  for (int64_t& a : axes) {
    KILN_TRY(a, normAxis(c, a, x.rank()));
  }
  for (int64_t s : steps)
    if (s == 0) return c.err("a slice step is 0");

  // A slice of a symbolic shape vector stays symbolic.
  std::optional<std::vector<SymExpr>> symIn = x.rank() == 1 ? Ctx::symOf(x) : std::nullopt;

  std::vector<int64_t> cs, ce, ca, cst;
  Val y = x;
  for (size_t i = 0; i < starts.size(); ++i) {
    const Dim& d = x.type().dim(axes[i]);
    auto sv = starts[i].constantValue(), ev = ends[i].constantValue();
    bool staticBounds =
        sv && ev &&
        (d.isStatic() || (*sv >= 0 && steps[i] > 0 && *ev >= std::numeric_limits<int32_t>::max()));
    if (staticBounds) {
      cs.push_back(*sv);
      ce.push_back(*ev);
      ca.push_back(axes[i]);
      cst.push_back(steps[i]);
      continue;
    }
    std::optional<Val> startRuntime;
    if (!sv && c.opset() >= 10) {
      KILN_TRY(Val sval, c.input(1));
      if (sval.rank() == 1) {
        KILN_TRY(Val e,
                 c.op(OpKind::Gather, {sval, c.scalar(ElemType::I64, double(i))}, axisAttr(0)));
        startRuntime = e;
      } else if (sval.rank() == 0) {
        startRuntime = sval;
      }
    }
    KILN_TRY(y, symbolicSlice(c, y, axes[i], starts[i], ends[i], steps[i], startRuntime));
  }
  if (!ca.empty()) {
    Attrs a;
    a.set("starts", cs);
    a.set("ends", ce);
    a.set("axes", ca);
    a.set("steps", cst);
    KILN_TRY(y, c.op(OpKind::Slice, {y}, std::move(a)));
  }
  if (symIn && !y.value && ca.size() == 1 && starts.size() == 1) {
    auto n = static_cast<int64_t>(symIn->size());
    int64_t s = cs[0], e = ce[0], st = cst[0];
    if (s < 0) s += n;
    if (e < 0) e += n;
    std::vector<SymExpr> out;
    if (st > 0) {
      s = std::clamp<int64_t>(s, 0, n);
      e = std::clamp<int64_t>(e, 0, n);
      for (int64_t k = s; k < e; k += st) out.push_back((*symIn)[static_cast<size_t>(k)]);
    } else {
      s = std::clamp<int64_t>(s, -1, n - 1);
      e = std::clamp<int64_t>(e, -1, n - 1);
      for (int64_t k = s; k > e; k += st) out.push_back((*symIn)[static_cast<size_t>(k)]);
    }
    y.sym = out;
  }
  c.setOutput(0, y);
  return ok();
}

Status gatherOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val idx, c.input(1));
  KILN_TRY(int64_t axis, c.attrInt("axis", 0));
  KILN_TRY(axis, normAxis(c, axis, x.rank()));
  KILN_TRY(Val y, c.op(OpKind::Gather, {x, idx}, axisAttr(axis)));
  if (!y.value && x.rank() == 1 && idx.value && idx.rank() <= 1) {
    if (auto s = Ctx::symOf(x)) {
      std::vector<SymExpr> out;
      auto n = static_cast<int64_t>(s->size());
      for (int64_t k = 0; k < idx.value->numElements(); ++k) {
        int64_t i = idx.value->getI(k);
        if (i < 0) i += n;
        if (i < 0 || i >= n) return c.err("index " + std::to_string(i) + " is out of range");
        out.push_back((*s)[static_cast<size_t>(i)]);
      }
      y.sym = out;
    }
  }
  c.setOutput(0, y);
  return ok();
}

Status gatherElementsOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val idx, c.input(1));
  KILN_TRY(int64_t axis, c.attrInt("axis", 0));
  KILN_TRY(axis, normAxis(c, axis, x.rank()));
  KILN_TRY(Val y, c.op(OpKind::GatherElements, {x, idx}, axisAttr(axis)));
  c.setOutput(0, y);
  return ok();
}

// ReverseSequence: along the time axis, position t of batch entry b reads L[b] - 1 - t when
// t < L[b] and t otherwise: one gather_elements with an index table built from iota.
Status reverseSequenceOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val lens, c.input(1));
  KILN_TRY(int64_t ta, c.attrInt("time_axis", 0));
  KILN_TRY(int64_t ba, c.attrInt("batch_axis", 1));
  if (x.rank() < 2 || (ta != 0 && ta != 1) || (ba != 0 && ba != 1) || ta == ba || lens.rank() != 1)
    return c.err("needs rank >= 2, time_axis and batch_axis 0 and 1, and 1-D sequence_lens");
  KILN_TRY(lens, c.cast(lens, ElemType::I64));
  Shape s(static_cast<size_t>(x.rank()), Dim(1));
  s[static_cast<size_t>(ta)] = x.type().dim(ta);
  s[static_cast<size_t>(ba)] = x.type().dim(ba);
  KILN_TRY(Val t, c.op(OpKind::Iota, {}, axisAttr(ta), {Type(ElemType::I64, s)}));
  Shape ls(static_cast<size_t>(x.rank()), Dim(1));
  ls[static_cast<size_t>(ba)] = lens.type().dim(0);
  KILN_TRY(Val l, reshapeTo(c, lens, ls));
  KILN_TRY(Val inside, c.op(OpKind::Lt, {t, l}));
  KILN_TRY(Val rev, c.op(OpKind::Sub, {l, t}));
  KILN_TRY(rev, c.op(OpKind::Sub, {rev, c.scalar(ElemType::I64, 1)}));
  KILN_TRY(Val idx, c.op(OpKind::Select, {inside, rev, t}));
  KILN_TRY(idx, broadcastTo(c, idx, x.type().shape()));
  KILN_TRY(Val y, c.op(OpKind::GatherElements, {x, idx}, axisAttr(ta)));
  c.setOutput(0, y);
  return ok();
}

// Negative indices along a dim of size `dim` wrapped into range: i < 0 ? i + dim : i.
Result<Val> wrapIndices(Ctx& c, const Val& idx, const Val& dims) {
  KILN_TRY(Val zero, c.op(OpKind::Lt, {idx, c.scalar(ElemType::I64, 0)}));
  KILN_TRY(Val plus, c.op(OpKind::Add, {idx, dims}));
  return c.op(OpKind::Select, {zero, plus, idx});
}

// GatherND: x's leading dims flattened, each index tuple turned into one flat index,
// then one gather. With batch_dims b, the b batch dims of x are flattened too and each
// tuple is prefixed with its own batch position (from iota over the index batch dims).
Status gatherNdOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val idx, c.input(1));
  KILN_TRY(int64_t batch, c.attrInt("batch_dims", 0));
  KILN_TRY(idx, c.cast(idx, ElemType::I64));
  if (idx.rank() < 1 || batch < 0 || batch >= idx.rank() || batch >= x.rank())
    return c.err("batch_dims or the index rank is invalid");
  const Dim& kd = idx.type().dim(idx.rank() - 1);
  if (!kd.isStatic() || batch + kd.value() > x.rank())
    return c.err("the index tuple length is invalid");
  int64_t k = kd.value();
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < batch + k; ++i) {
    const Dim& d = x.type().dim(i);
    if (!d.isStatic()) return c.err("GatherND over symbolic dims is not supported");
    sizes.push_back(d.value());
  }
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= sizes[i];
  }
  std::vector<int64_t> tupleSizes(sizes.begin() + batch, sizes.end());
  std::vector<int64_t> tupleStrides(strides.begin() + batch, strides.end());
  KILN_TRY(Val w, wrapIndices(c, idx, c.constant(i64Tensor(tupleSizes))));
  KILN_TRY(Val m, c.op(OpKind::Mul, {w, c.constant(i64Tensor(tupleStrides))}));
  Attrs ra;
  ra.set("axes", std::vector<int64_t>{-1});
  ra.set("keepdims", int64_t(0));
  KILN_TRY(Val flat, c.op(OpKind::ReduceSum, {m}, std::move(ra)));
  for (int64_t j = 0; j < batch; ++j) {
    KILN_TRY(Val pos, c.op(OpKind::Iota, {}, axisAttr(j), {flat.type()}));
    KILN_TRY(pos, c.op(OpKind::Mul, {pos, c.scalar(ElemType::I64, double(strides[size_t(j)]))}));
    KILN_TRY(flat, c.op(OpKind::Add, {flat, pos}));
  }
  Shape xs{Dim(stride)};
  for (int64_t i = batch + k; i < x.rank(); ++i) xs.push_back(x.type().dim(i));
  KILN_TRY(Val xf, reshapeTo(c, x, xs));
  KILN_TRY(Val y, c.op(OpKind::Gather, {xf, flat}, axisAttr(0)));
  c.setOutput(0, y);
  return ok();
}

Status scatterNdOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val idx, c.input(1));
  KILN_TRY(Val upd, c.input(2));
  KILN_TRY(std::string red, c.attrStr("reduction", "none"));
  Attrs a;
  if (red != "none") a.set("reduction", red);
  KILN_TRY(Val y, c.op(OpKind::ScatterNd, {x, idx, upd}, std::move(a)));
  c.setOutput(0, y);
  return ok();
}

// ScatterElements as scatter_nd: each index element becomes a full index tuple whose other
// coordinates are its own position.
Status scatterElementsOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val idx, c.input(1));
  KILN_TRY(Val upd, c.input(2));
  KILN_TRY(int64_t axis, c.attrInt("axis", 0));
  KILN_TRY(axis, normAxis(c, axis, x.rank()));
  KILN_TRY(std::string red, c.attrStr("reduction", "none"));
  KILN_TRY(idx, c.cast(idx, ElemType::I64));
  KILN_TRY(SymExpr dim, dimExpr(c, x.type(), axis));
  if (!dim.isConstant()) return c.err("ScatterElements along a symbolic dim is not supported");
  KILN_TRY(Val w, wrapIndices(c, idx, c.scalar(ElemType::I64, double(*dim.constantValue()))));
  Shape one = dims(idx);
  one.push_back(Dim(1));
  std::vector<Val> coords;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i == axis) {
      KILN_TRY(Val v, reshapeTo(c, w, one));
      coords.push_back(v);
      continue;
    }
    KILN_TRY(Val v, c.op(OpKind::Iota, {}, axisAttr(i), {Type(ElemType::I64, one)}));
    coords.push_back(v);
  }
  KILN_TRY(Val tuples, c.op(OpKind::Concat, coords, axisAttr(x.rank())));
  Attrs a;
  if (red != "none") a.set("reduction", red);
  KILN_TRY(Val y, c.op(OpKind::ScatterNd, {x, tuples, upd}, std::move(a)));
  c.setOutput(0, y);
  return ok();
}

Status expandOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(auto target, c.symInts(1, "the expand shape"));
  Shape t;
  for (const SymExpr& e : target) t.push_back(Dim(simplify(c, e)));
  KILN_TRY(Shape s, broadcastShapes(x.type().shape(), t, c.symbols(), c.loc()));
  KILN_TRY(Val y, broadcastTo(c, x, s));
  c.setOutput(0, y);
  return ok();
}

// Tile: x reshaped to [1, d0, 1, d1, ...], broadcast to [r0, d0, r1, d1, ...], reshaped back.
Status tileOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(auto reps, c.constInts(1, "repeats"));
  if (static_cast<int64_t>(reps.size()) != x.rank())
    return c.err("repeats has " + std::to_string(reps.size()) + " entries for rank " +
                 std::to_string(x.rank()));
  Shape split, wide, out;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (reps[static_cast<size_t>(i)] < 0) return c.err("a repeat count is negative");
    KILN_TRY(SymExpr d, dimExpr(c, x.type(), i));
    SymExpr r = SymExpr::constant(reps[static_cast<size_t>(i)]);
    split.push_back(Dim(1));
    split.push_back(Dim(d));
    wide.push_back(Dim(r));
    wide.push_back(Dim(d));
    out.push_back(Dim(simplify(c, r * d)));
  }
  KILN_TRY(Val a, reshapeTo(c, x, split));
  KILN_TRY(Val b, broadcastTo(c, a, wide));
  KILN_TRY(Val y, reshapeTo(c, b, out));
  c.setOutput(0, y);
  return ok();
}

Status padOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(std::string mode, c.attrStr("mode", "constant"));
  std::vector<int64_t> pads;
  double value = 0;
  if (c.opset() < 11) {
    KILN_TRY(pads, c.attrInts("pads"));
    KILN_TRY(value, c.attrFloat("value", 0));
  } else {
    KILN_TRY(pads, c.constInts(1, "pads"));
    if (c.hasInput(2)) {
      KILN_TRY(HostTensor v, c.constInput(2, "the pad value"));
      if (v.numElements() != 1) return c.err("the pad value must have one element");
      value = v.getF(0);
    }
    if (c.hasInput(3)) {
      KILN_TRY(auto axes, c.constInts(3, "pad axes"));
      std::vector<int64_t> full(static_cast<size_t>(2 * x.rank()), 0);
      if (pads.size() != 2 * axes.size()) return c.err("pads and axes differ in length");
      for (size_t i = 0; i < axes.size(); ++i) {
        KILN_TRY(int64_t a, normAxis(c, axes[i], x.rank()));
        full[static_cast<size_t>(a)] = pads[i];
        full[static_cast<size_t>(a + x.rank())] = pads[i + axes.size()];
      }
      pads = full;
    }
  }
  if (static_cast<int64_t>(pads.size()) != 2 * x.rank())
    return c.err("pads has " + std::to_string(pads.size()) + " entries for rank " +
                 std::to_string(x.rank()));
  Attrs a;
  a.set("pads", pads);
  a.set("mode", mode);
  if (mode == "constant") a.set("value", value);
  KILN_TRY(Val y, c.op(OpKind::Pad, {x}, std::move(a)));
  c.setOutput(0, y);
  return ok();
}

Status constantOfShapeOp(Ctx& c) {
  KILN_TRY(auto target, c.symInts(0, "the shape"));
  HostTensor value(ElemType::F32, {});
  if (c.attr("value")) {
    KILN_TRY(value, c.attrTensor("value"));
    if (value.numElements() != 1) return c.err("value must have one element");
    value = HostTensor::view(value.elem(), {}, value.data(), nullptr).clone();
  }
  Shape s;
  for (const SymExpr& e : target) s.push_back(Dim(simplify(c, e)));
  KILN_TRY(Val y, broadcastTo(c, c.constant(value), s));
  c.setOutput(0, y);
  return ok();
}

Status rangeOp(Ctx& c) {
  KILN_TRY(Val start, c.input(0));
  KILN_TRY(Val limit, c.input(1));
  KILN_TRY(Val delta, c.input(2));
  if (!start.value || !delta.value)
    return c.err("Range needs a start and delta known at compile time");
  double s = start.value->getF(0), d = delta.value->getF(0);
  if (d == 0) return c.err("Range delta is 0");
  SymExpr len;
  if (!std::isfinite(s) || !std::isfinite(d)) return c.err("Range start and delta must be finite");
  if (limit.value) {
    double l = limit.value->getF(0), n = std::ceil((l - s) / d);
    if (!std::isfinite(n) || n > double(int64_t(1) << 40))
      return c.err("the Range length is out of range");
    len = SymExpr::constant(std::max<int64_t>(0, static_cast<int64_t>(n)));
  } else if (auto sym = Ctx::symOf(limit); sym && sym->size() == 1 && d > 0 && d < 1e15 &&
                                           std::fabs(s) < 1e15 && s == std::floor(s) &&
                                           d == std::floor(d)) {
    len = simplify(c, SymExpr::max(SymExpr::ceilDiv((*sym)[0] - SymExpr::constant(int64_t(s)),
                                                    SymExpr::constant(int64_t(d))),
                                   SymExpr::constant(0)));
  } else {
    return c.err("the Range limit depends on run-time data");
  }
  Attrs a;
  a.set("start", s);
  a.set("delta", d);
  KILN_TRY(Val y, c.op(OpKind::Range, {}, std::move(a), {Type(start.elem(), {Dim(len)})}));
  c.setOutput(0, y);
  return ok();
}

Status triluOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(int64_t upper, c.attrInt("upper", 1));
  int64_t k = 0;
  if (c.hasInput(1)) {
    KILN_TRY(auto kv, c.constInts(1, "k"));
    if (kv.size() != 1) return c.err("k must have one element");
    k = kv[0];
  }
  Attrs a;
  a.set("k", k);
  KILN_TRY(Val y, c.op(upper ? OpKind::Triu : OpKind::Tril, {x}, std::move(a)));
  c.setOutput(0, y);
  return ok();
}

// DepthToSpace / SpaceToDepth as reshape, transpose, reshape.
Status depthSpace(Ctx& c, bool toSpace) {
  KILN_TRY(Val x, c.input(0));
  if (x.rank() != 4) return c.err("needs a 4-D input");
  KILN_TRY(int64_t b, c.attrInt("blocksize", 0));
  if (b <= 0) return c.err("blocksize must be positive");
  KILN_TRY(std::string mode, c.attrStr("mode", "DCR"));
  Shape d = dims(x);
  SymExpr n = d[0].expr(), ch = d[1].expr(), h = d[2].expr(), w = d[3].expr();
  SymExpr bb = SymExpr::constant(b), b2 = SymExpr::constant(b * b);
  Val y;
  if (toSpace) {
    SymExpr cc = simplify(c, SymExpr::floorDiv(ch, b2));
    Shape mid = mode == "CRD" ? Shape{Dim(n), Dim(cc), Dim(bb), Dim(bb), Dim(h), Dim(w)}
                              : Shape{Dim(n), Dim(bb), Dim(bb), Dim(cc), Dim(h), Dim(w)};
    std::vector<int64_t> perm = mode == "CRD" ? std::vector<int64_t>{0, 1, 4, 2, 5, 3}
                                              : std::vector<int64_t>{0, 3, 4, 1, 5, 2};
    KILN_TRY(y, reshapeTo(c, x, mid));
    KILN_TRY(y, transpose(c, y, perm));
    KILN_TRY(
        y, reshapeTo(c, y, {Dim(n), Dim(cc), Dim(simplify(c, h * bb)), Dim(simplify(c, w * bb))}));
  } else {
    SymExpr hh = simplify(c, SymExpr::floorDiv(h, bb)), ww = simplify(c, SymExpr::floorDiv(w, bb));
    KILN_TRY(y, reshapeTo(c, x, {Dim(n), Dim(ch), Dim(hh), Dim(bb), Dim(ww), Dim(bb)}));
    KILN_TRY(y, transpose(c, y, {0, 3, 5, 1, 2, 4}));
    KILN_TRY(y, reshapeTo(c, y, {Dim(n), Dim(simplify(c, ch * b2)), Dim(hh), Dim(ww)}));
  }
  c.setOutput(0, y);
  return ok();
}

} // namespace

void registerShapeOps(Registry& r) {
  r["Shape"] = {shapeOp};
  r["Size"] = {sizeOp};
  r["Reshape"] = {reshapeOp};
  r["Flatten"] = {flattenOp};
  r["Squeeze"] = {squeezeOp};
  r["Unsqueeze"] = {unsqueezeOp};
  r["Transpose"] = {transposeOp};
  r["Concat"] = {concatOp};
  r["Split"] = {splitOp};
  r["Slice"] = {sliceOp};
  r["Gather"] = {gatherOp};
  r["GatherElements"] = {gatherElementsOp};
  r["ReverseSequence"] = {reverseSequenceOp};
  r["GatherND"] = {gatherNdOp};
  r["ScatterND"] = {scatterNdOp};
  r["ScatterElements"] = {scatterElementsOp};
  r["Scatter"] = {scatterElementsOp};
  r["Expand"] = {expandOp};
  r["Tile"] = {tileOp};
  r["Pad"] = {padOp};
  r["ConstantOfShape"] = {constantOfShapeOp};
  r["Range"] = {rangeOp};
  r["Trilu"] = {triluOp};
  r["DepthToSpace"] = {[](Ctx& c) { return depthSpace(c, true); }};
  r["SpaceToDepth"] = {[](Ctx& c) { return depthSpace(c, false); }};
}

} // namespace kiln::onnx
