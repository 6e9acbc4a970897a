// Strategy `matmul-cpu`, dot plan: a matmul with a short side on a cpu target, as dot
// products along K. The blocked plan (matmul_cpu.cpp) is built for many rows and columns:
// a decode step's or a classifier's one row times a `[N, K]` weight (a `Linear`: B under
// `transpose`) packs all of B once per block to feed a 1-row micro-kernel, and a
// convolution over a 1x1 map (a squeeze-excite block: one column) computes 2 x lanes
// copies of its one column.
//
// Matches:  a matmul kernel of matmul-cpu whose short side is static and at most 4:
//           rows with B contiguous along K (transposedB) and either batched or used by one
//           batch entry, or columns with A contiguous along K (its K dim innermost where it
//           is loaded); batch dims are the grid's z.
// Plan:     CpuDotPlan{chunk, unroll, shortLen, pack}: tile [chunk, unroll, short, pack],
//           workgroup [1, 1, 1]; `chunk` long-side elements per workgroup (about 8
//           workgroups, at most 512 elements each), `unroll` of them at a time (unroll x
//           short accumulators), the short side packed (1) or read in place (0).
// Emits:    per workgroup, the short side packed once into a private buffer when `pack`
//           (a prologue computed once per element), then per `unroll` long-side elements
//           one loop over K with unroll x short wide accumulators (f64 / i64, as the
//           reference interpreter; their f64 sums may be reassociated, so LLVM runs the
//           loop in vector lanes: KernelEmitter::isWideAccumulation), then the epilogue
//           on the valid outputs. Every element of the long operand is read once, in
//           order along K.
//
//   %0 = matmul %x, (transpose %w) : tensor<1x1000xf32>    =>  for each 8 columns n..n+7:
//     (x: 1x1024, w: 1000x1024)                                  for k: acc[u] += x[k] * w[n+u, k]
//                                                                 epilogue(acc[u])
#include <algorithm>

#include "passes/lower/kernel_builder.h"
#include "passes/lower/strategy.h"

namespace kiln {

namespace {

constexpr int64_t kDotMaxShort = 4;
// The packed short side stays under this many bytes of private memory.
constexpr int64_t kDotMaxPackBytes = 128 * 1024;

// The kernel's short side: rows (true) or columns (false), and its static length; none
// when the dot plan does not apply.
struct ShortSide {
  bool rows = true;
  int64_t len = 0;
};

std::optional<ShortSide> shortSide(const KernelShape& s) {
  const Op& mm = *s.anchor;
  size_t r = s.outShape.size();
  if (r < 2) return std::nullopt;
  const Dim& m = s.outShape[r - 2];
  const Dim& n = s.outShape[r - 1];
  // Rows: a B shared by several batch entries ([197, 1, 768] x W^T, a sequence-first
  // Linear) would be streamed once per entry; the blocked plan folds those rows into one
  // product instead (foldsBatch).
  if (m.isStatic() && m.value() <= kDotMaxShort && transposedB(mm.operand(1)) && !foldsBatch(s))
    return ShortSide{true, m.value()};
  if (n.isStatic() && n.value() <= kDotMaxShort &&
      innermostWhereLoaded(mm.operand(0), mm.operand(0)->type().rank() - 1) &&
      !(m.isStatic() && m.value() <= n.value()))
    return ShortSide{false, n.value()};
  return std::nullopt;
}

} // namespace

std::vector<Plan> cpuDotPlans(const KernelShape& s, const TargetDesc& t, const SymbolTable& syms) {
  std::optional<ShortSide> side = shortSide(s);
  if (!side || side->len < 1) return {};
  size_t r = s.outShape.size();
  const Op& mm = *s.anchor;
  const Type& at = mm.operand(0)->type();
  int64_t kub = upperBound(at.dim(at.rank() - 1), syms);
  ElemType ae = matmulAccElem(mm.result(0)->type().elem(), t);
  bool fits = kub * side->len * std::max<int64_t>(4, elemTypeBytes(ae)) <= kDotMaxPackBytes;
  // Packing pays when the short side costs more than a load (a prologue) or is strided.
  bool pack = computedOperand(mm.operand(side->rows ? 0 : 1)) || !side->rows;
  if (pack && !fits) {
    if (computedOperand(mm.operand(side->rows ? 0 : 1))) return {};
    pack = false;
  }
  int64_t unroll = side->len <= 2 ? 8 : 4;
  int64_t longLen =
      std::min<int64_t>(upperBound(s.outShape[side->rows ? r - 1 : r - 2], syms), int64_t(1) << 30);
  int64_t chunk = (longLen + 7) / 8;
  chunk = std::clamp<int64_t>((chunk + unroll - 1) / unroll * unroll, unroll, 512);
  return {CpuDotPlan{chunk, unroll, side->len, pack ? 1 : 0}};
}

std::optional<std::string> strategyProblem(const KernelShape& s, const CpuDotPlan& p,
                                           const TargetDesc& t, bool) {
  std::string tile = listStr({p.chunk, p.unroll, p.shortLen, p.pack});
  if (!t.cpu) return "tile " + tile + " is a cpu plan";
  if (p.chunk < 1 || p.unroll < 1 || p.shortLen < 1)
    return "tile " + tile + " has an entry below 1";
  if (p.pack != 0 && p.pack != 1) return "tile " + tile + ": pack is 0 or 1";
  if (p.chunk % p.unroll != 0) return "tile " + tile + ": the chunk must be a multiple of unroll";
  if (p.unroll * p.shortLen > 32)
    return "tile " + tile + " has " + std::to_string(p.unroll * p.shortLen) +
           " accumulators (at most 32)";
  std::optional<ShortSide> side = shortSide(s);
  if (!side || side->len != p.shortLen)
    return "tile " + tile + " needs a matmul with " + std::to_string(p.shortLen) +
           " rows and B contiguous along K, or " + std::to_string(p.shortLen) +
           " columns and A contiguous along K";
  return std::nullopt;
}

// One thread per workgroup: `chunk` elements of the long side (grid x) of one batch entry
// (grid z), each against every element of the short side.
Status emitStrategy(KernelBuilder& kb, const CpuDotPlan& plan) {
  const Op& mm = *kb.shape().anchor;
  const Shape& s = kb.shape().outShape;
  size_t r = s.size();
  std::optional<ShortSide> side = shortSide(kb.shape());
  if (!side)
    return error(mm.loc(), "internal: the dot plan was given a matmul without a short side");
  const Type& at = mm.operand(0)->type();
  const Dim& kDim = at.dim(at.rank() - 1);
  int64_t S = plan.shortLen, U = plan.unroll, C = plan.chunk;
  Value* K = kb.dim(kDim);
  Value* longLen = kb.dim(s[side->rows ? r - 1 : r - 2]);
  Shape batchShape(s.begin(), s.end() - 2);
  kb.setGrid(0, kb.idx(OpKind::ICeilDiv, longLen, kb.cst(C), kb.prologue()));
  kb.setGrid(2, kb.product(batchShape, 0, batchShape.size()));
  Value* bx = kb.mk(kb.body(), OpKind::WorkgroupId, {}, Type::index(), kb.axisAttr(0));
  Value* bz = kb.mk(kb.body(), OpKind::WorkgroupId, {}, Type::index(), kb.axisAttr(2));
  std::vector<Value*> batch = kb.delinearize(bz, batchShape);
  ElemType re = mm.result(0)->type().elem();
  // The reference's wide accumulator (f64, i64): its f64 sums may be reassociated
  // (KernelEmitter::isWideAccumulation), so LLVM runs the loop over K in vector lanes.
  ElemType wide = accElem(re);
  ElemType pe = matmulAccElem(re, kb.target());
  auto priv = [&](ElemType e, std::vector<Dim> dims) {
    return kb.mk(kb.body(), OpKind::Alloc, {}, Type::buffer(e, Shape(dims), MemSpace::Private));
  };
  // The output index of short element `sh` and long element `lg`.
  auto outIndex = [&](Value* sh, Value* lg) {
    std::vector<Value*> ix = batch;
    ix.push_back(side->rows ? sh : lg);
    ix.push_back(side->rows ? lg : sh);
    return ix;
  };
  // An operand's element at output index `ix` and contraction index k.
  auto operandAt = [&](bool shortOne, Value* sh, Value* lg, Value* k,
                       ElemType e) -> Result<Value*> {
    auto ix = kb.matmulIndices(mm, outIndex(sh, lg), k);
    bool a = shortOne == side->rows; // the short side is A when it is the rows
    KILN_TRY(Value * v, kb.emitAt(mm.operand(a ? 0 : 1), a ? ix.first : ix.second));
    return kb.castTo(v, e);
  };

  Value* l0 = kb.idx(OpKind::IMul, bx, kb.cst(C));
  Value* lEnd = kb.idx(OpKind::IMin, kb.idx(OpKind::IAdd, l0, kb.cst(C)), longLen);
  Value* lastLong = kb.idx(OpKind::ISub, longLen, kb.cst(1));

  // The short side packed along K, computed once per workgroup (a prologue such as a
  // hardswish costs its ops once per element, not once per long element).
  Value* xs = nullptr;
  if (plan.pack) {
    int64_t kub = std::max<int64_t>(1, upperBound(kDim, kb.symbols()));
    if (kub * S * std::max<int64_t>(4, elemTypeBytes(pe)) > kDotMaxPackBytes)
      return error(mm.loc(), "the dot plan's packed short side (" + std::to_string(S) + " x " +
                                 std::to_string(kub) + " elements) exceeds " +
                                 std::to_string(kDotMaxPackBytes) + " bytes");
    xs = priv(pe, {Dim(S), Dim(kub)});
    for (int64_t sh = 0; sh < S; ++sh) {
      Value* k = kb.beginFor(kb.cst(0), K, kb.cst(1));
      KILN_TRY(Value * v, operandAt(true, kb.cst(sh), kb.cst(0), k, pe));
      kb.st(v, xs, {kb.cst(sh), k});
      kb.endFor();
    }
  }

  Value* sums = priv(wide, {Dim(S), Dim(U)});
  Value* jb = kb.beginFor(l0, lEnd, kb.cst(U));
  // The U long elements of this step; past the end, the last one again (never stored).
  std::vector<Value*> lg;
  for (int64_t u = 0; u < U; ++u)
    lg.push_back(kb.idx(OpKind::IMin, kb.idx(OpKind::IAdd, jb, kb.cst(u)), lastLong));
  std::vector<Value*> acc;
  for (int64_t i = 0; i < S * U; ++i) acc.push_back(kb.accumulator(wide, 0));
  Value* k = kb.beginFor(kb.cst(0), K, kb.cst(1));
  std::vector<Value*> x;
  for (int64_t sh = 0; sh < S; ++sh) {
    Value* v = nullptr;
    if (xs) {
      v = kb.castTo(kb.ld(xs, {kb.cst(sh), k}), wide);
    } else {
      KILN_TRY(v, operandAt(true, kb.cst(sh), kb.cst(0), k, wide));
    }
    x.push_back(v);
  }
  for (int64_t u = 0; u < U; ++u) {
    KILN_TRY(Value * y, operandAt(false, kb.cst(0), lg[static_cast<size_t>(u)], k, wide));
    for (int64_t sh = 0; sh < S; ++sh) {
      Value* a = acc[static_cast<size_t>(sh * U + u)];
      Value* p = kb.compute(OpKind::Mul, {x[static_cast<size_t>(sh)], y}, wide);
      kb.accStore(a, kb.compute(OpKind::Add, {kb.accLoad(a), p}, wide));
    }
  }
  kb.endFor();
  for (int64_t sh = 0; sh < S; ++sh)
    for (int64_t u = 0; u < U; ++u)
      kb.st(kb.accLoad(acc[static_cast<size_t>(sh * U + u)]), sums, {kb.cst(sh), kb.cst(u)});
  // The epilogue on this step's valid long elements.
  Value* valid = kb.idx(OpKind::IMin, kb.cst(U), kb.idx(OpKind::ISub, lEnd, jb));
  Value* u = kb.beginFor(kb.cst(0), valid, kb.cst(1));
  Value* lgU = kb.idx(OpKind::IAdd, jb, u);
  for (int64_t sh = 0; sh < S; ++sh) {
    kb.substitute(mm.result(0), kb.castTo(kb.ld(sums, {kb.cst(sh), u}), re));
    KILN_CHECK(kb.storeOutputs(outIndex(kb.cst(sh), lgU)));
  }
  kb.endFor();
  kb.endFor();
  return ok();
}

} // namespace kiln
