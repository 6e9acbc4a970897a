// Strategy `attention`, cpu plan: the online-softmax kernel as two small GEMMs per key
// tile, register-blocked and vectorized like matmul-cpu's micro-kernel. The rows plan
// (attention.cpp: rows in vector lanes, one key per step) leaves a cpu with a chain of D
// dependent FMAs per key and a value update strided across the rows; here a tile's scores
// are a rows x keys block of vector accumulators and its values are accumulated into
// rows x Dv vectors.
//
// Matches:  attention's kernels on cpu targets (attentionPlans asks cpuAttentionPlans).
// Plan:     CpuAttentionPlan{block, rows, keys}: tile [block, rows, keys], workgroup
//           [1, 1, 1]; `block` query rows of one (batch, head) per workgroup (at most 64,
//           fewer until there are 16 workgroups), `rows` = 4 rows per register block,
//           `keys` per tile: up to 4 vectors, as many as rows x keys accumulators leave
//           room for in the vector registers (64 with AVX-512). At most `rows` queries
//           (a decode step) keep the rows plan of attention.cpp, AttentionPlan{queries, 1,
//           0, 0, heads} (tile [queries, heads]): each thread takes the queries of `heads`
//           query heads that share a kv head, so it reads those keys and values once.
// Emits:    per workgroup, its q rows in private memory; per key tile: the tile's keys
//           packed transposed ([D, keys], contiguous along the keys; the values too when a
//           prologue computes them), then per register block of `rows` rows that sees a key
//           of the tile (causal: from the first such block): S = q . K^T with one vector
//           FMA per (row, key vector, d); scale, mask, hidden keys (-inf: past the causal
//           limit or the last key) and per row m' = max(m, max S), p = e^(S - m'),
//           l[c] = l[c] e^(m - m') + p[c] (per key place), in f32; then acc = acc
//           e^(m - m') + p . V with one vector FMA per (row, value vector, key), Dv in
//           chunks that fit the registers. Keys that are not a multiple of `keys` end in
//           one narrower tile. Finally out = acc / sum l for the block's real rows. A
//           hidden key weighs 0; a row that sees no key is NaN (0 / 0) like the reference.
//
//   %o = attention %q, %k, %v : tensor<1x12x197x64xf32>   =>   for j0 in keys by 64:
//     (tile [64, 4, 64])                                            kT = k[j0.., :]^T
//                                                                    for 4 rows: S = q kT
//                                                                      softmax; acc += P v
#include <algorithm>
#include <cmath>

#include "passes/lower/kernel_builder.h"
#include "passes/lower/strategy.h"

namespace kiln {

namespace {

constexpr int64_t kRows = 4;
constexpr int64_t kMaxBlock = 64;
// Workgroups a kernel should have at least, so that the cpu's threads share it (and the
// causal blocks, whose work grows along the queries, even out).
constexpr int64_t kMinWorkgroups = 16;
// A decode step's thread takes at most this many rows (queries x heads of one kv head).
constexpr int64_t kMaxDecodeRows = 16;

int64_t lanes(const TargetDesc& t) { return std::max<int64_t>(1, t.preferredVectorBits / 32); }
// Vector registers free for accumulators (the rest hold a loaded row and a broadcast).
int64_t accVectors(const TargetDesc& t) { return std::max<int64_t>(1, t.vectorRegisters - 4); }

int64_t ceilDiv(int64_t x, int64_t d) { return (x + d - 1) / d; }

} // namespace

std::vector<Plan> cpuAttentionPlans(const KernelShape& s, const TargetDesc& t,
                                    const SymbolTable& syms) {
  const Type& q = s.anchor->operand(0)->type();
  int64_t queries = upperBound(q.dim(q.rank() - 2), syms);
  // A decode step (at most a register block of rows, most often one) would pack each key
  // tile for one block's use, mostly for rows past its end: its rows stream the keys.
  // Its rows take every query head of their kv head (up to kMaxDecodeRows rows in all), so
  // that the keys and values are read once per kv head and each key's update is a vector
  // operation over the heads' rows.
  if (queries <= kRows) {
    const Type& k = s.anchor->operand(1)->type();
    const Dim &hq = q.dim(q.rank() - 3), &hk = k.dim(k.rank() - 3);
    int64_t group = hq.isStatic() && hk.isStatic() && hk.value() > 0 && hq.value() % hk.value() == 0
                        ? hq.value() / hk.value()
                        : 1;
    int64_t heads = 1;
    for (int64_t h = 2; h <= group; ++h)
      if (group % h == 0 && queries * h <= kMaxDecodeRows) heads = h;
    return {AttentionPlan{queries, 1, 0, 0, heads}};
  }
  int64_t keys = std::clamp<int64_t>(accVectors(t) / kRows, 1, 4) * lanes(t);
  int64_t heads = 1;
  for (int64_t i = 0; i + 2 < q.rank(); ++i)
    heads = std::min<int64_t>(heads * upperBound(q.dim(i), syms), int64_t(1) << 30);
  int64_t block = std::min<int64_t>(kMaxBlock, ceilDiv(queries, kRows) * kRows);
  while (block > kRows && ceilDiv(queries, block) * heads < kMinWorkgroups)
    block = ceilDiv(block / 2, kRows) * kRows;
  return {CpuAttentionPlan{block, kRows, keys}};
}

std::optional<std::string> strategyProblem(const KernelShape& s, const CpuAttentionPlan& p,
                                           const TargetDesc& t, bool) {
  std::string tile = listStr({p.block, p.rows, p.keys});
  if (s.strategy != Strategy::Attention)
    return "tile " + tile + " is an attention kernel's, and the kernel has none";
  if (!t.cpu) return "tile " + tile + " is a cpu plan; " + t.name + " is not a cpu target";
  if (p.block < 1 || p.rows < 1 || p.keys < 1) return "tile " + tile + " has an entry below 1";
  if (p.block % p.rows != 0) return "tile " + tile + ": the block must be a multiple of rows";
  if (p.block > 1024 || p.rows > 16 || p.keys > 256 || p.rows * p.keys > 1024)
    return "a cpu attention kernel takes tile [block, rows, keys] with block <= 1024, rows <= "
           "16, keys <= 256 and rows x keys <= 1024, got " +
           tile;
  return std::nullopt;
}

Status emitStrategy(KernelBuilder& b, const CpuAttentionPlan& p) {
  const Op& att = *b.shape().anchor;
  const Value *qv = att.operand(0), *kv = att.operand(1), *vv = att.operand(2);
  const Value* mv = att.numOperands() == 4 ? att.operand(3) : nullptr;
  const Shape &qs = qv->type().shape(), &vs = vv->type().shape();
  size_t rank = qs.size();
  int64_t D = qs[rank - 1].value(), Dv = vs[rank - 1].value();
  int64_t QB = p.block, R = p.rows, KT = p.keys;
  const ElemType f = ElemType::F32;
  double scale = att.attrs().getFloat("scale");
  bool causal = att.attrs().getInt("causal") != 0;
  AttentionRows rows = attentionRows(b, QB, 1);
  Value *Sq = rows.Sq, *Sk = rows.Sk, *off = rows.off, *i0 = rows.i0, *iEnd = rows.iEnd;

  auto priv = [&](std::vector<int64_t> dims) {
    Shape s;
    for (int64_t d : dims) s.push_back(Dim(d));
    return b.mk(b.body(), OpKind::Alloc, {}, Type::buffer(f, s, MemSpace::Private));
  };
  // Dv in chunks of at most as many vectors per row as the accumulator registers hold
  // for `rows` rows (one chunk in registers at a time), the last chunk shorter.
  int64_t L = lanes(b.target());
  int64_t chunkMax = std::max<int64_t>(1, accVectors(b.target()) / R) * L;
  int64_t chunks = ceilDiv(Dv, chunkMax);
  int64_t chunk = std::min(Dv, ceilDiv(ceilDiv(Dv, chunks), L) * L);

  // Private state: the block's q rows and output rows (rows past the block's real ones
  // stay 0 and are never stored), each row's running max, and its running sum split by
  // the key's place in the tile (a vector update per tile, summed at the end); a key tile
  // transposed, the register blocks of scores (then weights) and of output rows, each
  // row's rescale factor, a value row.
  Value* qb = priv({QB, D});
  Value* ob = priv({QB, Dv});
  Value* mb = priv({QB});
  Value* lb = priv({QB, KT});
  Value* kt = priv({D, KT});
  Value* sreg = priv({R, KT});
  Value* areg = priv({R});
  Value* oreg = priv({R, chunk});
  Value* vrow = priv({chunk});
  // A value computed by a prologue is packed once per tile, not once per register block.
  Value* vt = computedOperand(vv) ? priv({KT, Dv}) : nullptr;
  Value* negInf = b.scst(f, -INFINITY);
  Value* zero = b.scst(f, 0);
  Value* rowsV = b.idx(OpKind::ISub, iEnd, i0);
  Value* lastRow = b.idx(OpKind::ISub, Sq, b.cst(1), b.prologue());
  Value* lastKey = b.idx(OpKind::ISub, Sk, b.cst(1), b.prologue());
  auto with = [](std::vector<Value*> ix, Value* a, Value* c) {
    ix.push_back(a);
    ix.push_back(c);
    return ix;
  };
  {
    Value* i = b.beginFor(b.cst(0), b.cst(QB), b.cst(1));
    b.st(negInf, mb, {i});
    b.endFor();
    i = b.beginFor(b.cst(0), rowsV, b.cst(1));
    Value* d = b.beginFor(b.cst(0), b.cst(D), b.cst(1));
    KILN_TRY(Value * x, b.emitAt(qv, with(rows.hix, b.idx(OpKind::IAdd, i0, i), d)));
    b.st(b.castTo(x, f), qb, {i, d});
    b.endFor();
    b.endFor();
  }

  // The keys the block sees: all, or up to its last row's causal limit.
  Value* kEnd = attentionKeyEnd(b, rows, causal);
  // One key tile of T <= KT keys from j0 (the buffers' first T key places).
  auto keyTile = [&](Value* j0, int64_t T) -> Status {
    auto keyAt = [&](Value* c) { return b.idx(OpKind::IMin, b.idx(OpKind::IAdd, j0, c), lastKey); };
    {
      // The tile's keys transposed (past the last key: the last key again, hidden below),
      // written along the keys (gathers: a vector store of scattered elements costs more).
      Value* d = b.beginFor(b.cst(0), b.cst(D), b.cst(1));
      Value* c = b.beginFor(b.cst(0), b.cst(T), b.cst(1));
      KILN_TRY(Value * x, b.emitAt(kv, with(rows.kvIx, keyAt(c), d)));
      b.st(b.castTo(x, f), kt, {d, c});
      b.endFor();
      b.endFor();
      if (vt) {
        c = b.beginFor(b.cst(0), b.cst(T), b.cst(1));
        Value* e = b.beginFor(b.cst(0), b.cst(Dv), b.cst(1));
        KILN_TRY(Value * y, b.emitAt(vv, with(rows.kvIx, keyAt(c), e)));
        b.st(b.castTo(y, f), vt, {c, e});
        b.endFor();
        b.endFor();
      }
    }
    // The register blocks that see a key of the tile: causal row i sees j0 when
    // i >= j0 - off, so the blocks before that row's are skipped.
    Value* rb0 = b.cst(0);
    if (causal) {
      Value* first = b.idx(OpKind::ISub, b.idx(OpKind::ISub, j0, off), i0);
      first = b.idx(OpKind::IMax, first, b.cst(0));
      rb0 = b.idx(OpKind::IMul, b.idx(OpKind::IFloorDiv, first, b.cst(R)), b.cst(R));
    }
    Value* rb = b.beginFor(rb0, rowsV, b.cst(R));
    {
      // S = q . K^T: the rows are unrolled, the keys innermost (vector lanes), d outermost.
      for (int64_t r = 0; r < R; ++r) {
        Value* c = b.beginFor(b.cst(0), b.cst(T), b.cst(1));
        b.st(zero, sreg, {b.cst(r), c});
        b.endFor();
      }
      Value* d = b.beginFor(b.cst(0), b.cst(D), b.cst(1));
      for (int64_t r = 0; r < R; ++r) {
        Value* qx = b.ld(qb, {b.idx(OpKind::IAdd, rb, b.cst(r)), d});
        Value* c = b.beginFor(b.cst(0), b.cst(T), b.cst(1));
        Value* prod = b.compute(OpKind::Mul, {qx, b.ld(kt, {d, c})}, f);
        b.st(b.compute(OpKind::Add, {b.ld(sreg, {b.cst(r), c}), prod}, f), sreg, {b.cst(r), c});
        b.endFor();
      }
      b.endFor();

      // Per row: the scores scaled, masked and hidden, their max, the weights and their sum.
      Value* r = b.beginFor(b.cst(0), b.cst(R), b.cst(1));
      Value* lr = b.idx(OpKind::IAdd, rb, r);
      Value* row = b.idx(OpKind::IAdd, i0, lr);
      Value* limit = Sk;
      if (causal)
        limit =
            b.idx(OpKind::IMin, b.idx(OpKind::IAdd, b.idx(OpKind::IAdd, row, off), b.cst(1)), Sk);
      Value* c = b.beginFor(b.cst(0), b.cst(T), b.cst(1), {negInf});
      Value* s = b.compute(OpKind::Mul, {b.ld(sreg, {r, c}), b.scst(f, scale)}, f);
      if (mv) {
        std::vector<Value*> mix = with(rows.hix, b.idx(OpKind::IMin, row, lastRow), keyAt(c));
        KILN_TRY(Value * mx, b.emitAt(mv, b.bcast(mix, mv->type().shape())));
        s = b.compute(OpKind::Add, {s, b.castTo(mx, f)}, f);
      }
      Value* hidden = b.cmp("ge", b.idx(OpKind::IAdd, j0, c), limit);
      s = b.compute(OpKind::Select, {hidden, negInf, s}, f);
      b.st(s, sreg, {r, c});
      Value* tileMax = b.endFor({b.compute(OpKind::Max, {b.carried()[0], s}, f)})[0];
      Value* m = b.ld(mb, {lr});
      Value* mNew = b.compute(OpKind::Max, {m, tileMax}, f);
      Value* alpha = attentionWeight(b, m, mNew, negInf, zero);
      b.st(mNew, mb, {lr});
      b.st(alpha, areg, {r});
      c = b.beginFor(b.cst(0), b.cst(T), b.cst(1));
      Value* w = attentionWeight(b, b.ld(sreg, {r, c}), mNew, negInf, zero);
      b.st(w, sreg, {r, c});
      b.st(b.compute(OpKind::Add, {b.compute(OpKind::Mul, {b.ld(lb, {lr, c}), alpha}, f), w}, f),
           lb, {lr, c});
      b.endFor();
      if (T < KT) { // the sums of the key places this tile does not fill are rescaled too
        c = b.beginFor(b.cst(T), b.cst(KT), b.cst(1));
        b.st(b.compute(OpKind::Mul, {b.ld(lb, {lr, c}), alpha}, f), lb, {lr, c});
        b.endFor();
      }
      b.endFor();

      // acc = acc * alpha + P . V, per chunk of Dv: the rows unrolled, the chunk innermost.
      for (int64_t e0 = 0; e0 < Dv; e0 += chunk) {
        int64_t ec = std::min(chunk, Dv - e0);
        for (int64_t k = 0; k < R; ++k) {
          Value* lk = b.idx(OpKind::IAdd, rb, b.cst(k));
          Value* e = b.beginFor(b.cst(0), b.cst(ec), b.cst(1));
          Value* o = b.ld(ob, {lk, b.idx(OpKind::IAdd, e, b.cst(e0))});
          b.st(b.compute(OpKind::Mul, {o, b.ld(areg, {b.cst(k)})}, f), oreg, {b.cst(k), e});
          b.endFor();
        }
        c = b.beginFor(b.cst(0), b.cst(T), b.cst(1));
        Value* e = b.beginFor(b.cst(0), b.cst(ec), b.cst(1));
        Value* ve = b.idx(OpKind::IAdd, e, b.cst(e0));
        Value* y = nullptr;
        if (vt) {
          y = b.ld(vt, {c, ve});
        } else {
          KILN_TRY(Value * x, b.emitAt(vv, with(rows.kvIx, keyAt(c), ve)));
          y = b.castTo(x, f);
        }
        b.st(y, vrow, {e});
        b.endFor();
        for (int64_t k = 0; k < R; ++k) {
          Value* pk = b.ld(sreg, {b.cst(k), c});
          e = b.beginFor(b.cst(0), b.cst(ec), b.cst(1));
          Value* prod = b.compute(OpKind::Mul, {pk, b.ld(vrow, {e})}, f);
          b.st(b.compute(OpKind::Add, {b.ld(oreg, {b.cst(k), e}), prod}, f), oreg, {b.cst(k), e});
          b.endFor();
        }
        b.endFor();
        for (int64_t k = 0; k < R; ++k) {
          Value* lk = b.idx(OpKind::IAdd, rb, b.cst(k));
          e = b.beginFor(b.cst(0), b.cst(ec), b.cst(1));
          b.st(b.ld(oreg, {b.cst(k), e}), ob, {lk, b.idx(OpKind::IAdd, e, b.cst(e0))});
          b.endFor();
        }
      }
    }
    b.endFor();
    return ok();
  };
  // Whole tiles of KT keys, then, when the keys are not a multiple of KT, the rest in one
  // narrower tile (static keys: the remainder rounded up to a vector, instead of a whole
  // tile's worth of hidden keys; symbolic keys: tiles of one vector).
  const Dim& skDim = kv->type().dim(kv->type().rank() - 2);
  bool ragged = !skDim.isStatic() || skDim.value() % KT != 0;
  int64_t tail =
      skDim.isStatic() ? std::min(KT, ceilDiv(skDim.value() % KT, L) * L) : std::min(KT, L);
  Value* wholeEnd = b.idx(OpKind::IMin, kEnd,
                          b.idx(OpKind::IMul, b.idx(OpKind::IFloorDiv, Sk, b.cst(KT), b.prologue()),
                                b.cst(KT), b.prologue()));
  Value* j0 = b.beginFor(b.cst(0), ragged ? wholeEnd : kEnd, b.cst(KT));
  KILN_CHECK(keyTile(j0, KT));
  b.endFor();
  if (ragged) {
    j0 = b.beginFor(wholeEnd, kEnd, b.cst(tail));
    KILN_CHECK(keyTile(j0, tail));
    b.endFor();
  }

  // out = acc / l for the block's real rows.
  ElemType oe = att.result()->type().elem();
  Value* i = b.beginFor(b.cst(0), rowsV, b.cst(1));
  Value* c = b.beginFor(b.cst(0), b.cst(KT), b.cst(1), {zero});
  Value* l = b.endFor({b.compute(OpKind::Add, {b.carried()[0], b.ld(lb, {i, c})}, f)})[0];
  Value* e = b.beginFor(b.cst(0), b.cst(Dv), b.cst(1));
  Value* o = b.compute(OpKind::Div, {b.ld(ob, {i, e}), l}, f);
  b.st(b.castTo(o, oe), b.output(0), with(rows.hix, b.idx(OpKind::IAdd, i0, i), e));
  b.endFor();
  b.endFor();
  return ok();
}

} // namespace kiln
