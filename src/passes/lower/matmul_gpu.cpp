// Strategy `matmul-gpu`: a matmul anchor with a pointwise epilogue, in workgroup tiles of
// its output, with the operand tiles staged in shared memory (barriers between the load
// and compute phases).
//
// Matches:  a matmul kernel (codegen.h: Strategy::Matmul) on a gpu target.
// Plan:     GpuMatmulPlan{tm, tn, tk, wx, wy}: tile [TM, TN, TK], workgroup [wx, wy, 1];
//           each thread computes (TM/wy) x (TN/wx) outputs. The search space starts at
//           128 x 128 x 32 (never beyond the extents' upper bounds) with 16 x 16 threads
//           and shrinks step by step: TK first, then the larger of TM and TN, then threads.
// Emits:    for each K step: A and B tiles staged by all threads (zero-filled and masked
//           past the ends unless provably exact), A transposed (K-major) so that both are
//           read along M or N; each thread stages a fixed number of elements, 4 adjacent
//           ones along K (A) or N (B) at a time where the tile allows, A's rows fastest
//           across threads so that its transposed stores meet no bank twice. A barrier;
//           then for each k of the tile the thread's TM/wy A and TN/wx B values into private
//           registers and their outer product into its private accumulators; a barrier.
//           Then the epilogue per accumulator. A thread's rows (columns) come in groups of
//           4 adjacent ones when its share is a multiple of 4, so that the backends read
//           each group from shared memory as one vector (LLVM's load-store vectorizer), and
//           strided by the workgroup otherwise.
//
//   %0 = matmul %a, %b : tensor<{m}x256xf32>   =>   alloc shared 16x64 (A^T), 16x64 (B)
//   %1 = relu %0                                     for k0: stage; barrier;
//                                                      for k: a[i] = A^T[k][row i]
//                                                             b[j] = B[k][col j]
//                                                             acc[i][j] += a[i] * b[j]
//                                                      barrier
//                                                    relu(acc) -> masked_store
#include <algorithm>

#include "passes/lower/kernel_builder.h"
#include "passes/lower/strategy.h"

namespace kiln {

namespace {

// At most this many rows take the few-rows plans.
constexpr int64_t kGemvMaxRows = 4;
// Adjacent rows (columns) a thread owns when its share allows: one vector load each.
constexpr int64_t kGroup = 4;

int64_t pow2AtLeast(int64_t x) {
  int64_t p = 1;
  while (p < x && p < (int64_t(1) << 30)) p *= 2;
  return p;
}

// The next plan of the search space: TK first, then the larger of TM and TN, then threads
// (nullopt when nothing is left to shrink).
std::optional<GpuMatmulPlan> shrink(GpuMatmulPlan p) {
  if (p.tk > 4 && p.tk >= std::max(p.tm, p.tn) / 8) {
    p.tk /= 2;
  } else if (std::max(p.tm, p.tn) > std::max(p.wx, p.wy)) {
    if (p.tm >= p.tn) {
      if (p.tm / 2 >= p.wy)
        p.tm /= 2;
      else
        p.tn /= 2;
    } else {
      if (p.tn / 2 >= p.wx)
        p.tn /= 2;
      else
        p.tm /= 2;
    }
  } else if (p.wx * p.wy > 1) {
    if (p.wx >= p.wy)
      p.wx /= 2;
    else
      p.wy /= 2;
  } else if (p.tk > 1) {
    p.tk /= 2;
  } else if (p.tm > 1 || p.tn > 1) {
    p.tm = std::max<int64_t>(1, p.tm / 2);
    p.tn = std::max<int64_t>(1, p.tn / 2);
  } else {
    return std::nullopt;
  }
  return p;
}

} // namespace

bool matchGpuMatmul(const KernelRef& k, const TargetDesc& t) {
  return k.shape.strategy == Strategy::Matmul && !t.cpu;
}

std::vector<Plan> gpuMatmulPlans(const KernelShape& s, const TargetDesc& t,
                                 const SymbolTable& syms) {
  size_t r = s.outShape.size();
  int64_t wx = 16, wy = 16;
  while (wx * wy > t.maxWorkgroupInvocations) (wy > 1 ? wy : wx) /= 2;
  // Start big (128 x 128 x 32) but never beyond the extents' upper bounds.
  int64_t tm =
      std::max(wy, std::min<int64_t>(128, pow2AtLeast(upperBound(s.outShape[r - 2], syms))));
  int64_t tn =
      std::max(wx, std::min<int64_t>(128, pow2AtLeast(upperBound(s.outShape[r - 1], syms))));
  const Type& a = s.anchor->operand(0)->type();
  int64_t tk = std::min<int64_t>(32, pow2AtLeast(upperBound(a.dim(a.rank() - 1), syms)));
  // A few rows (a decode step's projections): tiles of TM rows would leave most threads idle
  // and give too few workgroups; the few-rows plans come first.
  int64_t rows = upperBound(s.outShape[r - 2], syms);
  std::vector<Plan> plans = rows <= kGemvMaxRows ? gpuGemvPlans(rows, t) : std::vector<Plan>{};
  for (std::optional<GpuMatmulPlan> p = GpuMatmulPlan{tm, tn, tk, wx, wy}; p; p = shrink(*p))
    plans.push_back(*p);
  return plans;
}

std::vector<SharedBuffer> gpuMatmulSharedBuffers(const KernelShape& s, const GpuMatmulPlan& p) {
  return {{s.aElem, {p.tk, p.tm}}, {s.bElem, {p.tk, p.tn}}};
}

std::optional<std::string> strategyProblem(const KernelShape& s, const GpuMatmulPlan& p,
                                           const TargetDesc& t, bool checkSharedMemory) {
  std::string tile = listStr({p.tm, p.tn, p.tk});
  if (p.tm < 1 || p.tn < 1 || p.tk < 1) return "tile " + tile + " has an entry below 1";
  if (p.tm % p.wy != 0 || p.tn % p.wx != 0)
    return "tile " + tile + " is not a multiple of workgroup " + listStr({p.wx, p.wy, 1}) +
           " (TM by y, TN by x)";
  int64_t perThread = (p.tm / p.wy) * (p.tn / p.wx);
  if (perThread > 256)
    return "tile " + tile + " gives each thread " + std::to_string(perThread) +
           " accumulators (at most 256)";
  if (checkSharedMemory) return sharedMemoryProblem(tile, gpuMatmulSharedBuffers(s, p), t);
  return std::nullopt;
}

Status emitStrategy(KernelBuilder& kb, const GpuMatmulPlan& plan) {
  const Op& mm = *kb.shape().anchor;
  const Shape& s = kb.shape().outShape;
  size_t r = s.size();
  const Type& at = mm.operand(0)->type();
  int64_t TM = plan.tm, TN = plan.tn, TK = plan.tk;
  int64_t WX = plan.wx, WY = plan.wy;
  int64_t RM = TM / WY, RN = TN / WX;
  const Dim& dM = s[r - 2];
  const Dim& dN = s[r - 1];
  const Dim& dK = at.dim(at.rank() - 1);
  Value* M = kb.dim(dM);
  Value* N = kb.dim(dN);
  Value* K = kb.dim(dK);
  Shape batchShape(s.begin(), s.end() - 2);
  kb.setGrid(0, kb.idx(OpKind::ICeilDiv, N, kb.cst(TN), kb.prologue()));
  kb.setGrid(1, kb.idx(OpKind::ICeilDiv, M, kb.cst(TM), kb.prologue()));
  kb.setGrid(2, kb.product(batchShape, 0, batchShape.size()));
  const SymbolTable& syms = kb.symbols();
  bool gM = kb.guarded() || !provablyDivisible(dM.expr(), TM, syms);
  bool gN = kb.guarded() || !provablyDivisible(dN.expr(), TN, syms);
  bool gK = kb.guarded() || !provablyDivisible(dK.expr(), TK, syms);

  Value* bx = kb.mk(kb.body(), OpKind::WorkgroupId, {}, Type::index(), kb.axisAttr(0));
  Value* by = kb.mk(kb.body(), OpKind::WorkgroupId, {}, Type::index(), kb.axisAttr(1));
  Value* bz = kb.mk(kb.body(), OpKind::WorkgroupId, {}, Type::index(), kb.axisAttr(2));
  Value* tx = kb.mk(kb.body(), OpKind::LocalId, {}, Type::index(), kb.axisAttr(0));
  Value* ty = kb.mk(kb.body(), OpKind::LocalId, {}, Type::index(), kb.axisAttr(1));
  Value* tid = kb.idx(OpKind::IAdd, kb.idx(OpKind::IMul, ty, kb.cst(WX)), tx);
  std::vector<Value*> batch =
      batchShape.empty() ? std::vector<Value*>{} : kb.delinearize(bz, batchShape);
  Value* m0 = kb.idx(OpKind::IMul, by, kb.cst(TM));
  Value* n0 = kb.idx(OpKind::IMul, bx, kb.cst(TN));
  std::vector<SharedBuffer> sb = gpuMatmulSharedBuffers(kb.shape(), plan);
  Value* As = kb.mk(kb.body(), OpKind::Alloc, {},
                    Type::buffer(sb[0].elem, {Dim(TK), Dim(TM)}, MemSpace::Shared));
  Value* Bs = kb.mk(kb.body(), OpKind::Alloc, {},
                    Type::buffer(sb[1].elem, {Dim(TK), Dim(TN)}, MemSpace::Shared));
  ElemType ae = matmulAccElem(mm.result(0)->type().elem(), kb.target());
  Value* acc =
      kb.mk(kb.body(), OpKind::Alloc, {}, Type::buffer(ae, {Dim(RM), Dim(RN)}, MemSpace::Private));
  Value* aReg =
      kb.mk(kb.body(), OpKind::Alloc, {}, Type::buffer(sb[0].elem, {Dim(RM)}, MemSpace::Private));
  Value* bReg =
      kb.mk(kb.body(), OpKind::Alloc, {}, Type::buffer(sb[1].elem, {Dim(RN)}, MemSpace::Private));
  int64_t T = WX * WY;
  // The tile row (column) of a thread's i-th accumulator row (column): groups of kGroup
  // adjacent ones when its share is a multiple of kGroup, else strided by the workgroup.
  auto spread = [&](Value* t, Value* i, int64_t share, int64_t threads) {
    if (share % kGroup != 0)
      return kb.idx(OpKind::IAdd, t, kb.idx(OpKind::IMul, i, kb.cst(threads)));
    Value* group = kb.idx(OpKind::IMul, kb.idx(OpKind::IFloorDiv, i, kb.cst(kGroup)),
                          kb.cst(threads * kGroup));
    Value* lane = kb.idx(OpKind::IAdd, kb.idx(OpKind::IMul, t, kb.cst(kGroup)),
                         kb.idx(OpKind::IMod, i, kb.cst(kGroup)));
    return kb.idx(OpKind::IAdd, group, lane);
  };

  Value* k0 = kb.beginFor(kb.cst(0), K, kb.cst(TK));
  // Stage one operand tile: rows x cols elements of `operand` (A: m x k, stored k-major;
  // B: k x n), read along the operand's rows.
  auto stage = [&](bool isA, Value* tileBuf, int64_t rows, int64_t cols) -> Status {
    // Element (rr, cc) of the tile. When the threads divide the tile, each takes a fixed
    // number of elements (constant trip counts: the backends unroll them and issue the loads
    // together), kGroup adjacent ones along K (A) or N (B) at a time where the tile allows
    // (one vector load each); else every T-th element. A's consecutive threads take
    // consecutive rows, so that its transposed stores meet no bank twice; B's take
    // consecutive columns.
    int64_t n = rows * cols;
    int64_t grouped = cols / kGroup; // B's groups along a row
    Value *rr, *cc;
    int64_t loops = 1;
    if (n % (T * kGroup) == 0 && cols % kGroup == 0) {
      Value* l = kb.beginFor(kb.cst(0), kb.cst(n / (T * kGroup)), kb.cst(1));
      Value* c = kb.beginFor(kb.cst(0), kb.cst(kGroup), kb.cst(1));
      loops = 2;
      Value* v = kb.idx(OpKind::IAdd, tid, kb.idx(OpKind::IMul, l, kb.cst(T)));
      Value* fast = kb.idx(OpKind::IMod, v, kb.cst(isA ? rows : grouped));
      Value* slow = kb.idx(OpKind::IFloorDiv, v, kb.cst(isA ? rows : grouped));
      rr = isA ? fast : slow;
      Value* g = isA ? slow : fast;
      cc = kb.idx(OpKind::IAdd, kb.idx(OpKind::IMul, g, kb.cst(kGroup)), c);
    } else {
      Value* e = n % T == 0
                     ? kb.idx(OpKind::IAdd, tid,
                              kb.idx(OpKind::IMul, kb.beginFor(kb.cst(0), kb.cst(n / T), kb.cst(1)),
                                     kb.cst(T)))
                     : kb.beginFor(tid, kb.cst(n), kb.cst(T));
      rr = isA ? kb.idx(OpKind::IMod, e, kb.cst(rows)) : kb.idx(OpKind::IFloorDiv, e, kb.cst(cols));
      cc = isA ? kb.idx(OpKind::IFloorDiv, e, kb.cst(rows)) : kb.idx(OpKind::IMod, e, kb.cst(cols));
    }
    Value* mask = nullptr;
    std::vector<Value*> oix = batch;
    Value* kk;
    if (isA) {
      Value* gm = kb.idx(OpKind::IAdd, m0, rr);
      kk = kb.idx(OpKind::IAdd, k0, cc);
      if (gM) mask = kb.andMask(mask, kb.cmp("lt", gm, M));
      oix.push_back(gm);
      oix.push_back(n0); // placeholder for N, unused by A
    } else {
      Value* gn = kb.idx(OpKind::IAdd, n0, cc);
      kk = kb.idx(OpKind::IAdd, k0, rr);
      if (gN) mask = kb.andMask(mask, kb.cmp("lt", gn, N));
      oix.push_back(m0);
      oix.push_back(gn);
    }
    if (gK) mask = kb.andMask(mask, kb.cmp("lt", kk, K));
    auto [ai, bi] = kb.matmulIndices(mm, oix, kk);
    kb.setMask(mask);
    const Value* operand = mm.operand(isA ? 0 : 1);
    KILN_TRY(Value * v, kb.emitAt(operand, isA ? ai : bi));
    kb.setMask(nullptr);
    ElemType oe = operand->type().elem();
    if (mask) v = kb.mk(kb.body(), OpKind::SSelect, {mask, v, kb.scst(oe, 0)}, Type::scalar(oe));
    if (isA)
      kb.body().createUnchecked(OpKind::Store, {v, tileBuf, cc, rr}, {}, {});
    else
      kb.body().createUnchecked(OpKind::Store, {v, tileBuf, rr, cc}, {}, {});
    for (int64_t l = 0; l < loops; ++l) kb.endFor();
    return ok();
  };
  KILN_CHECK(stage(true, As, TM, TK));
  KILN_CHECK(stage(false, Bs, TK, TN));
  kb.body().createUnchecked(OpKind::Barrier, {}, {}, {});
  // For each k of the tile: the thread's A and B values, then their outer product.
  // A thread's grouped rows (columns) are read as vector_loads of kGroup lanes (vec4
  // accesses on every backend), the others one element at a time.
  Value* kk = kb.beginFor(kb.cst(0), kb.cst(TK), kb.cst(1));
  auto fill = [&](Value* tile, Value* regs, Value* t, int64_t share, int64_t threads, ElemType e) {
    if (share % kGroup == 0) {
      Value* g = kb.beginFor(kb.cst(0), kb.cst(share / kGroup), kb.cst(1));
      Value* at = kb.idx(OpKind::IAdd, kb.idx(OpKind::IMul, g, kb.cst(threads * kGroup)),
                         kb.idx(OpKind::IMul, t, kb.cst(kGroup)));
      Value* v = kb.mk(kb.body(), OpKind::VectorLoad, {tile, kk, at}, Type::vector(e, kGroup));
      kb.body().createUnchecked(OpKind::VectorStore,
                                {v, regs, kb.idx(OpKind::IMul, g, kb.cst(kGroup))}, {}, {});
    } else {
      Value* i = kb.beginFor(kb.cst(0), kb.cst(share), kb.cst(1));
      Value* v =
          kb.mk(kb.body(), OpKind::Load, {tile, kk, spread(t, i, share, threads)}, Type::scalar(e));
      kb.body().createUnchecked(OpKind::Store, {v, regs, i}, {}, {});
    }
    kb.endFor();
  };
  fill(As, aReg, ty, RM, WY, sb[0].elem);
  fill(Bs, bReg, tx, RN, WX, sb[1].elem);
  Value* i = kb.beginFor(kb.cst(0), kb.cst(RM), kb.cst(1));
  Value* j = kb.beginFor(kb.cst(0), kb.cst(RN), kb.cst(1));
  Value* a = kb.mk(kb.body(), OpKind::Load, {aReg, i}, Type::scalar(sb[0].elem));
  Value* b = kb.mk(kb.body(), OpKind::Load, {bReg, j}, Type::scalar(sb[1].elem));
  Value* p = kb.compute(OpKind::Mul, {kb.castTo(a, ae), kb.castTo(b, ae)}, ae);
  Value* old = kb.mk(kb.body(), OpKind::Load, {acc, i, j}, Type::scalar(ae));
  kb.body().createUnchecked(OpKind::Store, {kb.compute(OpKind::Add, {old, p}, ae), acc, i, j}, {},
                            {});
  kb.endFor();
  kb.endFor();
  kb.endFor();
  kb.body().createUnchecked(OpKind::Barrier, {}, {}, {});
  kb.endFor();

  // Epilogue: each thread's outputs, with the matmul's value taken from the accumulator.
  i = kb.beginFor(kb.cst(0), kb.cst(RM), kb.cst(1));
  j = kb.beginFor(kb.cst(0), kb.cst(RN), kb.cst(1));
  Value* gm = kb.idx(OpKind::IAdd, m0, spread(ty, i, RM, WY));
  Value* gn = kb.idx(OpKind::IAdd, n0, spread(tx, j, RN, WX));
  Value* mask = nullptr;
  if (gM) mask = kb.andMask(mask, kb.cmp("lt", gm, M));
  if (gN) mask = kb.andMask(mask, kb.cmp("lt", gn, N));
  kb.setMask(mask);
  Value* accv = kb.mk(kb.body(), OpKind::Load, {acc, i, j}, Type::scalar(ae));
  kb.substitute(mm.result(0), kb.castTo(accv, mm.result(0)->type().elem()));
  std::vector<Value*> ix = batch;
  ix.push_back(gm);
  ix.push_back(gn);
  KILN_CHECK(kb.storeOutputs(ix));
  kb.endFor();
  kb.endFor();
  return ok();
}
} // namespace kiln
