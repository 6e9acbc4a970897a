// Strategy `attention` (every target): an `attention` op (with the views and elementwise ops
// fused into its operands) lowered to an online-softmax kernel, so its memory is linear in
// the sequence length: no score matrix exists, each thread keeps the running max, sum and
// output rows of its queries in private memory and streams the keys once.
//
// Matches:  a kernel whose one result is an `attention` with a static head dim
//           (Strategy::Attention, codegen.cpp).
// Plan:     AttentionPlan{rows, threads}: each thread owns `rows` consecutive query rows of
//           one (batch, head); cpu: CpuAttentionPlan (key tiles, register blocks:
//           attention_cpu.cpp), or with at most 4 queries (a decode step) one thread per
//           workgroup with rows = the queries of `heads` query heads that read one kv head
//           (AttentionPlan{queries, 1, 0, 0, heads}); gpu: 64 threads, one row each, keys
//           and values staged in shared memory (AttentionPlan{1, 64, 0, keys}: the kernel
//           of attention_staged.cpp) or, where no stage fits, read by each thread; with at
//           most 4 query rows on a gpu with subgroups, AttentionPlan{1, threads,
//           subgroup}: the split-key kernel of attention_split.cpp (one workgroup per row,
//           its keys over the subgroups).
// Emits:    workgroups over (batch x heads) x query blocks; per tile of keys j (up to the
//           block's last causal key): s = scale * q.k_j (+ mask), m' = max(m, s of the
//           tile), l = l*e^(m-m') + sum e^(s-m'), acc = acc*e^(m-m') + sum e^(s-m') * v_j,
//           in f32; then out = acc / l. A key hidden by the causal flag or a -inf mask
//           weighs 0; a row that sees no key gives NaN like the reference (0 / 0). Tiles
//           are kKeyTile keys on cpu and where the target keeps unrolled private arrays in
//           registers (cuda, amdgpu) and the q and output rows fit kRegisterRows (the loops
//           over the head dims then marked unroll=1), else one key; a tile's scores are
//           summed along the head dims together (the head dim outer, its keys inner).
//
//   %o = attention %q, %k, %v {causal = 1}    =>   for j < min(Sk, last + Sk - Sq + 1):
//     : tensor<1x4x{s}x8xf32>                        for i in block: online softmax update
#include <algorithm>
#include <cmath>

#include "passes/lower/kernel_builder.h"
#include "passes/lower/strategy.h"

namespace kiln {

namespace {

// At most this many query rows (its upper bound) take the split-key plan on gpus: each row
// then reads every key and value itself, which only pays when the rows are few.
constexpr int64_t kSplitKeyMaxQueries = 4;
// Larger heads than kAttentionRegisterRows, and Vulkan targets, keep private arrays in
// (cached) local memory.
constexpr int64_t kRegisterRows = kAttentionRegisterRows;
constexpr int64_t kKeyTile = kAttentionKeyTile;
// Keys per stage of the staged gpu plan, largest first (each a multiple of kKeyTile).
constexpr int64_t kStagedKeys[] = {32, 16, 8};
constexpr int64_t kStagedTileBytes = 16 * 1024;

} // namespace

bool matchAttention(const KernelRef& k, const TargetDesc&) {
  if (k.shape.strategy != Strategy::Attention || !k.shape.anchor) return false;
  const Type& v = k.shape.anchor->operand(2)->type();
  const Type& q = k.shape.anchor->operand(0)->type();
  return q.dim(q.rank() - 1).isStatic() && v.dim(v.rank() - 1).isStatic();
}

std::vector<Plan> attentionPlans(const KernelShape& s, const TargetDesc& t,
                                 const SymbolTable& syms) {
  if (t.cpu) return cpuAttentionPlans(s, t, syms);
  const Type& q = s.anchor->operand(0)->type();
  int64_t queries = upperBound(q.dim(q.rank() - 2), syms);
  int64_t threads = std::min<int64_t>({64, t.maxWorkgroupSize[0], t.maxWorkgroupInvocations});
  AttentionPlan rows{1, threads};
  // Few queries (a decode step): one row per workgroup, its keys split over the
  // workgroup's subgroups; smaller workgroups for targets whose shared memory the partials
  // outgrow, then one thread per row.
  // More queries: the key and value tiles staged in shared memory, the largest that fits;
  // without shared memory enough for any, every thread reads them itself.
  int64_t sg = t.subgroupSizes.empty() ? 1 : t.subgroupSizes[0];
  std::vector<Plan> plans;
  if (sg >= 2 && queries <= kSplitKeyMaxQueries) {
    int64_t cap = std::min<int64_t>({256, t.maxWorkgroupSize[0], t.maxWorkgroupInvocations});
    for (int64_t th = cap / sg * sg; th >= sg; th = th / 2 / sg * sg)
      plans.push_back(AttentionPlan{1, th, sg});
  }
  // The largest stage whose key and value tiles take at most kStagedTileBytes (the
  // smallest always), so that several workgroups share a multiprocessor.
  const Type& v = s.anchor->operand(2)->type();
  int64_t dims = q.dim(q.rank() - 1).value() + v.dim(v.rank() - 1).value();
  for (int64_t keys : kStagedKeys)
    if (keys == kKeyTile || keys * dims * 4 <= kStagedTileBytes)
      plans.push_back(AttentionPlan{1, threads, 0, keys});
  plans.push_back(rows);
  return plans;
}

bool attentionQInShared(const KernelShape& s, const AttentionPlan& p) {
  if (p.keys < 1 || p.subgroup > 0 || !s.anchor) return false;
  const Type &q = s.anchor->operand(0)->type(), &v = s.anchor->operand(2)->type();
  if (!q.dim(q.rank() - 1).isStatic() || !v.dim(v.rank() - 1).isStatic()) return false;
  int64_t D = q.dim(q.rank() - 1).value(), Dv = v.dim(v.rank() - 1).value();
  return (D + Dv) * p.rows > kRegisterRows && Dv * p.rows <= kRegisterRows;
}

std::vector<SharedBuffer> attentionSharedBuffers(const KernelShape& s, const AttentionPlan& p) {
  if ((p.subgroup < 1 && p.keys < 1) || !s.anchor) return {};
  const Type& v = s.anchor->operand(2)->type();
  int64_t dv = v.dim(v.rank() - 1).isStatic() ? v.dim(v.rank() - 1).value() : 1;
  if (p.keys > 0) {
    // The staged key and value tiles, then the q rows ([D / G, threads x rows, G] with G = 4
    // lanes where D allows) when they are shared.
    const Type& q = s.anchor->operand(0)->type();
    int64_t d = q.dim(q.rank() - 1).isStatic() ? q.dim(q.rank() - 1).value() : 1;
    std::vector<SharedBuffer> bufs = {{ElemType::F32, {p.keys, d}}, {ElemType::F32, {p.keys, dv}}};
    int64_t g = d % 4 == 0 ? 4 : 1;
    if (attentionQInShared(s, p)) bufs.push_back({ElemType::F32, {d / g, p.threads * p.rows, g}});
    return bufs;
  }
  int64_t parts = std::max<int64_t>(p.threads / p.subgroup, 1);
  // Each subgroup's running max and sum, and its unnormalized output row.
  return {{ElemType::F32, {parts, 2}}, {ElemType::F32, {parts, dv}}};
}

std::optional<std::string> strategyProblem(const KernelShape& s, const AttentionPlan& p,
                                           const TargetDesc& t, bool checkSharedMemory) {
  if (s.strategy != Strategy::Attention)
    return "tile " + listStr({p.rows}) + " is an attention kernel's, and the kernel has none";
  if (p.subgroup > 0) {
    std::string tile = listStr({p.rows, p.subgroup});
    if (t.cpu)
      return "tile " + tile + " splits keys over subgroups; " + t.name + " is a cpu target";
    if (std::find(t.subgroupSizes.begin(), t.subgroupSizes.end(), p.subgroup) ==
        t.subgroupSizes.end())
      return "tile " + tile + ": " + t.name + " has no subgroups of " + std::to_string(p.subgroup) +
             " threads";
    if (p.rows != 1 || p.threads % p.subgroup != 0)
      return "tile " + tile +
             ": a split-key attention kernel takes one row per workgroup and "
             "whole subgroups, got workgroup " +
             listStr({p.threads, 1, 1});
    if (checkSharedMemory) return sharedMemoryProblem(tile, attentionSharedBuffers(s, p), t);
    return std::nullopt;
  }
  if (p.heads != 1) {
    std::string tile = listStr({p.rows, p.heads});
    if (!t.cpu) return "tile " + tile + " takes several heads per thread, a cpu plan";
    const Type &q = s.anchor->operand(0)->type(), &k = s.anchor->operand(1)->type();
    const Dim &hq = q.dim(q.rank() - 3), &hk = k.dim(k.rank() - 3);
    if (p.heads < 1 || !hq.isStatic() || !hk.isStatic() || hk.value() < 1 ||
        hq.value() % hk.value() != 0 || (hq.value() / hk.value()) % p.heads != 0)
      return "tile " + tile + ": the heads per thread must divide the query heads per kv head";
    if (p.rows < 1 || p.rows > 64 || p.heads > 64 || p.rows * p.heads > 64 || p.threads != 1)
      return "tile " + tile +
             ": a thread takes at most 64 rows of its heads, with workgroup "
             "[1, 1, 1], got workgroup " +
             listStr({p.threads, 1, 1});
    return std::nullopt;
  }
  if (p.keys != 0) {
    std::string tile = listStr({p.rows, 0, p.keys});
    if (t.cpu)
      return "tile " + tile + " stages keys in shared memory; " + t.name + " is a cpu target";
    if (p.rows < 1 || p.rows > 64 || p.threads < 1 || p.keys < 1 || p.keys > 4096 ||
        p.keys % kKeyTile != 0)
      return "tile " + tile +
             ": a staged attention kernel takes 1 to 64 query rows per thread "
             "and a multiple of " +
             std::to_string(kKeyTile) + " keys per stage, at most 4096";
    if (checkSharedMemory) return sharedMemoryProblem(tile, attentionSharedBuffers(s, p), t);
    return std::nullopt;
  }
  if (p.rows < 1 || p.rows > 64 || p.threads < 1)
    return "an attention kernel takes tile [rows] (1 to 64 query rows per thread) with "
           "workgroup [threads, 1, 1], got tile " +
           listStr({p.rows}) + " and workgroup " + listStr({p.threads, 1, 1});
  return std::nullopt;
}

AttentionRows attentionRows(KernelBuilder& b, int64_t rows, int64_t threads, int64_t perHead) {
  const Op& att = *b.shape().anchor;
  const Shape &qs = att.operand(0)->type().shape(), &ks = att.operand(1)->type().shape();
  size_t r = qs.size();
  AttentionRows a;
  // Prologue: extents, the grid (query blocks x batch-heads, folded under the grid cap).
  Shape bh(qs.begin(), qs.begin() + static_cast<long>(r - 2)); // B.. x Hq
  // With perHead > 1 a workgroup takes perHead consecutive heads (the plan checked that
  // they divide the heads of a kv group): its head index counts groups of them.
  Value* heads = b.product(bh, 0, bh.size());
  if (perHead > 1) heads = b.idx(OpKind::IFloorDiv, heads, b.cst(perHead), b.prologue());
  a.Sq = b.dim(qs[r - 2]);
  a.Sk = b.dim(ks[r - 2]);
  Value* group = b.idx(OpKind::IFloorDiv, b.dim(qs[r - 3]), b.dim(ks[r - 3]), b.prologue());
  Value* blocks = b.idx(OpKind::ICeilDiv, a.Sq, b.cst(rows * threads), b.prologue());
  Value* total = b.idx(OpKind::IMul, blocks, heads, b.prologue());
  Value* gx =
      b.idx(OpKind::IMax, b.idx(OpKind::IMin, total, b.cst(gridCap(b.target())), b.prologue()),
            b.cst(1), b.prologue());
  b.setGrid(0, gx);
  b.setGrid(1, b.idx(OpKind::ICeilDiv, total, gx, b.prologue()));
  a.off = b.idx(OpKind::ISub, a.Sk, a.Sq, b.prologue());

  // This thread's rows [i0, iEnd) of batch-head `g / blocks` (empty past the end).
  Value* wx = b.mk(b.body(), OpKind::WorkgroupId, {}, Type::index(), b.axisAttr(0));
  Value* wy = b.mk(b.body(), OpKind::WorkgroupId, {}, Type::index(), b.axisAttr(1));
  Value* lid = b.mk(b.body(), OpKind::LocalId, {}, Type::index(), b.axisAttr(0));
  Value* g = b.idx(OpKind::IAdd, b.idx(OpKind::IMul, wy, gx), wx);
  Value* live = b.cmp("lt", g, total);
  g = b.mk(b.body(), OpKind::SSelect, {live, g, b.cst(0)}, Type::index());
  Value* head = b.idx(OpKind::IFloorDiv, g, blocks);
  if (perHead > 1) head = b.idx(OpKind::IMul, head, b.cst(perHead));
  Value* blk = b.idx(OpKind::IMod, g, blocks);
  a.i0 = b.idx(OpKind::IMul, b.idx(OpKind::IAdd, b.idx(OpKind::IMul, blk, b.cst(threads)), lid),
               b.cst(rows));
  Value* iEnd = b.idx(OpKind::IMin, b.idx(OpKind::IAdd, a.i0, b.cst(rows)), a.Sq);
  iEnd = b.mk(b.body(), OpKind::SSelect, {live, iEnd, a.i0}, Type::index());
  a.iEnd = b.idx(OpKind::IMax, iEnd, a.i0);
  a.b0 = b.idx(OpKind::IMul, blk, b.cst(rows * threads));
  Value* bEnd = b.idx(OpKind::IMin, b.idx(OpKind::IAdd, a.b0, b.cst(rows * threads)), a.Sq);
  bEnd = b.mk(b.body(), OpKind::SSelect, {live, bEnd, a.b0}, Type::index());
  a.bEnd = b.idx(OpKind::IMax, bEnd, a.b0);
  a.lid = lid;
  a.hix = b.delinearize(head, bh); // B.. indices, then the query head
  a.kvIx.assign(a.hix.begin(), a.hix.end() - 1);
  a.kvIx.push_back(b.idx(OpKind::IFloorDiv, a.hix.back(), group));
  return a;
}

namespace {

Value* keyEnd(KernelBuilder& b, const AttentionRows& rows, Value* first, Value* end, bool causal) {
  Value* kEnd = rows.Sk;
  if (causal)
    kEnd = b.idx(OpKind::IMax, b.idx(OpKind::IMin, rows.Sk, b.idx(OpKind::IAdd, end, rows.off)),
                 b.cst(0));
  return b.mk(b.body(), OpKind::SSelect, {b.cmp("lt", first, end), kEnd, b.cst(0)}, Type::index());
}

} // namespace

Value* attentionKeyEnd(KernelBuilder& b, const AttentionRows& rows, bool causal) {
  return keyEnd(b, rows, rows.i0, rows.iEnd, causal);
}

Value* attentionBlockKeyEnd(KernelBuilder& b, const AttentionRows& rows, bool causal) {
  return keyEnd(b, rows, rows.b0, rows.bEnd, causal);
}

Value* attentionWeight(KernelBuilder& b, Value* x, Value* max, Value* negInf, Value* zero) {
  const ElemType f = ElemType::F32;
  Value* e = b.compute(OpKind::Exp, {b.compute(OpKind::Sub, {x, max}, f)}, f);
  return b.compute(OpKind::Select, {b.compute(OpKind::Eq, {x, negInf}, ElemType::I1), zero, e}, f);
}

Status attentionMaskTile(KernelBuilder& b, const AttentionRows& rows, const AttentionTile& t) {
  const Op& att = *b.shape().anchor;
  const Value* mv = att.numOperands() == 4 ? att.operand(3) : nullptr;
  const ElemType f = ElemType::F32;
  Value* k = b.beginFor(b.cst(0), b.cst(t.keys), b.cst(1));
  if (t.unroll) b.unrollLoop();
  Value* j = b.idx(OpKind::IAdd, t.j0, k);
  Value* jl = t.keys > 1 ? b.idx(OpKind::IMin, j, t.lastKey) : j;
  Value* r = b.beginFor(b.cst(0), b.cst(t.rows), b.cst(1));
  Value* sc =
      b.compute(OpKind::Mul, {b.ld(t.scores, {k, r}), b.scst(f, att.attrs().getFloat("scale"))}, f);
  if (mv) {
    std::vector<Value*> six = t.hixOf(r);
    six.push_back(t.loadRow(r));
    six.push_back(jl);
    KILN_TRY(Value * mx, b.emitAt(mv, b.bcast(six, mv->type().shape())));
    sc = b.compute(OpKind::Add, {sc, b.castTo(mx, f)}, f);
  }
  if (att.attrs().getInt("causal") != 0) {
    Value* hidden = b.cmp("gt", j, b.idx(OpKind::IAdd, t.rowOf(r), rows.off));
    sc = b.compute(OpKind::Select, {hidden, t.negInf, sc}, f);
  }
  if (t.keys > 1) sc = b.compute(OpKind::Select, {b.cmp("lt", j, t.kEnd), sc, t.negInf}, f);
  b.st(sc, t.scores, {k, r});
  b.endFor();
  b.endFor();
  return ok();
}

void attentionSoftmaxTile(KernelBuilder& b, const AttentionTile& t) {
  const ElemType f = ElemType::F32;
  auto weight = [&](Value* x, Value* max) { return attentionWeight(b, x, max, t.negInf, t.zero); };
  Value* r = b.beginFor(b.cst(0), b.cst(t.rows), b.cst(1));
  Value* m = b.ld(t.max, {r});
  Value* mNew = m;
  for (int64_t k = 0; k < t.keys; ++k)
    mNew = b.compute(OpKind::Max, {mNew, b.ld(t.scores, {b.cst(k), r})}, f);
  Value* alpha = weight(m, mNew);
  b.st(mNew, t.max, {r});
  b.st(alpha, t.alpha, {r});
  Value* l = b.compute(OpKind::Mul, {b.ld(t.sum, {r}), alpha}, f);
  for (int64_t k = 0; k < t.keys; ++k) {
    Value* pk = weight(b.ld(t.scores, {b.cst(k), r}), mNew);
    b.st(pk, t.weights, {b.cst(k), r});
    l = b.compute(OpKind::Add, {l, pk}, f);
  }
  b.st(l, t.sum, {r});
  b.endFor();
}

void attentionRescaleRows(KernelBuilder& b, const AttentionTile& t, Value* acc, Value* e) {
  const ElemType f = ElemType::F32;
  Value* r = b.beginFor(b.cst(0), b.cst(t.rows), b.cst(1));
  b.st(b.compute(OpKind::Mul, {b.ld(acc, {e, r}), b.ld(t.alpha, {r})}, f), acc, {e, r});
  b.endFor();
}

void attentionAccumulateRows(KernelBuilder& b, const AttentionTile& t, Value* acc, Value* e,
                             Value* k, Value* v) {
  const ElemType f = ElemType::F32;
  Value* r = b.beginFor(b.cst(0), b.cst(t.rows), b.cst(1));
  Value* pv = b.compute(OpKind::Mul, {b.ld(t.weights, {k, r}), v}, f);
  b.st(b.compute(OpKind::Add, {b.ld(acc, {e, r}), pv}, f), acc, {e, r});
  b.endFor();
}

void attentionStoreRows(KernelBuilder& b, const AttentionRows& rows, const AttentionTile& t,
                        Value* acc, int64_t dv, bool unroll) {
  // A static loop over the thread's rows, so that the private arrays' indices are constants
  // once it is unrolled.
  const ElemType f = ElemType::F32;
  ElemType oe = b.shape().anchor->result()->type().elem();
  Value* r = b.beginFor(b.cst(0), b.cst(t.rows), b.cst(1));
  Value* i = t.rowOf(r);
  Value* live = b.cmp("lt", i, rows.iEnd);
  Value* l = b.ld(t.sum, {r});
  Value* e = b.beginFor(b.cst(0), b.cst(dv), b.cst(1));
  if (unroll) b.unrollLoop();
  std::vector<Value*> st{live, b.castTo(b.compute(OpKind::Div, {b.ld(acc, {e, r}), l}, f), oe),
                         b.output(0)};
  std::vector<Value*> oix = t.hixOf(r);
  st.insert(st.end(), oix.begin(), oix.end());
  st.push_back(i);
  st.push_back(e);
  b.body().createUnchecked(OpKind::MaskedStore, st, {}, {});
  b.endFor();
  b.endFor();
}

Status emitStrategy(KernelBuilder& b, const AttentionPlan& p) {
  if (p.subgroup > 0) return emitSplitKeyAttention(b, p);
  if (p.keys > 0) return emitStagedAttention(b, p);
  const Op& att = *b.shape().anchor;
  const Value *qv = att.operand(0), *kv = att.operand(1), *vv = att.operand(2);
  const Shape &qs = qv->type().shape(), &vs = vv->type().shape();
  size_t r = qs.size();
  int64_t D = qs[r - 1].value(), Dv = vs[r - 1].value();
  const ElemType f = ElemType::F32;
  bool causal = att.attrs().getInt("causal") != 0;
  AttentionRows rows = attentionRows(b, p.rows, p.threads, p.heads);
  Value *Sq = rows.Sq, *i0 = rows.i0;
  const std::vector<Value*>& kvIx = rows.kvIx;

  // Private state, rows innermost so that the per-row updates are vector operations on
  // cpu: q transposed [D, R], the output rows transposed [Dv, R], and per row the running
  // max and sum, this key's score, rescale factor and weight. Rows past iEnd compute on a
  // clamped copy of the last row and are never stored.
  auto priv = [&](std::vector<int64_t> dims) {
    Shape s;
    for (int64_t d : dims) s.push_back(Dim(d));
    return b.mk(b.body(), OpKind::Alloc, {}, Type::buffer(f, s, MemSpace::Private));
  };
  // A thread's R private rows: `rows` query rows of each of its `heads` heads (head-major),
  // all reading one kv head.
  int64_t R = p.rows * p.heads;
  bool inRegisters = b.target().unrolledArraysInRegisters && (D + Dv) * R <= kRegisterRows;
  auto headLoop = [&](int64_t n) {
    Value* i = b.beginFor(b.cst(0), b.cst(n), b.cst(1));
    if (inRegisters) b.unrollLoop();
    return i;
  };
  Value* qT = priv({D, R});
  Value* accT = priv({Dv, R});
  Value* mBuf = priv({R});
  Value* lBuf = priv({R});
  Value* aBuf = priv({R});
  Value* negInf = b.scst(f, -INFINITY);
  Value* zero = b.scst(f, 0);
  Value* lastRow = b.idx(OpKind::ISub, Sq, b.cst(1), b.prologue());
  auto rowOf = [&](Value* r) {
    return b.idx(OpKind::IAdd, i0, p.heads > 1 ? b.idx(OpKind::IMod, r, b.cst(p.rows)) : r);
  };
  auto loadRow = [&](Value* r) { return b.idx(OpKind::IMin, rowOf(r), lastRow); };
  // The batch indices and query head of private row r.
  auto hixOf = [&](Value* r) {
    std::vector<Value*> h = rows.hix;
    if (p.heads > 1)
      h.back() = b.idx(OpKind::IAdd, h.back(), b.idx(OpKind::IFloorDiv, r, b.cst(p.rows)));
    return h;
  };
  {
    Value* r = b.beginFor(b.cst(0), b.cst(R), b.cst(1));
    b.st(negInf, mBuf, {r});
    Value* il = loadRow(r);
    Value* d = headLoop(D);
    std::vector<Value*> ix = hixOf(r);
    ix.push_back(il);
    ix.push_back(d);
    KILN_TRY(Value * x, b.emitAt(qv, ix));
    b.st(b.castTo(x, f), qT, {d, r});
    b.endFor();
    b.endFor();
  }

  // The keys the block sees: all, or up to its last row's causal limit, TK at a time: every
  // key's score first, then one rescale of the running sum and output rows per tile.
  // cpu's rows plan takes keys kKeyTile at a time too: its loops are not unrolled, but the
  // tile's keys are independent sums along the head dims and its rows share one rescale.
  int64_t TK = inRegisters || b.target().cpu ? kKeyTile : 1;
  bool unroll = inRegisters;
  Value* sT = priv({TK, R});
  Value* pT = priv({TK, R});
  Value* kEnd = attentionKeyEnd(b, rows, causal);
  Value* lastKey = b.idx(OpKind::ISub, kEnd, b.cst(1));
  Value* j0 = b.beginFor(b.cst(0), kEnd, b.cst(TK));
  AttentionTile tile{sT, pT,   mBuf,    lBuf,  aBuf,    R,     TK,     unroll,
                     j0, kEnd, lastKey, rowOf, loadRow, hixOf, negInf, zero};
  // The key that key t of the tile reads: keys past kEnd in the last tile read the last key
  // (attentionMaskTile scores them -inf).
  auto keyAt = [&](Value* t) {
    Value* j = b.idx(OpKind::IAdd, j0, t);
    return TK > 1 ? b.idx(OpKind::IMin, j, lastKey) : j;
  };
  auto tileLoop = [&]() {
    Value* t = b.beginFor(b.cst(0), b.cst(TK), b.cst(1));
    if (unroll) b.unrollLoop();
    return t;
  };
  {
    // s_tr = q_r . k_t for every key t of the tile and row r, one head dim at a time for
    // all of them (independent sums): k_t's element scales the row vector.
    Value* t = tileLoop();
    Value* r = b.beginFor(b.cst(0), b.cst(R), b.cst(1));
    b.st(zero, sT, {t, r});
    b.endFor();
    b.endFor();
    Value* d = headLoop(D);
    t = tileLoop();
    std::vector<Value*> kix = kvIx;
    kix.push_back(keyAt(t));
    kix.push_back(d);
    KILN_TRY(Value * kx, b.emitAt(kv, kix));
    Value* kd = b.castTo(kx, f);
    r = b.beginFor(b.cst(0), b.cst(R), b.cst(1));
    b.st(b.compute(OpKind::Add,
                   {b.ld(sT, {t, r}), b.compute(OpKind::Mul, {b.ld(qT, {d, r}), kd}, f)}, f),
         sT, {t, r});
    b.endFor();
    b.endFor();
    b.endFor();
    KILN_CHECK(attentionMaskTile(b, rows, tile));

    // The online-softmax update of each row over the tile: the new max, one rescale
    // factor, each key's weight and the running sum, in key order.
    attentionSoftmaxTile(b, tile);
    // Per value dim: acc_r *= alpha_r, then acc_r += p_tr * v_t for each key t in order.
    Value* e = headLoop(Dv);
    attentionRescaleRows(b, tile, accT, e);
    t = tileLoop();
    std::vector<Value*> vix = kvIx;
    vix.push_back(keyAt(t));
    vix.push_back(e);
    KILN_TRY(Value * vx, b.emitAt(vv, vix));
    attentionAccumulateRows(b, tile, accT, e, t, b.castTo(vx, f));
    b.endFor();
    b.endFor();
  }
  b.endFor();

  // out = acc / l for the block's real rows.
  attentionStoreRows(b, rows, tile, accT, Dv, inRegisters);
  return ok();
}

} // namespace kiln
