// Scalar arithmetic for LLVM emission (see scalar.h). Every function mirrors one kernel of
// src/ir/interp/elementwise.cpp: floats that the interpreter computes in f64 and rounds
// once are computed so that the rounded result is the same (exact ops in the value's own
// precision, libm functions in f64 as inline vectorizable code from scalar_math.cpp);
// integers wrap at their width. The exception: f32 exp, log, tanh, erf, sigmoid, silu and
// gelu use scalar_math.cpp's f32 forms, a few ulp from the interpreter's value (docs/cpu.md).
#include "backends/llvm/scalar.h"

#include <llvm/IR/Intrinsics.h>

#include <cmath>
#include <numbers>

#include "backends/llvm/scalar_math.h"
#include "ir/core/host_tensor.h"

namespace kiln::llvmgen {

namespace {

using llvm::IRBuilder;
using llvm::Value;

bool isUnsignedLike(ElemType e) { return isUnsignedInt(e) || e == ElemType::I1; }

llvm::Type* f32(IRBuilder<>& b) { return b.getFloatTy(); }
llvm::Type* f64(IRBuilder<>& b) { return b.getDoubleTy(); }

// Rounds a float (the scalar form of f16/bf16) to bf16 precision, round to nearest even,
// NaN kept quiet, exactly as floatToBf16.
Value* roundBf16Bits(IRBuilder<>& b, Value* f) {
  Value* x = b.CreateBitCast(f, b.getInt32Ty());
  Value* absx = b.CreateAnd(x, 0x7fffffffu);
  Value* nan = b.CreateICmpUGT(absx, b.getInt32(0x7f800000u));
  Value* hi = b.CreateLShr(x, 16);
  Value* nanBits = b.CreateOr(hi, 0x40u);
  Value* rounding = b.CreateAdd(b.getInt32(0x7fffu), b.CreateAnd(hi, 1u));
  Value* rounded = b.CreateLShr(b.CreateAdd(x, rounding), 16);
  return b.CreateSelect(nan, nanBits, rounded); // the 16 bits, in an i32
}

Value* bf16BitsToFloat(IRBuilder<>& b, Value* bits32) {
  return b.CreateBitCast(b.CreateShl(bits32, 16), b.getFloatTy());
}

// A float rounded to the precision of `e` (f16, bf16), kept as a float.
Value* roundFloat(IRBuilder<>& b, ElemType e, Value* f) {
  if (e == ElemType::F16) return b.CreateFPExt(b.CreateFPTrunc(f, b.getHalfTy()), f32(b));
  if (e == ElemType::BF16) return bf16BitsToFloat(b, roundBf16Bits(b, f));
  return f;
}

// A double rounded to float element type `e`, as the interpreter's setF does.
Value* fromDouble(IRBuilder<>& b, ElemType e, Value* d) {
  if (e == ElemType::F64) return d;
  return roundFloat(b, e, b.CreateFPTrunc(d, f32(b)));
}

Value* toDouble(IRBuilder<>& b, Value* v) {
  return v->getType()->isDoubleTy() ? v : b.CreateFPExt(v, f64(b));
}

// Sign- or zero-extends an integer scalar of `e` to i64 (the interpreter's getI).
Value* toI64(IRBuilder<>& b, ElemType e, Value* v) {
  return isUnsignedLike(e) ? b.CreateZExt(v, b.getInt64Ty()) : b.CreateSExt(v, b.getInt64Ty());
}

// A libm function of f64 operands, as inline code (scalar_math.cpp has every one the
// interpreter uses).
Value* libm(IRBuilder<>& b, llvm::Module& m, const char* name, std::vector<Value*> args) {
  return b.CreateCall(inlineMathFunction(m, name), args);
}

Value* intrinsic(IRBuilder<>& b, llvm::Intrinsic::ID id, std::vector<Value*> args) {
  return b.CreateIntrinsic(id, {args[0]->getType()}, args);
}

Value* expD(IRBuilder<>& b, llvm::Module& m, Value* x) {
  return b.CreateCall(inlineMathFunction(m, "exp"), {x});
}

// sigmoid in f64 without overflow: both branches exponentiate -|x|.
Value* sigmoidD(IRBuilder<>& b, llvm::Module& m, Value* x) {
  Value* ax = intrinsic(b, llvm::Intrinsic::fabs, {x});
  Value* e = expD(b, m, b.CreateFNeg(ax));
  Value* one = llvm::ConstantFP::get(f64(b), 1.0);
  Value* den = b.CreateFAdd(one, e);
  Value* pos = b.CreateFDiv(one, den);
  Value* neg = b.CreateFDiv(e, den);
  return b.CreateSelect(b.CreateFCmpOGE(x, llvm::ConstantFP::get(f64(b), 0.0)), pos, neg);
}

// A float function the interpreter computes in f64: the result rounded to `e`.
template <typename F> Value* viaDouble(IRBuilder<>& b, ElemType e, Value* x, F f) {
  return fromDouble(b, e, f(toDouble(b, x)));
}

// Integer x^y as the interpreter's intPow, on i64 (one helper function per module).
llvm::Function* ipowFunction(llvm::Module& m) {
  if (llvm::Function* f = m.getFunction("kiln_ipow")) return f;
  llvm::LLVMContext& c = m.getContext();
  llvm::Type* i64 = llvm::Type::getInt64Ty(c);
  auto* f = llvm::Function::Create(llvm::FunctionType::get(i64, {i64, i64}, false),
                                   llvm::GlobalValue::InternalLinkage, "kiln_ipow", m);
  auto* entry = llvm::BasicBlock::Create(c, "entry", f);
  auto* negExp = llvm::BasicBlock::Create(c, "neg", f);
  auto* loop = llvm::BasicBlock::Create(c, "loop", f);
  auto* done = llvm::BasicBlock::Create(c, "done", f);
  IRBuilder<> b(entry);
  Value* x = f->getArg(0);
  Value* y = f->getArg(1);
  b.CreateCondBr(b.CreateICmpSLT(y, b.getInt64(0)), negExp, loop);
  b.SetInsertPoint(negExp);
  // x == 1: 1; x == -1: -1 for odd y, 1 for even; else 0.
  Value* odd = b.CreateICmpNE(b.CreateAnd(y, 1), b.getInt64(0));
  Value* m1 = b.CreateSelect(odd, b.getInt64(-1), b.getInt64(1));
  Value* r = b.CreateSelect(b.CreateICmpEQ(x, b.getInt64(1)), b.getInt64(1),
                            b.CreateSelect(b.CreateICmpEQ(x, b.getInt64(-1)), m1, b.getInt64(0)));
  b.CreateRet(r);
  b.SetInsertPoint(loop);
  llvm::PHINode* acc = b.CreatePHI(i64, 2);
  llvm::PHINode* base = b.CreatePHI(i64, 2);
  llvm::PHINode* e = b.CreatePHI(i64, 2);
  acc->addIncoming(b.getInt64(1), entry);
  base->addIncoming(x, entry);
  e->addIncoming(y, entry);
  Value* isZero = b.CreateICmpEQ(e, b.getInt64(0));
  auto* body = llvm::BasicBlock::Create(c, "body", f);
  b.CreateCondBr(isZero, done, body);
  b.SetInsertPoint(body);
  Value* bit = b.CreateICmpNE(b.CreateAnd(e, 1), b.getInt64(0));
  Value* nextAcc = b.CreateSelect(bit, b.CreateMul(acc, base), acc);
  acc->addIncoming(nextAcc, body);
  base->addIncoming(b.CreateMul(base, base), body);
  e->addIncoming(b.CreateAShr(e, 1), body);
  b.CreateBr(loop);
  b.SetInsertPoint(done);
  b.CreateRet(acc);
  return f;
}

Result<Value*> floatCompute(IRBuilder<>& b, llvm::Module& m, const Op& op, OpKind fn, ElemType e,
                            const std::vector<Value*>& a) {
  using llvm::Intrinsic::ID;
  namespace I = llvm::Intrinsic;
  llvm::Type* t = a[0]->getType();
  auto c = [&](double v) { return llvm::ConstantFP::get(t, v); };
  auto exact = [&](Value* v) { return roundFloat(b, e, v); }; // one rounding after an exact op
  auto unaryLibm = [&](const char* name) {
    return viaDouble(b, e, a[0], [&](Value* d) { return libm(b, m, name, {d}); });
  };
  Value* x = a[0];
  Value* y = a.size() > 1 ? a[1] : nullptr;
  // f32 only: f16 and bf16 keep the f64 forms, whose one rounding to the element type is the
  // interpreter's (an f32 result a few ulp off could round to a different f16 value).
  if (e == ElemType::F32) {
    const char* name = nullptr;
    switch (fn) {
    case OpKind::Exp: name = "exp"; break;
    case OpKind::Log: name = "log"; break;
    case OpKind::Tanh: name = "tanh"; break;
    case OpKind::Erf: name = "erf"; break;
    case OpKind::Sigmoid: name = "sigmoid"; break;
    case OpKind::Silu: name = "silu"; break;
    case OpKind::Gelu:
      name = op.attrs().getStr("approximate", "none") == "tanh" ? "gelu_tanh" : "gelu";
      break;
    default: break;
    }
    if (name) return b.CreateCall(inlineMathFunctionF32(m, name), {x});
  }
  switch (fn) {
  case OpKind::Neg: return b.CreateFNeg(x);
  case OpKind::Abs: return intrinsic(b, I::fabs, {x});
  case OpKind::Exp: return viaDouble(b, e, x, [&](Value* d) { return expD(b, m, d); });
  case OpKind::Log: return unaryLibm("log");
  case OpKind::Sqrt: return exact(intrinsic(b, I::sqrt, {x}));
  case OpKind::Rsqrt:
    return viaDouble(b, e, x, [&](Value* d) {
      return b.CreateFDiv(llvm::ConstantFP::get(f64(b), 1.0), intrinsic(b, I::sqrt, {d}));
    });
  case OpKind::Reciprocal: return exact(b.CreateFDiv(c(1.0), x));
  case OpKind::Tanh: return unaryLibm("tanh");
  case OpKind::Sigmoid: return viaDouble(b, e, x, [&](Value* d) { return sigmoidD(b, m, d); });
  case OpKind::Erf: return unaryLibm("erf");
  case OpKind::Relu: return b.CreateSelect(b.CreateFCmpOLT(x, c(0.0)), c(0.0), x);
  case OpKind::Gelu: {
    std::string mode = op.attrs().getStr("approximate", "none");
    return viaDouble(b, e, x, [&](Value* d) {
      auto cd = [&](double v) { return llvm::ConstantFP::get(f64(b), v); };
      Value* inner;
      if (mode == "tanh") {
        Value* cube = b.CreateFMul(b.CreateFMul(b.CreateFMul(cd(0.044715), d), d), d);
        inner = libm(b, m, "tanh",
                     {b.CreateFMul(cd(std::sqrt(2.0 / std::numbers::pi)), b.CreateFAdd(d, cube))});
      } else {
        inner = libm(b, m, "erf", {b.CreateFDiv(d, cd(std::sqrt(2.0)))});
      }
      return b.CreateFMul(b.CreateFMul(cd(0.5), d), b.CreateFAdd(cd(1.0), inner));
    });
  }
  case OpKind::Silu:
    return viaDouble(b, e, x, [&](Value* d) { return b.CreateFMul(d, sigmoidD(b, m, d)); });
  case OpKind::Sin: return unaryLibm("sin");
  case OpKind::Cos: return unaryLibm("cos");
  case OpKind::Tan: return unaryLibm("tan");
  case OpKind::Asin: return unaryLibm("asin");
  case OpKind::Acos: return unaryLibm("acos");
  case OpKind::Atan: return unaryLibm("atan");
  case OpKind::Sinh: return unaryLibm("sinh");
  case OpKind::Cosh: return unaryLibm("cosh");
  case OpKind::Asinh: return unaryLibm("asinh");
  case OpKind::Acosh: return unaryLibm("acosh");
  case OpKind::Atanh: return unaryLibm("atanh");
  case OpKind::Floor: return intrinsic(b, I::floor, {x});
  case OpKind::Ceil: return intrinsic(b, I::ceil, {x});
  case OpKind::Round: return intrinsic(b, I::roundeven, {x});
  case OpKind::Sign: {
    Value* s = b.CreateSelect(b.CreateFCmpOGT(x, c(0.0)), c(1.0),
                              b.CreateSelect(b.CreateFCmpOLT(x, c(0.0)), c(-1.0), c(0.0)));
    return b.CreateSelect(b.CreateFCmpUNO(x, x), x, s);
  }
  case OpKind::IsNan: return b.CreateFCmpUNO(x, x);
  case OpKind::IsInf: return b.CreateFCmpOEQ(intrinsic(b, I::fabs, {x}), c(INFINITY));
  case OpKind::Add: return exact(b.CreateFAdd(x, y));
  case OpKind::Sub: return exact(b.CreateFSub(x, y));
  case OpKind::Mul: return exact(b.CreateFMul(x, y));
  case OpKind::Div: return exact(b.CreateFDiv(x, y));
  case OpKind::Pow: return fromDouble(b, e, libm(b, m, "pow", {toDouble(b, x), toDouble(b, y)}));
  case OpKind::Max: return intrinsic(b, I::maximum, {x, y});
  case OpKind::Min: return intrinsic(b, I::minimum, {x, y});
  case OpKind::Mod: {
    Value* r = b.CreateFRem(x, y); // C fmod: exact
    if (op.attrs().getInt("fmod", 0)) return r;
    Value* zero = c(0.0);
    Value* signedZero = intrinsic(b, I::copysign, {zero, y});
    Value* fix = b.CreateXor(b.CreateFCmpOLT(r, zero), b.CreateFCmpOLT(y, zero));
    Value* adjusted = b.CreateSelect(fix, exact(b.CreateFAdd(r, y)), r);
    return b.CreateSelect(b.CreateFCmpOEQ(r, zero), signedZero, adjusted);
  }
  case OpKind::Eq: return b.CreateFCmpOEQ(x, y);
  case OpKind::Ne: return b.CreateFCmpUNE(x, y);
  case OpKind::Lt: return b.CreateFCmpOLT(x, y);
  case OpKind::Le: return b.CreateFCmpOLE(x, y);
  case OpKind::Gt: return b.CreateFCmpOGT(x, y);
  case OpKind::Ge: return b.CreateFCmpOGE(x, y);
  case OpKind::Clamp: return intrinsic(b, I::minimum, {intrinsic(b, I::maximum, {x, y}), a[2]});
  default: break;
  }
  return error(op.loc(), "compute: the CPU backend has no float form of '" +
                             std::string(opInfo(fn).name) + "'");
}

Result<Value*> intCompute(IRBuilder<>& b, llvm::Module& m, const Op& op, OpKind fn, ElemType e,
                          const std::vector<Value*>& a) {
  namespace I = llvm::Intrinsic;
  bool u = isUnsignedLike(e);
  Value* x = a[0];
  Value* y = a.size() > 1 ? a[1] : nullptr;
  llvm::Type* t = x->getType();
  auto c = [&](int64_t v) { return llvm::ConstantInt::get(t, static_cast<uint64_t>(v), true); };
  switch (fn) {
  case OpKind::Neg: return b.CreateSub(c(0), x);
  case OpKind::Abs:
    return u ? x : b.CreateSelect(b.CreateICmpSLT(x, c(0)), b.CreateSub(c(0), x), x);
  case OpKind::Relu: return u ? x : b.CreateSelect(b.CreateICmpSLT(x, c(0)), c(0), x);
  case OpKind::Sign: {
    if (u) return b.CreateZExt(b.CreateICmpNE(x, c(0)), t);
    Value* pos = b.CreateZExt(b.CreateICmpSGT(x, c(0)), t);
    Value* neg = b.CreateZExt(b.CreateICmpSLT(x, c(0)), t);
    return b.CreateSub(pos, neg);
  }
  case OpKind::Not: return b.CreateXor(x, c(1));
  case OpKind::And: return b.CreateAnd(x, y);
  case OpKind::Or: return b.CreateOr(x, y);
  case OpKind::Xor: return b.CreateXor(x, y);
  case OpKind::Add: return b.CreateAdd(x, y);
  case OpKind::Sub: return b.CreateSub(x, y);
  case OpKind::Mul: return b.CreateMul(x, y);
  case OpKind::Div: {
    Value* zero = b.CreateICmpEQ(y, c(0));
    if (u) return b.CreateSelect(zero, c(0), b.CreateUDiv(x, b.CreateSelect(zero, c(1), y)));
    Value* m1 = b.CreateICmpEQ(y, c(-1));
    Value* safe = b.CreateSelect(b.CreateOr(zero, m1), c(1), y);
    Value* q = b.CreateSDiv(x, safe);
    return b.CreateSelect(zero, c(0), b.CreateSelect(m1, b.CreateSub(c(0), x), q));
  }
  case OpKind::Mod: {
    Value* zero = b.CreateICmpEQ(y, c(0));
    if (u) return b.CreateSelect(zero, c(0), b.CreateURem(x, b.CreateSelect(zero, c(1), y)));
    Value* m1 = b.CreateICmpEQ(y, c(-1));
    Value* none = b.CreateOr(zero, m1);
    Value* r = b.CreateSelect(none, c(0), b.CreateSRem(x, b.CreateSelect(none, c(1), y)));
    if (op.attrs().getInt("fmod", 0)) return r;
    Value* fix = b.CreateAnd(b.CreateICmpNE(r, c(0)),
                             b.CreateXor(b.CreateICmpSLT(r, c(0)), b.CreateICmpSLT(y, c(0))));
    return b.CreateSelect(fix, b.CreateAdd(r, y), r);
  }
  case OpKind::Pow: {
    Value* r = b.CreateCall(ipowFunction(m), {toI64(b, e, x), toI64(b, e, y)});
    return b.CreateTrunc(r, t);
  }
  case OpKind::Max: return intrinsic(b, u ? I::umax : I::smax, {x, y});
  case OpKind::Min: return intrinsic(b, u ? I::umin : I::smin, {x, y});
  case OpKind::Clamp: {
    Value* lo = intrinsic(b, u ? I::umax : I::smax, {x, y});
    return intrinsic(b, u ? I::umin : I::smin, {lo, a[2]});
  }
  case OpKind::Eq: return b.CreateICmpEQ(x, y);
  case OpKind::Ne: return b.CreateICmpNE(x, y);
  case OpKind::Lt: return u ? b.CreateICmpULT(x, y) : b.CreateICmpSLT(x, y);
  case OpKind::Le: return u ? b.CreateICmpULE(x, y) : b.CreateICmpSLE(x, y);
  case OpKind::Gt: return u ? b.CreateICmpUGT(x, y) : b.CreateICmpSGT(x, y);
  case OpKind::Ge: return u ? b.CreateICmpUGE(x, y) : b.CreateICmpSGE(x, y);
  default: break;
  }
  return error(op.loc(), "compute: the CPU backend has no integer form of '" +
                             std::string(opInfo(fn).name) + "'");
}

} // namespace

llvm::Type* scalarType(llvm::LLVMContext& c, ElemType e) {
  switch (e) {
  case ElemType::F64: return llvm::Type::getDoubleTy(c);
  case ElemType::F32:
  case ElemType::F16:
  case ElemType::BF16: return llvm::Type::getFloatTy(c);
  case ElemType::I1: return llvm::Type::getInt1Ty(c);
  case ElemType::I8:
  case ElemType::U8: return llvm::Type::getInt8Ty(c);
  case ElemType::I16:
  case ElemType::U16: return llvm::Type::getInt16Ty(c);
  case ElemType::I32:
  case ElemType::U32: return llvm::Type::getInt32Ty(c);
  case ElemType::I64:
  case ElemType::U64: return llvm::Type::getInt64Ty(c);
  }
  return llvm::Type::getInt64Ty(c);
}

llvm::Type* storageType(llvm::LLVMContext& c, ElemType e) {
  switch (e) {
  case ElemType::F16: return llvm::Type::getHalfTy(c);
  case ElemType::BF16: return llvm::Type::getInt16Ty(c);
  case ElemType::I1: return llvm::Type::getInt8Ty(c);
  default: return scalarType(c, e);
  }
}

Value* fromStorage(IRBuilder<>& b, ElemType e, Value* v) {
  switch (e) {
  case ElemType::F16: return b.CreateFPExt(v, f32(b));
  case ElemType::BF16: return bf16BitsToFloat(b, b.CreateZExt(v, b.getInt32Ty()));
  case ElemType::I1: return b.CreateICmpNE(v, b.getInt8(0));
  default: return v;
  }
}

Value* toStorage(IRBuilder<>& b, ElemType e, Value* v) {
  switch (e) {
  case ElemType::F16: return b.CreateFPTrunc(v, b.getHalfTy());
  case ElemType::BF16: return b.CreateTrunc(roundBf16Bits(b, v), b.getInt16Ty());
  case ElemType::I1: return b.CreateZExt(v, b.getInt8Ty());
  default: return v;
  }
}

Value* scalarConstant(IRBuilder<>& b, ElemType e, double v) {
  HostTensor t(e, {});
  t.setF(0, v);
  llvm::Type* ty = scalarType(b.getContext(), e);
  if (isFloat(e)) return llvm::ConstantFP::get(ty, t.getF(0));
  return llvm::ConstantInt::get(ty, static_cast<uint64_t>(t.getI(0)), !isUnsignedLike(e));
}

Value* convert(IRBuilder<>& b, ElemType from, ElemType to, Value* v) {
  llvm::Type* dt = scalarType(b.getContext(), to);
  if (isBool(to))
    return isFloat(from) ? b.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0))
                         : b.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
  if (isFloat(to)) {
    if (isFloat(from)) {
      if (to == ElemType::F64) return toDouble(b, v);
      if (v->getType()->isDoubleTy()) return fromDouble(b, to, v);
      return roundFloat(b, to, v); // float -> f32/f16/bf16
    }
    Value* i = toI64(b, from, v);
    if (from == ElemType::U64) // above 2^63 too, like the interpreter
      return to == ElemType::F32 ? b.CreateUIToFP(i, f32(b))
                                 : fromDouble(b, to, b.CreateUIToFP(i, f64(b)));
    if (to == ElemType::F32) return b.CreateSIToFP(i, f32(b)); // rounds once, like the interpreter
    return fromDouble(b, to, b.CreateSIToFP(i, f64(b)));
  }
  if (isFloat(from)) {
    // NaN -> 0, out of range saturates to int64, then wraps to the width.
    Value* s = b.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {b.getInt64Ty(), v->getType()}, {v});
    return b.CreateTrunc(s, dt);
  }
  return b.CreateTrunc(toI64(b, from, v), dt);
}

Result<Value*> emitCompute(IRBuilder<>& b, llvm::Module& m, const Op& op,
                           const std::vector<Value*>& args) {
  std::optional<OpKind> kind = op.attrs().getOp("fn");
  if (!kind) return error(op.loc(), "compute names no op");
  OpKind fn = *kind;
  ElemType re = op.result(0)->type().elem();
  if (args.empty()) return error(op.loc(), "compute needs operands");
  if (fn == OpKind::Cast) return convert(b, op.operand(0)->type().elem(), re, args[0]);
  if (fn == OpKind::Select) {
    if (args.size() != 3) return error(op.loc(), "compute select needs 3 operands");
    return b.CreateSelect(args[0], args[1], args[2]);
  }
  ElemType e = op.operand(0)->type().elem();
  for (size_t i = 1; i < args.size(); ++i)
    if (args[i]->getType() != args[0]->getType())
      return error(op.loc(), "compute '" + std::string(opInfo(fn).name) +
                                 "' has operands of different types");
  if (isFloat(e)) return floatCompute(b, m, op, fn, e, args);
  return intCompute(b, m, op, fn, e, args);
}

} // namespace kiln::llvmgen
