// Strategy `matmul-cpu`: a matmul anchor with a pointwise epilogue on a cpu target (one
// thread per workgroup), with f32 accumulation (TargetDesc::wideAccumulation) and exact
// loop bounds, never masks.
//
// Matches:  a matmul kernel (codegen.h: Strategy::Matmul) on a cpu target.
// Plan:     CpuMatmulPlan{mc, nc, kc, mr, nr}: tile [MC, NC, KC, MR, NR], workgroup
//           [1, 1, 1]; the search space is the dot plan (matmul_cpu_dot.cpp) when the
//           kernel has a short side, then one blocked plan: the MR x NR register block from the
//           vector registers, MC x NC x KC from the caches (the KC x NR slice of B stays in
//           L1 across the MR-row micro-tiles, the MC x KC block of A in L2), never beyond
//           the extents.
// Emits:    per MC x NC block, K in steps of KC: B's panel packed (when transposed, or
//           reused by more than kDirectTiles micro-tile rows or computed by a longer
//           prologue; read in place otherwise), MR-row micro-tiles over NR-column strips
//           (the partial last one by width: two vectors, one, and dot products along k
//           for its last few columns), and a streamed path for blocks of at most MR rows;
//           then the epilogue on the block's valid part. A B that is a concat along K
//           (fuse's concatIntoGemmColumns) is read by one k loop per operand, each reading
//           its operand alone.
//
//   %0 = matmul %a, %b : tensor<{m}x512xf32>   =>   for k0 in K by KC: pack B's panel
//                                                     for strips, micro-tiles: reg += a * b
//                                                    epilogue: the block's valid outputs
#include <algorithm>
#include <set>
#include <tuple>

#include "passes/lower/kernel_builder.h"
#include "passes/lower/strategy.h"

namespace kiln {

namespace {

// The most micro-tile rows a block reads B in place for (directB). MobileNetV3-Small's
// 1x1 convs on one thread (AVX-512, MR = 8): 16 x 3136 (K = 16) 68 -> 28 us, 24 x 784
// (K = 72, 88) 81 -> 37 and 100 -> 46 us, 40 x 196 (K = 240) 93 -> 66 us. Larger blocks
// gained nothing measurable: alone, 72 to 576-row products read in place ran within 5% of
// packed (and 1.5x slower at 96 x 576 x 49 while the partial strip was read in place too).
constexpr int64_t kDirectTiles = 8;
// The most non-view ops B's prologue may have for a direct block, which computes it once
// per micro-tile row (an SE gate's multiply: 1; a depthwise conv's taps: dozens).
constexpr int64_t kDirectPrologueOps = 4;
// How many rows ahead a micro-kernel reading B in place prefetches: a row of a conv's
// patches or of a wide activation is in another page, where the hardware prefetchers stop,
// and from L3 its lines took longer than the FMAs of the rows before it.
constexpr int64_t kPrefetchRows = 16;
// Workgroups (blocks) a GEMM should have at least, so that the cpu's threads share it: a
// 256 x 196 conv-gemm in 96 x 224 blocks is 3 workgroups, which 2 threads run in the time
// of 2 (one idles half the time); a 40 x 196 one is 1 workgroup, which leaves every other
// thread idle.
constexpr int64_t kMinBlocks = 8;
// The widest block of a streamed (at most MR rows) product: its accumulator row, 32 KiB.
constexpr int64_t kMaxStreamCols = 8192;
// Rows of B a streamed block adds per pass over its accumulator row.
constexpr int64_t kStreamRows = 4;
constexpr double kMinBlockWork = 65536;
// The fewest wide columns (matmul_cpu_conv.cpp) for which a conv's GEMM reading its patches
// in place takes the 4 x 64 register block instead of 8 x 32 (AVX-512). AMD EPYC (Zen 5),
// two threads, `--tile-config` rounds: ResNet-18's 7x7 stem (64 x 147 x 12,544 wide
// columns) 0.69 -> 0.64-0.66 ms, 0.64-0.65 with NC 512; its 64-channel 3x3 convs on 56x56
// (3,246) 0.56-0.57 -> 0.53-0.55; the 128-channel ones on 28x28 (838) within noise, the
// 256-channel ones on 14x14 (222) 8% slower (a third of their columns in the partial strip).
constexpr int64_t kMinWideConvCols = 1024;

// Shrinks the MC x NC block (never below MR x NR) until the product has kMinBlocks
// workgroups (fewer for a small product) or cannot have more, splitting rows only when
// `splitRows` and columns only when `splitCols`: of the splits into mb row blocks and nb
// column blocks (each rounded up to whole micro-tiles) that reach the count, or come closest
// to it, the one that computes the fewest padded elements, then the one that reads the
// least (each column block reads all of A, each row block packs all of B: a 512 x 4608
// weight times a 4608 x 49 activation splits its rows, not its 49 columns), then the
// fewest workgroups. Products that already have enough keep theirs.
void balanceBlocks(int64_t rows, int64_t cols, int64_t depth, int64_t entries, int64_t mr,
                   int64_t nr, bool splitRows, bool splitCols, int64_t& mc, int64_t& nc) {
  auto ceilDiv = [](int64_t x, int64_t d) { return (x + d - 1) / d; };
  auto blocks = [&](int64_t m, int64_t n) { return ceilDiv(rows, m) * ceilDiv(cols, n) * entries; };
  if (rows < 1 || cols < 1 || depth < 1) return;
  // At least kMinBlockWork multiply-adds per workgroup (a few microseconds): a small
  // product is not worth waking threads for.
  double work = static_cast<double>(rows) * static_cast<double>(cols) * static_cast<double>(depth) *
                static_cast<double>(entries);
  auto wanted = static_cast<int64_t>(std::clamp(work / kMinBlockWork, 1.0, double(kMinBlocks)));
  if (blocks(mc, nc) >= wanted) return;
  // A block that packs B (more than MR rows) is never split into blocks of MR rows or
  // fewer: those stream B, computing a computed B (a depthwise conv fused into a
  // projection's operand) once per row.
  int64_t mbMax = splitRows ? (mc > mr ? ceilDiv(rows, mr + 1) : ceilDiv(rows, mr)) : 0;
  int64_t nbMax = splitCols ? ceilDiv(cols, nr) : 0;
  struct Split {
    int64_t m, n, count, work;
    double traffic;
  };
  std::vector<Split> splits;
  int64_t most = 0;
  for (int64_t mb = ceilDiv(rows, mc); mb <= std::max(mbMax, ceilDiv(rows, mc)) && mb <= kMinBlocks;
       ++mb)
    for (int64_t nb = ceilDiv(cols, nc);
         nb <= std::max(nbMax, ceilDiv(cols, nc)) && nb <= kMinBlocks; ++nb) {
      int64_t m = ceilDiv(ceilDiv(rows, mb), mr) * mr;
      int64_t n = ceilDiv(ceilDiv(cols, nb), nr) * nr;
      if (mc > mr && m <= mr) continue;
      // Every column block reads all of A's rows, every row block packs all of B's columns.
      double traffic = static_cast<double>(ceilDiv(cols, n)) * static_cast<double>(rows) *
                           static_cast<double>(depth) +
                       static_cast<double>(ceilDiv(rows, m)) * static_cast<double>(depth) *
                           static_cast<double>(cols);
      splits.push_back({m, n, blocks(m, n), ceilDiv(rows, m) * m * ceilDiv(cols, n) * n, traffic});
      most = std::max(most, splits.back().count);
    }
  // The splits that reach the wanted count, or as close as the allowed splits come.
  const Split* best = nullptr;
  for (const Split& sp : splits) {
    if (sp.count < std::min(wanted, most)) continue;
    if (!best ||
        std::tie(sp.work, sp.traffic, sp.count) < std::tie(best->work, best->traffic, best->count))
      best = &sp;
  }
  if (best) {
    mc = best->m;
    nc = best->n;
  }
}

} // namespace

// The cpu register block: NR two vectors of accumulators wide (f32; f64 and i64 for f64
// and integer matmuls), MR rows so that MR x NR / lanes accumulators plus the B row and a
// broadcast A fit the SIMD registers.
std::pair<int64_t, int64_t> cpuMicroTile(const TargetDesc& t, ElemType result) {
  bool wide = result == ElemType::F64 || !isFloat(result);
  int64_t lanes = std::max<int64_t>(1, t.preferredVectorBits / (wide ? 64 : 32));
  int64_t nr = 2 * lanes;
  int64_t mr = std::clamp<int64_t>((t.vectorRegisters - 4) / 2, 1, 8);
  return {mr, nr};
}

namespace {

// P when v is reshape(transpose(P)) of P [S, K, width] to [K, S * width] (axis 1: B's
// strips, transposed [1, 0, 2]) or [S * width, K] (axis 0: A's panels, transposed
// [0, 2, 1]), or its first N (M) along `axis` when P's last strip is padded; B may be the
// cast of those views (a narrow weight widened after them).
const Value* prepackedPanels(const Value* v, int64_t width, int64_t axis) {
  const Type& vt = v->type();
  if (vt.rank() != 2 || !vt.isStatic()) return nullptr;
  const Op* r = v->def();
  // A bf16 or f16 weight's strips, widened after the views (the micro-kernel converts each
  // element it loads).
  if (axis == 1 && r && r->kind() == OpKind::Cast) r = r->operand(0)->def();
  // The valid part of padded strips: slice [0, N) of `axis`.
  if (r && r->kind() == OpKind::Slice) {
    const Attrs& a = r->attrs();
    if (a.getInts("axes") != std::vector<int64_t>{axis} ||
        a.getInts("starts") != std::vector<int64_t>{0} ||
        a.getInts("steps") != std::vector<int64_t>{1} ||
        a.getInts("ends") != std::vector<int64_t>{vt.dim(axis).value()})
      return nullptr;
    r = r->operand(0)->def();
  }
  if (!r || r->kind() != OpKind::Reshape) return nullptr;
  const Type& rt = r->result(0)->type();
  const Op* t = r->operand(0)->def();
  std::vector<int64_t> perm =
      axis == 1 ? std::vector<int64_t>{1, 0, 2} : std::vector<int64_t>{0, 2, 1};
  if (!t || t->kind() != OpKind::Transpose || t->attrs().getInts("perm") != perm ||
      !rt.isStatic() || rt.rank() != 2)
    return nullptr;
  const Value* p = t->operand(0);
  const Type& pt = p->type();
  int64_t padded = rt.dim(axis).value(), valid = vt.dim(axis).value();
  if (pt.rank() != 3 || !pt.isStatic() || pt.dim(2).value() != width ||
      pt.dim(1) != vt.dim(1 - axis) || pt.dim(0).value() * width != padded || padded < valid ||
      padded - valid >= width)
    return nullptr;
  return p;
}

} // namespace

const Value* prepackedB(const Value* b, int64_t nr) { return prepackedPanels(b, nr, 1); }

const Value* prepackedA(const Value* a, int64_t mr) { return prepackedPanels(a, mr, 0); }

bool foldsBatch(const KernelShape& s) {
  if (s.outShape.size() < 3) return false;
  const Type& a = s.anchor->operand(0)->type();
  const Type& b = s.anchor->operand(1)->type();
  if (a.rank() < 2 || b.rank() < 2) return false;
  for (int64_t i = 0; i + 2 < b.rank(); ++i)
    if (!(b.dim(i).isStatic() && b.dim(i).value() == 1)) return false;
  // Batch dims that are all 1 (a conv-gemm's [1, Cout, P]) add no rows: nothing to fold.
  for (size_t i = 0; i + 2 < s.outShape.size(); ++i)
    if (!(s.outShape[i].isStatic() && s.outShape[i].value() == 1)) return true;
  return false;
}

bool innermostWhereLoaded(const Value* v, int64_t axis) {
  while (const Op* d = v->def()) {
    if (d->has(kElementwise) && d->numOperands() == 1) {
      v = d->operand(0);
    } else if (d->kind() == OpKind::Transpose) {
      std::vector<int64_t> perm = d->attrs().getInts("perm");
      if (axis < 0 || axis >= static_cast<int64_t>(perm.size())) return false;
      axis = perm[static_cast<size_t>(axis)];
      v = d->operand(0);
    } else {
      break;
    }
  }
  return axis == v->type().rank() - 1;
}

// Also attention's keys under `transpose {perm = [1, 2, 0]}`.
bool transposedB(const Value* b) { return innermostWhereLoaded(b, b->type().rank() - 2); }

const Op* concatAlongK(const Value* b) {
  const Value* v = b;
  if (const Op* r = v->def(); r && r->kind() == OpKind::Reshape) v = r->operand(0);
  const Op* cat = v->def();
  if (!cat || cat->kind() != OpKind::Concat) return nullptr;
  const Type& ct = v->type();
  const Type& bt = b->type();
  int64_t axis = cat->attrs().getInt("axis");
  axis = axis < 0 ? axis + ct.rank() : axis;
  if (bt.rank() < 2 || axis != bt.rank() - 2 || ct.rank() < bt.rank() - 1) return nullptr;
  for (int64_t i = 0; i <= axis; ++i)
    if (!(ct.dim(i) == bt.dim(i))) return nullptr;
  return cat;
}

bool computedOperand(const Value* a) {
  std::vector<const Value*> stack{a};
  std::set<const Value*> seen;
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    const Op* d = v->def();
    if (!d || !seen.insert(v).second) continue;
    if (!d->has(kView)) return true;
    for (const Value* o : d->operands()) stack.push_back(o);
  }
  return false;
}

namespace {

// The non-view ops that compute `v` inside its kernel, counted up to `cap`; a view other
// than a reshape or broadcast counts `cap` (a slice, transpose or gather can make the
// columns of a row non-contiguous, each element a gather per micro-tile row: EfficientNet-
// B0's projections read their depthwise conv's wide rows through a slice, and read
// directly they took 1.7-3.8x the packed time).
int64_t prologueOps(const Value* v, int64_t cap) {
  std::vector<const Value*> stack{v};
  std::set<const Op*> seen;
  int64_t n = 0;
  while (!stack.empty() && n < cap) {
    const Op* d = stack.back()->def();
    stack.pop_back();
    if (!d || !seen.insert(d).second) continue;
    if (!d->has(kView))
      ++n;
    else if (d->kind() != OpKind::Reshape && d->kind() != OpKind::Broadcast)
      n = cap;
    for (const Value* o : d->operands()) stack.push_back(o);
  }
  return n;
}

// When B = reshape(X) merges X's last two dims [.., K, R, W] into its N and X is read
// through a slice or transpose (a depthwise conv's wide rows, `slice(..)[.., :OW]`), the
// input X itself; null otherwise. Packed through B, every column's element finds its row
// and column of X by a division and LLVM gathers the strip; from X a strip is at most
// (NR - 1) / W + 2 contiguous runs of one row each.
const Value* mergedRowsInput(const Value* b) {
  const Op* d = b->def();
  if (!d || d->kind() != OpKind::Reshape) return nullptr;
  const Value* x = d->operand(0);
  const Type& bt = b->type();
  const Type& xt = x->type();
  if (xt.rank() != bt.rank() + 1) return nullptr;
  const Dim& w = xt.dim(xt.rank() - 1);
  if (!w.isStatic() || w.value() < 1) return nullptr;
  for (int64_t i = 0; i + 1 < bt.rank(); ++i)
    if (!(xt.dim(i) == bt.dim(i))) return nullptr;
  return prologueOps(x, 1 << 20) >= (1 << 20) ? x : nullptr;
}

// A transpose that keeps the order of its input's dims other than those of extent 1 (ViT's
// sequence-first [1, 197, 768] -> [197, 1, 768]): its elements stay where they are.
bool movesNothing(const Op& t) {
  const Type& in = t.operand(0)->type();
  int64_t last = -1;
  for (int64_t p : t.attrs().getInts("perm")) {
    if (p < 0 || p >= in.rank()) return false;
    const Dim& d = in.dim(p);
    if (d.isStatic() && d.value() == 1) continue;
    if (p < last) return false;
    last = p;
  }
  return true;
}

// A plain operand (no computed element) read through a view that moves its elements: a
// transpose (but movesNothing), slice, gather, anything but a reshape or broadcast.
bool movedA(const Value* a) {
  if (computedOperand(a)) return false;
  std::vector<const Value*> stack{a};
  std::set<const Op*> seen;
  while (!stack.empty()) {
    const Op* d = stack.back()->def();
    stack.pop_back();
    if (!d || !seen.insert(d).second) continue;
    if (d->kind() == OpKind::Transpose
            ? !movesNothing(*d)
            : d->kind() != OpKind::Reshape && d->kind() != OpKind::Broadcast)
      return true;
    for (const Value* o : d->operands()) stack.push_back(o);
  }
  return false;
}

bool directB(const Value* b, bool transposed, int64_t mc, int64_t mr) {
  return !transposed && mc > mr && mc <= kDirectTiles * mr &&
         prologueOps(b, kDirectPrologueOps + 1) <= kDirectPrologueOps;
}

} // namespace

void cpuMicroAccumulatorsIn(KernelBuilder& kb, Value* reg, Value* cb, Value* rb, Value* cb0,
                            int64_t mr, int64_t nr, Value* k0, ElemType acc) {
  Value* a = kb.beginFor(kb.cst(0), kb.cst(mr), kb.cst(1));
  Value* b = kb.beginFor(kb.cst(0), kb.cst(nr), kb.cst(1));
  kb.st(kb.scst(acc, 0.0), reg, {a, b});
  kb.endFor();
  kb.endFor();
  kb.beginFor(kb.cst(0),
              kb.mk(kb.body(), OpKind::SSelect, {kb.cmp("gt", k0, kb.cst(0)), kb.cst(1), kb.cst(0)},
                    Type::index()),
              kb.cst(1));
  a = kb.beginFor(kb.cst(0), kb.cst(mr), kb.cst(1));
  b = kb.beginFor(kb.cst(0), kb.cst(nr), kb.cst(1));
  kb.st(kb.ld(cb, {kb.idx(OpKind::IAdd, rb, a), kb.idx(OpKind::IAdd, cb0, b)}), reg, {a, b});
  kb.endFor();
  kb.endFor();
  kb.endFor();
}

void cpuMicroAccumulatorsOut(KernelBuilder& kb, Value* reg, Value* cb, Value* rb, Value* cb0,
                             int64_t mr, int64_t nr) {
  Value* a = kb.beginFor(kb.cst(0), kb.cst(mr), kb.cst(1));
  Value* b = kb.beginFor(kb.cst(0), kb.cst(nr), kb.cst(1));
  kb.st(kb.ld(reg, {a, b}), cb, {kb.idx(OpKind::IAdd, rb, a), kb.idx(OpKind::IAdd, cb0, b)});
  kb.endFor();
  kb.endFor();
}

bool matchCpuMatmul(const KernelRef& k, const TargetDesc& t) {
  return k.shape.strategy == Strategy::Matmul && t.cpu;
}

int64_t cpuMatmulKStep(const TargetDesc& t, int64_t nr, ElemType b, int64_t depth) {
  int64_t bBytes = std::max<int64_t>(4, elemTypeBytes(b));
  int64_t kc = std::max<int64_t>(16, static_cast<int64_t>(t.l1Bytes / 2) / (nr * bBytes));
  // A depth at most half a step over KC is one K step: EfficientNet-B0's 192-deep 1x1
  // convs took 6% longer in steps of 128 and 64 (the second pass over C for a short step).
  return depth <= kc + kc / 2 ? depth : kc;
}

std::vector<Plan> cpuMatmulPlans(const KernelShape& s, const TargetDesc& t,
                                 const SymbolTable& syms) {
  size_t r = s.outShape.size();
  auto ub = [&](const Dim& d) { return std::min<int64_t>(upperBound(d, syms), 1 << 30); };
  auto [mr, nr] = cpuMicroTile(t, s.anchor->result(0)->type().elem());
  auto roundUp = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  int64_t aBytes = std::max<int64_t>(4, elemTypeBytes(s.aElem));
  const Type& a = s.anchor->operand(0)->type();
  int64_t kc = cpuMatmulKStep(t, nr, s.bElem, ub(a.dim(a.rank() - 1)));
  int64_t mc = std::max<int64_t>(mr, static_cast<int64_t>(t.l2Bytes / 2) / (kc * aBytes));
  // Every row block packs all of B once more: up to 24 micro-tile rows (144 on AVX2) a
  // 128-token prefill's projections pack their weights once (12 packed them twice: 13%
  // of the TinyLlama layer's time).
  mc = std::min<int64_t>(mc / mr * mr, 24 * mr);
  int64_t rows = ub(s.outShape[r - 2]);
  if (foldsBatch(s))
    for (size_t i = 0; i + 2 < r; ++i) rows = std::min<int64_t>(rows * ub(s.outShape[i]), 1 << 30);
  // Rows over the cap split into equal row blocks: capped, ViT's 197 tokens were a block of
  // 192 and one of 5 rows, which streams all of B for those 5 (the 768 x 3072 MLP weight,
  // 9.4 MB: 197 x 768 x 3072 took 12.7 ms on one thread against 9.5 for 192 rows). A
  // product at most an eighth over the cap stays one block (B packed once).
  if (int64_t whole = roundUp(rows, mr); whole <= mc + mc / 8) {
    mc = whole;
  } else {
    int64_t rowBlocks = (rows + mc - 1) / mc;
    mc = std::min(mc, roundUp((rows + rowBlocks - 1) / rowBlocks, mr));
  }
  int64_t cols = ub(s.outShape[r - 1]);
  // A conv's patches read in place: the wide columns (matmul_cpu_conv.cpp).
  // Its K steps hold whole channels (KC a multiple of the taps).
  std::optional<ConvPatches> cp = patchesInPlace(*s.anchor);
  bool patches = cp.has_value();
  if (patches) {
    cols = convWideColumns(*cp);
    kc = std::max<int64_t>(1, kc / cp->taps) * cp->taps;
    // Many wide columns (AVX-512's 8 x 32 block): a register block half as tall and twice
    // as wide, 4 x 64 (the same 16 accumulators), KC kept. Per k it broadcasts 4 elements
    // of A, each from another row of the weight, and loads 4 vectors of the input's
    // contiguous run, where 8 x 32 broadcast 8 and loaded 2.
    if (cols >= kMinWideConvCols && mr == 8 && nr == 32) {
      mr /= 2;
      nr *= 2;
    }
  }
  int64_t nc = std::min<int64_t>(8 * nr, roundUp(cols, nr));
  int64_t entries = 1;
  if (!foldsBatch(s))
    for (size_t i = 0; i + 2 < r; ++i)
      entries = std::min<int64_t>(entries * ub(s.outShape[i]), 1 << 30);
  // Blocks of at most MR rows stream B in place, one row of the block's columns per k:
  // with enough batch entries for the threads (gemv-split's K slices), a block takes whole
  // rows of B (up to kMaxStreamCols), one contiguous run per k, instead of a 512-byte piece
  // of every row (a stride the prefetchers lose: 18 against 42 GB/s measured).
  if (rows <= mr && entries >= kMinBlocks && !transposedB(s.anchor->operand(1)))
    nc = std::min<int64_t>(roundUp(cols, nr), kMaxStreamCols);
  // More row blocks pack (and compute) B once more each, more column blocks A: an operand
  // computed by a prologue keeps its blocks (patches read in place are not computed),
  // unless the prologue is cheap (at most kDirectPrologueOps: an SE gate's multiply) and
  // the product has more rows than a direct block. Two threads: EfficientNet-B0's gated
  // 192 x 1152 x 49 projections in 2 column blocks 0.27 ms, in 4 x 2 blocks 0.175;
  // MobileNetV3-Small's 40 and 48-row ones 10-20% slower split (24 + 16 rows), its 96-row
  // ones 10% faster.
  auto keeps = [&](const Value* v, bool rowsOperand) {
    if (!computedOperand(v)) return false;
    bool cheap = prologueOps(v, kDirectPrologueOps + 1) <= kDirectPrologueOps;
    return !cheap || (rowsOperand && rows <= kDirectTiles * mr);
  };
  balanceBlocks(rows, cols, ub(a.dim(a.rank() - 1)), entries, mr, nr,
                patches || !keeps(s.anchor->operand(1), true), !keeps(s.anchor->operand(0), false),
                mc, nc);
  std::vector<Plan> plans = cpuDotPlans(s, t, syms);
  plans.push_back(
      CpuMatmulPlan{std::max(mc, mr), std::max(nc, nr), std::max<int64_t>(kc, 1), mr, nr});
  return plans;
}

std::optional<std::string> strategyProblem(const KernelShape& s, const CpuMatmulPlan& p,
                                           const TargetDesc&, bool) {
  std::string tile = listStr({p.mc, p.nc, p.kc, p.mr, p.nr});
  if (s.anchor)
    if (std::optional<ConvPatches> cp = patchesInPlace(*s.anchor); cp && p.kc % cp->taps != 0)
      return "tile " + tile + ": KC must be a multiple of the convolution's " +
             std::to_string(cp->taps) + " taps (its K steps hold whole channels)";
  if (p.mc < 1 || p.nc < 1 || p.kc < 1 || p.mr < 1 || p.nr < 1)
    return "tile " + tile + " has an entry below 1";
  if (p.mr * p.nr > 512)
    return "tile " + tile + " has " + std::to_string(p.mr * p.nr) +
           " micro-kernel accumulators (at most 512)";
  if (p.mc % p.mr != 0 || p.nc % p.nr != 0)
    return "tile " + tile + ": MC must be a multiple of MR and NC of NR";
  if (p.mc * p.nc > 256 * 1024)
    return "tile " + tile + " has " + std::to_string(p.mc * p.nc) +
           " accumulators per workgroup (at most 262144)";
  return std::nullopt;
}

// cpu matmul: one thread per workgroup computes an MC x NC block of C into a private
// block accumulator `cb`, K in steps of KC. Inside a K step, NR-column strips of the block
// (the KC x NR slice of B stays in L1) and MR-row micro-tiles: the micro-kernel keeps
// MR x NR accumulators in a private buffer with static loop bounds (LLVM unrolls it into
// registers), runs k outermost, loads NR contiguous elements of B's row k and broadcasts
// one element of A per row. Rows past the last multiple of MR use a 1-row micro-kernel
// and the last partial column strip clamps its columns to N - 1, so no access is masked
// and no work is wasted on rows; the epilogue stores exactly the block's valid part.
Status emitStrategy(KernelBuilder& kb, const CpuMatmulPlan& plan) {
  const Op& mm = *kb.shape().anchor;
  if (std::optional<ConvPatches> cp = patchesInPlace(mm)) return emitConvStrategy(kb, plan, *cp);
  const Shape& s = kb.shape().outShape;
  size_t r = s.size();
  const Type& at = mm.operand(0)->type();
  int64_t MC = plan.mc, NC = plan.nc, KC = plan.kc;
  int64_t MR = plan.mr, NR = plan.nr;
  Value* M = kb.dim(s[r - 2]);
  Value* N = kb.dim(s[r - 1]);
  Value* K = kb.dim(at.dim(at.rank() - 1));
  Shape batchShape(s.begin(), s.end() - 2);
  // Folded batch (foldsBatch): the rows run over batch x M, and a row's batch indices come
  // from its row number; B's batch indices are 0.
  bool fold = !batchShape.empty() && foldsBatch(kb.shape());
  Shape rowShape(s.begin(), s.end() - 1);
  if (fold) M = kb.product(rowShape, 0, rowShape.size());
  kb.setGrid(0, kb.idx(OpKind::ICeilDiv, N, kb.cst(NC), kb.prologue()));
  kb.setGrid(1, kb.idx(OpKind::ICeilDiv, M, kb.cst(MC), kb.prologue()));
  kb.setGrid(2, fold ? kb.cst(1) : kb.product(batchShape, 0, batchShape.size()));
  Value* bx = kb.mk(kb.body(), OpKind::WorkgroupId, {}, Type::index(), kb.axisAttr(0));
  Value* by = kb.mk(kb.body(), OpKind::WorkgroupId, {}, Type::index(), kb.axisAttr(1));
  Value* bz = kb.mk(kb.body(), OpKind::WorkgroupId, {}, Type::index(), kb.axisAttr(2));
  std::vector<Value*> batch;
  if (fold)
    batch.assign(batchShape.size(), kb.cst(0));
  else if (!batchShape.empty())
    batch = kb.delinearize(bz, batchShape);
  // The output index of row `row` without its column: batch + [row], or the row
  // delinearized over batch x M when folded (computed outside the loops over k and columns).
  auto rowIndex = [&](Value* row) {
    std::vector<Value*> ix = fold ? kb.delinearize(row, rowShape) : batch;
    if (!fold) ix.push_back(row);
    return ix;
  };
  auto with = [](std::vector<Value*> ix, Value* col) {
    ix.push_back(col);
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
  // Every private buffer here is written before it is read, so none is zero-filled: a
  // memset of the block accumulator and the packed panel per workgroup was 2-3% of
  // MobileNetV3-Small's time (a stem block filled 44 KB to compute 16 x 256 outputs).
  auto priv = [&](std::vector<Dim> dims) {
    Attrs uninit;
    uninit.set("uninit", int64_t(1));
    return kb.mk(kb.body(), OpKind::Alloc, {}, Type::buffer(ae, Shape(dims), MemSpace::Private),
                 uninit);
  };
  Value* cb = priv({Dim(MC), Dim(NC)});
  Value* reg = priv({Dim(MR), Dim(NR)});
  Value* bv = priv({Dim(NR)});
  const Value* A = mm.operand(0);
  const Value* B = mm.operand(1);
  // B's KC x NC panel packed per K step as NC/NR micro-panels of KC x NR contiguous
  // elements (k-major), cast to the accumulator type once: the micro-kernel streams one
  // contiguous micro-panel (no cache-set aliasing from B's row stride, no gathers for a
  // transposed B). Columns past the block's valid ones are never written: they read 0.
  bool transposed = transposedB(B);
  // Blocks of at most MR rows over a B stored [K, N] never pack (they stream B below): no
  // panel, whose NC x KC elements would be most of the stack for a block of whole rows.
  // A block of at most kDirectTiles micro-tile rows over a B stored [K, N] that is plain
  // or cheaply computed reads B's rows in place in its micro-kernels (NR contiguous
  // elements of row k, as the panel would hold them): each element is read MC / MR times
  // or fewer, where packing would load and store it once more (directB).
  // A weight stored as the micro-kernel reads it (pack-weights) is read in place, whatever
  // the block: each micro-tile loads NR contiguous elements of its strip per k.
  const Value* P = prepackedB(B, NR);
  bool direct = P || directB(B, transposed, MC, MR);
  bool mayPack = transposed || (MC > MR && !direct);
  // Micro-tiles over a packed or (direct) in-place B; the streamed path otherwise.
  bool tiled = mayPack || direct;
  // A direct block packs its partial last strip only (one micro-panel), whose clamped
  // columns would not be one contiguous load per row k.
  // A prepacked B has no partial strip (its last strip is padded): no panel at all.
  Value* pack = P         ? nullptr
                : mayPack ? priv({Dim(NC / NR), Dim(KC), Dim(NR)})
                : direct  ? priv({Dim(1), Dim(KC), Dim(NR)})
                          : nullptr;
  // A computed by a prologue (a LayerNorm before a linear layer) is packed too: the block's
  // MC x KC slice of A, computed once per K step, instead of once per NR-column strip
  // that reads it (N / NR times per element).
  // So is an A read through a view that moves its elements (a transpose or slice), when
  // the block has more than one strip to read it: an attention output [heads, S, D] read
  // as [S, heads x D] found each element's address with a division and a remainder by D
  // per micro-tile row and k, 30 integer instructions per 16 FMAs (movedA).
  // A weight stored as MR-row panels (pack-weights: a conv's weights) is read in place, each
  // micro-tile row's element at P[row / MR, k, row mod MR] (one contiguous run per panel
  // and K step), and the micro-kernels prefetch their panel's next K step.
  const Value* PA = fold ? nullptr : prepackedA(A, MR);
  Value* apack = tiled && !PA && (computedOperand(A) || (NC > NR && movedA(A)))
                     ? priv({Dim(MC), Dim(KC)})
                     : nullptr;

  // The partial last strip's w < NR columns, by width, with L = NR / 2 (one vector):
  // more than 3L/2 take the whole strip (two vectors wide, as the full strips), more than
  // L/2 a one-vector strip (the first L columns), and the rest, at most L/2 columns (all of
  // a narrow strip or the last w - L of one more than L wide), are dot products along k
  // in L lanes per row: a 49-column product (a 7x7 map) computed 64 columns in two
  // strips, now 48 and a dot column. Dots need A contiguous along k (a weight [M, K], or
  // A packed) and K of at least two vectors; otherwise the whole strip computes w.
  const int64_t L = NR / 2;
  const Dim& kDim = at.dim(at.rank() - 1);
  bool dotEdge = tiled && NR % 2 == 0 && L >= 2 && (!kDim.isStatic() || kDim.value() >= 2 * L) &&
                 (apack || innermostWhereLoaded(A, at.rank() - 1));
  // With a static N every block's partial strip has w = N mod NR columns (0 but in the
  // last block): only the parts that w takes are emitted.
  const Dim& nDim = s[r - 1];
  int64_t staticW = nDim.isStatic() ? nDim.value() % NR : -1;
  bool anyW = staticW < 0;
  bool wideEdge = !dotEdge || anyW || staticW > L + L / 2;
  bool halfEdge = dotEdge && (anyW || (staticW > L / 2 && staticW <= L + L / 2));
  bool dotCols = dotEdge && (anyW || (staticW > 0 && staticW <= L / 2) ||
                             (staticW > L && staticW <= L + L / 2));
  if (P) wideEdge = halfEdge = dotCols = false;
  Value* stripsEnd =
      P ? kb.idx(OpKind::IMul, kb.idx(OpKind::ICeilDiv, colsV, kb.cst(NR)), kb.cst(NR)) : nullptr;
  auto pick = [&](Value* cond, Value* x, Value* y) {
    return kb.mk(kb.body(), OpKind::SSelect, {cond, x, y}, Type::index());
  };
  // The loop ends of the two-vector and one-vector edge strips and the first dot column,
  // emitted where they are used (nothing when there are no dots: the strip computes w).
  struct EdgeBounds {
    Value* wideEnd;
    Value* halfEnd;
    Value* dotStart;
  };
  auto edgeBounds = [&]() -> EdgeBounds {
    if (!dotEdge) return {colsV, nullptr, nullptr};
    Value* w = kb.idx(OpKind::ISub, colsV, colsFull);
    Value* overHalf = kb.cmp("gt", w, kb.cst(L / 2));
    Value* overL = kb.cmp("gt", w, kb.cst(L));
    Value* overWide = kb.cmp("gt", w, kb.cst(L + L / 2));
    return {pick(overWide, colsV, colsFull),
            pick(overWide, colsFull,
                 pick(overHalf, kb.idx(OpKind::IAdd, colsFull, kb.cst(1)), colsFull)),
            pick(overWide, colsV,
                 pick(overL, kb.idx(OpKind::IAdd, colsFull, kb.cst(L)),
                      pick(overHalf, colsV, colsFull)))};
  };
  // B a concat along K (concatAlongK): a loop over k in [lo, hi) that reads B (`readsB`)
  // is one loop per operand, over its K range, reading that operand alone
  // (KernelBuilder::pickConcat) instead of a masked load of each and a select; `kSeg` is
  // the operand of the loop being emitted.
  const Op* kcat = concatAlongK(B);
  size_t kSeg = SIZE_MAX;
  bool viewsOfBuffers = kcat != nullptr;
  for (size_t i = 0; kcat && i < kcat->numOperands(); ++i)
    viewsOfBuffers = viewsOfBuffers && prologueOps(kcat->operand(i), 1) == 0;
  // A B read in place that is a view of a buffer (or a concat of such, per operand): its
  // rows ahead are prefetched.
  bool prefetchB = direct && !P && (prologueOps(B, 1) == 0 || viewsOfBuffers);
  // A prepacked weight: the part of it that the block reads next (pfS in `micro`).
  bool prefetchP = P != nullptr;
  Value* lastK =
      prefetchB || prefetchP || PA ? kb.idx(OpKind::ISub, K, kb.cst(1), kb.prologue()) : nullptr;
  Value* dacc = dotCols ? priv({Dim(MR), Dim(L)}) : nullptr;
  Value* packT = dotCols ? priv({Dim(L / 2), Dim(KC)}) : nullptr;

  std::vector<Value*> kcatBounds = kcat ? kb.concatBounds(*kcat) : std::vector<Value*>{};
  auto forK = [&](Value* lo, Value* hi, bool readsB,
                  const std::function<Status(Value*)>& body) -> Status {
    size_t parts = kcat && readsB ? kcat->numOperands() : 1;
    for (size_t i = 0; i < parts; ++i) {
      Value* k = parts == 1 ? kb.beginFor(lo, hi, kb.cst(1))
                            : kb.beginFor(kb.idx(OpKind::IMax, lo, kcatBounds[i]),
                                          kb.idx(OpKind::IMin, hi, kcatBounds[i + 1]), kb.cst(1));
      if (parts > 1) {
        kb.pickConcat(*kcat, k, i);
        kSeg = i;
      }
      Status st = body(k);
      if (parts > 1) {
        kb.unpickConcat(*kcat);
        kSeg = SIZE_MAX;
      }
      KILN_CHECK(std::move(st));
      kb.endFor();
    }
    return ok();
  };

  // The micro-kernel on rows [rb, rb + mr) and columns [cb0, cb0 + NR) of the block,
  // reading B from the packed panel or in place.
  auto micro = [&](Value* rb, Value* cb0, int64_t mr, int64_t nr, bool edge, bool packed, Value* k0,
                   Value* kEnd) -> Status {
    cpuMicroAccumulatorsIn(kb, reg, cb, rb, cb0, mr, nr, k0, ae);
    Value* a = nullptr;
    Value* b = nullptr;
    Value* strip = !packed  ? nullptr
                   : direct ? kb.cst(0)
                            : kb.idx(OpKind::IFloorDiv, cb0, kb.cst(NR));
    // A folded row's index is delinearized once, outside the loop over k.
    auto rowAt = [&](int64_t r) {
      return rowIndex(kb.idx(OpKind::IAdd, m0, kb.idx(OpKind::IAdd, rb, kb.cst(r))));
    };
    std::vector<std::vector<Value*>> rowIx;
    for (int64_t r = 0; fold && r < mr; ++r) rowIx.push_back(rowAt(r));
    // A prepacked weight: what the block reads after this strip's K step is strip `pfS` from
    // row `pfK` (the next strip; after the last, the first strip's next K step; after the
    // last K step, the next block's first strip), KC rows of NR contiguous elements. The
    // block's `tiles` micro-tile rows share it: row rb / MR fetches the R = ceil(KC / tiles)
    // rows from pfK + rb / MR * R, at element (k mod KC) * q of them, q = ceil(R * NR / KC)
    // (a few k per cache line; k mod KC is k - k0 and proven non-negative, so the per-k
    // index arithmetic is shifts and masks, not floor divisions).
    // The strip is contiguous, but a block's K step reads 16 KB of it and then the next
    // strip's, 96 KB on (K = 768): the hardware prefetchers stop at each 4 KB page, and a
    // transformer's weights come from DRAM every call. Fetching row k + 32 of the strip
    // being read (the rule before) left the first micro-tile row of each strip waiting on
    // DRAM (16 KB in the time of 2048 FMAs, more than a core's bandwidth) while the others
    // read L1, and cost two prefetches per k in every micro-tile. A 128 x 2048 x 5632
    // product with its weight prepacked, alternating rounds: 22.3 -> 19.3 ms on one thread
    // (a hand-written C kernel of the same blocking: 21.7 -> 18.5, 159 GFLOP/s of the
    // core's 175), 12.5 -> 10.0 ms on two.
    Value* pfS = nullptr;
    Value* pfRow = nullptr;
    Value* pfStep = nullptr;
    if (prefetchP && !edge && mr == MR) {
      Value* nextK = kb.idx(OpKind::IAdd, k0, kb.cst(KC));
      Value* lastStrip = kb.cmp("ge", kb.idx(OpKind::IAdd, cb0, kb.cst(NR)), stripsEnd);
      Value* lastStep = kb.cmp("ge", nextK, K);
      Value* s0 = kb.idx(OpKind::IFloorDiv, n0, kb.cst(NR));
      Value* here = kb.idx(OpKind::IFloorDiv, kb.idx(OpKind::IAdd, n0, cb0), kb.cst(NR));
      Value* s = pick(lastStrip, pick(lastStep, kb.idx(OpKind::IAdd, s0, kb.cst(NC / NR)), s0),
                      kb.idx(OpKind::IAdd, here, kb.cst(1)));
      pfS = kb.idx(OpKind::IMin, s, kb.cst(P->type().dim(0).value() - 1));
      Value* pfK = pick(lastStrip, pick(lastStep, kb.cst(0), nextK), k0);
      Value* tiles =
          kb.idx(OpKind::IMax, kb.idx(OpKind::IFloorDiv, rowsFull, kb.cst(MR)), kb.cst(1));
      Value* share = kb.idx(OpKind::ICeilDiv, kb.cst(KC), tiles);
      pfRow = kb.idx(OpKind::IAdd, pfK,
                     kb.idx(OpKind::IMul, kb.idx(OpKind::IFloorDiv, rb, kb.cst(MR)), share));
      pfStep = kb.idx(OpKind::ICeilDiv, kb.idx(OpKind::IMul, share, kb.cst(NR)), kb.cst(KC));
    }
    Value* paPanel = PA && mr == MR && !edge
                         ? kb.idx(OpKind::IFloorDiv, kb.idx(OpKind::IAdd, m0, rb), kb.cst(MR))
                         : nullptr;
    auto step = [&](Value* k) -> Status {
      std::vector<Value*> oix;
      // B read in place: its row k + kPrefetchRows (the last row past K) is prefetched at both
      // ends of the strip, so that a row in another page is in L1 when the k loop gets there.
      // Through a concat, the row ahead in the same operand (its last one at most).
      if (prefetchB && !packed && !edge && (!kcat || kSeg != SIZE_MAX)) {
        Value* last = kcat ? kb.idx(OpKind::ISub, kcatBounds[kSeg + 1], kb.cst(1)) : lastK;
        Value* kp = kb.idx(OpKind::IMin, kb.idx(OpKind::IAdd, k, kb.cst(kPrefetchRows)), last);
        if (kcat) kb.pickConcat(*kcat, kp, kSeg);
        for (int64_t c : {int64_t(0), nr - 1}) {
          oix = batch;
          oix.push_back(m0);
          oix.push_back(kb.idx(OpKind::IAdd, n0, kb.idx(OpKind::IAdd, cb0, kb.cst(c))));
          KILN_TRY(bool fetched, kb.prefetchAt(B, kb.matmulIndices(mm, oix, kp).second));
          (void)fetched;
        }
        if (kcat) kb.pickConcat(*kcat, k, kSeg);
      }
      // A prepacked weight: element (k mod KC) * q of this micro-tile row's share of what
      // the block reads next (pfS above), its row clamped to K - 1.
      if (pfS) {
        Value* off = kb.idx(OpKind::IMul, kb.idx(OpKind::IMod, k, kb.cst(KC)), pfStep);
        Value* row = kb.idx(OpKind::IAdd, pfRow, kb.idx(OpKind::IFloorDiv, off, kb.cst(NR)));
        Value* col = kb.idx(OpKind::IMod, off, kb.cst(NR));
        KILN_TRY(bool fetched, kb.prefetchAt(P, {pfS, kb.idx(OpKind::IMin, row, lastK), col}));
        (void)fetched;
      }
      // A's panels (PA): this micro-tile's panel at the next K step (row K - 1 at most).
      if (paPanel) {
        Value* row = kb.idx(OpKind::IMin, kb.idx(OpKind::IAdd, k, kb.cst(KC)), lastK);
        KILN_TRY(bool fetched, kb.prefetchAt(PA, {paPanel, row, kb.cst(0)}));
        (void)fetched;
      }
      b = kb.beginFor(kb.cst(0), kb.cst(nr), kb.cst(1));
      if (packed) {
        kb.st(kb.ld(pack, {strip, kb.idx(OpKind::ISub, k, k0), b}), bv, {b});
      } else if (P && !edge) {
        Value* sIx = kb.idx(OpKind::IFloorDiv, kb.idx(OpKind::IAdd, n0, cb0), kb.cst(NR));
        KILN_TRY(Value * bval, kb.emitAt(P, {sIx, k, b}));
        kb.st(kb.castTo(bval, ae), bv, {b});
      } else {
        Value* col = kb.idx(OpKind::IAdd, n0, kb.idx(OpKind::IAdd, cb0, b));
        if (edge) col = kb.idx(OpKind::IMin, col, lastCol);
        oix = batch;
        oix.push_back(m0);
        oix.push_back(col);
        KILN_TRY(Value * bval, kb.emitAt(B, kb.matmulIndices(mm, oix, k).second));
        kb.st(kb.castTo(bval, ae), bv, {b});
      }
      kb.endFor();
      // The rows are unrolled here (MR copies): the innermost loop is the NR columns, so
      // no vectorizer runs across rows (gathers of A and scatters of the accumulators).
      for (int64_t r = 0; r < mr; ++r) {
        a = kb.cst(r);
        Value* av = nullptr;
        if (apack) {
          av = kb.ld(apack, {kb.idx(OpKind::IAdd, rb, a), kb.idx(OpKind::ISub, k, k0)});
        } else if (PA) {
          Value* row = kb.idx(OpKind::IAdd, m0, kb.idx(OpKind::IAdd, rb, a));
          KILN_TRY(Value * aval, kb.emitAt(PA, {kb.idx(OpKind::IFloorDiv, row, kb.cst(MR)), k,
                                                kb.idx(OpKind::IMod, row, kb.cst(MR))}));
          av = kb.castTo(aval, ae);
        } else {
          oix = with(fold ? rowIx[static_cast<size_t>(r)] : rowAt(r), n0);
          KILN_TRY(Value * aval, kb.emitAt(A, kb.matmulIndices(mm, oix, k).first));
          av = kb.castTo(aval, ae);
        }
        b = kb.beginFor(kb.cst(0), kb.cst(nr), kb.cst(1));
        Value* p = kb.compute(OpKind::Mul, {av, kb.ld(bv, {b})}, ae);
        kb.st(kb.compute(OpKind::Add, {kb.ld(reg, {a, b}), p}, ae), reg, {a, b});
        kb.endFor();
      }
      return ok();
    };
    // B read in place through a concat along K: one k loop per operand.
    KILN_CHECK(forK(k0, kEnd, !packed && !(P && !edge), step));
    cpuMicroAccumulatorsOut(kb, reg, cb, rb, cb0, mr, nr);
    return ok();
  };
  // Rows [rb, rb + mr) of the columns [dotStart, colsV): per column, L lanes of partial
  // sums per row over k in steps of L (B's column packed along k in packT), the rest of k
  // into lane 0, then the lanes summed into the block accumulator.
  auto dots = [&](Value* rb, int64_t mr, Value* dotStart, Value* k0, Value* kEnd) -> Status {
    Value* c = kb.beginFor(dotStart, colsV, kb.cst(1));
    Value* jt = kb.idx(OpKind::ISub, c, dotStart);
    Value* a = kb.beginFor(kb.cst(0), kb.cst(mr), kb.cst(1));
    Value* l = kb.beginFor(kb.cst(0), kb.cst(L), kb.cst(1));
    kb.st(kb.scst(ae, 0.0), dacc, {a, l});
    kb.endFor();
    kb.endFor();
    std::vector<std::vector<Value*>> rowIx;
    for (int64_t r = 0; !apack && r < mr; ++r)
      rowIx.push_back(rowIndex(kb.idx(OpKind::IAdd, m0, kb.idx(OpKind::IAdd, rb, kb.cst(r)))));
    auto aAt = [&](int64_t r, Value* k) -> Result<Value*> {
      if (apack)
        return kb.ld(apack, {kb.idx(OpKind::IAdd, rb, kb.cst(r)), kb.idx(OpKind::ISub, k, k0)});
      KILN_TRY(
          Value * aval,
          kb.emitAt(A, kb.matmulIndices(mm, with(rowIx[static_cast<size_t>(r)], n0), k).first));
      return kb.castTo(aval, ae);
    };
    Value* kVec = kb.idx(
        OpKind::IAdd, k0,
        kb.idx(OpKind::IMul, kb.idx(OpKind::IFloorDiv, kb.idx(OpKind::ISub, kEnd, k0), kb.cst(L)),
               kb.cst(L)));
    for (bool tail : {false, true}) {
      Value* kk = tail ? kb.beginFor(kVec, kEnd, kb.cst(1)) : kb.beginFor(k0, kVec, kb.cst(L));
      for (int64_t r = 0; r < mr; ++r) {
        Value* lane = tail ? kb.cst(0) : kb.beginFor(kb.cst(0), kb.cst(L), kb.cst(1));
        Value* k = tail ? kk : kb.idx(OpKind::IAdd, kk, lane);
        KILN_TRY(Value * av, aAt(r, k));
        Value* p =
            kb.compute(OpKind::Mul, {av, kb.ld(packT, {jt, kb.idx(OpKind::ISub, k, k0)})}, ae);
        kb.st(kb.compute(OpKind::Add, {kb.ld(dacc, {kb.cst(r), lane}), p}, ae), dacc,
              {kb.cst(r), lane});
        if (!tail) kb.endFor();
      }
      kb.endFor();
    }
    for (int64_t r = 0; r < mr; ++r) {
      std::vector<Value*> at = {kb.idx(OpKind::IAdd, rb, kb.cst(r)), c};
      Value* prev =
          kb.mk(kb.body(), OpKind::SSelect,
                {kb.cmp("gt", k0, kb.cst(0)), kb.ld(cb, at), kb.scst(ae, 0.0)}, Type::scalar(ae));
      kb.st(prev, cb, at);
      l = kb.beginFor(kb.cst(0), kb.cst(L), kb.cst(1));
      kb.st(kb.compute(OpKind::Add, {kb.ld(cb, at), kb.ld(dacc, {kb.cst(r), l})}, ae), cb, at);
      kb.endFor();
    }
    kb.endFor();
    return ok();
  };
  // The NR-column strips of the block: full ones, then the partial last one.
  // Full strips read the panel when B is packed, B in place when direct; the partial last
  // strip always reads the panel.
  auto strips = [&](Value* k0, Value* kEnd) -> Status {
    EdgeBounds eb = edgeBounds();
    // 0: the full strips, 1: the partial one two vectors wide, 2: one vector wide.
    for (int part : {0, 1, 2}) {
      if ((part == 1 && !wideEdge) || (part == 2 && !halfEdge)) continue;
      bool edge = part > 0;
      bool packed = edge || mayPack;
      int64_t nr = part == 2 ? L : NR;
      // A prepacked B's last strip is whole (padded with zeros): no partial strip.
      Value* j0 = part == 0   ? kb.beginFor(kb.cst(0), P ? stripsEnd : colsFull, kb.cst(NR))
                  : part == 1 ? kb.beginFor(colsFull, eb.wideEnd, kb.cst(NR))
                              : kb.beginFor(colsFull, eb.halfEnd, kb.cst(1));
      Value* i0 = kb.beginFor(kb.cst(0), rowsFull, kb.cst(MR));
      KILN_CHECK(micro(i0, j0, MR, nr, edge, packed, k0, kEnd));
      kb.endFor();
      if (MR > 1) {
        Value* i = kb.beginFor(rowsFull, rowsV, kb.cst(1));
        KILN_CHECK(micro(i, j0, 1, nr, edge, packed, k0, kEnd));
        kb.endFor();
      }
      kb.endFor();
    }
    if (dotCols) {
      Value* i0 = kb.beginFor(kb.cst(0), rowsFull, kb.cst(MR));
      KILN_CHECK(dots(i0, MR, eb.dotStart, k0, kEnd));
      kb.endFor();
      if (MR > 1) {
        Value* i = kb.beginFor(rowsFull, rowsV, kb.cst(1));
        KILN_CHECK(dots(i, 1, eb.dotStart, k0, kEnd));
        kb.endFor();
      }
    }
    return ok();
  };

  // Packing pays when the panel is reused by several micro-tile rows, or when B is
  // transposed (strided along N otherwise): `packs` is 1 or 0 (a loop taken once or not),
  // 1 for the micro-tiles over a packed or (direct) in-place B, 0 for the streamed path.
  Value* packs = kb.cst(tiled ? 1 : 0);
  if (tiled && !transposed)
    packs = kb.mk(kb.body(), OpKind::SSelect,
                  {kb.cmp("gt", rowsV, kb.cst(MR)), kb.cst(1), kb.cst(0)}, Type::index());
  // The streamed path adds into the block accumulator, and an empty K computes nothing:
  // then the accumulator's valid part starts at 0 (the micro-kernels set all of it in
  // their first K step otherwise).
  Value* zeroes =
      kb.mk(kb.body(), OpKind::SSelect,
            {kb.cmp("eq", K, kb.cst(0)), kb.cst(1), kb.idx(OpKind::ISub, kb.cst(1), packs)},
            Type::index());
  kb.beginFor(kb.cst(0), zeroes, kb.cst(1));
  {
    Value* i = kb.beginFor(kb.cst(0), rowsV, kb.cst(1));
    Value* j = kb.beginFor(kb.cst(0), colsV, kb.cst(1));
    kb.st(kb.scst(ae, 0.0), cb, {i, j});
    kb.endFor();
    kb.endFor();
  }
  kb.endFor();
  Value* k0 = kb.beginFor(kb.cst(0), K, kb.cst(KC));
  Value* kEnd = kb.idx(OpKind::IMin, kb.idx(OpKind::IAdd, k0, kb.cst(KC)), K);
  if (tiled) {
    kb.beginFor(kb.cst(0), packs, kb.cst(1));
    {
      auto packOne = [&](Value* n, Value* k, Value* s, Value* b) -> Status {
        std::vector<Value*> oix = batch;
        oix.push_back(m0);
        oix.push_back(kb.idx(OpKind::IAdd, n0, n));
        KILN_TRY(Value * bval, kb.emitAt(B, kb.matmulIndices(mm, oix, k).second));
        kb.st(kb.castTo(bval, ae), pack, {s, kb.idx(OpKind::ISub, k, k0), b});
        return ok();
      };
      if (transposed) {
        // Read along k (contiguous in the [N, K] weight).
        Value* n = kb.beginFor(kb.cst(0), colsV, kb.cst(1));
        Value* k = kb.beginFor(k0, kEnd, kb.cst(1));
        KILN_CHECK(packOne(n, k, kb.idx(OpKind::IFloorDiv, n, kb.cst(NR)),
                           kb.idx(OpKind::IMod, n, kb.cst(NR))));
        kb.endFor();
        kb.endFor();
      } else {
        // Row k of each full strip: NR contiguous elements in, NR contiguous out (static
        // bounds); the partial last strip clamps its columns to the last valid one.
        // A B merged from rows of X (mergedRowsInput) packs each full strip as its runs
        // along X's rows: run `seg` is row r0 + seg of X, columns [lo, hi) of the strip.
        const Value* X = direct ? nullptr : mergedRowsInput(B);
        if (X) {
          int64_t W = X->type().dim(X->type().rank() - 1).value();
          Value* Wv = kb.cst(W);
          Value* sv =
              kb.beginFor(kb.cst(0), kb.idx(OpKind::IFloorDiv, colsV, kb.cst(NR)), kb.cst(1));
          Value* ns = kb.idx(OpKind::IAdd, n0, kb.idx(OpKind::IMul, sv, kb.cst(NR)));
          Value* r0 = kb.idx(OpKind::IFloorDiv, ns, Wv);
          Value* c0 = kb.idx(OpKind::IMod, ns, Wv);
          Value* seg = kb.beginFor(kb.cst(0), kb.cst((NR - 1) / W + 2), kb.cst(1));
          Value* segStart = kb.idx(OpKind::IMul, seg, Wv);
          Value* lo = kb.idx(OpKind::IMax, kb.idx(OpKind::ISub, segStart, c0), kb.cst(0));
          Value* hi =
              kb.idx(OpKind::IMin, kb.idx(OpKind::ISub, kb.idx(OpKind::IAdd, segStart, Wv), c0),
                     kb.cst(NR));
          Value* row = kb.idx(OpKind::IAdd, r0, seg);
          Value* k = kb.beginFor(k0, kEnd, kb.cst(1));
          Value* b = kb.beginFor(lo, hi, kb.cst(1));
          std::vector<Value*> oix = batch;
          oix.push_back(m0);
          oix.push_back(ns);
          std::vector<Value*> xix = kb.matmulIndices(mm, oix, k).second;
          xix.back() = row;
          xix.push_back(kb.idx(OpKind::ISub, kb.idx(OpKind::IAdd, b, c0), segStart));
          KILN_TRY(Value * xval, kb.emitAt(X, xix));
          kb.st(kb.castTo(xval, ae), pack, {sv, kb.idx(OpKind::ISub, k, k0), b});
          kb.endFor();
          kb.endFor();
          kb.endFor();
          kb.endFor();
        }
        for (bool edge : {false, true}) {
          // The partial strip's panel only for the micro-kernels that read it (not for
          // dot columns alone).
          if (((direct || X) && !edge) || P || (edge && !wideEdge && !halfEdge)) continue;
          Value* sEnd = edge ? kb.idx(OpKind::ICeilDiv, colsV, kb.cst(NR))
                             : kb.idx(OpKind::IFloorDiv, colsV, kb.cst(NR));
          Value* s0 = edge ? kb.idx(OpKind::IFloorDiv, colsV, kb.cst(NR)) : kb.cst(0);
          Value* sv = kb.beginFor(s0, sEnd, kb.cst(1));
          Value* s = direct ? kb.cst(0) : sv;
          KILN_CHECK(forK(k0, kEnd, true, [&](Value* k) -> Status {
            if (edge && staticW > 0) {
              // With a static N the partial strip has w = N mod NR columns: w contiguous
              // ones, then zeros (never stored). Clamped, LLVM vectorized the loop over k
              // instead, with a gather and a scatter per vector (EfficientNet-B0's
              // 320 x 1152 x 49 projection with its gate in B: a third of its time).
              Value* b = kb.beginFor(kb.cst(0), kb.cst(staticW), kb.cst(1));
              KILN_CHECK(
                  packOne(kb.idx(OpKind::IAdd, kb.idx(OpKind::IMul, sv, kb.cst(NR)), b), k, s, b));
              kb.endFor();
              b = kb.beginFor(kb.cst(staticW), kb.cst(NR), kb.cst(1));
              kb.st(kb.scst(ae, 0.0), pack, {s, kb.idx(OpKind::ISub, k, k0), b});
              kb.endFor();
            } else {
              Value* b = kb.beginFor(kb.cst(0), kb.cst(NR), kb.cst(1));
              Value* n = kb.idx(OpKind::IAdd, kb.idx(OpKind::IMul, sv, kb.cst(NR)), b);
              if (edge) n = kb.idx(OpKind::IMin, n, kb.idx(OpKind::ISub, colsV, kb.cst(1)));
              KILN_CHECK(packOne(n, k, s, b));
              kb.endFor();
            }
            return ok();
          }));
          kb.endFor();
        }
      }
    }
    if (dotCols) { // the dot columns, each contiguous along k
      Value* dotStart = edgeBounds().dotStart;
      Value* j = kb.beginFor(kb.cst(0), kb.idx(OpKind::ISub, colsV, dotStart), kb.cst(1));
      KILN_CHECK(forK(k0, kEnd, true, [&](Value* k) -> Status {
        std::vector<Value*> oix = batch;
        oix.push_back(m0);
        oix.push_back(kb.idx(OpKind::IAdd, n0, kb.idx(OpKind::IAdd, dotStart, j)));
        KILN_TRY(Value * bval, kb.emitAt(B, kb.matmulIndices(mm, oix, k).second));
        kb.st(kb.castTo(bval, ae), packT, {j, kb.idx(OpKind::ISub, k, k0)});
        return ok();
      }));
      kb.endFor();
    }
    if (apack) { // rows of the block's A slice, contiguous along k
      Value* i = kb.beginFor(kb.cst(0), rowsV, kb.cst(1));
      std::vector<Value*> oix = with(rowIndex(kb.idx(OpKind::IAdd, m0, i)), n0);
      Value* k = kb.beginFor(k0, kEnd, kb.cst(1));
      KILN_TRY(Value * aval, kb.emitAt(A, kb.matmulIndices(mm, oix, k).first));
      kb.st(kb.castTo(aval, ae), apack, {i, kb.idx(OpKind::ISub, k, k0)});
      kb.endFor();
      kb.endFor();
    }
    KILN_CHECK(strips(k0, kEnd));
    kb.endFor();
  }
  if (!transposed) {
    // A block of at most MR rows (a decode step): B's rows streamed in place, each k
    // adding a[i, k] * B[k, n0 .. n0 + cols) to the block accumulator's row i (a
    // contiguous, vectorizable column loop; every element of B is used once).
    // An accumulator row wider than half of L1 (a Llama-3-8B gate projection's 8192
    // columns) takes kStreamRows rows of B per pass (then the rest one at a time), added in
    // k order: the same sums, with the accumulators loaded and stored once per kStreamRows
    // rows of B instead of once per row (that projection 7.7 -> 4.6 ms).
    bool wideRow = NC * elemTypeBytes(ae) > static_cast<int64_t>(kb.target().l1Bytes / 2);
    kb.beginFor(packs, kb.cst(1), kb.cst(1));
    Value* kSplit =
        wideRow ? kb.idx(OpKind::ISub, kEnd,
                         kb.idx(OpKind::IMod, kb.idx(OpKind::ISub, kEnd, k0), kb.cst(kStreamRows)))
                : k0;
    for (int64_t u : wideRow ? std::vector<int64_t>{kStreamRows, 1} : std::vector<int64_t>{1}) {
      // One row of B at a time: a concat along K in segments (forK).
      auto rowsOfB = [&](Value* k) -> Status {
        Value* i = kb.beginFor(kb.cst(0), rowsV, kb.cst(1));
        std::vector<Value*> ks, avs;
        for (int64_t j = 0; j < u; ++j) {
          ks.push_back(j ? kb.idx(OpKind::IAdd, k, kb.cst(j)) : k);
          std::vector<Value*> oix = with(rowIndex(kb.idx(OpKind::IAdd, m0, i)), n0);
          KILN_TRY(Value * aval, kb.emitAt(A, kb.matmulIndices(mm, oix, ks.back()).first));
          avs.push_back(kb.castTo(aval, ae));
        }
        Value* n = kb.beginFor(kb.cst(0), colsV, kb.cst(1));
        Value* acc = kb.ld(cb, {i, n});
        for (int64_t j = 0; j < u; ++j) {
          std::vector<Value*> oix = batch;
          oix.push_back(m0);
          oix.push_back(kb.idx(OpKind::IAdd, n0, n));
          KILN_TRY(Value * bval, kb.emitAt(B, kb.matmulIndices(mm, oix, ks[j]).second));
          Value* p = kb.compute(OpKind::Mul, {avs[j], kb.castTo(bval, ae)}, ae);
          acc = kb.compute(OpKind::Add, {acc, p}, ae);
        }
        kb.st(acc, cb, {i, n});
        kb.endFor();
        kb.endFor();
        return ok();
      };
      if (u > 1) {
        KILN_CHECK(rowsOfB(kb.beginFor(k0, kSplit, kb.cst(u))));
        kb.endFor();
      } else {
        KILN_CHECK(forK(kSplit, kEnd, true, rowsOfB));
      }
    }
    kb.endFor();
  }
  kb.endFor();

  // Epilogue: the block's valid outputs, the matmul's value taken from the accumulator.
  Value* i = kb.beginFor(kb.cst(0), rowsV, kb.cst(1));
  std::vector<Value*> outRow;
  if (fold) outRow = rowIndex(kb.idx(OpKind::IAdd, m0, i));
  Value* j = kb.beginFor(kb.cst(0), colsV, kb.cst(1));
  kb.substitute(mm.result(0), kb.castTo(kb.ld(cb, {i, j}), mm.result(0)->type().elem()));
  if (!fold) outRow = rowIndex(kb.idx(OpKind::IAdd, m0, i));
  KILN_CHECK(kb.storeOutputs(with(outRow, kb.idx(OpKind::IAdd, n0, j))));
  kb.endFor();
  kb.endFor();
  return ok();
}

} // namespace kiln
