// KernelEmitter, arithmetic half (see emitter.h): `compute`, `icast` and index ops with the
// interpreter's semantics (src/ir/interp/elementwise.cpp), as the cpu backend's scalar.cpp
// does for LLVM. Exact ops (add, sub, mul, div, sqrt, conversions) round once to the
// element type; integers wrap at their width; comparisons and max/min treat NaN as the
// interpreter does. Transcendental functions are the GLSL.std.450 ones in f32 (f64 values
// go through f32: Vulkan has no f64 transcendentals), plus erf, which GLSL lacks; their
// error is the device's, which the differential tests allow for (docs/vulkan.md).
#include <spirv/unified1/GLSL.std.450.h>

#include <climits>
#include <cmath>
#include <numbers>

#include "backends/spirv/emitter.h"
#include "ir/core/host_tensor.h"

namespace kiln::spirv {

using SOp = spv::Op;

namespace {

bool isUnsignedLike(ElemType e) { return isUnsignedInt(e) || e == ElemType::I1; }

} // namespace

// ---- types ---------------------------------------------------------------------------------

Id KernelEmitter::scalarType(ElemType e) {
  switch (e) {
  case ElemType::F64: b_.capability(spv::Capability::Float64); return b_.typeFloat(64);
  case ElemType::F32:
  case ElemType::F16:
  case ElemType::BF16: return b_.typeFloat(32);
  case ElemType::I1: return b_.typeBool();
  case ElemType::I8:
  case ElemType::U8: b_.capability(spv::Capability::Int8); return b_.typeInt(8);
  case ElemType::I16:
  case ElemType::U16: b_.capability(spv::Capability::Int16); return b_.typeInt(16);
  case ElemType::I32:
  case ElemType::U32: return b_.typeInt(32);
  case ElemType::I64:
  case ElemType::U64: b_.capability(spv::Capability::Int64); return b_.typeInt(64);
  }
  return b_.typeInt(32);
}

Id KernelEmitter::storageType(ElemType e) {
  auto eightBit = [&] {
    b_.capability(spv::Capability::StorageBuffer8BitAccess);
    b_.extension("SPV_KHR_8bit_storage");
  };
  switch (e) {
  case ElemType::F16:
    b_.capability(spv::Capability::StorageBuffer16BitAccess);
    return b_.typeFloat(16);
  case ElemType::BF16:
    b_.capability(spv::Capability::StorageBuffer16BitAccess);
    return b_.typeInt(16);
  case ElemType::I16:
  case ElemType::U16: b_.capability(spv::Capability::StorageBuffer16BitAccess); break;
  case ElemType::I1: eightBit(); return b_.typeInt(8);
  case ElemType::I8:
  case ElemType::U8: eightBit(); break;
  default: break;
  }
  return scalarType(e);
}

// Shared and private buffers hold values as the code computes with them.
Id KernelEmitter::internalType(ElemType e) { return scalarType(e); }

Id KernelEmitter::valueType(const Type& t) {
  if (t.isIndex()) return idx_;
  if (t.isVector()) return b_.typeVector(scalarType(t.elem()), uint32_t(t.dim(0).value()));
  return scalarType(t.elem());
}

Id KernelEmitter::indexConst(int64_t v) { return b_.constInt(idx_, uint64_t(v)); }

Id KernelEmitter::scalarConstant(ElemType e, double v) {
  HostTensor t(e, {});
  t.setF(0, v);
  if (isFloat(e)) return b_.constFloat(scalarType(e), t.getF(0));
  if (isBool(e)) return b_.constBool(t.getI(0) != 0);
  return b_.constInt(scalarType(e), uint64_t(t.getI(0)));
}

Id KernelEmitter::glsl(uint32_t inst, Id type, const std::vector<Id>& args) {
  Words w = {b_.glslImport(), inst};
  w.insert(w.end(), args.begin(), args.end());
  return b_.codeResult(SOp::OpExtInst, type, w);
}

Id KernelEmitter::boolToInt(Id c, Id intType) {
  return select(intType, c, b_.constInt(intType, 1), b_.constInt(intType, 0));
}

Id KernelEmitter::signExtend(Id v, uint32_t fromBits, uint32_t toBits) {
  Id wide = b_.codeResult(SOp::OpSConvert, b_.typeSignedInt(toBits),
                          {op1(SOp::OpBitcast, b_.typeSignedInt(fromBits), v)});
  return op1(SOp::OpBitcast, b_.typeInt(toBits), wide);
}

Id KernelEmitter::signedToFloat(Id v, uint32_t bits, Id floatType) {
  return op1(SOp::OpConvertSToF, floatType, op1(SOp::OpBitcast, b_.typeSignedInt(bits), v));
}

Id KernelEmitter::floatToI64(Id v) {
  return op1(SOp::OpBitcast, b_.typeInt(64), op1(SOp::OpConvertFToS, b_.typeSignedInt(64), v));
}

// ---- storage forms -------------------------------------------------------------------------

// A float rounded to bf16 precision (nearest even, NaN kept quiet): its 16 bits in a u32.
static Id bf16Bits(SpirvBuilder& b, Id u32, Id boolT, Id f) {
  auto c = [&](uint32_t v) { return b.constInt(u32, v); };
  Id x = b.codeResult(SOp::OpBitcast, u32, {f});
  Id nan =
      b.codeResult(SOp::OpUGreaterThan, boolT,
                   {b.codeResult(SOp::OpBitwiseAnd, u32, {x, c(0x7fffffffu)}), c(0x7f800000u)});
  Id hi = b.codeResult(SOp::OpShiftRightLogical, u32, {x, c(16)});
  Id nanBits = b.codeResult(SOp::OpBitwiseOr, u32, {hi, c(0x40)});
  Id rounding =
      b.codeResult(SOp::OpIAdd, u32, {c(0x7fff), b.codeResult(SOp::OpBitwiseAnd, u32, {hi, c(1)})});
  Id rounded = b.codeResult(SOp::OpShiftRightLogical, u32,
                            {b.codeResult(SOp::OpIAdd, u32, {x, rounding}), c(16)});
  return b.codeResult(SOp::OpSelect, u32, {nan, nanBits, rounded});
}

Id KernelEmitter::roundTo(ElemType e, Id f) {
  if (e == ElemType::F16)
    return op1(SOp::OpFConvert, f32_, op1(SOp::OpFConvert, storageType(ElemType::F16), f));
  if (e == ElemType::BF16) {
    Id bits = bf16Bits(b_, u32_, bool_, f);
    return op1(SOp::OpBitcast, f32_,
               op2(SOp::OpShiftLeftLogical, u32_, bits, b_.constInt(u32_, 16)));
  }
  return f;
}

Id KernelEmitter::fromStorage(ElemType e, Id raw) {
  switch (e) {
  case ElemType::F16: return op1(SOp::OpFConvert, f32_, raw);
  case ElemType::BF16:
    return op1(
        SOp::OpBitcast, f32_,
        op2(SOp::OpShiftLeftLogical, u32_, op1(SOp::OpUConvert, u32_, raw), b_.constInt(u32_, 16)));
  case ElemType::I1:
    return op2(SOp::OpINotEqual, bool_, op1(SOp::OpUConvert, u32_, raw), b_.constInt(u32_, 0));
  default: return raw;
  }
}

Id KernelEmitter::toStorage(ElemType e, Id v) {
  switch (e) {
  case ElemType::F16: return op1(SOp::OpFConvert, storageType(e), v);
  case ElemType::BF16: return op1(SOp::OpUConvert, storageType(e), bf16Bits(b_, u32_, bool_, v));
  case ElemType::I1: return op1(SOp::OpUConvert, storageType(e), boolToInt(v, u32_));
  default: return v;
  }
}

// ---- index ops -----------------------------------------------------------------------------

Status KernelEmitter::indexArith(const Op& op) {
  Id a = get(op.operand(0)), d = get(op.operand(1));
  const Value* res = op.result(0);
  switch (op.kind()) {
  case OpKind::IAdd: vals_[res] = op2(SOp::OpIAdd, idx_, a, d); return ok();
  case OpKind::ISub: vals_[res] = op2(SOp::OpISub, idx_, a, d); return ok();
  case OpKind::IMul: vals_[res] = op2(SOp::OpIMul, idx_, a, d); return ok();
  case OpKind::IMin:
    vals_[res] = select(idx_, op2(SOp::OpSLessThan, bool_, a, d), a, d);
    return ok();
  case OpKind::IMax:
    vals_[res] = select(idx_, op2(SOp::OpSLessThan, bool_, a, d), d, a);
    return ok();
  case OpKind::ICmp: {
    std::string p = op.attrs().getStr("pred");
    SOp o = p == "lt"   ? SOp::OpSLessThan
            : p == "le" ? SOp::OpSLessThanEqual
            : p == "gt" ? SOp::OpSGreaterThan
            : p == "ge" ? SOp::OpSGreaterThanEqual
            : p == "eq" ? SOp::OpIEqual
                        : SOp::OpINotEqual;
    vals_[res] = op2(o, bool_, a, d);
    return ok();
  }
  default: break;
  }
  // ifloordiv / iceildiv / imod: unsigned forms where value bounds prove both sides
  // non-negative, floor forms otherwise; a zero divisor (a run-time error on the
  // interpreter) gives a defined value instead of undefined behaviour.
  //
  // A 64-bit division whose operands' bounds fit in 32 bits divides in 32 bits, and an
  // unsigned one that may not fit does so whenever both operands fit at run time: it is
  // faster, and NVIDIA's Vulkan driver computes 64-bit OpUDiv/OpUMod wrongly (with 64-bit
  // indices forced, maxpool and averagepool with pads, constant pad and tile came out wrong
  // on an H200 with driver 580; docs/vulkan.md).
  Range ra = bounds_.of(op.operand(0)), rd = bounds_.of(op.operand(1));
  bool unsignedForm = ra.lo >= 0 && rd.lo > 0;
  if (!(rd.lo > 0)) d = select(idx_, op2(SOp::OpIEqual, bool_, d, indexConst(0)), indexConst(1), d);
  if (idxBits_ == 32) {
    vals_[res] = divMod(op.kind(), a, d, idx_, unsignedForm);
    return ok();
  }
  auto narrow = [&](Id v) { return op1(SOp::OpUConvert, u32_, v); };
  if (unsignedForm ? ra.hi <= UINT32_MAX && rd.hi <= UINT32_MAX : fitsI32(ra) && fitsI32(rd)) {
    Id r = divMod(op.kind(), narrow(a), narrow(d), u32_, unsignedForm);
    vals_[res] = unsignedForm ? op1(SOp::OpUConvert, idx_, r) : signExtend(r, 32, 64);
    return ok();
  }
  if (!unsignedForm) {
    vals_[res] = divMod(op.kind(), a, d, idx_, false);
    return ok();
  }
  Id high = op2(SOp::OpShiftRightLogical, idx_, op2(SOp::OpBitwiseOr, idx_, a, d), indexConst(32));
  Id small = op2(SOp::OpIEqual, bool_, high, indexConst(0));
  Id d32 = select(u32_, small, narrow(d), b_.constInt(u32_, 1));
  Id r32 = op1(SOp::OpUConvert, idx_, divMod(op.kind(), narrow(a), d32, u32_, true));
  KILN_TRY(std::vector<Id> r, guarded(op1(SOp::OpLogicalNot, bool_, small), {{idx_, r32}},
                                      [&]() -> Result<std::vector<Id>> {
                                        return std::vector<Id>{divMod(op.kind(), a, d, idx_, true)};
                                      }));
  vals_[res] = r[0];
  return ok();
}

// a / d (floor or ceiling) or a mod d of integers of type `t`, d non-zero: unsigned
// instructions when both are known non-negative, else floor semantics from OpSDiv.
Id KernelEmitter::divMod(OpKind kind, Id a, Id d, Id t, bool unsignedForm) {
  auto k = [&](int64_t v) { return b_.constInt(t, v); };
  if (unsignedForm) {
    if (kind == OpKind::IFloorDiv) return op2(SOp::OpUDiv, t, a, d);
    Id m = op2(SOp::OpUMod, t, a, d);
    if (kind == OpKind::IMod) return m;
    return op2(SOp::OpIAdd, t, op2(SOp::OpUDiv, t, a, d),
               boolToInt(op2(SOp::OpINotEqual, bool_, m, k(0)), t));
  }
  Id m1 = op2(SOp::OpIEqual, bool_, d, k(-1));
  Id q = select(t, m1, op1(SOp::OpSNegate, t, a), op2(SOp::OpSDiv, t, a, select(t, m1, k(1), d)));
  Id rem = op2(SOp::OpISub, t, a, op2(SOp::OpIMul, t, q, d));
  Id inexact = op2(SOp::OpINotEqual, bool_, rem, k(0));
  Id signsDiffer = op2(SOp::OpLogicalNotEqual, bool_, op2(SOp::OpSLessThan, bool_, rem, k(0)),
                       op2(SOp::OpSLessThan, bool_, d, k(0)));
  if (kind == OpKind::IFloorDiv)
    return op2(SOp::OpISub, t, q,
               boolToInt(op2(SOp::OpLogicalAnd, bool_, inexact, signsDiffer), t));
  if (kind == OpKind::ICeilDiv)
    return op2(
        SOp::OpIAdd, t, q,
        boolToInt(
            op2(SOp::OpLogicalAnd, bool_, inexact, op1(SOp::OpLogicalNot, bool_, signsDiffer)), t));
  return select(t, op2(SOp::OpLogicalAnd, bool_, inexact, signsDiffer), op2(SOp::OpIAdd, t, rem, d),
                rem);
}

Result<Id> KernelEmitter::indexCast(const Op& op) {
  const Type& from = op.operand(0)->type();
  const Type& to = op.result(0)->type();
  Id v = get(op.operand(0));
  ElemType indexElem = idxBits_ == 32 ? ElemType::I32 : ElemType::I64;
  if (from.isIndex()) {
    if (to.isIndex()) return v;
    return convert(indexElem, to.elem(), v);
  }
  ElemType e = from.elem();
  if (isFloat(e)) return error(op.loc(), "icast takes an integer scalar");
  if (isBool(e)) return boolToInt(v, idx_);
  int bits = elemTypeBytes(e) * 8;
  if (bits > int(idxBits_)) {
    // A 64-bit data index into 32-bit index arithmetic: saturate, so that an index out of
    // range stays out of range (and is refused by the access's range check).
    Id t = scalarType(e);
    Id hiC = b_.constInt(t, uint64_t(INT32_MAX)),
       loC = b_.constInt(t, uint64_t(int64_t(INT32_MIN)));
    bool u = isUnsignedInt(e);
    v = select(t, op2(u ? SOp::OpUGreaterThan : SOp::OpSGreaterThan, bool_, v, hiC), hiC, v);
    if (!u) v = select(t, op2(SOp::OpSLessThan, bool_, v, loC), loC, v);
    return op1(SOp::OpUConvert, idx_, v);
  }
  if (bits == int(idxBits_)) return v;
  return isUnsignedInt(e) ? op1(SOp::OpUConvert, idx_, v) : signExtend(v, uint32_t(bits), idxBits_);
}

// ---- conversions ---------------------------------------------------------------------------

Result<Id> KernelEmitter::convert(ElemType from, ElemType to, Id v) {
  Id dt = scalarType(to);
  if (isBool(to)) {
    if (isBool(from)) return v;
    if (isFloat(from)) return op2(SOp::OpFUnordNotEqual, bool_, v, b_.constNull(scalarType(from)));
    return op2(SOp::OpINotEqual, bool_, v, b_.constNull(scalarType(from)));
  }
  if (isBool(from)) {
    if (isFloat(to)) return select(dt, v, b_.constFloat(dt, 1.0), b_.constFloat(dt, 0.0));
    return boolToInt(v, dt);
  }
  if (isFloat(to)) {
    if (isFloat(from)) {
      bool fromWide = from == ElemType::F64, toWide = to == ElemType::F64;
      if (fromWide == toWide) return toWide ? v : roundTo(to, v);
      if (toWide) return op1(SOp::OpFConvert, dt, v);
      return roundTo(to, op1(SOp::OpFConvert, f32_, v));
    }
    uint32_t bits = uint32_t(elemTypeBytes(from)) * 8;
    auto toF = [&](Id ft) {
      return isUnsignedInt(from) ? op1(SOp::OpConvertUToF, ft, v) : signedToFloat(v, bits, ft);
    };
    if (to == ElemType::F64 || to == ElemType::F32) return toF(dt);
    return roundTo(to, toF(f32_));
  }
  if (isFloat(from)) {
    // NaN -> 0, out of range saturates to int64, then wraps to the width.
    b_.capability(spv::Capability::Int64);
    Id i64 = b_.typeInt(64);
    Id ft = scalarType(from);
    Id big = b_.constFloat(ft, 9223372036854775808.0);
    Id small = b_.constFloat(ft, -9223372036854775808.0);
    Id conv = floatToI64(select(ft, op2(SOp::OpFOrdLessThan, bool_, v, big),
                                select(ft, op2(SOp::OpFOrdGreaterThan, bool_, v, small), v, small),
                                b_.constFloat(ft, 0.0)));
    Id r = select(i64, op2(SOp::OpFOrdGreaterThanEqual, bool_, v, big),
                  b_.constInt(i64, uint64_t(INT64_MAX)), conv);
    r = select(i64, op1(SOp::OpIsNan, bool_, v), b_.constInt(i64, 0), r);
    return to == ElemType::I64 || to == ElemType::U64 ? r : op1(SOp::OpUConvert, dt, r);
  }
  int fb = elemTypeBytes(from), tb = elemTypeBytes(to);
  if (fb == tb) return v;
  if (fb > tb) return op1(SOp::OpUConvert, dt, v);
  if (isUnsignedInt(from)) return op1(SOp::OpUConvert, dt, v);
  return signExtend(v, uint32_t(fb) * 8, uint32_t(tb) * 8);
}

// ---- compute -------------------------------------------------------------------------------

Result<Id> KernelEmitter::compute(const Op& op) {
  std::optional<OpKind> kind = op.attrs().getOp("fn");
  if (!kind) return error(op.loc(), "compute names no op");
  if (op.numOperands() == 0) return error(op.loc(), "compute needs operands");
  for (const Value* v : op.operands())
    if (!v->type().isScalar())
      return error(op.loc(), "the SPIR-V backend computes on scalars only");
  std::vector<Id> a;
  for (const Value* v : op.operands()) a.push_back(get(v));
  ElemType re = op.result(0)->type().elem();
  if (*kind == OpKind::Cast) return convert(op.operand(0)->type().elem(), re, a[0]);
  if (*kind == OpKind::Select) {
    if (a.size() != 3) return error(op.loc(), "compute select needs 3 operands");
    return select(scalarType(re), a[0], a[1], a[2]);
  }
  ElemType e = op.operand(0)->type().elem();
  if (isFloat(e)) return floatCompute(op, *kind, e, a);
  return intCompute(op, *kind, e, a);
}

Id KernelEmitter::sigmoid(Id x, Id t) {
  Id one = b_.constFloat(t, 1.0);
  Id ex = glsl(GLSLstd450Exp, t, {op1(SOp::OpFNegate, t, glsl(GLSLstd450FAbs, t, {x}))});
  Id den = op2(SOp::OpFAdd, t, one, ex);
  return select(t, op2(SOp::OpFOrdGreaterThanEqual, bool_, x, b_.constFloat(t, 0.0)),
                op2(SOp::OpFDiv, t, one, den), op2(SOp::OpFDiv, t, ex, den));
}

// tanh of |x| > 10 is +-1 in f32; clamping keeps exp-based implementations from overflowing.
Id KernelEmitter::tanhSafe(Id x, Id t) {
  Id c = glsl(GLSLstd450FClamp, t, {x, b_.constFloat(t, -10.0), b_.constFloat(t, 10.0)});
  return select(t, op1(SOp::OpIsNan, bool_, x), x, glsl(GLSLstd450Tanh, t, {c}));
}

// asin and acos in f32 from one odd polynomial on |x| <= 0.5 (Cephes' asinf, error about
// 1 ulp) and the half-angle identity above it; GLSL's asin/acos are far less accurate on
// some drivers (2e-4 on lavapipe). |x| > 1 gives NaN (the square root of a negative).
Id KernelEmitter::asinAcos(Id x, bool acos) {
  Id t = f32_;
  auto c = [&](double v) { return b_.constFloat(t, v); };
  auto mul = [&](Id p, Id q) { return op2(SOp::OpFMul, t, p, q); };
  auto add = [&](Id p, Id q) { return op2(SOp::OpFAdd, t, p, q); };
  auto sub = [&](Id p, Id q) { return op2(SOp::OpFSub, t, p, q); };
  // asin(r) for |r| <= 0.5
  auto small = [&](Id r) {
    Id z = mul(r, r);
    Id p = c(4.2163199048e-2);
    for (double k : {2.4181311049e-2, 4.5470025998e-2, 7.4953002686e-2, 1.6666752422e-1})
      p = add(mul(p, z), c(k));
    return add(mul(mul(p, z), r), r);
  };
  const double halfPi = std::numbers::pi / 2;
  Id a = glsl(GLSLstd450FAbs, t, {x});
  Id big = op2(SOp::OpFOrdGreaterThan, bool_, a, c(0.5));
  Id negative = op2(SOp::OpFOrdLessThan, bool_, x, c(0.0));
  // s = asin(sqrt((1 - |x|) / 2)): asin(|x|) = pi/2 - 2s and acos(|x|) = 2s
  Id s = small(glsl(GLSLstd450Sqrt, t, {mul(c(0.5), sub(c(1.0), a))}));
  Id direct = small(x);
  if (!acos) {
    Id far = sub(c(halfPi), add(s, s));
    return select(t, big, select(t, negative, op1(SOp::OpFNegate, t, far), far), direct);
  }
  Id far = select(t, negative, sub(c(std::numbers::pi), add(s, s)), add(s, s));
  return select(t, big, far, sub(c(halfPi), direct));
}

// erf in f32: its Taylor series below 0.5 (relative error < 1e-6), Abramowitz and Stegun
// 7.1.26 above (absolute error < 1.5e-7).
Id KernelEmitter::erf(Id x, Id t) {
  auto c = [&](double v) { return b_.constFloat(t, v); };
  auto mul = [&](Id p, Id q) { return op2(SOp::OpFMul, t, p, q); };
  auto add = [&](Id p, Id q) { return op2(SOp::OpFAdd, t, p, q); };
  const double k = 2.0 / std::sqrt(std::numbers::pi);
  Id ax = glsl(GLSLstd450FAbs, t, {x});
  Id x2 = mul(x, x);
  Id series = c(k / 216);
  for (double coef : {-k / 42, k / 10, -k / 3, k}) series = add(mul(series, x2), c(coef));
  series = mul(series, x);
  Id tt = op2(SOp::OpFDiv, t, c(1.0), add(c(1.0), mul(c(0.3275911), ax)));
  Id poly = c(1.061405429);
  for (double coef : {-1.453152027, 1.421413741, -0.284496736, 0.254829592})
    poly = add(mul(poly, tt), c(coef));
  poly = mul(poly, tt);
  Id tail =
      op2(SOp::OpFSub, t, c(1.0), mul(poly, glsl(GLSLstd450Exp, t, {op1(SOp::OpFNegate, t, x2)})));
  Id signedTail =
      select(t, op2(SOp::OpFOrdLessThan, bool_, x, c(0.0)), op1(SOp::OpFNegate, t, tail), tail);
  return select(t, op2(SOp::OpFOrdLessThan, bool_, ax, c(0.5)), series, signedTail);
}

// x / y correctly rounded where the target has f64. Vulkan lets OpFDiv on 32-bit floats be
// 2.5 ULP off, and NVIDIA's driver is (DynamicQuantizeLinear's 25.5 came out 25.499...,
// then rounded to 25): a 32-bit quotient is computed in f64, whose error is far below half
// an f32 ULP, and rounded once to f32. f64 operands divide as they are.
Id KernelEmitter::divide(Id x, Id y, Id type) {
  if (type != f32_ || !target_.desc.supports(ElemType::F64)) return op2(SOp::OpFDiv, type, x, y);
  Id d = scalarType(ElemType::F64);
  return op1(SOp::OpFConvert, f32_,
             op2(SOp::OpFDiv, d, op1(SOp::OpFConvert, d, x), op1(SOp::OpFConvert, d, y)));
}

Result<Id> KernelEmitter::floatCompute(const Op& op, OpKind fn, ElemType e,
                                       const std::vector<Id>& a) {
  Id t = scalarType(e);
  bool wide = e == ElemType::F64;
  auto c = [&](double v) { return b_.constFloat(t, v); };
  auto exact = [&](Id v) { return roundTo(e, v); };
  // A function computed in f32 (f64 values go through f32), rounded to `e`.
  auto viaF32 = [&](std::vector<Id> args, const std::function<Id(const std::vector<Id>&)>& f) {
    if (wide)
      for (Id& x : args) x = op1(SOp::OpFConvert, f32_, x);
    Id r = f(args);
    return wide ? op1(SOp::OpFConvert, t, r) : roundTo(e, r);
  };
  // A GLSL function; NaN stays NaN (some drivers' atan(NaN) is 0).
  auto unary = [&](uint32_t inst) {
    return viaF32({a[0]}, [&](const std::vector<Id>& v) {
      return select(f32_, op1(SOp::OpIsNan, bool_, v[0]), v[0], glsl(inst, f32_, {v[0]}));
    });
  };
  auto isNan = [&](Id v) { return op1(SOp::OpIsNan, bool_, v); };
  auto negative = [&](Id v) { return op2(SOp::OpFOrdLessThan, bool_, v, c(0.0)); };
  auto anyNan = [&](Id p, Id q) { return op2(SOp::OpLogicalOr, bool_, isNan(p), isNan(q)); };
  // max / min that propagate NaN, as the interpreter's
  auto fmax = [&](Id p, Id q) {
    return select(t, anyNan(p, q), op2(SOp::OpFAdd, t, p, q),
                  select(t, op2(SOp::OpFOrdLessThan, bool_, p, q), q, p));
  };
  auto fmin = [&](Id p, Id q) {
    return select(t, anyNan(p, q), op2(SOp::OpFAdd, t, p, q),
                  select(t, op2(SOp::OpFOrdLessThan, bool_, q, p), q, p));
  };
  Id x = a[0];
  Id y = a.size() > 1 ? a[1] : 0;
  switch (fn) {
  case OpKind::Neg: return op1(SOp::OpFNegate, t, x);
  case OpKind::Abs: return glsl(GLSLstd450FAbs, t, {x});
  case OpKind::Exp: return unary(GLSLstd450Exp);
  // GLSL leaves these undefined outside their domains; the interpreter gives C's results.
  case OpKind::Log:
    return viaF32({x}, [&](const std::vector<Id>& v) {
      Id r = glsl(GLSLstd450Log, f32_, {v[0]});
      r = select(f32_, op2(SOp::OpFOrdEqual, bool_, v[0], b_.constFloat(f32_, 0.0)),
                 b_.constFloat(f32_, -INFINITY), r);
      return select(f32_, op2(SOp::OpFOrdLessThan, bool_, v[0], b_.constFloat(f32_, 0.0)),
                    b_.constFloat(f32_, std::nan("")), r);
    });
  case OpKind::Sqrt:
    return exact(select(t, negative(x), c(std::nan("")), glsl(GLSLstd450Sqrt, t, {x})));
  case OpKind::Rsqrt:
    return exact(select(t, negative(x), c(std::nan("")),
                        op2(SOp::OpFDiv, t, c(1.0), glsl(GLSLstd450Sqrt, t, {x}))));
  case OpKind::Reciprocal: return exact(divide(c(1.0), x, t));
  case OpKind::Tanh:
    return viaF32({x}, [&](const std::vector<Id>& v) { return tanhSafe(v[0], f32_); });
  case OpKind::Sigmoid:
    return viaF32({x}, [&](const std::vector<Id>& v) { return sigmoid(v[0], f32_); });
  case OpKind::Erf: return viaF32({x}, [&](const std::vector<Id>& v) { return erf(v[0], f32_); });
  case OpKind::Relu: return select(t, op2(SOp::OpFOrdLessThan, bool_, x, c(0.0)), c(0.0), x);
  case OpKind::Gelu: {
    bool tanhForm = op.attrs().getStr("approximate", "none") == "tanh";
    return viaF32({x}, [&](const std::vector<Id>& v) {
      Id d = v[0];
      auto cf = [&](double k) { return b_.constFloat(f32_, k); };
      Id inner;
      if (tanhForm) {
        Id cube = op2(SOp::OpFMul, f32_,
                      op2(SOp::OpFMul, f32_, op2(SOp::OpFMul, f32_, cf(0.044715), d), d), d);
        inner = tanhSafe(op2(SOp::OpFMul, f32_, cf(std::sqrt(2.0 / std::numbers::pi)),
                             op2(SOp::OpFAdd, f32_, d, cube)),
                         f32_);
      } else {
        inner = erf(op2(SOp::OpFMul, f32_, d, cf(1.0 / std::sqrt(2.0))), f32_);
      }
      return op2(SOp::OpFMul, f32_, op2(SOp::OpFMul, f32_, cf(0.5), d),
                 op2(SOp::OpFAdd, f32_, cf(1.0), inner));
    });
  }
  case OpKind::Silu:
    return viaF32({x}, [&](const std::vector<Id>& v) {
      return op2(SOp::OpFMul, f32_, v[0], sigmoid(v[0], f32_));
    });
  case OpKind::Sin: return unary(GLSLstd450Sin);
  case OpKind::Cos: return unary(GLSLstd450Cos);
  case OpKind::Tan: return unary(GLSLstd450Tan);
  case OpKind::Asin:
  case OpKind::Acos:
    return viaF32({x},
                  [&](const std::vector<Id>& v) { return asinAcos(v[0], fn == OpKind::Acos); });
  case OpKind::Atan: return unary(GLSLstd450Atan);
  case OpKind::Sinh: return unary(GLSLstd450Sinh);
  case OpKind::Cosh: return unary(GLSLstd450Cosh);
  case OpKind::Asinh: return unary(GLSLstd450Asinh);
  case OpKind::Acosh:
    return viaF32({x}, [&](const std::vector<Id>& v) {
      auto cf = [&](double k) { return b_.constFloat(f32_, k); };
      return select(f32_, op2(SOp::OpFOrdLessThan, bool_, v[0], cf(1.0)), cf(std::nan("")),
                    glsl(GLSLstd450Acosh, f32_, {v[0]}));
    });
  case OpKind::Atanh:
    return viaF32({x}, [&](const std::vector<Id>& v) {
      auto cf = [&](double k) { return b_.constFloat(f32_, k); };
      Id a = glsl(GLSLstd450FAbs, f32_, {v[0]});
      Id r = glsl(GLSLstd450Atanh, f32_, {v[0]});
      Id edge =
          select(f32_, op2(SOp::OpFOrdLessThan, bool_, v[0], cf(0.0)), cf(-INFINITY), cf(INFINITY));
      r = select(f32_, op2(SOp::OpFOrdEqual, bool_, a, cf(1.0)), edge, r);
      return select(f32_, op2(SOp::OpFOrdGreaterThan, bool_, a, cf(1.0)), cf(std::nan("")), r);
    });
  case OpKind::Floor: return glsl(GLSLstd450Floor, t, {x});
  case OpKind::Ceil: return glsl(GLSLstd450Ceil, t, {x});
  case OpKind::Round: return glsl(GLSLstd450RoundEven, t, {x});
  case OpKind::Sign: {
    Id s = select(t, op2(SOp::OpFOrdGreaterThan, bool_, x, c(0.0)), c(1.0),
                  select(t, op2(SOp::OpFOrdLessThan, bool_, x, c(0.0)), c(-1.0), c(0.0)));
    return select(t, isNan(x), x, s);
  }
  case OpKind::IsNan: return isNan(x);
  case OpKind::IsInf: return op1(SOp::OpIsInf, bool_, x);
  case OpKind::Add: return exact(op2(SOp::OpFAdd, t, x, y));
  case OpKind::Sub: return exact(op2(SOp::OpFSub, t, x, y));
  case OpKind::Mul: return exact(op2(SOp::OpFMul, t, x, y));
  case OpKind::Div: return exact(divide(x, y, t));
  case OpKind::Pow:
    return viaF32({x, y}, [&](const std::vector<Id>& v) {
      // C pow: pow(x, 0) = 1 and pow(1, y) = 1 even for NaN; a negative base takes an
      // integer exponent (the sign from its parity), else NaN; pow(0, y<0) = inf.
      Id px = v[0], py = v[1];
      auto cf = [&](double k) { return b_.constFloat(f32_, k); };
      Id r = glsl(GLSLstd450Pow, f32_, {glsl(GLSLstd450FAbs, f32_, {px}), py});
      Id integral = op2(SOp::OpFOrdEqual, bool_, glsl(GLSLstd450Floor, f32_, {py}), py);
      Id odd = op2(SOp::OpFOrdEqual, bool_, op2(SOp::OpFMod, f32_, py, cf(2.0)), cf(1.0));
      Id negBase = select(f32_, integral, select(f32_, odd, op1(SOp::OpFNegate, f32_, r), r),
                          cf(std::nan("")));
      r = select(f32_, op2(SOp::OpFOrdLessThan, bool_, px, cf(0.0)), negBase, r);
      Id zeroBase =
          select(f32_, op2(SOp::OpFOrdGreaterThan, bool_, py, cf(0.0)), cf(0.0), cf(INFINITY));
      r = select(f32_, op2(SOp::OpFOrdEqual, bool_, px, cf(0.0)), zeroBase, r);
      r = select(f32_, op1(SOp::OpIsNan, bool_, px), px, r);
      Id one = op2(SOp::OpLogicalOr, bool_, op2(SOp::OpFOrdEqual, bool_, py, cf(0.0)),
                   op2(SOp::OpFOrdEqual, bool_, px, cf(1.0)));
      return select(f32_, one, cf(1.0), r);
    });
  case OpKind::Max: return fmax(x, y);
  case OpKind::Min: return fmin(x, y);
  case OpKind::Mod: {
    if (op.attrs().getInt("fmod", 0)) return op2(SOp::OpFRem, t, x, y);
    return op2(SOp::OpFMod, t, x, y);
  }
  case OpKind::Eq: return op2(SOp::OpFOrdEqual, bool_, x, y);
  case OpKind::Ne: return op2(SOp::OpFUnordNotEqual, bool_, x, y);
  case OpKind::Lt: return op2(SOp::OpFOrdLessThan, bool_, x, y);
  case OpKind::Le: return op2(SOp::OpFOrdLessThanEqual, bool_, x, y);
  case OpKind::Gt: return op2(SOp::OpFOrdGreaterThan, bool_, x, y);
  case OpKind::Ge: return op2(SOp::OpFOrdGreaterThanEqual, bool_, x, y);
  case OpKind::Clamp: return fmin(fmax(x, y), a[2]);
  default: break;
  }
  return error(op.loc(), "compute: the SPIR-V backend has no float form of '" +
                             std::string(opInfo(fn).name) + "'");
}

// x^y on `bits`-bit integers as the interpreter's intPow: square and multiply over y's bits;
// a negative exponent gives 0 unless x is 1 or -1.
Id KernelEmitter::ipow(Id x, Id y, Id t, int64_t bits) {
  auto c = [&](int64_t v) { return b_.constInt(t, uint64_t(v)); };
  Id e0 = select(t, op2(SOp::OpSLessThan, bool_, y, c(0)), c(0), y);
  Result<std::vector<Id>> r =
      loop(indexConst(0), indexConst(bits), indexConst(1), true, {{t, c(1)}, {t, x}, {t, e0}},
           [&](Id, const std::vector<Id>& v) -> Result<std::vector<Id>> {
             Id bit = op2(SOp::OpINotEqual, bool_, op2(SOp::OpBitwiseAnd, t, v[2], c(1)), c(0));
             Id acc = select(t, bit, op2(SOp::OpIMul, t, v[0], v[1]), v[0]);
             return std::vector<Id>{acc, op2(SOp::OpIMul, t, v[1], v[1]),
                                    op2(SOp::OpShiftRightLogical, t, v[2], c(1))};
           });
  Id acc = (*r)[0];
  Id odd = op2(SOp::OpINotEqual, bool_, op2(SOp::OpBitwiseAnd, t, y, c(1)), c(0));
  Id negExp =
      select(t, op2(SOp::OpIEqual, bool_, x, c(1)), c(1),
             select(t, op2(SOp::OpIEqual, bool_, x, c(-1)), select(t, odd, c(-1), c(1)), c(0)));
  return select(t, op2(SOp::OpSLessThan, bool_, y, c(0)), negExp, acc);
}

Result<Id> KernelEmitter::intCompute(const Op& op, OpKind fn, ElemType e,
                                     const std::vector<Id>& a) {
  Id x = a[0];
  Id y = a.size() > 1 ? a[1] : 0;
  if (isBool(e)) {
    switch (fn) {
    case OpKind::Not: return op1(SOp::OpLogicalNot, bool_, x);
    case OpKind::And:
    case OpKind::Min: return op2(SOp::OpLogicalAnd, bool_, x, y);
    case OpKind::Or:
    case OpKind::Max: return op2(SOp::OpLogicalOr, bool_, x, y);
    case OpKind::Xor:
    case OpKind::Ne: return op2(SOp::OpLogicalNotEqual, bool_, x, y);
    case OpKind::Eq: return op2(SOp::OpLogicalEqual, bool_, x, y);
    default: {
      // Everything else on i1 as on 0/1 integers, wrapped back to one bit.
      std::vector<Id> wide;
      for (Id v : a) wide.push_back(boolToInt(v, u32_));
      KILN_TRY(Id r, intCompute(op, fn, ElemType::U32, wide));
      if (opInfo(fn).traits & kResultBool) return r;
      return op2(SOp::OpINotEqual, bool_, op2(SOp::OpBitwiseAnd, u32_, r, b_.constInt(u32_, 1)),
                 b_.constInt(u32_, 0));
    }
    }
  }
  Id t = scalarType(e);
  bool u = isUnsignedLike(e);
  auto c = [&](int64_t v) { return b_.constInt(t, uint64_t(v)); };
  auto lt = [&](Id p, Id q) { return op2(u ? SOp::OpULessThan : SOp::OpSLessThan, bool_, p, q); };
  switch (fn) {
  case OpKind::Neg: return op1(SOp::OpSNegate, t, x);
  case OpKind::Abs: return u ? x : select(t, lt(x, c(0)), op1(SOp::OpSNegate, t, x), x);
  case OpKind::Relu: return u ? x : select(t, lt(x, c(0)), c(0), x);
  case OpKind::Sign: {
    Id pos = boolToInt(op2(SOp::OpINotEqual, bool_, x, c(0)), t);
    if (u) return pos;
    return op2(SOp::OpISub, t, boolToInt(op2(SOp::OpSGreaterThan, bool_, x, c(0)), t),
               boolToInt(op2(SOp::OpSLessThan, bool_, x, c(0)), t));
  }
  case OpKind::Add: return op2(SOp::OpIAdd, t, x, y);
  case OpKind::Sub: return op2(SOp::OpISub, t, x, y);
  case OpKind::Mul: return op2(SOp::OpIMul, t, x, y);
  case OpKind::Div: {
    Id zero = op2(SOp::OpIEqual, bool_, y, c(0));
    if (u) return select(t, zero, c(0), op2(SOp::OpUDiv, t, x, select(t, zero, c(1), y)));
    Id m1 = op2(SOp::OpIEqual, bool_, y, c(-1));
    Id safe = select(t, op2(SOp::OpLogicalOr, bool_, zero, m1), c(1), y);
    return select(t, zero, c(0),
                  select(t, m1, op1(SOp::OpSNegate, t, x), op2(SOp::OpSDiv, t, x, safe)));
  }
  case OpKind::Mod: {
    Id zero = op2(SOp::OpIEqual, bool_, y, c(0));
    if (u) return select(t, zero, c(0), op2(SOp::OpUMod, t, x, select(t, zero, c(1), y)));
    Id none = op2(SOp::OpLogicalOr, bool_, zero, op2(SOp::OpIEqual, bool_, y, c(-1)));
    // Vulkan leaves OpSRem and OpSMod undefined when an operand is negative (NVIDIA's driver
    // does give other results), so the remainder of the magnitudes takes x's sign. |INT_MIN|
    // wraps to INT_MIN, whose bits are the right magnitude for OpUMod.
    auto mag = [&](Id v) { return select(t, lt(v, c(0)), op1(SOp::OpSNegate, t, v), v); };
    Id um = op2(SOp::OpUMod, t, mag(x), mag(select(t, none, c(1), y)));
    Id r = select(t, none, c(0), select(t, lt(x, c(0)), op1(SOp::OpSNegate, t, um), um));
    if (op.attrs().getInt("fmod", 0)) return r;
    Id fix = op2(SOp::OpLogicalAnd, bool_, op2(SOp::OpINotEqual, bool_, r, c(0)),
                 op2(SOp::OpLogicalNotEqual, bool_, lt(r, c(0)), lt(y, c(0))));
    return select(t, fix, op2(SOp::OpIAdd, t, r, y), r);
  }
  case OpKind::Pow: {
    // In 32 bits for types up to 32 bits (the low bits of a product do not depend on the
    // high ones), in 64 bits for 64-bit types.
    uint32_t bits = uint32_t(elemTypeBytes(e)) * 8;
    if (bits == 64) return ipow(x, y, t, 64);
    auto ext = [&](Id v) {
      if (bits == 32) return v;
      return u ? op1(SOp::OpUConvert, u32_, v) : signExtend(v, bits, 32);
    };
    Id r = ipow(ext(x), ext(y), u32_, 32);
    return bits == 32 ? r : op1(SOp::OpUConvert, t, r);
  }
  case OpKind::Max: return select(t, lt(x, y), y, x);
  case OpKind::Min: return select(t, lt(y, x), y, x);
  case OpKind::Clamp: {
    Id lo = select(t, lt(x, y), y, x);
    return select(t, lt(a[2], lo), a[2], lo);
  }
  case OpKind::Eq: return op2(SOp::OpIEqual, bool_, x, y);
  case OpKind::Ne: return op2(SOp::OpINotEqual, bool_, x, y);
  case OpKind::Lt: return lt(x, y);
  case OpKind::Le: return op2(u ? SOp::OpULessThanEqual : SOp::OpSLessThanEqual, bool_, x, y);
  case OpKind::Gt: return op2(u ? SOp::OpUGreaterThan : SOp::OpSGreaterThan, bool_, x, y);
  case OpKind::Ge: return op2(u ? SOp::OpUGreaterThanEqual : SOp::OpSGreaterThanEqual, bool_, x, y);
  default: break;
  }
  return error(op.loc(), "compute: the SPIR-V backend has no integer form of '" +
                             std::string(opInfo(fn).name) + "'");
}

} // namespace kiln::spirv
