// The walker's windows (kernel_builder.h): conv, max_pool and avg_pool at one output
// position, static shapes only (codegen.h: lowerSupports).
#include <algorithm>
#include <limits>

#include "passes/lower/kernel_builder.h"

namespace kiln {

// Convolution and pooling at one output position [n, c, o...]: loops over the window in
// the reference's order (channels of the group, then window positions in C order);
// positions in the padding are skipped (max: never win; avg: counted only with
// count_include_pad).
Result<Value*> KernelBuilder::window(const Op& op, const std::vector<Value*>& ix) {
  const Value* x = op.operand(0);
  std::vector<int64_t> xs = x->type().staticShape();
  size_t sp = xs.size() - 2;
  bool conv = op.kind() == OpKind::Conv;
  bool isMax = op.kind() == OpKind::MaxPool;
  std::vector<int64_t> kernel = op.attrs().getInts("kernel");
  if (conv) {
    std::vector<int64_t> ws = op.operand(1)->type().staticShape();
    kernel.assign(ws.begin() + 2, ws.end());
  }
  auto list = [&](const char* name, size_t n, int64_t def) {
    std::vector<int64_t> v = op.attrs().getInts(name);
    if (v.size() != n) v.assign(n, def);
    return v;
  };
  std::vector<int64_t> strides = list("strides", sp, 1), pads = list("pads", 2 * sp, 0),
                       dil = list("dilations", sp, 1);
  ElemType e = op.result(0)->type().elem();
  // A max is exact in any float type: f32 lanes (twice as many per vector as f64) hold it.
  ElemType ae = isMax && isFloat(e) && e != ElemType::F64 ? ElemType::F32 : accElem(e);
  bool flt = isFloat(ae);
  Value* outer = mask_;
  Value* acc;
  Value* real = nullptr;
  Value* padded = nullptr;
  Value* ch = ix[1];
  if (conv) {
    acc = accumulator(ae, 0);
    if (op.numOperands() == 3) {
      KILN_TRY(Value * bias, emitAt(op.operand(2), {ix[1]}));
      accStore(acc, castTo(bias, ae));
    }
  } else if (isMax) {
    double lowest = 0;
    switch (e) {
    case ElemType::I8: lowest = INT8_MIN; break;
    case ElemType::I16: lowest = INT16_MIN; break;
    case ElemType::I32: lowest = INT32_MIN; break;
    case ElemType::I64: lowest = static_cast<double>(INT64_MIN); break;
    default: break;
    }
    acc = accumulator(ae, flt ? -std::numeric_limits<double>::infinity() : lowest);
  } else {
    acc = accumulator(ae, 0);
    real = accumulator(ElemType::F64, 0);
    padded = accumulator(ElemType::F64, 0);
  }
  // A cpu row of a pool strided along it and shorter than one vector stays scalar: LLVM
  // vectorized it with a gather per tap (a 3x3 stride-2 max over rows of 13: 0.17 ms,
  // scalar 0.09 ms; rows of 27 and more are faster vectorized, by interleaved loads).
  if (!conv && colLoop_ && target().cpu && strides.back() > 1 &&
      op.result(0)->type().staticShape().back() <
          std::max<int64_t>(2, target().preferredVectorBits / 32))
    scalarLoop(colLoop_);
  int64_t cg = 1, mg = 1;
  size_t loops = 0;
  Value* cc = nullptr;
  if (conv) {
    int64_t group = op.attrs().getInt("group", 1);
    cg = xs[1] / group;
    mg = op.operand(1)->type().staticShape()[0] / group;
    cc = beginFor(cst(0), cst(cg), cst(1));
    ++loops;
    ch = idx(OpKind::IAdd, idx(OpKind::IMul, idx(OpKind::IFloorDiv, ix[1], cst(mg)), cst(cg)), cc);
  }
  std::vector<Value*> xi{ix[0], ch}, wi;
  if (conv) wi = {ix[1], cc};
  Value* inside = nullptr;
  Value* insidePadded = nullptr;
  for (size_t d = 0; d < sp; ++d) {
    Value* k = beginFor(cst(0), cst(kernel[d]), cst(1));
    ++loops;
    Value* p = idx(OpKind::IAdd,
                   idx(OpKind::ISub, idx(OpKind::IMul, ix[2 + d], cst(strides[d])), cst(pads[d])),
                   idx(OpKind::IMul, k, cst(dil[d])));
    inside = andMask(inside, andMask(cmp("ge", p, cst(0)), cmp("lt", p, cst(xs[2 + d]))));
    if (padded)
      insidePadded = andMask(insidePadded, andMask(cmp("ge", p, cst(-pads[d])),
                                                   cmp("lt", p, cst(xs[2 + d] + pads[sp + d]))));
    xi.push_back(p);
    if (conv) wi.push_back(k);
  }
  mask_ = andMask(outer, inside);
  KILN_TRY(Value * xv, emitAt(x, xi));
  mask_ = outer;
  Value* v = castTo(xv, ae);
  Value* old = accLoad(acc);
  Value* next;
  if (conv) {
    KILN_TRY(Value * wv, emitAt(op.operand(1), wi));
    next = compute(OpKind::Add, {old, compute(OpKind::Mul, {v, castTo(wv, ae)}, ae)}, ae);
  } else {
    next = compute(isMax ? OpKind::Max : OpKind::Add, {old, v}, ae);
  }
  accStore(acc, compute(OpKind::Select, {inside, next, old}, ae));
  if (real) {
    Value* one = scst(ElemType::F64, 1);
    Value* r0 = accLoad(real);
    accStore(real,
             compute(OpKind::Select, {inside, compute(OpKind::Add, {r0, one}, ElemType::F64), r0},
                     ElemType::F64));
    Value* p0 = accLoad(padded);
    accStore(padded, compute(OpKind::Select,
                             {insidePadded, compute(OpKind::Add, {p0, one}, ElemType::F64), p0},
                             ElemType::F64));
  }
  for (size_t i = 0; i < loops; ++i) endFor();
  Value* res = accLoad(acc);
  if (real) {
    bool includePad = op.attrs().getInt("count_include_pad", 0) != 0;
    res = compute(OpKind::Div, {res, accLoad(includePad ? padded : real)}, ae);
  }
  return castTo(res, e);
}

} // namespace kiln
