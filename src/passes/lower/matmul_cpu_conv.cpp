// Strategy `matmul-cpu`, patches plan: a convolution's GEMM on a cpu target that reads its
// input where it lies instead of conv-gemm's materialized im2col patches. The patches
// kernel wrote KH*KW copies of the (padded) input, 7.2 MB for a 64-channel 56x56 map that
// the GEMM then read back from L3; the input itself (0.86 MB) stays in L2.
//
// Matches:  a matmul-cpu kernel whose B is conv-gemm's patches (convPatches:
//           reshape(concat{axis 2}(slice(X) per tap))) with every tap a unit-step window of
//           a kernel argument X: the padded input [1, C, Hp, Wp] of a stride-1 conv, or the
//           four phases [1, C, 4, Hp/2, Wp/2] of a stride-2 one's (tap (i, j) a window of
//           phase 2 (i mod 2) + j mod 2); with output rows long enough (wideRowsPay: OW at
//           least kMinWideRow times W - OW, W the row width of X) that the dropped columns
//           below cost little. fuse puts the concat in the GEMM's kernel for it
//           (FusionRules::patchesIntoGemm).
// Plan:     the blocked CpuMatmulPlan (matmul_cpu.cpp) over the wide columns, with KC a
//           multiple of the taps: the output is computed at every position n = oy * W + ox
//           of X's rows, n in [0, (OH - 1) * W + OW). Row k = (c, t) of B is then the
//           contiguous run of X's channel c (tap t's plane) from dy_t * W + dx_t + n: a
//           micro-kernel's NR columns are one vector load per row k, whatever output rows
//           they cross. The W - OW columns per row past OW are computed and dropped.
// Emits:    per MC x NC block of wide columns, K in steps of KC whole channels: MR-row
//           micro-tiles over NR-column strips reading A in place and B's rows from X (a
//           loop over the channels with the taps unrolled, each a constant offset; X's
//           index as row and column of the flat offset, which LLVM folds back; the partial
//           last strip computes the last NR wide columns into an accumulator of its own, or
//           clamps its columns to the last wide one when there are fewer than NR); then the
//           epilogue on the valid columns of each output row in the block, at their NCHW
//           positions.
//
//   %p = pad %x : 1x64x58x58                  for k0 in K by KC, strips, micro-tiles:
//   %b = reshape(concat(slices of %p))  =>      for c, taps: reg += a[k] * X[c, dy*58 + dx + n]
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

bool wideRowsPay(int64_t ow, int64_t width) { return ow >= 1 && (width - ow) * kMinWideRow <= ow; }

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
  for (size_t t = 0; t < cat->numOperands(); ++t) {
    const Value* v = cat->operand(t);
    if (const Op* r = defOf(v, OpKind::Reshape)) v = r->operand(0);
    const Op* s = defOf(v, OpKind::Slice);
    if (!s) return std::nullopt;
    const Value* x = s->operand(0);
    if (t == 0) p.x = x;
    const Type& xt = x->type();
    if (x != p.x || (xt.rank() != 4 && xt.rank() != 5)) return std::nullopt;
    bool planes = xt.rank() == 5;
    const Attrs& a = s->attrs();
    std::vector<int64_t> st = a.getInts("starts"), en = a.getInts("ends");
    if (a.getInts("axes") !=
            (planes ? std::vector<int64_t>{2, 3, 4} : std::vector<int64_t>{2, 3}) ||
        a.getInts("steps") != std::vector<int64_t>(planes ? 3 : 2, 1) || st.size() != en.size())
      return std::nullopt;
    size_t r = planes ? 1 : 0; // where the rows' start is
    ConvPatches::Tap tap{planes ? st[0] : 0, st[r], st[r + 1]};
    if ((planes && en[0] != st[0] + 1) || tap.plane < 0 || tap.dy < 0 || tap.dx < 0 ||
        en[r] - st[r] != p.oh || en[r + 1] - st[r + 1] != p.ow)
      return std::nullopt;
    p.window.push_back(tap);
  }
  const Type& xt = p.x->type();
  if (!xt.isStatic() || xt.dim(0).value() != 1 || xt.dim(1).value() != p.channels ||
      xt.elem() != bt.elem())
    return std::nullopt;
  p.rows = xt.dim(xt.rank() - 2).value();
  p.width = xt.dim(xt.rank() - 1).value();
  int64_t planes = xt.rank() == 5 ? xt.dim(2).value() : 1;
  // Every window inside its plane.
  for (const ConvPatches::Tap& t : p.window)
    if (t.plane >= planes || t.dy + p.oh > p.rows || t.dx + p.ow > p.width) return std::nullopt;
  if (!wideRowsPay(p.ow, p.width)) return std::nullopt;
  return p;
}

std::optional<ConvPatches> patchesInPlace(const Op& mm) {
  std::optional<ConvPatches> p = convPatches(mm.operand(1));
  if (p && p->x->def()) return std::nullopt;
  return p;
}

int64_t convWideColumns(const ConvPatches& p) { return (p.oh - 1) * p.width + p.ow; }

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
  // X's element at flat offset `o` of channel c (and plane), rows `width` long, as its row
  // o / width and column o mod width (LLVM folds the pair back into the flat offset: one
  // contiguous run of NR elements per row k).
  Value* widthV = kb.cst(cp.width);
  bool planes = X->type().rank() == 5;
  auto xAt = [&](Value* c, int64_t plane, Value* o) -> Result<Value*> {
    std::vector<Value*> ix{kb.cst(0), c};
    if (planes) ix.push_back(kb.cst(plane));
    ix.push_back(kb.idx(OpKind::IFloorDiv, o, widthV));
    ix.push_back(kb.idx(OpKind::IMod, o, widthV));
    KILN_TRY(Value * v, kb.load(X, ix));
    return kb.castTo(v, ae);
  };
  // The partial last strip of w = N mod NR columns: with N >= NR, the last NR wide columns
  // [N - NR, N), whole contiguous loads like a full strip's, into an accumulator of their
  // own (`eb`, whose last w columns the block's take after the K loop: the others belong
  // to the strips before, already in `cb`). Otherwise its columns clamp to the last wide
  // one, a gather per row k in every micro-tile: with 192 x 48 x 3x3 on a 13x13 map (193
  // wide columns, the last strip 1 of them) the clamped strip was 40% of the kernel's time.
  const int64_t wideCols = convWideColumns(cp);
  const bool shiftEdge = wideCols >= NR && wideCols % NR != 0;
  Value* eb = shiftEdge ? priv(ae, {Dim(MC), Dim(NR)}) : nullptr;
  // Rows [rb, rb + mr) and wide columns [cb0, cb0 + NR) of the block; `edge`, the partial
  // last strip: shifted to end at the last wide column, or clamped to it.
  auto micro = [&](Value* rb, Value* cb0, int64_t mr, bool edge, Value* k0, Value* kEnd) -> Status {
    bool shifted = edge && shiftEdge;
    Value* acc = shifted ? eb : cb;
    Value* acc0 = shifted ? kb.cst(0) : cb0;
    cpuMicroAccumulatorsIn(kb, reg, acc, rb, acc0, mr, NR, k0, ae);
    Value* a = nullptr;
    Value* b = nullptr;
    Value* col0 = shifted ? kb.cst(wideCols - NR) : kb.idx(OpKind::IAdd, n0, cb0);
    if (shifted) edge = false;
    // k = (c, t): a loop over the channels (the K step holds whole ones), the taps unrolled
    // here, each B row a constant offset dy * width + dx from the wide column in its plane.
    Value* c = kb.beginFor(kb.idx(OpKind::IFloorDiv, k0, kb.cst(cp.taps)),
                           kb.idx(OpKind::IFloorDiv, kEnd, kb.cst(cp.taps)), kb.cst(1));
    for (int64_t t = 0; t < cp.taps; ++t) {
      const ConvPatches::Tap& tap = cp.window[static_cast<size_t>(t)];
      Value* k = kb.idx(OpKind::IAdd, kb.idx(OpKind::IMul, c, kb.cst(cp.taps)), kb.cst(t));
      Value* rowOff = kb.cst(tap.dy * cp.width + tap.dx);
      b = kb.beginFor(kb.cst(0), kb.cst(NR), kb.cst(1));
      Value* col = kb.idx(OpKind::IAdd, col0, b);
      if (edge) col = kb.idx(OpKind::IMin, col, lastCol);
      KILN_TRY(Value * xv, xAt(c, tap.plane, kb.idx(OpKind::IAdd, rowOff, col)));
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
    }
    kb.endFor();
    cpuMicroAccumulatorsOut(kb, reg, acc, rb, acc0, mr, NR);
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
  if (shiftEdge) {
    // The partial strip's w columns, the last w of its shifted accumulator (none in a
    // block without one).
    Value* w = kb.idx(OpKind::ISub, colsV, colsFull);
    Value* i = kb.beginFor(kb.cst(0), rowsV, kb.cst(1));
    Value* j = kb.beginFor(kb.cst(0), w, kb.cst(1));
    kb.st(kb.ld(eb, {i, kb.idx(OpKind::IAdd, kb.idx(OpKind::ISub, kb.cst(NR), w), j)}), cb,
          {i, kb.idx(OpKind::IAdd, colsFull, j)});
    kb.endFor();
    kb.endFor();
  }

  // Epilogue: per row of the block, the valid columns of each output row oy it covers,
  // wide column oy * Wp + ox at output column oy * OW + ox.
  Value* wp = kb.cst(cp.width);
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
