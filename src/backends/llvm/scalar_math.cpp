// libm functions as inline LLVM IR (see scalar_math.h). Every function works in f64 and is
// built from the same pieces: an argument reduction, a polynomial or rational approximation,
// and selects for the special values (NaN, +-inf, +-0, subnormals, overflow). All lanes
// compute every piece and a select keeps the one that applies, which costs a few extra
// operations per element and lets the loop vectorizer widen the code.
//
// The coefficients of log, erf, sin, cos and atan are fdlibm's (Copyright (C) 1993 by Sun
// Microsystems, Inc. Permission to use, copy, modify, and distribute this software is freely
// granted, provided that this notice is preserved.)
#include "backends/llvm/scalar_math.h"

#include <llvm/IR/Intrinsics.h>

#include <cmath>
#include <initializer_list>
#include <map>
#include <string>

namespace kiln::llvmgen {

namespace {

using llvm::Value;

// Emission helpers for one function body: float constants, arithmetic, selects, bits. The
// float type is f64 (with i64 bits) unless `single`, then f32 (with i32 bits); the helpers
// that depend on the format's layout (pow2, scale, truncBits' callers) are f64 only.
struct Math {
  llvm::IRBuilder<>& b;
  llvm::Module& m;
  bool single = false;
  llvm::Type* d = single ? b.getFloatTy() : b.getDoubleTy();
  llvm::Type* i64 = single ? b.getInt32Ty() : b.getInt64Ty();

  Value* k(double v) const { return llvm::ConstantFP::get(d, v); }
  Value* ki(int64_t v) const { return llvm::ConstantInt::get(i64, static_cast<uint64_t>(v), true); }
  Value* add(Value* x, Value* y) { return b.CreateFAdd(x, y); }
  Value* sub(Value* x, Value* y) { return b.CreateFSub(x, y); }
  Value* mul(Value* x, Value* y) { return b.CreateFMul(x, y); }
  Value* div(Value* x, Value* y) { return b.CreateFDiv(x, y); }
  Value* neg(Value* x) { return b.CreateFNeg(x); }
  Value* lt(Value* x, double c) { return b.CreateFCmpOLT(x, k(c)); }
  Value* gt(Value* x, double c) { return b.CreateFCmpOGT(x, k(c)); }
  Value* eq(Value* x, double c) { return b.CreateFCmpOEQ(x, k(c)); }
  Value* isNan(Value* x) { return b.CreateFCmpUNO(x, x); }
  Value* sel(Value* c, Value* x, Value* y) { return b.CreateSelect(c, x, y); }
  Value* intrinsic(llvm::Intrinsic::ID id, std::vector<Value*> args) {
    return b.CreateIntrinsic(id, {d}, args);
  }
  Value* fabs(Value* x) { return intrinsic(llvm::Intrinsic::fabs, {x}); }
  Value* copysign(Value* x, Value* s) { return intrinsic(llvm::Intrinsic::copysign, {x, s}); }
  Value* roundeven(Value* x) { return intrinsic(llvm::Intrinsic::roundeven, {x}); }
  Value* floor(Value* x) { return intrinsic(llvm::Intrinsic::floor, {x}); }
  Value* bits(Value* x) { return b.CreateBitCast(x, i64); }
  Value* fromBits(Value* i) { return b.CreateBitCast(i, d); }
  Value* toInt(Value* x) { return b.CreateFPToSI(x, i64); }
  Value* toDouble(Value* i) { return b.CreateSIToFP(i, d); }
  // x with the low `n` bits of its significand cleared (exact; the rest is x - result).
  Value* truncBits(Value* x, int n) {
    return fromBits(b.CreateAnd(bits(x), ki(-(int64_t{1} << n))));
  }
  // x*y + z, fused where the target has a fused multiply-add (llvm.fmuladd).
  Value* fma(Value* x, Value* y, Value* z) {
    return b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {d}, {x, y, z});
  }
  // Horner's rule with `fma`.
  Value* polyFused(Value* x, std::initializer_list<double> c) {
    auto it = std::rbegin(c);
    Value* p = k(*it);
    for (++it; it != std::rend(c); ++it) p = fma(p, x, k(*it));
    return p;
  }
  // c[0] + x*(c[1] + x*(c[2] + ...)), Horner's rule.
  Value* poly(Value* x, std::initializer_list<double> c) {
    auto it = std::rbegin(c);
    Value* p = k(*it);
    for (++it; it != std::rend(c); ++it) p = add(mul(p, x), k(*it));
    return p;
  }
  // The same with the coefficients `ca` where `c` holds and `cb` elsewhere (zeros pad the
  // shorter list: leading zeros change nothing).
  Value* polySel(Value* x, Value* c, std::initializer_list<double> ca,
                 std::initializer_list<double> cb) {
    auto ia = std::rbegin(ca);
    auto ib = std::rbegin(cb);
    Value* p = sel(c, k(*ia), k(*ib));
    for (++ia, ++ib; ia != std::rend(ca); ++ia, ++ib) p = add(mul(p, x), sel(c, k(*ia), k(*ib)));
    return p;
  }
  // 2^e for an i64 e in [-1022, 1023].
  Value* pow2(Value* e) { return fromBits(b.CreateShl(b.CreateAdd(e, ki(1023)), 52)); }
  // v * 2^e for e in [-2044, 2046], in two steps so that neither factor overflows.
  Value* scale(Value* v, Value* e) {
    Value* e1 = b.CreateSDiv(e, ki(2));
    return mul(mul(v, pow2(e1)), pow2(b.CreateSub(e, e1)));
  }
  // x + y as a rounded sum and its exact error (Knuth's TwoSum: no condition on magnitudes).
  std::pair<Value*, Value*> twoSum(Value* x, Value* y) {
    Value* s = add(x, y);
    Value* yy = sub(s, x);
    Value* err = add(sub(x, sub(s, yy)), sub(y, yy));
    return {s, err};
  }
  // x * y as a rounded product and its exact error (Dekker, without FMA: 27-bit halves).
  // Needs |x|, |y| < 2^995.
  std::pair<Value*, Value*> twoProd(Value* x, Value* y) {
    Value* p = mul(x, y);
    Value* xh = truncBits(x, 27);
    Value* xl = sub(x, xh);
    Value* yh = truncBits(y, 27);
    Value* yl = sub(y, yh);
    Value* err = add(add(add(sub(mul(xh, yh), p), mul(xh, yl)), mul(xl, yh)), mul(xl, yl));
    return {p, err};
  }
  Value* call(std::string_view name, std::vector<Value*> args) {
    return b.CreateCall(inlineMathFunction(m, name), args);
  }
};

using Body = Value* (*)(Math&, const std::vector<Value*>&);

llvm::Function* define(llvm::Module& m, const std::string& symbol, size_t arity, Body body,
                       bool single = false) {
  llvm::LLVMContext& c = m.getContext();
  llvm::Type* d = single ? llvm::Type::getFloatTy(c) : llvm::Type::getDoubleTy(c);
  std::vector<llvm::Type*> params(arity, d);
  auto* f = llvm::Function::Create(llvm::FunctionType::get(d, params, false),
                                   llvm::GlobalValue::InternalLinkage, symbol, m);
  f->addFnAttr(llvm::Attribute::AlwaysInline);
  f->addFnAttr(llvm::Attribute::NoUnwind);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(c, "entry", f));
  Math e{b, m, single};
  std::vector<Value*> args;
  for (llvm::Argument& a : f->args()) args.push_back(&a);
  b.CreateRet(body(e, args));
  return f;
}

// ---- exp, expm1 ------------------------------------------------------------------------------

// e^x overflows above 709.79 and is 0 below -745.14: clamping just outside keeps n in range.
Value* clampExpArg(Math& e, Value* x) {
  return e.sel(e.gt(x, 710.0), e.k(710.0), e.sel(e.lt(x, -746.0), e.k(-746.0), x));
}

// x = n*ln2 + r with |r| <= ln2/2 (ln2 in two parts; n * the first is exact for these n);
// returns n (an integral double) and e^r - 1 by its Taylor series to r^13 (truncation below
// 2e-16). `tail`, when given, is added to x inside the reduction, for arguments that come in
// two parts (pow's y log|x|, erf's exponent) whose sum would lose bits.
std::pair<Value*, Value*> expReduce(Math& e, Value* x, Value* tail = nullptr) {
  Value* n = e.roundeven(e.mul(tail ? e.add(x, tail) : x, e.k(1.4426950408889634)));
  Value* r = e.sub(x, e.mul(n, e.k(0.6931471803691238)));
  if (tail) r = e.add(r, tail);
  r = e.sub(r, e.mul(n, e.k(1.9082149292705877e-10)));
  double coef = 1;
  std::vector<double> inv = {1};
  for (int i = 1; i <= 13; ++i) inv.push_back(coef /= i);
  Value* p = e.k(inv[13]);
  for (size_t i = 12; i >= 1; --i) p = e.add(e.mul(p, r), e.k(inv[i]));
  return {n, e.mul(p, r)};
}

// e^r * 2^n, 2^n in two halves so that results near overflow and subnormal ones are right.
// Within about 2 ulp of libm; after rounding to f32 the results are libm's.
Value* expF64(Math& e, const std::vector<Value*>& a) {
  auto [n, q] = expReduce(e, clampExpArg(e, a[0]));
  Value* res = e.scale(e.add(q, e.k(1.0)), e.toInt(n));
  return e.sel(e.isNan(a[0]), a[0], res);
}

// e^x - 1 = 2^n * (e^r - 1) + (2^n - 1): exact for n = 0 (small x, where e^x - 1 cancels),
// no worse than a couple of ulp elsewhere; e^x itself where 1 no longer counts.
Value* expm1F64(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  auto [n, q] = expReduce(e, clampExpArg(e, x));
  Value* ni = e.toInt(n);
  Value* big = e.sub(e.scale(e.add(q, e.k(1.0)), ni), e.k(1.0));
  Value* high = e.b.CreateICmpSGT(ni, e.ki(60));
  Value* low = e.b.CreateICmpSLT(ni, e.ki(-60));
  Value* s = e.pow2(e.b.CreateSelect(high, e.ki(60), e.b.CreateSelect(low, e.ki(-60), ni)));
  Value* mid = e.add(e.mul(s, q), e.sub(s, e.k(1.0)));
  Value* res = e.sel(high, big, e.sel(low, e.k(-1.0), mid));
  res = e.sel(e.eq(x, 0.0), x, res); // keeps -0
  return e.sel(e.isNan(x), x, res);
}

// ---- log -------------------------------------------------------------------------------------

// x = 2^k * m with m in [sqrt(2)/2, sqrt(2)) (subnormals scaled by 2^54 first), f = m - 1,
// s = f / (2 + f): log(m) = f - f^2/2 + s * (f^2/2 + R(s^2)), fdlibm's e_log.c.
Value* logF64(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  Value* subnormal = e.lt(x, 0x1p-1022);
  Value* xs = e.sel(subnormal, e.mul(x, e.k(0x1p54)), x);
  Value* ix = e.b.CreateAdd(e.bits(xs), e.ki(int64_t{0x3ff00000 - 0x3fe6a09e} << 32));
  Value* k = e.b.CreateSub(e.b.CreateAShr(ix, 52), e.ki(0x3ff));
  k = e.b.CreateSub(k, e.b.CreateSelect(subnormal, e.ki(54), e.ki(0)));
  Value* mbits =
      e.b.CreateAdd(e.b.CreateAnd(ix, e.ki(0x000fffffffffffff)), e.ki(int64_t{0x3fe6a09e} << 32));
  Value* f = e.sub(e.fromBits(mbits), e.k(1.0));
  Value* hfsq = e.mul(e.k(0.5), e.mul(f, f));
  Value* s = e.div(f, e.add(e.k(2.0), f));
  Value* z = e.mul(s, s);
  Value* w = e.mul(z, z);
  Value* t1 = e.mul(
      w, e.poly(w, {3.999999999940941908e-01, 2.222219843214978396e-01, 1.531383769920937332e-01}));
  Value* t2 = e.mul(z, e.poly(w, {6.666666666666735130e-01, 2.857142874366239149e-01,
                                  1.818357216161805012e-01, 1.479819860511658591e-01}));
  Value* r = e.add(t2, t1);
  Value* dk = e.toDouble(k);
  Value* lo = e.add(e.mul(s, e.add(hfsq, r)), e.mul(dk, e.k(1.90821492927058770002e-10)));
  Value* res = e.sub(e.mul(dk, e.k(6.93147180369123816490e-01)), e.sub(e.sub(hfsq, lo), f));
  res = e.sel(e.eq(x, INFINITY), x, res);
  res = e.sel(e.eq(x, 0.0), e.k(-INFINITY), res);
  res = e.sel(e.lt(x, 0.0), e.k(NAN), res);
  return e.sel(e.isNan(x), x, res);
}

// ---- tanh, erf -------------------------------------------------------------------------------

// tanh|x| = t / (t + 2) with t = e^(2|x|) - 1, which has no cancellation for small x; 1 from
// |x| = 20 on (where tanh rounds to 1). Within about 3 ulp.
Value* tanhF64(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  Value* ax = e.fabs(x);
  Value* c = e.sel(e.lt(ax, 20.0), ax, e.k(20.0));
  Value* t = e.call("expm1", {e.add(c, c)});
  Value* res = e.copysign(e.div(t, e.add(t, e.k(2.0))), x);
  return e.sel(e.isNan(x), x, res);
}

// fdlibm's s_erf.c with every interval computed and the right one selected: x + x*P/Q(x^2)
// below 0.84375, erx + P/Q(|x|-1) below 1.25 (one rational function with the coefficients of
// the interval), 1 - exp(-x^2 - 0.5625 + R/S(1/x^2))/x below 6 (x^2 split so that its head is
// exact; R/S with the coefficients of [1.25, 1/0.35) or [1/0.35, 6)), 1 above.
Value* erfF64(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  Value* ax = e.fabs(x);
  Value* one = e.k(1.0);
  // |x| < 1.25
  Value* inner = e.lt(ax, 0.84375);
  Value* t = e.sel(inner, e.mul(ax, ax), e.sub(ax, one));
  Value* p = e.polySel(
      t, inner,
      {1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
       -5.77027029648944159157e-03, -2.37630166566501626084e-05, 0, 0},
      {-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
       3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
       -2.16637559486879084300e-03});
  Value* q = e.polySel(
      t, inner,
      {1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
       1.32494738004321644526e-04, -3.96022827877536812320e-06, 0},
      {1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
       1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02});
  Value* y = e.div(p, q);
  Value* small = e.add(ax, e.mul(ax, y));
  // Tiny x: 0.125 * (8x + efx8*x) keeps the subnormal bits that x*efx would lose.
  Value* tiny =
      e.mul(e.k(0.125), e.add(e.mul(e.k(8.0), ax), e.mul(e.k(1.02703333676410069053e+00), ax)));
  small = e.sel(e.lt(ax, 0x1p-1000), tiny, small);
  Value* mid = e.add(e.k(8.45062911510467529297e-01), y);
  // 1.25 <= |x| < 6 (clamped into it so that the unused lanes stay finite)
  Value* l = e.sel(e.lt(ax, 1.25), e.k(1.25), e.sel(e.lt(ax, 6.0), ax, e.k(6.0)));
  Value* u = e.div(one, e.mul(l, l));
  Value* nearer = e.lt(l, 1.0 / 0.35);
  Value* r = e.polySel(
      u, nearer,
      {-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
       -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
       -8.12874355063065934246e+01, -9.81432934416914548592e+00},
      {-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
       -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
       -4.83519191608651397019e+02, 0});
  Value* s = e.polySel(
      u, nearer,
      {1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
       6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
       6.57024977031928170135e+00, -6.04244152148580987438e-02},
      {1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
       3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
       -2.24409524465858183362e+01, 0});
  Value* zl = e.truncBits(l, 32);
  Value* head = e.sub(e.neg(e.mul(zl, zl)), e.k(0.5625));
  Value* tail = e.add(e.mul(e.sub(zl, l), e.add(zl, l)), e.div(r, s));
  auto [n, em1] = expReduce(e, head, tail);
  Value* large = e.sub(one, e.div(e.scale(e.add(em1, one), e.toInt(n)), l));
  Value* res =
      e.sel(e.lt(ax, 0.84375), small, e.sel(e.lt(ax, 1.25), mid, e.sel(e.lt(ax, 6.0), large, one)));
  res = e.copysign(res, x);
  return e.sel(e.isNan(x), x, res);
}

// ---- sin, cos --------------------------------------------------------------------------------

// x = n*pi/2 + (y0 + y1) with |y0 + y1| <= pi/4 (about), y1 a correction far below y0's ulp.
struct Quadrant {
  Value* n; // n mod 4 (i64)
  Value* y0;
  Value* y1;
};

// Below kCodyWaiteLimit, n < 2^20 and Cody-Waite's reduction is exact enough: pi/2 in three
// 33-bit parts and a tail (fdlibm's pio2_1 .. pio2_3t), n * part exact, each subtraction's
// rounding error kept (TwoSum), so y0 + y1 is good to ~2^-100 absolute.
constexpr double kCodyWaiteLimit = 0x1p20;

Quadrant codyWaite(Math& e, Value* x) {
  Value* n = e.roundeven(e.mul(x, e.k(6.36619772367581382433e-01)));
  Value* r1 = e.sub(x, e.mul(n, e.k(0x1.921fb544p+0)));
  auto [r2, e2] = e.twoSum(r1, e.neg(e.mul(n, e.k(6.07710050630396597660e-11))));
  auto [r3, e3] = e.twoSum(r2, e.neg(e.mul(n, e.k(2.02226624871116645580e-21))));
  Value* tail = e.sub(e.add(e2, e3), e.mul(n, e.k(8.47842766036889956997e-32)));
  auto [y0, y1] = e.twoSum(r3, tail);
  return {e.b.CreateAnd(e.toInt(n), e.ki(3)), y0, y1};
}

// 2/pi in 24-bit pieces (2/pi = sum of piece[j] * 2^(-24 (j + 1))), after two zero pieces that
// let the window below start before the binary point.
constexpr double kTwoOverPiPieces[] = {
    0,        0,        10680707, 7228996,  1387004, 2578385, 16069853, 12639074, 9804092,
    4427841,  16666979, 11263675, 12935607, 2387514, 4345298, 14681673, 3074569,  13734428,
    16653803, 1880361,  10960616, 8533493,  3062596, 8710556, 7349940,  6258241,  3772886,
    3769171,  3798172,  8675211,  12450088, 3874808, 9961438, 366607,   15675153, 9132554,
    7151469,  3571407,  2607881,  12013382, 4155038, 6285869, 7677882,  13102053, 15825725,
    473591,   9065106,  15363067, 6271263,  9264392, 5636912, 4652155,
};

llvm::GlobalVariable* twoOverPiTable(llvm::Module& m) {
  if (llvm::GlobalVariable* g = m.getNamedGlobal("kiln_two_over_pi")) return g;
  llvm::Type* d = llvm::Type::getDoubleTy(m.getContext());
  std::vector<llvm::Constant*> pieces;
  for (double v : kTwoOverPiPieces) pieces.push_back(llvm::ConstantFP::get(d, v));
  auto* type = llvm::ArrayType::get(d, pieces.size());
  return new llvm::GlobalVariable(m, type, true, llvm::GlobalValue::InternalLinkage,
                                  llvm::ConstantArray::get(type, pieces), "kiln_two_over_pi");
}

// Payne-Hanek for any finite |x| >= 2^20, without branches: only the bits of 2/pi that matter
// modulo 4 are used. |x| = M * 2^E (M < 2^53); with k0 = floor((E - 2) / 24), the pieces
// before k0 contribute multiples of 4, and x' = |x| * 2^(-24 k0) (in [2^54, 2^78)) times nine
// pieces from k0 on gives the rest. x' is cut into three 24-bit parts X0..X2, so every
// product X_i * piece is exact, and the products of one weight (i + piece index) add up
// exactly. The big weights are reduced modulo 4 exactly; the small ones are summed with their
// rounding errors, so the fraction is good to ~2^-110 absolute. It is multiplied by pi/2 in
// exact 26-bit pieces.
Quadrant payneHanek(Math& e, Value* ax) {
  Value* exponent = e.b.CreateSub(e.b.CreateLShr(e.bits(ax), 52), e.ki(1075));
  Value* k0 = e.b.CreateSub(e.b.CreateSDiv(e.b.CreateAdd(exponent, e.ki(46)), e.ki(24)), e.ki(2));
  Value* xs = e.mul(ax, e.pow2(e.b.CreateMul(k0, e.ki(-24))));
  Value* x01 = e.truncBits(xs, 5);
  Value* x0 = e.truncBits(xs, 29);
  Value* x[3] = {x0, e.sub(x01, x0), e.sub(xs, x01)};
  llvm::GlobalVariable* table = twoOverPiTable(e.m);
  Value* t[9];
  for (int j = 0; j < 9; ++j) {
    Value* index = e.b.CreateAdd(k0, e.ki(j + 2));
    Value* at = e.b.CreateInBoundsGEP(table->getValueType(), table, {e.ki(0), index});
    t[j] = e.mul(e.b.CreateLoad(e.d, at), e.k(std::ldexp(1.0, -24 * (j + 1))));
  }
  auto level = [&](int l) {
    Value* sum = e.mul(x[0], t[l]);
    for (int i = 1; i <= 2 && i <= l; ++i) sum = e.add(sum, e.mul(x[i], t[l - i]));
    return sum;
  };
  auto mod4 = [&](Value* v) { return e.sub(v, e.mul(e.k(4.0), e.floor(e.mul(v, e.k(0.25))))); };
  // Weight 0 is a multiple of 4; weights 1 and 2 reduced modulo 4 and added are exact.
  Value* a = mod4(e.add(mod4(level(1)), mod4(level(2))));
  auto [s, err] = e.twoSum(a, level(3));
  Value* n = e.roundeven(s);
  Value* f = e.sub(s, n);
  auto [s1, e1] = e.twoSum(f, level(4));
  auto [s2, e2] = e.twoSum(s1, err);
  auto [s3, e3] = e.twoSum(s2, level(5));
  Value* tail = e.add(e.add(e.add(e1, e2), e3), e.add(level(6), e.add(level(7), level(8))));
  auto [hi, lo] = e.twoSum(s3, tail);
  // (hi + lo) * pi/2 with pi/2 = q1 + q2 + q3, q1 and q2 of 26 bits.
  constexpr double q1 = 0x1.921fb5p+0, q2 = 0x1.110b46p-26, q3 = 0x1.1a62633145c07p-54;
  Value* hh = e.truncBits(hi, 27);
  Value* hl = e.sub(hi, hh);
  Value* p0 = e.mul(hh, e.k(q1));
  Value* p1 = e.add(e.mul(hh, e.k(q2)), e.mul(hl, e.k(q1)));
  Value* p2 =
      e.add(e.add(e.mul(hl, e.k(q2)), e.mul(hi, e.k(q3))), e.mul(lo, e.k(1.5707963267948966)));
  auto [y0, y1] = e.twoSum(p0, e.add(p1, p2));
  return {e.b.CreateAnd(e.toInt(n), e.ki(3)), y0, y1};
}

// The quadrant and remainder of any finite x (garbage for inf and NaN, which callers replace).
Quadrant reduceHalfPi(Math& e, Value* x) {
  Value* ax = e.fabs(x);
  Value* small = e.lt(ax, kCodyWaiteLimit);
  // Each path gets an argument it can handle; the select below keeps the right one.
  Quadrant cw = codyWaite(e, e.sel(small, x, e.k(0.0)));
  Value* big = e.b.CreateFCmpOGE(ax, e.k(kCodyWaiteLimit));
  Quadrant ph =
      payneHanek(e, e.sel(big, e.sel(e.lt(ax, INFINITY), ax, e.k(0x1p30)), e.k(kCodyWaiteLimit)));
  // sin and cos of -x from those of |x|: negate the remainder and the quadrant.
  Value* negative = e.lt(x, 0.0);
  Value* phN =
      e.b.CreateSelect(negative, e.b.CreateAnd(e.b.CreateSub(e.ki(0), ph.n), e.ki(3)), ph.n);
  return {e.b.CreateSelect(small, cw.n, phN),
          e.sel(small, cw.y0, e.sel(negative, e.neg(ph.y0), ph.y0)),
          e.sel(small, cw.y1, e.sel(negative, e.neg(ph.y1), ph.y1))};
}

// sin(y0 + y1) and cos(y0 + y1) for |y0| <= pi/4: fdlibm's k_sin.c and k_cos.c.
Value* kernelSin(Math& e, Value* x, Value* y) {
  Value* z = e.mul(x, x);
  Value* v = e.mul(z, x);
  Value* r = e.poly(z, {8.33333333332248946124e-03, -1.98412698298579493134e-04,
                        2.75573137070700676789e-06, -2.50507602534068634195e-08,
                        1.58969099521155010221e-10});
  Value* inner = e.sub(e.mul(z, e.sub(e.mul(e.k(0.5), y), e.mul(v, r))), y);
  return e.sub(x, e.sub(inner, e.mul(v, e.k(-1.66666666666666324348e-01))));
}

Value* kernelCos(Math& e, Value* x, Value* y) {
  Value* z = e.mul(x, x);
  Value* r = e.mul(z, e.poly(z, {4.16666666666666019037e-02, -1.38888888888741095749e-03,
                                 2.48015872894767294178e-05, -2.75573143513906633035e-07,
                                 2.08757232129817482790e-09, -1.13596475577881948265e-11}));
  Value* hz = e.mul(e.k(0.5), z);
  Value* w = e.sub(e.k(1.0), hz);
  return e.add(w, e.add(e.sub(e.sub(e.k(1.0), w), hz), e.sub(e.mul(z, r), e.mul(x, y))));
}

// sin or cos: the kernel and sign the quadrant picks; NaN for +-inf and NaN.
Value* sinOrCos(Math& e, Value* x, bool cosine) {
  Quadrant q = reduceHalfPi(e, x);
  Value* ks = kernelSin(e, q.y0, q.y1);
  Value* kc = kernelCos(e, q.y0, q.y1);
  // sin: q = 0: ks, 1: kc, 2: -ks, 3: -kc. cos: q = 0: kc, 1: -ks, 2: -kc, 3: ks.
  Value* n = cosine ? e.b.CreateAdd(q.n, e.ki(1)) : q.n;
  Value* odd = e.b.CreateICmpNE(e.b.CreateAnd(n, e.ki(1)), e.ki(0));
  Value* flip = e.b.CreateICmpNE(e.b.CreateAnd(n, e.ki(2)), e.ki(0));
  Value* res = e.sel(odd, kc, ks);
  res = e.sel(flip, e.neg(res), res);
  if (!cosine) res = e.sel(e.lt(e.fabs(x), 0x1p-27), x, res); // sin x = x, -0 kept
  res = e.sel(e.eq(e.fabs(x), INFINITY), e.k(NAN), res);
  return e.sel(e.isNan(x), x, res);
}

Value* sinF64(Math& e, const std::vector<Value*>& a) { return sinOrCos(e, a[0], false); }
Value* cosF64(Math& e, const std::vector<Value*>& a) { return sinOrCos(e, a[0], true); }

// tan = sin/cos of the reduced argument: ks/kc in even quadrants, -kc/ks in odd ones.
Value* tanF64(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  Quadrant q = reduceHalfPi(e, x);
  Value* ks = kernelSin(e, q.y0, q.y1);
  Value* kc = kernelCos(e, q.y0, q.y1);
  Value* odd = e.b.CreateICmpNE(e.b.CreateAnd(q.n, e.ki(1)), e.ki(0));
  Value* res = e.sel(odd, e.neg(e.div(kc, ks)), e.div(ks, kc));
  res = e.sel(e.lt(e.fabs(x), 0x1p-27), x, res); // tan x = x, -0 kept
  res = e.sel(e.eq(e.fabs(x), INFINITY), e.k(NAN), res);
  return e.sel(e.isNan(x), x, res);
}

// ---- atan, asin, acos ------------------------------------------------------------------------

// fdlibm's s_atan.c with the interval's reduction selected: atan|x| = atan(c) + atan(t) with
// c in {0, 0.5, 1, 1.5, inf} and t small, atan(t) by an odd polynomial of degree 23.
Value* atanF64(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  Value* ax = e.fabs(x);
  Value* one = e.k(1.0);
  Value* i0 = e.lt(ax, 0.4375);
  Value* i1 = e.lt(ax, 0.6875);
  Value* i2 = e.lt(ax, 1.1875);
  Value* i3 = e.lt(ax, 2.4375);
  auto pick = [&](Value* v0, Value* v1, Value* v2, Value* v3, Value* v4) {
    return e.sel(i0, v0, e.sel(i1, v1, e.sel(i2, v2, e.sel(i3, v3, v4))));
  };
  Value* num = pick(ax, e.sub(e.add(ax, ax), one), e.sub(ax, one), e.sub(ax, e.k(1.5)), e.k(-1.0));
  Value* den = pick(one, e.add(e.k(2.0), ax), e.add(ax, one), e.add(one, e.mul(e.k(1.5), ax)), ax);
  Value* t = e.div(num, den);
  Value* hi = pick(e.k(0.0), e.k(4.63647609000806093515e-01), e.k(7.85398163397448278999e-01),
                   e.k(9.82793723247329054082e-01), e.k(1.57079632679489655800e+00));
  Value* lo = pick(e.k(0.0), e.k(2.26987774529616870924e-17), e.k(3.06161699786838301793e-17),
                   e.k(1.39033110312309984516e-17), e.k(6.12323399573676603587e-17));
  Value* z = e.mul(t, t);
  Value* w = e.mul(z, z);
  Value* s1 = e.mul(z, e.poly(w, {3.33333333333329318027e-01, 1.42857142725034663711e-01,
                                  9.09088713343650656196e-02, 6.66107313738753120669e-02,
                                  4.97687799461593236017e-02, 1.62858201153657823623e-02}));
  Value* s2 = e.mul(w, e.poly(w, {-1.99999999998764832476e-01, -1.11111104054623557880e-01,
                                  -7.69187620504482999495e-02, -5.83357013379057348645e-02,
                                  -3.65315727442169155270e-02}));
  Value* res = e.sub(hi, e.sub(e.sub(e.mul(t, e.add(s1, s2)), lo), t));
  res = e.sel(e.lt(ax, 0x1p-27), ax, res);
  res = e.copysign(res, x);
  return e.sel(e.isNan(x), x, res);
}

// asin x = atan(x / sqrt((1 - x)(1 + x))) and acos x = 2 atan(sqrt((1 - x) / (1 + x))): 1 - x
// and 1 + x are exact where they cancel. NaN outside [-1, 1].
Value* asinF64(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  Value* one = e.k(1.0);
  Value* c = e.intrinsic(llvm::Intrinsic::sqrt, {e.mul(e.sub(one, x), e.add(one, x))});
  Value* res = e.call("atan", {e.div(x, c)});
  res = e.sel(e.lt(e.fabs(x), 0x1p-27), x, res);
  return e.sel(e.gt(e.fabs(x), 1.0), e.k(NAN), res);
}

Value* acosF64(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  Value* one = e.k(1.0);
  Value* r = e.intrinsic(llvm::Intrinsic::sqrt, {e.div(e.sub(one, x), e.add(one, x))});
  Value* res = e.mul(e.k(2.0), e.call("atan", {r}));
  return e.sel(e.gt(e.fabs(x), 1.0), e.k(NAN), res);
}

// ---- sinh, cosh ------------------------------------------------------------------------------

// fdlibm's forms: with t = e^|x| - 1, sinh|x| = (2t - t^2/(t + 1))/2 below 1 and
// (t + t/(t + 1))/2 below 22; e^|x|/2 above, as (e^(|x|/2)/2) * e^(|x|/2) from 709 on so that
// it overflows only where sinh does. cosh x = (e^|x| + 1/e^|x|)/2, the same way above 709.
Value* sinhF64(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  Value* ax = e.fabs(x);
  Value* half = e.k(0.5);
  Value* t = e.call("expm1", {e.sel(e.lt(ax, 22.0), ax, e.k(22.0))});
  Value* ratio = e.div(t, e.add(t, e.k(1.0)));
  Value* small = e.mul(half, e.sub(e.add(t, t), e.mul(t, ratio)));
  Value* mid = e.mul(half, e.add(t, ratio));
  Value* big = e.mul(half, e.call("exp", {e.sel(e.lt(ax, 709.0), ax, e.k(709.0))}));
  Value* eh = e.call("exp", {e.mul(half, ax)});
  Value* huge = e.mul(e.mul(half, eh), eh);
  Value* res =
      e.sel(e.lt(ax, 1.0), small, e.sel(e.lt(ax, 22.0), mid, e.sel(e.lt(ax, 709.0), big, huge)));
  res = e.copysign(res, x);
  return e.sel(e.isNan(x), x, res);
}

Value* coshF64(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  Value* ax = e.fabs(x);
  Value* half = e.k(0.5);
  Value* ex = e.call("exp", {e.sel(e.lt(ax, 709.0), ax, e.k(709.0))});
  Value* normal = e.add(e.mul(half, ex), e.div(half, ex));
  Value* eh = e.call("exp", {e.mul(half, ax)});
  Value* huge = e.mul(e.mul(half, eh), eh);
  Value* res = e.sel(e.lt(ax, 709.0), normal, huge);
  return e.sel(e.isNan(x), x, res);
}

// ---- asinh, acosh, atanh ---------------------------------------------------------------------

// log(1 + x) = log(u) + (x - (u - 1)) / u with u = 1 + x rounded: the second term is the part
// of x that the rounding lost.
Value* log1p(Math& e, Value* x) {
  Value* u = e.add(e.k(1.0), x);
  Value* c = e.div(e.sub(x, e.sub(u, e.k(1.0))), u);
  Value* res = e.add(e.call("log", {u}), c);
  res = e.sel(e.lt(e.fabs(x), 0x1p-54), x, res);
  return e.sel(e.eq(x, INFINITY), x, res);
}

// asinh|x| = log1p(|x| + x^2 / (1 + sqrt(1 + x^2))) below 2, log(2|x| + 1/(sqrt(x^2 + 1) + |x|))
// below 2^28, log|x| + ln2 above.
Value* asinhF64(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  Value* ax = e.fabs(x);
  Value* one = e.k(1.0);
  Value* am = e.sel(e.lt(ax, 0x1p28), ax, one);
  Value* root = e.intrinsic(llvm::Intrinsic::sqrt, {e.add(e.mul(am, am), one)});
  Value* small = log1p(e, e.add(am, e.div(e.mul(am, am), e.add(one, root))));
  Value* mid = e.call("log", {e.add(e.add(am, am), e.div(one, e.add(root, am)))});
  Value* big = e.add(e.call("log", {ax}), e.k(6.93147180559945286227e-01));
  Value* res = e.sel(e.lt(ax, 2.0), small, e.sel(e.lt(ax, 0x1p28), mid, big));
  res = e.copysign(res, x);
  return e.sel(e.isNan(x), x, res);
}

// acosh x = log1p(t + sqrt(2t + t^2)) with t = x - 1 (exact) below 2,
// log(2x - 1/(x + sqrt(x^2 - 1))) below 2^28, log x + ln2 above; NaN below 1.
Value* acoshF64(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  Value* one = e.k(1.0);
  Value* xm = e.sel(e.lt(x, 0x1p28), x, one);
  Value* t = e.sub(xm, one);
  Value* small =
      log1p(e, e.add(t, e.intrinsic(llvm::Intrinsic::sqrt, {e.add(e.add(t, t), e.mul(t, t))})));
  Value* root = e.intrinsic(llvm::Intrinsic::sqrt, {e.sub(e.mul(xm, xm), one)});
  Value* mid = e.call("log", {e.sub(e.add(xm, xm), e.div(one, e.add(xm, root)))});
  Value* big = e.add(e.call("log", {x}), e.k(6.93147180559945286227e-01));
  Value* res = e.sel(e.lt(x, 2.0), small, e.sel(e.lt(x, 0x1p28), mid, big));
  res = e.sel(e.lt(x, 1.0), e.k(NAN), res);
  return e.sel(e.isNan(x), x, res);
}

// atanh|x| = log1p(2|x| + 2x^2 / (1 - |x|)) / 2 below 0.5, log1p(2|x| / (1 - |x|)) / 2 up to 1
// (1 - |x| is exact there); +-inf at +-1, NaN beyond.
Value* atanhF64(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  Value* ax = e.fabs(x);
  Value* one = e.k(1.0);
  Value* d = e.sub(one, ax);
  Value* twice = e.add(ax, ax);
  Value* small = log1p(e, e.add(twice, e.div(e.mul(twice, ax), d)));
  Value* large = log1p(e, e.div(twice, d));
  Value* res = e.mul(e.k(0.5), e.sel(e.lt(ax, 0.5), small, large));
  res = e.sel(e.eq(ax, 1.0), e.k(INFINITY), res);
  res = e.sel(e.gt(ax, 1.0), e.k(NAN), res);
  res = e.copysign(res, x);
  return e.sel(e.isNan(x), x, res);
}

// ---- pow -------------------------------------------------------------------------------------

// log|x| as hi + lo, good to ~2^-60 relative: fdlibm's log with s = f / (2 + f) carried in two
// parts, log(m) = 2s + s*R(s^2). Finite positive x only (pow selects the other cases).
std::pair<Value*, Value*> logTwoPart(Math& e, Value* x) {
  Value* subnormal = e.lt(x, 0x1p-1022);
  Value* xs = e.sel(subnormal, e.mul(x, e.k(0x1p54)), x);
  Value* ix = e.b.CreateAdd(e.bits(xs), e.ki(int64_t{0x3ff00000 - 0x3fe6a09e} << 32));
  Value* k = e.b.CreateSub(e.b.CreateAShr(ix, 52), e.ki(0x3ff));
  k = e.b.CreateSub(k, e.b.CreateSelect(subnormal, e.ki(54), e.ki(0)));
  Value* m = e.fromBits(
      e.b.CreateAdd(e.b.CreateAnd(ix, e.ki(0x000fffffffffffff)), e.ki(int64_t{0x3fe6a09e} << 32)));
  Value* f = e.sub(m, e.k(1.0));
  auto [dh, dl] = e.twoSum(m, e.k(1.0)); // 2 + f exactly
  Value* sh = e.div(f, dh);
  auto [p, pe] = e.twoProd(sh, dh);
  Value* sl = e.div(e.sub(e.sub(e.sub(f, p), pe), e.mul(sh, dl)), dh);
  Value* z = e.mul(sh, sh);
  Value* w = e.mul(z, z);
  Value* t1 = e.mul(
      w, e.poly(w, {3.999999999940941908e-01, 2.222219843214978396e-01, 1.531383769920937332e-01}));
  Value* t2 = e.mul(z, e.poly(w, {6.666666666666735130e-01, 2.857142874366239149e-01,
                                  1.818357216161805012e-01, 1.479819860511658591e-01}));
  Value* dk = e.toDouble(k);
  auto [hi, lo] = e.twoSum(e.mul(dk, e.k(6.93147180369123816490e-01)), e.add(sh, sh));
  lo = e.add(lo, e.add(e.add(e.add(sl, sl), e.mul(sh, e.add(t2, t1))),
                       e.mul(dk, e.k(1.90821492927058770002e-10))));
  return e.twoSum(hi, lo);
}

// C's pow: |x|^y = e^(y log|x|) with log|x| and the product in two parts (so that the
// exponent's rounding does not grow with |y log|x||), then the special cases of C99 F.9.4.4.
Value* powF64(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  Value* y = a[1];
  Value* ax = e.fabs(x);
  Value* ay = e.fabs(y);
  // Finite, nonzero stand-ins keep the two-part arithmetic finite; the selects fix the rest.
  Value* regular = e.b.CreateAnd(e.gt(ax, 0.0), e.lt(ax, INFINITY));
  auto [lh, ll] = logTwoPart(e, e.sel(regular, ax, e.k(2.0)));
  Value* yc = e.sel(e.lt(ay, 0x1p900), y, e.copysign(e.k(0x1p900), y));
  auto [ph, pe] = e.twoProd(yc, lh);
  Value* tail = e.add(pe, e.mul(yc, ll));
  Value* clamped = clampExpArg(e, ph);
  auto [n, q] = expReduce(e, clamped, e.sel(e.b.CreateFCmpOEQ(clamped, ph), tail, e.k(0.0)));
  Value* res = e.scale(e.add(q, e.k(1.0)), e.toInt(n));
  // x = 0 or +-inf: 0 or inf by the signs of log|x| and y.
  Value* logPositive = e.gt(ax, 1.0);
  Value* growing = e.b.CreateICmpEQ(logPositive, e.gt(y, 0.0));
  Value* edge = e.sel(growing, e.k(INFINITY), e.k(0.0));
  res = e.sel(regular, res, edge);
  // y = +-inf: 0 or inf (1 for |x| = 1, below).
  res = e.sel(e.eq(ay, INFINITY), edge, res);
  // Negative x: an odd integer y flips the sign, any other non-integer y gives NaN.
  Value* integer = e.b.CreateFCmpOEQ(e.floor(y), y);
  Value* half = e.mul(y, e.k(0.5));
  Value* odd = e.b.CreateAnd(integer, e.b.CreateFCmpONE(e.floor(half), half));
  Value* negative = e.b.CreateICmpSLT(e.bits(x), e.ki(0));
  res = e.sel(e.b.CreateAnd(negative, odd), e.neg(res), res);
  Value* finiteNegative = e.b.CreateAnd(e.lt(x, 0.0), e.gt(x, -INFINITY));
  res = e.sel(e.b.CreateAnd(finiteNegative, e.b.CreateNot(integer)), e.k(NAN), res);
  res = e.sel(e.b.CreateOr(e.isNan(x), e.isNan(y)), e.add(x, y), res);
  res = e.sel(e.b.CreateAnd(e.eq(ax, 1.0), e.eq(ay, INFINITY)), e.k(1.0), res);
  res = e.sel(e.eq(x, 1.0), e.k(1.0), res);
  return e.sel(e.eq(y, 0.0), e.k(1.0), res);
}

// ---- f32: exp, log, tanh, erf, sigmoid, silu, gelu ------------------------------------------

// The forms for f32 elements, in float lanes (<16 x float> on AVX-512, twice the f64 width).
// Plain multiplies and adds, except exp's reduction and polynomial and the sigmoid's
// combination (`Math::fma`: fused where the target has FMA, x86-64-v3 and up and the GPUs;
// a multiply and an add on x86-64-v2). Fused, SiLU costs 40% less over a plain copy (its
// Horner steps were a third of its instructions); the bounds hold either way. Each bound
// below is the largest distance, in f32 ulp, from libm's f64 value rounded to f32 (or an
// erfc-based f64 value for gelu) that tests/unit/test_cpu_backend.cpp measures and asserts
// on both kinds of target. The tanh, erf
// and erfc-tail coefficients are relative-error minimax fits (iteratively reweighted least
// squares) rounded to f32, the tails' one at a time with the rest refitted; log's are
// FreeBSD's e_logf.c.

// 2^n for an i32 n in [-126, 127].
Value* pow2F32(Math& e, Value* n) {
  return e.fromBits(e.b.CreateShl(e.b.CreateAdd(n, e.ki(127)), 23));
}

// v * 2^n for n in [-252, 254], in two steps so that a subnormal result is rounded once.
Value* scaleF32(Math& e, Value* v, Value* n) {
  Value* n1 = e.b.CreateAShr(n, e.ki(1));
  return e.mul(e.mul(v, pow2F32(e, e.b.CreateSub(n, n1))), pow2F32(e, n1));
}

// h + tail = n*ln2 + r with |r| <= ln2/2 (ln2 in two parts, the first of 15 bits, so n times
// it is exact for |n| < 512, with or without a fused multiply-add); n (i32), r and p with
// e^r = 1 + r p, p by the Taylor series of (e^r - 1) / r to r^6 (truncation below 2^-27).
// `tail` carries the low part of an argument given in two parts.
struct ExpParts {
  Value* n;
  Value* r;
  Value* p;
};
ExpParts expPartsF32(Math& e, Value* h, Value* tail = nullptr) {
  Value* n = e.roundeven(e.mul(tail ? e.add(h, tail) : h, e.k(1.4426950408889634)));
  Value* r = e.fma(e.neg(n), e.k(0x1.62e4p-1), h);
  if (tail) r = e.add(r, tail);
  r = e.fma(e.neg(n), e.k(1.428606765330187e-06), r);
  Value* p = e.polyFused(r, {1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040});
  return {e.toInt(n), r, p};
}

// n and e^r - 1 (expPartsF32).
std::pair<Value*, Value*> expReduceF32(Math& e, Value* h, Value* tail = nullptr) {
  ExpParts x = expPartsF32(e, h, tail);
  return {x.n, e.mul(x.p, x.r)};
}

// e^x for x in [-104, 89] (beyond, e^x rounds to 0 or overflows in f32 alike).
Value* expClampedF32(Math& e, Value* x) {
  Value* c = e.sel(e.gt(x, 89.0), e.k(89.0), e.sel(e.lt(x, -104.0), e.k(-104.0), x));
  auto [n, q] = expReduceF32(e, c);
  return scaleF32(e, e.add(q, e.k(1.0)), n);
}

// Within 1 ulp.
Value* expF32(Math& e, const std::vector<Value*>& a) {
  return e.sel(e.isNan(a[0]), a[0], expClampedF32(e, a[0]));
}

// m * sigmoid(z), z = zh + zl (zl may be null): both branches exponentiate -|z|, and
// m * e^-|z| is scaled by 2^n last, so a subnormal result keeps its bits. m*0 for z < -126:
// every caller has |m| <= max(1, |z|) (sigmoid: 1, silu: z = x, gelu: |2u| > |x|), and
// |z| e^-|z| < 2^-150 there, so the product rounds to 0.
Value* mulSigmoidF32(Math& e, Value* m, Value* zh, Value* zl) {
  Value* pos = e.b.CreateFCmpOGE(zh, e.k(0.0));
  Value* ah = e.neg(e.fabs(zh));
  Value* under = e.lt(ah, -126.0);
  Value* al = zl ? e.sel(under, e.k(0.0), e.sel(pos, e.neg(zl), zl)) : nullptr;
  ExpParts x = expPartsF32(e, e.sel(under, e.k(-126.0), ah), al);
  // e^-|z| = E 2^lo, E = e^r 2^(n - lo) normal (n >= -182, lo = floor(n / 2)).
  Value* lo = e.b.CreateAShr(x.n, e.ki(1));
  Value* big = e.mul(e.fma(x.r, x.p, e.k(1.0)), pow2F32(e, e.b.CreateSub(x.n, lo)));
  Value* scaleLo = pow2F32(e, lo);
  // One division for both signs: m / (1 + e^-|z|), or m E / (1 + e^-|z|) then times 2^lo.
  Value* q = e.div(e.sel(pos, m, e.mul(m, big)), e.fma(big, scaleLo, e.k(1.0)));
  Value* res = e.mul(q, e.sel(pos, e.k(1.0), scaleLo));
  return e.sel(pos, res, e.sel(under, e.mul(m, e.k(0.0)), res));
}

// Within 2 ulp.
Value* sigmoidF32(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  return e.sel(e.isNan(x), x, mulSigmoidF32(e, e.k(1.0), x, nullptr));
}

// x * sigmoid(x), NaN at -inf like the interpreter's -inf * 0 (mulSigmoidF32's m * 0). Within
// 3 ulp.
Value* siluF32(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  return e.sel(e.isNan(x), x, mulSigmoidF32(e, x, x, nullptr));
}

// tanh|x| = |x| + |x|^3 P(x^2) below 0.55, 1 - 2/(e^(2|x|) + 1) above (no cancellation there:
// the result is above 0.5), 1 from |x| = 9.1 on. Within 1 ulp.
Value* tanhF32(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  Value* ax = e.fabs(x);
  Value* s = e.mul(ax, ax);
  Value* p = e.poly(
      s, {-0.333333343, 0.133333236, -0.0539647005, 0.0218184609, -0.00852637552, 0.00252644718});
  Value* small = e.add(ax, e.mul(ax, e.mul(s, p)));
  Value* c = e.sel(e.lt(ax, 9.1), ax, e.k(9.1));
  Value* big = e.sub(e.k(1.0), e.div(e.k(2.0), e.add(expClampedF32(e, e.add(c, c)), e.k(1.0))));
  Value* res = e.copysign(e.sel(e.lt(ax, 0.55), small, big), x);
  return e.sel(e.isNan(x), x, res);
}

// erf(t) = t + t P(t^2) for 0 <= t < 0.9.
Value* erfSmallF32(Math& e, Value* t) {
  Value* p = e.poly(e.mul(t, t), {0.128379166, -0.376126349, 0.112837151, -0.0268605091,
                                  0.00520385895, -0.000817563909, 8.51310251e-05});
  return e.add(t, e.mul(t, p));
}

// x^2 = hi + lo for an f32 x: x cut into two 12-bit halves, so hi and the products in lo are
// exact and lo is rounded once.
std::pair<Value*, Value*> squareF32(Math& e, Value* x) {
  Value* xh = e.fromBits(e.b.CreateAnd(e.bits(x), e.ki(-4096)));
  Value* xl = e.sub(x, xh);
  Value* lo = e.add(e.mul(e.k(2.0), e.mul(xh, xl)), e.mul(xl, xl));
  return {e.mul(xh, xh), lo};
}

// m/(1 + t) * R(1/(1 + t) - c0) * e^(h + l): erfc's tail, with R(t) = erfc(t) e^(t^2) (1 + t)
// (or the same of t/sqrt(2) for gelu) close to a constant, and the exponent -t^2 given exactly
// in two parts, so no rounding of it is amplified by its size. e^r enters as R + R (e^r - 1),
// one rounding fewer than R * e^r.
Value* erfcTailF32(Math& e, Value* t, Value* h, Value* l, Value* m, std::initializer_list<double> c,
                   double c0) {
  Value* onePlus = e.add(e.k(1.0), t);
  Value* r = e.poly(e.sub(e.div(e.k(1.0), onePlus), e.k(c0)), c);
  auto [n, q] = expReduceF32(e, h, l);
  return scaleF32(e, e.mul(e.div(m, onePlus), e.add(r, e.mul(r, q))), n);
}

// erf|x|: the odd polynomial below 0.9, 1 - erfc above (1 from 4.5 on). Within 1 ulp.
Value* erfBodyF32(Math& e, Value* x) {
  Value* ax = e.fabs(x);
  Value* t = e.sel(e.lt(ax, 0.9), e.k(0.9), e.sel(e.lt(ax, 4.5), ax, e.k(4.5)));
  auto [h, l] = squareF32(e, t);
  Value* tail = erfcTailF32(e, t, e.neg(h), e.neg(l), e.k(1.0),
                            {0.775865376, 0.576341689, -0.26851967, -0.407538027, 0.529726028,
                             0.0999889001, -0.818487525, 0.889769375, -1.21649563},
                            0.35);
  Value* res = e.copysign(e.sel(e.lt(ax, 0.9), erfSmallF32(e, ax), e.sub(e.k(1.0), tail)), x);
  return e.sel(e.isNan(x), x, res);
}

Value* erfF32(Math& e, const std::vector<Value*>& a) { return erfBodyF32(e, a[0]); }

// x/2 (1 + erf(x/sqrt(2))): directly for x >= 0; x/2 erfc(|x|/sqrt(2)) for x < 0, which is
// 1 - erf below |x| = 1.25 and erfc's tail (its own fit, in |x| so that x/sqrt(2) is not
// rounded) down to -16, below which it rounds to -0. NaN at -inf like the interpreter.
// Within 4 ulp of x/2 erfc(-x/sqrt(2)) in f64 (the interpreter's 1 + erf(x/sqrt(2)) cancels
// in f64 too and loses its relative accuracy below about -6).
Value* geluF32(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  Value* hx = e.mul(e.k(0.5), x);
  Value* t = e.mul(x, e.k(0.70710678118654752));
  Value* pos = e.mul(hx, e.add(e.k(1.0), erfBodyF32(e, t)));
  Value* ax = e.fabs(x);
  Value* near = e.mul(hx, e.sub(e.k(1.0), erfSmallF32(e, e.fabs(t))));
  Value* c = e.sel(e.lt(ax, 1.25), e.k(1.25), e.sel(e.lt(ax, 16.0), ax, e.k(16.0)));
  auto [h, l] = squareF32(e, c);
  Value* far = erfcTailF32(e, c, e.mul(h, e.k(-0.5)), e.mul(l, e.k(-0.5)), hx,
                           {0.972111583, 0.514809251, -0.920123994, -0.174391866, 2.08878684,
                            -2.49053431, -2.106951, 12.1823292, -10.5291853, -18.9254971},
                           0.25);
  Value* neg = e.sel(e.lt(ax, 1.25), near, e.sel(e.gt(ax, 16.0), e.mul(x, e.k(0.0)), far));
  Value* res = e.sel(e.b.CreateFCmpOGE(x, e.k(0.0)), pos, neg);
  res = e.sel(e.eq(x, -INFINITY), e.k(NAN), res);
  return e.sel(e.isNan(x), x, res);
}

// x/2 (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), without 1 + tanh's
// cancellation for x < 0. 2u is computed in f64 and passed in two f32 parts: a rounded 2u
// would be amplified by |2u| in e^(2u). Within 3 ulp of x sigmoid(2u) in f64.
Value* geluTanhF32(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  llvm::Type* f64 = e.b.getDoubleTy();
  Value* d = e.b.CreateFPExt(x, f64);
  auto kd = [&](double v) { return llvm::ConstantFP::get(f64, v); };
  Value* cube = e.b.CreateFMul(e.b.CreateFMul(e.b.CreateFMul(kd(0.044715), d), d), d);
  Value* z = e.b.CreateFMul(kd(2 * 0.79788456080286536), e.b.CreateFAdd(d, cube));
  Value* zh = e.b.CreateFPTrunc(z, e.d);
  Value* zl = e.b.CreateFPTrunc(e.b.CreateFSub(z, e.b.CreateFPExt(zh, f64)), e.d);
  zl = e.sel(e.eq(e.fabs(zh), INFINITY), e.k(0.0), zl);
  Value* res = e.sel(e.eq(x, -INFINITY), e.k(NAN), mulSigmoidF32(e, x, zh, zl));
  return e.sel(e.isNan(x), x, res);
}

// log x = k ln2 + log m with m in [sqrt(2)/2, sqrt(2)) (subnormals scaled by 2^25 first),
// f = m - 1, s = f/(2 + f): log m = f - f^2/2 + s (f^2/2 + R(s^2)), FreeBSD's e_logf.c with its
// four coefficients. Within 1 ulp.
Value* logF32(Math& e, const std::vector<Value*>& a) {
  Value* x = a[0];
  Value* subnormal = e.lt(x, 0x1p-126);
  Value* xs = e.sel(subnormal, e.mul(x, e.k(0x1p25)), x);
  Value* ix = e.b.CreateAdd(e.bits(xs), e.ki(0x3f800000 - 0x3f3504f3));
  Value* k = e.b.CreateSub(e.b.CreateAShr(ix, 23), e.ki(127));
  k = e.b.CreateSub(k, e.b.CreateSelect(subnormal, e.ki(25), e.ki(0)));
  Value* f = e.sub(e.fromBits(e.b.CreateAdd(e.b.CreateAnd(ix, e.ki(0x007fffff)), e.ki(0x3f3504f3))),
                   e.k(1.0));
  Value* s = e.div(f, e.add(e.k(2.0), f));
  Value* z = e.mul(s, s);
  Value* w = e.mul(z, z);
  Value* t1 = e.mul(w, e.poly(w, {0xccce13p-25, 0xf89e26p-26}));
  Value* t2 = e.mul(z, e.poly(w, {0xaaaaaap-24, 0x91e9eep-25}));
  Value* hfsq = e.mul(e.k(0.5), e.mul(f, f));
  Value* dk = e.toDouble(k);
  Value* lo = e.add(e.mul(s, e.add(hfsq, e.add(t2, t1))), e.mul(dk, e.k(9.0580006145e-06)));
  Value* res = e.sub(e.mul(dk, e.k(6.9313812256e-01)), e.sub(e.sub(hfsq, lo), f));
  res = e.sel(e.eq(x, INFINITY), x, res);
  res = e.sel(e.eq(x, 0.0), e.k(-INFINITY), res);
  res = e.sel(e.lt(x, 0.0), e.k(NAN), res);
  return e.sel(e.isNan(x), x, res);
}

} // namespace

llvm::Function* inlineMathFunction(llvm::Module& m, std::string_view name) {
  static const std::map<std::string_view, std::pair<size_t, Body>> kFunctions = {
      {"exp", {1, expF64}},     {"expm1", {1, expm1F64}}, {"log", {1, logF64}},
      {"tanh", {1, tanhF64}},   {"erf", {1, erfF64}},     {"sin", {1, sinF64}},
      {"cos", {1, cosF64}},     {"tan", {1, tanF64}},     {"atan", {1, atanF64}},
      {"asin", {1, asinF64}},   {"acos", {1, acosF64}},   {"sinh", {1, sinhF64}},
      {"cosh", {1, coshF64}},   {"asinh", {1, asinhF64}}, {"acosh", {1, acoshF64}},
      {"atanh", {1, atanhF64}}, {"pow", {2, powF64}}};
  auto it = kFunctions.find(name);
  if (it == kFunctions.end()) return nullptr;
  std::string symbol = "kiln_" + std::string(name) + "_f64";
  if (llvm::Function* f = m.getFunction(symbol)) return f;
  return define(m, symbol, it->second.first, it->second.second);
}

llvm::Function* inlineMathFunctionF32(llvm::Module& m, std::string_view name) {
  static const std::map<std::string_view, Body> kFunctions = {
      {"exp", expF32},         {"log", logF32},   {"tanh", tanhF32}, {"erf", erfF32},
      {"sigmoid", sigmoidF32}, {"silu", siluF32}, {"gelu", geluF32}, {"gelu_tanh", geluTanhF32}};
  auto it = kFunctions.find(name);
  if (it == kFunctions.end()) return nullptr;
  std::string symbol = "kiln_" + std::string(name) + "_f32";
  if (llvm::Function* f = m.getFunction(symbol)) return f;
  return define(m, symbol, 1, it->second, true);
}

} // namespace kiln::llvmgen
