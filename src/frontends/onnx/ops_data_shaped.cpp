// Converters of the ONNX ops whose result shape depends on the input's values: NonZero,
// Compress, Unique, NonMaxSuppression. Each result dim that only running tells is a fresh
// `data_dependent` symbol whose range ends at what the input's size allows (docs/onnx.md,
// "Data-dependent shapes"); the ops producing it bind it when they run, and the schedule
// allocates for the upper end of its range.
#include <algorithm>
#include <cmath>

#include "frontends/onnx/context.h"

namespace kiln::onnx {

Result<Dim> dataSymbol(Ctx& c, const std::string& base, int64_t hi) {
  std::string name = identifier(base, "n");
  for (int k = 1; c.symbols().lookup(name); ++k)
    name = identifier(base, "n") + "_" + std::to_string(k);
  SymbolInfo info{name, 0, hi, 1, c.loc(), true};
  KILN_CHECK(c.module().symbols().declare(info));
  return Dim(SymExpr::symbol(name));
}

namespace {

// The largest value `d` takes under the symbols' ranges.
Result<int64_t> dimUpperBound(const Ctx& c, const Dim& d) {
  if (d.isUnknown()) return c.err("a dim of the input is unknown");
  SymBounds b = bounds(d.expr(), c.symbols());
  if (b.hi < 0 || b.hi == INT64_MAX) return c.err("dim " + d.str() + " has no upper bound");
  return b.hi;
}

// The most elements a tensor of type `t` holds, within the interpreter's limit.
Result<int64_t> elementsUpperBound(const Ctx& c, const Type& t) {
  int64_t n = 1;
  for (const Dim& d : t.shape()) {
    KILN_TRY(int64_t hi, dimUpperBound(c, d));
    if (__builtin_mul_overflow(n, hi, &n) || n > (int64_t(1) << 31))
      return c.err(
          "the input " + t.str() +
          " may hold more than 2^31 elements; kiln cannot bound its data-dependent result");
  }
  return n;
}

// How many elements a tensor of type `t` has, symbolically (the dim of its flattened form).
Result<Dim> elementCount(const Ctx& c, const Type& t) {
  SymExpr count = SymExpr::constant(1);
  for (int64_t i = 0; i < t.rank(); ++i) {
    KILN_TRY(SymExpr d, dimExpr(c, t, i));
    count = count * d;
  }
  return Dim(count);
}

// The symbol's name: the node's first output, so a message or a printed module names the
// ONNX value whose size it is.
std::string symbolBase(const Ctx& c, const char* fallback) {
  std::string out = c.numOutputs() ? c.node().output(0) : "";
  return (out.empty() ? std::string(fallback) : out) + "_len";
}

// The 1-D i64 positions of the nonzero elements of 1-D `cond`.
Result<Val> nonzeroPositions(Ctx& c, const Val& cond, const Dim& n) {
  KILN_TRY(Val idx, c.op(OpKind::NonZero, {cond}, {}, {Type(ElemType::I64, {Dim(1), n})}));
  return reshapeTo(c, idx, {n});
}

Status nonZeroOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(int64_t hi, elementsUpperBound(c, x.type()));
  KILN_TRY(Dim n, dataSymbol(c, symbolBase(c, "nonzero"), hi));
  KILN_TRY(Val y, c.op(OpKind::NonZero, {x}, {}, {Type(ElemType::I64, {Dim(x.rank()), n})}));
  c.setOutput(0, y);
  return ok();
}

// Compress(x, condition, axis?): the slices of x along axis (or the elements of the flattened
// x) whose condition is true; a condition shorter than the axis selects among the first ones.
Status compressOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val cond, c.input(1));
  if (cond.rank() != 1) return c.err("the condition must be 1-D, got " + cond.type().str());
  KILN_TRY(int64_t hi, dimUpperBound(c, cond.type().dim(0)));
  if (const auto* a = c.attr("axis"); !a) {
    KILN_TRY(int64_t total, elementsUpperBound(c, x.type()));
    KILN_TRY(Dim count, elementCount(c, x.type()));
    KILN_TRY(x, reshapeTo(c, x, {count}));
    hi = std::min(hi, total);
  }
  KILN_TRY(int64_t axis, c.attrInt("axis", 0));
  KILN_TRY(axis, normAxis(c, axis, x.rank()));
  KILN_TRY(int64_t dimHi, dimUpperBound(c, x.type().dim(axis)));
  KILN_TRY(Dim n, dataSymbol(c, symbolBase(c, "compress"), std::min(hi, dimHi)));
  KILN_TRY(cond, c.cast(cond, ElemType::I1));
  KILN_TRY(Val idx, nonzeroPositions(c, cond, n));
  Attrs attrs;
  attrs.set("axis", axis);
  KILN_TRY(Val y, c.op(OpKind::Gather, {x, idx}, std::move(attrs)));
  c.setOutput(0, y);
  return ok();
}

// Unique(x, axis?, sorted = 1): y, indices, inverse_indices, counts.
Status uniqueOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(int64_t sorted, c.attrInt("sorted", 1));
  Attrs attrs;
  attrs.set("sorted", int64_t(sorted != 0));
  Shape y;
  int64_t hi = 0;
  if (c.attr("axis")) {
    KILN_TRY(int64_t axis, c.attrInt("axis", 0));
    KILN_TRY(axis, normAxis(c, axis, x.rank()));
    attrs.set("axis", axis);
    KILN_TRY(hi, dimUpperBound(c, x.type().dim(axis)));
    y = x.type().shape();
  } else {
    KILN_TRY(hi, elementsUpperBound(c, x.type()));
  }
  KILN_TRY(Dim u, dataSymbol(c, symbolBase(c, "unique"), hi));
  Dim n = Dim(SymExpr::constant(0));
  if (c.attr("axis")) {
    int64_t axis = attrs.getInt("axis");
    n = x.type().dim(axis);
    y[static_cast<size_t>(axis)] = u;
  } else {
    KILN_TRY(n, elementCount(c, x.type()));
    y = {u};
  }
  KILN_TRY(Val first, c.op(OpKind::Unique, {x}, std::move(attrs),
                           {Type(x.elem(), y), Type(ElemType::I64, {u}), Type(ElemType::I64, {n}),
                            Type(ElemType::I64, {u})}));
  Op* op = first.v->def();
  for (size_t i = 0; i < 4 && i < c.numOutputs(); ++i) c.setOutput(i, Val{op->result(i), {}, {}});
  return ok();
}

// NonMaxSuppression(boxes, scores, max_output_boxes_per_class = 0, iou_threshold = 0,
// score_threshold = none).
Status nonMaxSuppressionOp(Ctx& c) {
  KILN_TRY(Val boxes, c.input(0));
  KILN_TRY(Val scores, c.input(1));
  if (boxes.rank() != 3 || scores.rank() != 3)
    return c.err("boxes and scores must be [B, N, 4] and [B, C, N], got " + boxes.type().str() +
                 " and " + scores.type().str());
  KILN_TRY(int64_t center, c.attrInt("center_point_box", 0));
  if (center != 0 && center != 1) return c.err("center_point_box must be 0 or 1");
  Val maxOut = c.scalar(ElemType::I64, 0);
  if (c.hasInput(2)) {
    KILN_TRY(maxOut, c.input(2));
    KILN_TRY(maxOut, c.cast(maxOut, ElemType::I64));
  }
  Val iou = c.scalar(ElemType::F32, 0);
  if (c.hasInput(3)) {
    KILN_TRY(iou, c.input(3));
  }
  Val scoreThreshold = c.scalar(ElemType::F32, -INFINITY);
  if (c.hasInput(4)) {
    KILN_TRY(scoreThreshold, c.input(4));
  }
  // At most B * C * min(max, N) rows.
  KILN_TRY(int64_t b, dimUpperBound(c, scores.type().dim(0)));
  KILN_TRY(int64_t k, dimUpperBound(c, scores.type().dim(1)));
  KILN_TRY(int64_t n, dimUpperBound(c, scores.type().dim(2)));
  if (maxOut.value && maxOut.value->numElements() == 1)
    n = std::clamp<int64_t>(maxOut.value->getI(0), 0, n);
  int64_t hi = 0;
  if (__builtin_mul_overflow(b, k, &hi) || __builtin_mul_overflow(hi, n, &hi) ||
      hi > (int64_t(1) << 31))
    return c.err("boxes and scores may select more than 2^31 boxes");
  KILN_TRY(Dim rows, dataSymbol(c, symbolBase(c, "nms"), hi));
  Attrs attrs;
  attrs.set("center_point_box", center);
  KILN_TRY(Val y, c.op(OpKind::NonMaxSuppression, {boxes, scores, maxOut, iou, scoreThreshold},
                       std::move(attrs), {Type(ElemType::I64, {rows, Dim(3)})}));
  c.setOutput(0, y);
  return ok();
}

} // namespace

void registerDataShaped(Registry& r) {
  r["NonZero"] = {nonZeroOp, 9};
  r["Compress"] = {compressOp, 9};
  r["Unique"] = {uniqueOp, 11};
  r["NonMaxSuppression"] = {nonMaxSuppressionOp, 10};
}

} // namespace kiln::onnx
