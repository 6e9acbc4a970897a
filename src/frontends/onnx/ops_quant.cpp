// Converters for the quantization ops, as compositions over int8/uint8 storage:
// QuantizeLinear / DequantizeLinear (per tensor or per axis), DynamicQuantizeLinear,
// MatMulInteger and ConvInteger (operands widened to i32 after subtracting their zero
// points, i32 accumulation), and QLinearMatMul / QLinearConv (the same integer contraction,
// requantized: round(acc * a_scale * b_scale / y_scale) + y_zero_point, saturated).
#include "frontends/onnx/context.h"

namespace kiln::onnx {

namespace {

// A scale or zero point: a scalar as it is, a 1-D one reshaped to lie along `axis` of a
// tensor of rank `rank`.
Result<Val> perAxis(Ctx& c, const Val& p, int64_t axis, int64_t rank) {
  const Dim& d0 = p.rank() == 1 ? p.type().dim(0) : Dim(0);
  if (p.rank() == 0 || (d0.isStatic() && d0.value() == 1 && rank != 1)) return p;
  if (p.rank() != 1) return c.err("scales and zero points must be scalars or 1-D");
  KILN_TRY(axis, normAxis(c, axis, rank));
  Shape s{p.type().dim(0)};
  for (int64_t i = axis + 1; i < rank; ++i) s.push_back(Dim(1));
  return reshapeTo(c, p, s);
}

// The range of a quantized type.
Result<std::pair<double, double>> quantRange(Ctx& c, ElemType e) {
  if (e == ElemType::U8) return std::make_pair(0.0, 255.0);
  if (e == ElemType::I8) return std::make_pair(-128.0, 127.0);
  return c.err("quantized values must be u8 or i8, got " + std::string(elemTypeName(e)));
}

// saturate(round_half_even(v) + zp) in `out` (v and zp are floats of one type; zp optional).
Result<Val> requantize(Ctx& c, Val v, std::optional<Val> zp, ElemType out) {
  KILN_TRY(auto range, quantRange(c, out));
  KILN_TRY(v, c.op(OpKind::Round, {v}));
  if (zp) {
    KILN_TRY(Val z, c.cast(*zp, v.elem()));
    KILN_TRY(v, c.op(OpKind::Add, {v, z}));
  }
  KILN_TRY(v, c.op(OpKind::Clamp,
                   {v, c.scalar(v.elem(), range.first), c.scalar(v.elem(), range.second)}));
  return c.cast(v, out);
}

// x widened to i32 minus its zero point (which is reshaped to `zpShape` when 1-D).
Result<Val> centered(Ctx& c, const Val& x, std::optional<Val> zp, int64_t axis) {
  KILN_TRY(Val xi, c.cast(x, ElemType::I32));
  if (!zp) return xi;
  KILN_TRY(Val z, perAxis(c, *zp, axis, x.rank()));
  KILN_TRY(z, c.cast(z, ElemType::I32));
  return c.op(OpKind::Sub, {xi, z});
}

std::optional<Val> optionalInput(Ctx& c, size_t i) {
  if (!c.hasInput(i)) return std::nullopt;
  Result<Val> v = c.input(i);
  if (!v.ok()) return std::nullopt;
  return *v;
}

// True when every element of a zero point known at import is 0.
bool knownZero(const Val& zp) {
  if (!zp.value) return false;
  for (int64_t i = 0; i < zp.value->numElements(); ++i)
    if (zp.value->getI(i) != 0) return false;
  return true;
}

// A quantized matmul weight known at import (Ctx::quantizedWeights) as a module weight whose
// data the importer forgets, so that the dequantization stays in the IR: `cast`, `sub`,
// `mul` over the i8/u8 weight, which the cpu matmul widens while packing B instead of
// keeping a dequantized f32 copy.
Result<Val> keptWeight(Ctx& c, const Val& x) {
  Val w = x;
  if (x.v->def() == nullptr || x.v->def()->kind() != OpKind::Weight) {
    KILN_TRY(w, c.weight(c.node().input(0), *x.value));
  }
  return Val{w.v, std::nullopt, std::nullopt};
}

Status dequantizeOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val scale, c.input(1));
  KILN_TRY(int64_t axis, c.attrInt("axis", 1));
  if (x.value && (x.elem() == ElemType::I8 || x.elem() == ElemType::U8) &&
      c.quantizedWeights.count(c.node().input(0))) {
    KILN_TRY(x, keptWeight(c, x));
  }
  KILN_TRY(scale, perAxis(c, scale, axis, x.rank()));
  KILN_TRY(Val xf, c.cast(x, scale.elem()));
  if (c.hasInput(2)) {
    KILN_TRY(Val zp, c.input(2));
    if (!knownZero(zp)) {
      KILN_TRY(zp, perAxis(c, zp, axis, x.rank()));
      KILN_TRY(zp, c.cast(zp, scale.elem()));
      KILN_TRY(xf, c.op(OpKind::Sub, {xf, zp}));
    }
  }
  KILN_TRY(Val y, c.op(OpKind::Mul, {xf, scale}));
  c.setOutput(0, y);
  return ok();
}

// Frees the data of the weights that folding made on the way to `result` (Ctx::op turns each
// large folded step of quantizing a weight into a weight): once `result` is folded, no op
// uses them, and a model's weights would otherwise be held several times over in f32.
void dropFoldedSteps(Ctx& c, const std::set<std::string, std::less<>>& before, const Val& result) {
  const Op* d = result.v->def();
  if (!result.value || !d || d->kind() != OpKind::Weight) return;
  std::string keep = d->attrs().getStr("name");
  for (auto it = c.pendingWeights.begin(); it != c.pendingWeights.end();)
    it = before.count(it->first) || it->first == keep ? std::next(it) : c.pendingWeights.erase(it);
}

// saturate(round_half_even(x / scale) + zero_point) in the zero point's type (u8 default).
// A quantized matmul weight folds at any size, so that DequantizeLinear can keep it.
Status quantizeOp(Ctx& c) {
  struct FoldLimit {
    Ctx& c;
    int64_t saved;
    ~FoldLimit() { c.foldLimit = saved; }
  } restore{c, c.foldLimit};
  bool kept = c.node().output_size() > 0 && c.quantizedWeights.count(c.node().output(0));
  std::set<std::string, std::less<>> before;
  if (kept) {
    c.foldLimit = INT64_MAX;
    for (const auto& w : c.pendingWeights) before.insert(w.first);
  }
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val scale, c.input(1));
  KILN_TRY(int64_t axis, c.attrInt("axis", 1));
  KILN_TRY(scale, perAxis(c, scale, axis, x.rank()));
  KILN_TRY(scale, c.cast(scale, x.elem()));
  KILN_TRY(Val q, c.op(OpKind::Div, {x, scale}));
  std::optional<Val> zp;
  ElemType out = ElemType::U8;
  if (c.hasInput(2)) {
    KILN_TRY(Val z, c.input(2));
    out = z.elem();
    KILN_TRY(z, perAxis(c, z, axis, x.rank()));
    zp = z;
  }
  KILN_TRY(Val y, requantize(c, q, zp, out));
  if (kept) dropFoldedSteps(c, before, y);
  c.setOutput(0, y);
  return ok();
}

// y_scale = (max(x, 0) - min(x, 0)) / 255, y_zero_point = saturate(round(-min / scale)),
// y = saturate(round(x / scale) + zero_point), all u8.
Status dynamicQuantizeOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  Attrs all;
  all.set("axes", std::vector<int64_t>{});
  all.set("keepdims", int64_t(0));
  KILN_TRY(Val lo, c.op(OpKind::ReduceMin, {x}, all));
  KILN_TRY(Val hi, c.op(OpKind::ReduceMax, {x}, all));
  Val zero = c.scalar(x.elem(), 0);
  KILN_TRY(lo, c.op(OpKind::Min, {lo, zero}));
  KILN_TRY(hi, c.op(OpKind::Max, {hi, zero}));
  KILN_TRY(Val scale, c.op(OpKind::Sub, {hi, lo}));
  KILN_TRY(scale, c.op(OpKind::Div, {scale, c.scalar(x.elem(), 255)}));
  KILN_TRY(Val zpf, c.op(OpKind::Div, {lo, scale}));
  KILN_TRY(zpf, c.op(OpKind::Neg, {zpf}));
  KILN_TRY(Val zp, requantize(c, zpf, std::nullopt, ElemType::U8));
  KILN_TRY(Val q, c.op(OpKind::Div, {x, scale}));
  KILN_TRY(Val y, requantize(c, q, zp, ElemType::U8));
  c.setOutput(0, y);
  c.setOutput(1, scale);
  c.setOutput(2, zp);
  return ok();
}

// (A - a_zero_point) @ (B - b_zero_point) in i32; a 1-D a_zero_point is per row of A, a 1-D
// b_zero_point per column of B.
Result<Val> integerMatmul(Ctx& c, const Val& a, std::optional<Val> azp, const Val& b,
                          std::optional<Val> bzp) {
  KILN_TRY(Val ai, centered(c, a, azp, a.rank() - 2));
  KILN_TRY(Val bi, centered(c, b, bzp, b.rank() - 1));
  return c.op(OpKind::Matmul, {ai, bi});
}

// The same for a convolution: a 1-D w_zero_point is per output channel.
Result<Val> integerConv(Ctx& c, const Val& x, std::optional<Val> xzp, const Val& w,
                        std::optional<Val> wzp) {
  KILN_TRY(Attrs a, convAttrs(c, x, w));
  KILN_TRY(Val xi, centered(c, x, xzp, 1));
  KILN_TRY(Val wi, centered(c, w, wzp, 0));
  return c.op(OpKind::Conv, {xi, wi}, std::move(a));
}

// acc * (a_scale * b_scale / y_scale), requantized to y_zero_point's type; a 1-D scale lies
// along `aAxis` / `bAxis` of the accumulator.
Result<Val> requantizeAcc(Ctx& c, const Val& acc, const Val& as, int64_t aAxis, const Val& bs,
                          int64_t bAxis, const Val& ys, const Val& yzp) {
  KILN_TRY(Val sa, perAxis(c, as, aAxis, acc.rank()));
  KILN_TRY(Val sb, perAxis(c, bs, bAxis, acc.rank()));
  KILN_TRY(sb, c.cast(sb, sa.elem()));
  KILN_TRY(Val sy, c.cast(ys, sa.elem()));
  KILN_TRY(Val f, c.cast(acc, sa.elem()));
  KILN_TRY(f, c.op(OpKind::Mul, {f, sa}));
  KILN_TRY(f, c.op(OpKind::Mul, {f, sb}));
  KILN_TRY(f, c.op(OpKind::Div, {f, sy}));
  return requantize(c, f, yzp, yzp.elem());
}

Status matmulIntegerOp(Ctx& c) {
  KILN_TRY(Val a, c.input(0));
  KILN_TRY(Val b, c.input(1));
  if (a.rank() < 2 || b.rank() < 2) return c.err("A and B must have rank >= 2");
  KILN_TRY(Val y, integerMatmul(c, a, optionalInput(c, 2), b, optionalInput(c, 3)));
  c.setOutput(0, y);
  return ok();
}

Status convIntegerOp(Ctx& c) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(Val w, c.input(1));
  KILN_TRY(Val y, integerConv(c, x, optionalInput(c, 2), w, optionalInput(c, 3)));
  c.setOutput(0, y);
  return ok();
}

Status qlinearMatmulOp(Ctx& c) {
  std::vector<Val> in;
  for (size_t i = 0; i < 8; ++i) {
    KILN_TRY(Val v, c.input(i));
    in.push_back(v);
  }
  const Val &a = in[0], &b = in[3];
  if (a.rank() < 2 || b.rank() < 2) return c.err("A and B must have rank >= 2");
  KILN_TRY(Val acc, integerMatmul(c, a, in[2], b, in[5]));
  KILN_TRY(Val y,
           requantizeAcc(c, acc, in[1], acc.rank() - 2, in[4], acc.rank() - 1, in[6], in[7]));
  c.setOutput(0, y);
  return ok();
}

Status qlinearConvOp(Ctx& c) {
  std::vector<Val> in;
  for (size_t i = 0; i < 8; ++i) {
    KILN_TRY(Val v, c.input(i));
    in.push_back(v);
  }
  KILN_TRY(Val acc, integerConv(c, in[0], in[2], in[3], in[5]));
  if (c.hasInput(8)) {
    KILN_TRY(Val bias, c.input(8));
    KILN_TRY(bias, c.cast(bias, ElemType::I32));
    KILN_TRY(bias, perAxis(c, bias, 1, acc.rank()));
    KILN_TRY(acc, c.op(OpKind::Add, {acc, bias}));
  }
  KILN_TRY(Val y, requantizeAcc(c, acc, in[1], 1, in[4], 1, in[6], in[7]));
  c.setOutput(0, y);
  return ok();
}

} // namespace

void registerQuant(Registry& r) {
  r["DequantizeLinear"] = {dequantizeOp};
  r["QuantizeLinear"] = {quantizeOp};
  r["DynamicQuantizeLinear"] = {dynamicQuantizeOp};
  r["MatMulInteger"] = {matmulIntegerOp, 10};
  r["ConvInteger"] = {convIntegerOp, 10};
  r["QLinearMatMul"] = {qlinearMatmulOp, 10};
  r["QLinearConv"] = {qlinearConvOp, 10};
}

} // namespace kiln::onnx
