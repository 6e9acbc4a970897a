// Strategy `matmul-gpu`, few-rows plan: a matmul whose rows are at most 4 (a decode step's
// projections, M = 1), where the tiled plan's 16-row tiles left 15 of 16 threads idle and
// a 2048-column output made 16 workgroups for the whole GPU.
//
// Plan:     GpuGemvPlan{rows, cols, slices}: tile [rows, slices], workgroup [cols, slices, 1].
//           `rows` is the row count's upper bound; 32 columns (a 128-byte row of B per
//           warp), 8 slices.
// Emits:    workgroup x takes columns x * cols .. + cols, z the batch; thread (c, s)
//           accumulates, for every row, A[m, k] * B[k, n] over k = s, s + slices, ... in
//           private memory (B's element is loaded once for all rows); the partial sums go
//           to shared memory, barrier, and thread (c, s) adds up row s's slices and stores
//           it through the epilogue. Columns past N and rows past M are clamped for the
//           loads and masked for the stores.
//
//   %0 = matmul %x, %w : tensor<1x2048xf32>   =>   for k = s, K, 8: acc[m] += x[m, k] * w[k, n]
//   %1 = silu %0                                    store acc -> part[s, m, c]; barrier
//                                                   for m = s, 1, 8: silu(sum part[.., m, c])
#include <algorithm>

#include "passes/lower/kernel_builder.h"
#include "passes/lower/strategy.h"

namespace kiln {

std::vector<Plan> gpuGemvPlans(int64_t rows, const TargetDesc& t) {
  std::vector<Plan> plans;
  int64_t cols = std::min<int64_t>(32, t.maxWorkgroupSize[0]);
  for (int64_t slices = 8; slices >= 1; slices /= 2)
    if (cols * slices <= t.maxWorkgroupInvocations && slices <= t.maxWorkgroupSize[1])
      plans.push_back(GpuGemvPlan{rows, cols, slices});
  return plans;
}

std::vector<SharedBuffer> gpuGemvSharedBuffers(const KernelShape& s, const GpuGemvPlan& p) {
  // The gpu accumulator (matmulAccElem without wide accumulation): f32 for f32, f16, bf16.
  ElemType e = s.anchor ? s.anchor->result(0)->type().elem() : ElemType::F32;
  ElemType acc = isFloat(e) && e != ElemType::F64 ? ElemType::F32 : accElem(e);
  return {{acc, {p.slices, p.rows, p.cols}}};
}

std::optional<std::string> strategyProblem(const KernelShape& s, const GpuGemvPlan& p,
                                           const TargetDesc& t, bool checkSharedMemory) {
  std::string tile = listStr({p.rows, p.slices});
  if (t.cpu)
    return "tile " + tile + " is a gpu matmul's with few rows; " + t.name + " is a cpu target";
  if (p.rows < 1 || p.rows > 64 || p.cols < 1 || p.slices < 1)
    return "tile " + tile +
           ": a matmul with few rows takes 1 to 64 rows, and at least one "
           "column and slice";
  if (checkSharedMemory) return sharedMemoryProblem(tile, gpuGemvSharedBuffers(s, p), t);
  return std::nullopt;
}

Status emitStrategy(KernelBuilder& kb, const GpuGemvPlan& p) {
  const Op& mm = *kb.shape().anchor;
  const Shape& s = kb.shape().outShape;
  size_t r = s.size();
  const Type& at = mm.operand(0)->type();
  Value* M = kb.dim(s[r - 2]);
  Value* N = kb.dim(s[r - 1]);
  Value* K = kb.dim(at.dim(at.rank() - 1));
  // The plan holds `rows` rows; a manual tile with fewer would leave the others unwritten.
  if (int64_t most = upperBound(s[r - 2], kb.symbols()); most > p.rows)
    return error(kb.source().loc(), "kernel @" + kb.source().name() + ": tile " +
                                        listStr({p.rows, p.slices}) + " holds " +
                                        std::to_string(p.rows) + " rows; the matmul has up to " +
                                        std::to_string(most));
  Shape batchShape(s.begin(), s.end() - 2);
  kb.setGrid(0, kb.idx(OpKind::ICeilDiv, N, kb.cst(p.cols), kb.prologue()));
  kb.setGrid(2, kb.product(batchShape, 0, batchShape.size()));
  ElemType ae = matmulAccElem(mm.result(0)->type().elem(), kb.target());
  std::vector<SharedBuffer> sb = gpuGemvSharedBuffers(kb.shape(), p);

  Value* bx = kb.mk(kb.body(), OpKind::WorkgroupId, {}, Type::index(), kb.axisAttr(0));
  Value* bz = kb.mk(kb.body(), OpKind::WorkgroupId, {}, Type::index(), kb.axisAttr(2));
  Value* tx = kb.mk(kb.body(), OpKind::LocalId, {}, Type::index(), kb.axisAttr(0));
  Value* ty = kb.mk(kb.body(), OpKind::LocalId, {}, Type::index(), kb.axisAttr(1));
  std::vector<Value*> batch =
      batchShape.empty() ? std::vector<Value*>{} : kb.delinearize(bz, batchShape);
  Value* n = kb.idx(OpKind::IAdd, kb.idx(OpKind::IMul, bx, kb.cst(p.cols)), tx);
  Value* nc = kb.idx(OpKind::IMin, n, kb.idx(OpKind::ISub, N, kb.cst(1), kb.prologue()));
  Value* lastRow = kb.idx(OpKind::ISub, M, kb.cst(1), kb.prologue());
  auto at2 = [&](Value* m) {
    std::vector<Value*> ix = batch;
    ix.push_back(m);
    ix.push_back(nc);
    return ix;
  };
  Value* acc =
      kb.mk(kb.body(), OpKind::Alloc, {}, Type::buffer(ae, {Dim(p.rows)}, MemSpace::Private));
  Value* part =
      kb.mk(kb.body(), OpKind::Alloc, {},
            Type::buffer(sb[0].elem, {Dim(p.slices), Dim(p.rows), Dim(p.cols)}, MemSpace::Shared));

  // This thread's slice of k, for every row; B's element once for all rows.
  Value* k = kb.beginFor(ty, K, kb.cst(p.slices));
  {
    auto [ai0, bi] = kb.matmulIndices(mm, at2(kb.cst(0)), k);
    (void)ai0;
    KILN_TRY(Value * bv, kb.emitAt(mm.operand(1), bi));
    Value* b = kb.castTo(bv, ae);
    Value* m = kb.beginFor(kb.cst(0), kb.cst(p.rows), kb.cst(1));
    auto [ai, bi2] = kb.matmulIndices(mm, at2(kb.idx(OpKind::IMin, m, lastRow)), k);
    (void)bi2;
    KILN_TRY(Value * av, kb.emitAt(mm.operand(0), ai));
    Value* prod = kb.compute(OpKind::Mul, {kb.castTo(av, ae), b}, ae);
    kb.st(kb.compute(OpKind::Add, {kb.ld(acc, {m}), prod}, ae), acc, {m});
    kb.endFor();
  }
  kb.endFor();
  Value* m = kb.beginFor(kb.cst(0), kb.cst(p.rows), kb.cst(1));
  kb.st(kb.castTo(kb.ld(acc, {m}), sb[0].elem), part, {ty, m, tx});
  kb.endFor();
  kb.body().createUnchecked(OpKind::Barrier, {}, {}, {});

  // Thread (c, s) finishes row s (and s + slices, ...) of column c.
  m = kb.beginFor(ty, kb.cst(p.rows), kb.cst(p.slices));
  Value* j = kb.beginFor(kb.cst(0), kb.cst(p.slices), kb.cst(1), {kb.scst(ae, 0)});
  Value* sum = kb.endFor(
      {kb.compute(OpKind::Add, {kb.carried()[0], kb.castTo(kb.ld(part, {j, m, tx}), ae)}, ae)})[0];
  kb.setMask(kb.andMask(kb.cmp("lt", n, N), kb.cmp("lt", m, M)));
  kb.substitute(mm.result(0), kb.castTo(sum, mm.result(0)->type().elem()));
  std::vector<Value*> ix = batch;
  ix.push_back(m);
  ix.push_back(n);
  KILN_CHECK(kb.storeOutputs(ix));
  kb.setMask(nullptr);
  kb.endFor();
  return ok();
}

} // namespace kiln
