// Strategy `matmul-cpu`, patches plan: a stride-1 convolution's GEMM on a cpu target that
// reads its input where it lies instead of conv-gemm's materialized im2col patches. The
// patches kernel wrote KH*KW copies of the (padded) input, 7.2 MB for a 64-channel 56x56
// map that the GEMM then read back from L3; the input itself (0.86 MB) stays in L2.
//
// Matches:  a matmul-cpu kernel whose B is conv-gemm's patches of a stride-1 conv
//           (convPatches: reshape(concat{axis 2}(reshape(slice(X))))) over a kernel
//           argument X [1, C, Hp, Wp], with output rows long enough (OW at least
//           kMinWideRow times Wp - OW) that the dropped columns below cost little; fuse
//           puts the concat in the GEMM's kernel for it (FusionRules::patchesIntoGemm).
// Plan:     the blocked CpuMatmulPlan (matmul_cpu.cpp) over the wide columns, with KC a
//           multiple of the taps: the output is computed at every position n = oy * Wp + ox
//           of the padded width, n in [0, (OH - 1) * Wp + OW). Row k = (c, ky, kx) of B is
//           then the contiguous run of X's channel c from ky * dh * Wp + kx * dw + n (X
//           flat per channel): a micro-kernel's NR columns are one vector load per row k,
//           whatever output rows they cross. The Wp - OW columns per row past OW are
//           computed and dropped.
// Emits:    per MC x NC block of wide columns, K in steps of KC whole channels: MR-row
//           micro-tiles over NR-column strips reading A in place and B's rows from X (k as
//           three loops, c, ky, kx, the taps unrolled by LLVM into constant offsets; X's
//           index as row and column of the flat offset, which LLVM folds back; the partial
//           last strip clamps its columns to the last wide column); then the epilogue on
//           the valid columns of each output row in the block, at their NCHW positions.
//
//   %p = pad %x : 1x64x58x58                  for k0 in K by KC, strips, micro-tiles:
//   %b = reshape(concat(slices of %p))  =>      for c, ky, kx: reg += a[k] * X[c, ky*58 + kx + n]
//   %y = matmul %w, %b : 1x64x3136              epilogue: oy*58 + ox -> oy*56 + ox, ox < 56
#include "passes/lower/kernel_builder.h"
#include "passes/lower/strategy.h"

namespace kiln {

namespace {

// Output rows at least this many times the Wp - OW dropped columns per row (a quarter of
// the columns computed at most). Reading B from the input in L2 pays for more than the
// dropped columns: one thread, alone, a 3x3 conv's GEMM with its patches kernel against
// the wide GEMM: 64 channels on 56x56 (58 wide) 2.51 -> 1.79 ms, 128 on 28x28 1.81 ->
// 1.68, 256 on 14x14 (16 wide) 2.02 -> 1.67, 512 on 7x7 (9 wide) 1.99 -> 1.99.
constexpr int64_t kMinWideRow = 3;

const Op* defOf(const Value* v, OpKind k) {
  const Op* d = v->def();
  return d && d->kind() == k ? d : nullptr;
}

} // namespace

std::optional<ConvPatches> convPatches(const Value* b) {
  const Type& bt = b->type();
  if (bt.rank() != 3 || !bt.isStatic() || bt.dim(0).value() != 1) return std::nullopt;
  const Op* flat = defOf(b, OpKind::Reshape);
  const Op* cat = flat ? defOf(flat->operand(0), OpKind::Concat) : nullptr;
  if (!cat || cat->attrs().getInt("axis") != 2 || cat->numOperands() < 2) return std::nullopt;
  const Type& ct = cat->result(0)->type(); // [1, C, T, OH, OW]
  if (ct.rank() != 5 || !ct.isStatic()) return std::nullopt;
  std::vector<int64_t> cs = ct.staticShape();
  ConvPatches p;
  p.channels = cs[1];
  p.taps = cs[2];
  p.oh = cs[3];
  p.ow = cs[4];
  if (p.taps != static_cast<int64_t>(cat->numOperands()) ||
      bt.dim(1).value() != p.channels * p.taps || bt.dim(2).value() != p.oh * p.ow)
    return std::nullopt;
  // Tap t = (ky, kx) in row-major order at [ky * dh, kx * dw]: the slices of one X.
  std::vector<std::pair<int64_t, int64_t>> starts;
  for (size_t t = 0; t < cat->numOperands(); ++t) {
    const Op* r = defOf(cat->operand(t), OpKind::Reshape);
    const Op* s = r ? defOf(r->operand(0), OpKind::Slice) : nullptr;
    if (!s) return std::nullopt;
    const Attrs& a = s->attrs();
    if (a.getInts("axes") != std::vector<int64_t>{2, 3} ||
        a.getInts("steps") != std::vector<int64_t>{1, 1})
      return std::nullopt;
    const Value* x = s->operand(0);
    if (t == 0) p.x = x;
    if (x != p.x) return std::nullopt;
    std::vector<int64_t> st = a.getInts("starts"), en = a.getInts("ends");
    if (st.size() != 2 || en.size() != 2 || st[0] < 0 || st[1] < 0 || en[0] - st[0] != p.oh ||
        en[1] - st[1] != p.ow)
      return std::nullopt;
    starts.emplace_back(st[0], st[1]);
  }
  const Type& xt = p.x->type();
  if (xt.rank() != 4 || !xt.isStatic() || xt.dim(0).value() != 1 ||
      xt.dim(1).value() != p.channels || xt.elem() != bt.elem())
    return std::nullopt;
  p.hp = xt.dim(2).value();
  p.wp = xt.dim(3).value();
  // The taps form a KH x KW grid with steps dh, dw from [0, 0].
  p.kw = 1;
  while (p.kw < p.taps && starts[static_cast<size_t>(p.kw)].first == 0) ++p.kw;
  if (p.taps % p.kw != 0 || starts[0] != std::make_pair(int64_t(0), int64_t(0)))
    return std::nullopt;
  int64_t kh = p.taps / p.kw;
  p.dw = p.kw > 1 ? starts[1].second : 1;
  p.dh = kh > 1 ? starts[static_cast<size_t>(p.kw)].first : 1;
  for (int64_t t = 0; t < p.taps; ++t)
    if (starts[static_cast<size_t>(t)] != std::make_pair((t / p.kw) * p.dh, (t % p.kw) * p.dw))
      return std::nullopt;
  // Every window inside X: the last tap's rows and columns end at Hp, Wp at most.
  if ((kh - 1) * p.dh + p.oh > p.hp || (p.kw - 1) * p.dw + p.ow > p.wp) return std::nullopt;
  // The padded width the wide columns run over must add little.
  if ((p.wp - p.ow) * kMinWideRow > p.ow) return std::nullopt;
  return p;
}

int64_t convWideColumns(const ConvPatches& p) { return (p.oh - 1) * p.wp + p.ow; }

Status emitConvStrategy(KernelBuilder& kb, const CpuMatmulPlan& plan, const ConvPatches& cp) {
  const Op& mm = *kb.shape().anchor;
  const Shape& s = kb.shape().outShape;
  size_t r = s.size();
  int64_t MC = plan.mc, NC = plan.nc, KC = plan.kc, MR = plan.mr, NR = plan.nr;
  if (KC % cp.taps != 0)
    return error(mm.loc(), "internal error: matmul-cpu's patches plan needs KC a multiple of " +
                               std::to_string(cp.taps));
  Value* M = kb.dim(s[r - 2]);
  Value* N = kb.cst(convWideColumns(cp));
  Value* K = kb.cst(cp.channels * cp.taps);
  kb.setGrid(0, kb.idx(OpKind::ICeilDiv, N, kb.cst(NC), kb.prologue()));
  kb.setGrid(1, kb.idx(OpKind::ICeilDiv, M, kb.cst(MC), kb.prologue()));
  kb.setGrid(2, kb.cst(1));
  Value* bx = kb.mk(kb.body(), OpKind::WorkgroupId, {}, Type::index(), kb.axisAttr(0));
  Value* by = kb.mk(kb.body(), OpKind::WorkgroupId, {}, Type::index(), kb.axisAttr(1));
  // The output's batch dims (all 1) and a row index.
  std::vector<Value*> batch(r - 2, kb.cst(0));
  auto rowIndex = [&](Value* row) {
    std::vector<Value*> ix = batch;
    ix.push_back(row);
    return ix;
  };
  Value* m0 = kb.idx(OpKind::IMul, by, kb.cst(MC));
  Value* n0 = kb.idx(OpKind::IMul, bx, kb.cst(NC));
  Value* rowsV = kb.idx(OpKind::IMin, kb.idx(OpKind::ISub, M, m0), kb.cst(MC));
  Value* colsV = kb.idx(OpKind::IMin, kb.idx(OpKind::ISub, N, n0), kb.cst(NC));
  Value* rowsFull = kb.idx(OpKind::IMul, kb.idx(OpKind::IFloorDiv, rowsV, kb.cst(MR)), kb.cst(MR));
  Value* colsFull = kb.idx(OpKind::IMul, kb.idx(OpKind::IFloorDiv, colsV, kb.cst(NR)), kb.cst(NR));
  Value* lastCol = kb.idx(OpKind::ISub, N, kb.cst(1));
  ElemType ae = matmulAccElem(mm.result(0)->type().elem(), kb.target());
  auto priv = [&](ElemType e, std::vector<Dim> dims) {
    Attrs uninit;
    uninit.set("uninit", int64_t(1));
    return kb.mk(kb.body(), OpKind::Alloc, {}, Type::buffer(e, Shape(dims), MemSpace::Private),
                 uninit);
  };
  Value* cb = priv(ae, {Dim(MC), Dim(NC)});
  Value* reg = priv(ae, {Dim(MR), Dim(NR)});
  Value* bv = priv(ae, {Dim(NR)});
  const Value* A = mm.operand(0);
  const Value* X = cp.x;
  // X's element at flat offset `o` of channel c (Hp x Wp, row-major), as its row o / Wp and
  // column o mod Wp (LLVM folds the pair back into the flat offset: one contiguous run of
  // NR elements per row k).
  Value* wpV = kb.cst(cp.wp);
  auto xAt = [&](Value* c, Value* o) -> Result<Value*> {
    KILN_TRY(Value * v, kb.load(X, {kb.cst(0), c, kb.idx(OpKind::IFloorDiv, o, wpV),
                                    kb.idx(OpKind::IMod, o, wpV)}));
    return kb.castTo(v, ae);
  };

  // Rows [rb, rb + mr) and wide columns [cb0, cb0 + NR) of the block; `edge` clamps the
  // columns past the last wide one to it.
  auto micro = [&](Value* rb, Value* cb0, int64_t mr, bool edge, Value* k0, Value* kEnd) -> Status {
    Value* a = kb.beginFor(kb.cst(0), kb.cst(mr), kb.cst(1));
    Value* b = kb.beginFor(kb.cst(0), kb.cst(NR), kb.cst(1));
    kb.st(kb.scst(ae, 0.0), reg, {a, b});
    kb.endFor();
    kb.endFor();
    kb.beginFor(kb.cst(0),
                kb.mk(kb.body(), OpKind::SSelect,
                      {kb.cmp("gt", k0, kb.cst(0)), kb.cst(1), kb.cst(0)}, Type::index()),
                kb.cst(1));
    a = kb.beginFor(kb.cst(0), kb.cst(mr), kb.cst(1));
    b = kb.beginFor(kb.cst(0), kb.cst(NR), kb.cst(1));
    kb.st(kb.ld(cb, {kb.idx(OpKind::IAdd, rb, a), kb.idx(OpKind::IAdd, cb0, b)}), reg, {a, b});
    kb.endFor();
    kb.endFor();
    kb.endFor();
    Value* col0 = kb.idx(OpKind::IAdd, n0, cb0);
    // k = (c, ky, kx) as three loops (the K step holds whole channels): B's row k starts
    // at ky * dh * Wp + kx * dw in channel c of X, an affine index.
    Value* c = kb.beginFor(kb.idx(OpKind::IFloorDiv, k0, kb.cst(cp.taps)),
                           kb.idx(OpKind::IFloorDiv, kEnd, kb.cst(cp.taps)), kb.cst(1));
    Value* ky = kb.beginFor(kb.cst(0), kb.cst(cp.taps / cp.kw), kb.cst(1));
    Value* kx = kb.beginFor(kb.cst(0), kb.cst(cp.kw), kb.cst(1));
    Value* k =
        kb.idx(OpKind::IAdd,
               kb.idx(OpKind::IMul,
                      kb.idx(OpKind::IAdd, kb.idx(OpKind::IMul, c, kb.cst(cp.taps / cp.kw)), ky),
                      kb.cst(cp.kw)),
               kx);
    Value* rowOff = kb.idx(OpKind::IAdd, kb.idx(OpKind::IMul, ky, kb.cst(cp.dh * cp.wp)),
                           kb.idx(OpKind::IMul, kx, kb.cst(cp.dw)));
    b = kb.beginFor(kb.cst(0), kb.cst(NR), kb.cst(1));
    Value* col = kb.idx(OpKind::IAdd, col0, b);
    if (edge) col = kb.idx(OpKind::IMin, col, lastCol);
    KILN_TRY(Value * xv, xAt(c, kb.idx(OpKind::IAdd, rowOff, col)));
    kb.st(xv, bv, {b});
    kb.endFor();
    for (int64_t i = 0; i < mr; ++i) {
      a = kb.cst(i);
      Value* row = kb.idx(OpKind::IAdd, m0, kb.idx(OpKind::IAdd, rb, a));
      std::vector<Value*> oix = rowIndex(row);
      oix.push_back(n0);
      KILN_TRY(Value * aval, kb.emitAt(A, kb.matmulIndices(mm, oix, k).first));
      Value* av = kb.castTo(aval, ae);
      b = kb.beginFor(kb.cst(0), kb.cst(NR), kb.cst(1));
      Value* p = kb.compute(OpKind::Mul, {av, kb.ld(bv, {b})}, ae);
      kb.st(kb.compute(OpKind::Add, {kb.ld(reg, {a, b}), p}, ae), reg, {a, b});
      kb.endFor();
    }
    kb.endFor();
    kb.endFor();
    kb.endFor();
    a = kb.beginFor(kb.cst(0), kb.cst(mr), kb.cst(1));
    b = kb.beginFor(kb.cst(0), kb.cst(NR), kb.cst(1));
    kb.st(kb.ld(reg, {a, b}), cb, {kb.idx(OpKind::IAdd, rb, a), kb.idx(OpKind::IAdd, cb0, b)});
    kb.endFor();
    kb.endFor();
    return ok();
  };

  Value* k0 = kb.beginFor(kb.cst(0), K, kb.cst(KC));
  Value* kEnd = kb.idx(OpKind::IMin, kb.idx(OpKind::IAdd, k0, kb.cst(KC)), K);
  for (bool edge : {false, true}) {
    Value* j0 = edge ? kb.beginFor(colsFull, colsV, kb.cst(NR))
                     : kb.beginFor(kb.cst(0), colsFull, kb.cst(NR));
    Value* i0 = kb.beginFor(kb.cst(0), rowsFull, kb.cst(MR));
    KILN_CHECK(micro(i0, j0, MR, edge, k0, kEnd));
    kb.endFor();
    if (MR > 1) {
      Value* i = kb.beginFor(rowsFull, rowsV, kb.cst(1));
      KILN_CHECK(micro(i, j0, 1, edge, k0, kEnd));
      kb.endFor();
    }
    kb.endFor();
  }
  kb.endFor();

  // Epilogue: per row of the block, the valid columns of each output row oy it covers,
  // wide column oy * Wp + ox at output column oy * OW + ox.
  Value* wp = kb.cst(cp.wp);
  Value* i = kb.beginFor(kb.cst(0), rowsV, kb.cst(1));
  std::vector<Value*> outRow = rowIndex(kb.idx(OpKind::IAdd, m0, i));
  Value* colsEnd = kb.idx(OpKind::IAdd, n0, colsV);
  Value* oy = kb.beginFor(kb.idx(OpKind::IFloorDiv, n0, wp), kb.idx(OpKind::ICeilDiv, colsEnd, wp),
                          kb.cst(1));
  Value* rowStart = kb.idx(OpKind::IMul, oy, wp);
  Value* lo = kb.idx(OpKind::IMax, rowStart, n0);
  Value* hi = kb.idx(OpKind::IMin, kb.idx(OpKind::IAdd, rowStart, kb.cst(cp.ow)), colsEnd);
  Value* n = kb.beginFor(lo, hi, kb.cst(1));
  kb.substitute(mm.result(0), kb.castTo(kb.ld(cb, {i, kb.idx(OpKind::ISub, n, n0)}),
                                        mm.result(0)->type().elem()));
  std::vector<Value*> out = outRow;
  out.push_back(kb.idx(OpKind::IAdd, kb.idx(OpKind::IMul, oy, kb.cst(cp.ow)),
                       kb.idx(OpKind::ISub, n, rowStart)));
  KILN_CHECK(kb.storeOutputs(out));
  kb.endFor();
  kb.endFor();
  kb.endFor();
  return ok();
}

} // namespace kiln
