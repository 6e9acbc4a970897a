// Strategy `attention`, staged plan (gpu targets, more query rows than a decode step): the
// online-softmax kernel of attention.cpp with the keys and values read through shared
// memory. Every thread of a workgroup reads the same key at the same time, so instead of
// each thread loading it from global memory (through the cache, one element per load), the
// workgroup copies a tile of keys and values into shared memory together (consecutive
// threads, consecutive elements), converted to f32 once, and the threads read them from
// there, 4 lanes per load where the head dims allow.
//
// Plan:     AttentionPlan{rows, threads, 0, keys}: tile [rows, 0, keys], workgroup
//           [threads, 1, 1]; the footprint is attentionSharedBuffers' (keys x (D + Dv) f32,
//           and the q rows where attentionQInShared says they leave registers).
// Emits:    the workgroup's keys (all, or up to its last row's causal limit: later tiles
//           are skipped) `keys` at a time: stage K and V, barrier, each thread's online
//           softmax update over the tile (up to its own rows' causal limit,
//           kAttentionKeyTile keys per step where its rows are registers), barrier. The
//           loop over stages runs to the same bound in every thread of the workgroup (the
//           barriers need it); a workgroup past the grid's end runs none.
//
//   %o = attention %q, %k, %v {causal = 1}    =>   for js < blockKeyEnd step 32:
//     : tensor<1x32x{s}x64xf32>                      Ks[t][d], Vs[t][e] = k, v[js + t]
//                                                    barrier
//                                                    for j0 in [js, min(js + 32, kEnd)) step 8:
//                                                      scores, online softmax update
//                                                    barrier
#include <cmath>

#include "passes/lower/kernel_builder.h"
#include "passes/lower/strategy.h"

namespace kiln {

Status emitStagedAttention(KernelBuilder& b, const AttentionPlan& p) {
  const Op& att = *b.shape().anchor;
  const Value *qv = att.operand(0), *kv = att.operand(1), *vv = att.operand(2);
  const Shape &qs = qv->type().shape(), &vs = vv->type().shape();
  size_t r = qs.size();
  int64_t D = qs[r - 1].value(), Dv = vs[r - 1].value();
  const ElemType f = ElemType::F32;
  bool causal = att.attrs().getInt("causal") != 0;
  int64_t R = p.rows, T = p.threads, SK = p.keys;
  AttentionRows rows = attentionRows(b, R, T);
  Value *Sq = rows.Sq, *i0 = rows.i0;
  const std::vector<Value*>&hix = rows.hix, &kvIx = rows.kvIx;

  // Registers: where the target keeps unrolled private arrays there, the loops over the
  // head dims are unrolled and keys come kAttentionKeyTile at a time. The tiles are read 4
  // lanes per load where the head dims allow, on every target. q rows that do not fit beside
  // the output rows are shared (each thread reads only its own).
  bool qShared = attentionQInShared(b.shape(), p);
  int64_t regs = qShared ? Dv * R : (D + Dv) * R;
  bool inRegisters = b.target().unrolledArraysInRegisters && regs <= kAttentionRegisterRows;
  int64_t G = D % 4 == 0 && Dv % 4 == 0 ? 4 : 1;
  int64_t TK = inRegisters ? kAttentionKeyTile : 1;
  int64_t QG = D % 4 == 0 ? 4 : 1; // the shared q rows' lanes (attentionSharedBuffers)

  auto priv = [&](std::vector<int64_t> dims) {
    Shape s;
    for (int64_t d : dims) s.push_back(Dim(d));
    return b.mk(b.body(), OpKind::Alloc, {}, Type::buffer(f, s, MemSpace::Private));
  };
  auto shared = [&](std::vector<int64_t> dims) {
    Shape s;
    for (int64_t d : dims) s.push_back(Dim(d));
    return b.mk(b.body(), OpKind::Alloc, {}, Type::buffer(f, s, MemSpace::Shared));
  };
  auto headLoop = [&](int64_t n) {
    Value* i = b.beginFor(b.cst(0), b.cst(n), b.cst(1));
    if (inRegisters) b.unrollLoop();
    return i;
  };
  // The lanes of one 4-lane read: unrolled on every target (their private array's indices
  // become constants; SPIR-V asks the driver with the Unroll loop control).
  auto laneLoop = [&]() {
    Value* i = b.beginFor(b.cst(0), b.cst(G), b.cst(1));
    if (G > 1) b.unrollLoop();
    return i;
  };
  Value* Ks = shared({SK, D});
  Value* Vs = shared({SK, Dv});
  Value* qS = qShared ? shared({D / QG, T * R, QG}) : nullptr;
  Value* qT = qShared ? nullptr : priv({D, R});
  Value* accT = priv({Dv, R});
  Value* mBuf = priv({R});
  Value* lBuf = priv({R});
  Value* aBuf = priv({R});
  Value* sT = priv({TK, R});
  Value* pT = priv({TK, R});
  Value* lanes = G > 1 ? priv({G}) : nullptr;
  Value* qLanes = qShared && G > 1 ? priv({R, G}) : nullptr;
  Value* negInf = b.scst(f, -INFINITY);
  Value* zero = b.scst(f, 0);
  Value* lastRow = b.idx(OpKind::ISub, Sq, b.cst(1), b.prologue());
  auto rowOf = [&](Value* r) { return b.idx(OpKind::IAdd, i0, r); };
  auto loadRow = [&](Value* r) { return b.idx(OpKind::IMin, rowOf(r), lastRow); };
  auto hixOf = [&](Value*) { return hix; };
  // The thread's row r's column in the shared q rows.
  auto qCol = [&](Value* r) {
    return b.idx(OpKind::IAdd, b.idx(OpKind::IMul, rows.lid, b.cst(R)), r);
  };

  // The thread's q rows (f32), the running max -inf, sums and output rows 0.
  {
    Value* rr = b.beginFor(b.cst(0), b.cst(R), b.cst(1));
    b.st(negInf, mBuf, {rr});
    b.st(zero, lBuf, {rr});
    Value* il = loadRow(rr);
    Value* d = headLoop(D);
    std::vector<Value*> ix = hix;
    ix.push_back(il);
    ix.push_back(d);
    KILN_TRY(Value * x, b.emitAt(qv, ix));
    if (qShared)
      b.st(b.castTo(x, f), qS,
           {b.idx(OpKind::IFloorDiv, d, b.cst(QG)), qCol(rr), b.idx(OpKind::IMod, d, b.cst(QG))});
    else
      b.st(b.castTo(x, f), qT, {d, rr});
    b.endFor();
    Value* e = headLoop(Dv);
    b.st(zero, accT, {e, rr});
    b.endFor();
    b.endFor();
  }

  Value* kEnd = attentionKeyEnd(b, rows, causal);
  Value* lastKey = b.idx(OpKind::ISub, kEnd, b.cst(1));
  Value* blockEnd = attentionBlockKeyEnd(b, rows, causal);
  Value* blockLast = b.idx(OpKind::ISub, blockEnd, b.cst(1));
  AttentionTile tile{sT,      pT,   mBuf,    lBuf,  aBuf,    R,     TK,     inRegisters,
                     nullptr, kEnd, lastKey, rowOf, loadRow, hixOf, negInf, zero};
  Value* js = b.beginFor(b.cst(0), blockEnd, b.cst(SK));
  {
    // Stage keys js .. js + SK (past the block's last key: its last key again, never seen).
    auto stage = [&](Value* buf, const Value* operand, int64_t n) -> Status {
      int64_t total = SK * n;
      Value* e = total % T == 0
                     ? b.idx(OpKind::IAdd, rows.lid,
                             b.idx(OpKind::IMul, b.beginFor(b.cst(0), b.cst(total / T), b.cst(1)),
                                   b.cst(T)))
                     : b.beginFor(rows.lid, b.cst(total), b.cst(T));
      Value* t = b.idx(OpKind::IFloorDiv, e, b.cst(n));
      Value* d = b.idx(OpKind::IMod, e, b.cst(n));
      std::vector<Value*> ix = kvIx;
      ix.push_back(b.idx(OpKind::IMin, b.idx(OpKind::IAdd, js, t), blockLast));
      ix.push_back(d);
      KILN_TRY(Value * x, b.emitAt(operand, ix));
      b.st(b.castTo(x, f), buf, {t, d});
      b.endFor();
      return ok();
    };
    KILN_CHECK(stage(Ks, kv, D));
    KILN_CHECK(stage(Vs, vv, Dv));
    b.body().createUnchecked(OpKind::Barrier, {}, {}, {});

    // This thread's keys of the stage, TK at a time; keys past its own end (in the last
    // step) read its last key (attentionMaskTile scores them -inf); keyAt gives the place in
    // the stage of the key that key t of the step reads.
    Value* jEnd = b.idx(OpKind::IMin, b.idx(OpKind::IAdd, js, b.cst(SK)), kEnd);
    Value* j0 = b.beginFor(js, jEnd, b.cst(TK));
    tile.j0 = j0;
    auto keyAt = [&](Value* t) {
      Value* j = b.idx(OpKind::IAdd, j0, t);
      return b.idx(OpKind::ISub, TK > 1 ? b.idx(OpKind::IMin, j, lastKey) : j, js);
    };
    // Reads lane c of group g (G lanes) of tile row t into `lanes` first when G > 1.
    auto readGroup = [&](Value* buf, Value* t, Value* g) {
      if (G == 1) return;
      Value* v = b.mk(b.body(), OpKind::VectorLoad, {buf, t, b.idx(OpKind::IMul, g, b.cst(G))},
                      Type::vector(f, G));
      b.body().createUnchecked(OpKind::VectorStore, {v, lanes, b.cst(0)}, {}, {});
    };
    auto lane = [&](Value* buf, Value* t, Value* g, Value* c) {
      if (G > 1) return b.ld(lanes, {c});
      return b.ld(buf, {t, g});
    };
    {
      Value* t = headLoop(TK);
      Value* rr = b.beginFor(b.cst(0), b.cst(R), b.cst(1));
      b.st(zero, sT, {t, rr});
      b.endFor();
      b.endFor();
    }
    // s_tr = q_r . k_t: per group of G head dims, the rows' q values (from shared memory in
    // one load each where they are shared), then each key's G lanes against them.
    {
      Value* g = headLoop(D / G);
      if (qLanes) {
        Value* rr = b.beginFor(b.cst(0), b.cst(R), b.cst(1));
        Value* v =
            b.mk(b.body(), OpKind::VectorLoad, {qS, g, qCol(rr), b.cst(0)}, Type::vector(f, G));
        b.body().createUnchecked(OpKind::VectorStore, {v, qLanes, rr, b.cst(0)}, {}, {});
        b.endFor();
      }
      Value* t = headLoop(TK);
      Value* kt = keyAt(t);
      readGroup(Ks, kt, g);
      Value* c = laneLoop();
      Value* kd = lane(Ks, kt, g, c);
      Value* d = b.idx(OpKind::IAdd, b.idx(OpKind::IMul, g, b.cst(G)), c);
      Value* rr = b.beginFor(b.cst(0), b.cst(R), b.cst(1));
      Value* qd = qLanes    ? b.ld(qLanes, {rr, c})
                  : qShared ? b.ld(qS, {b.idx(OpKind::IFloorDiv, d, b.cst(QG)), qCol(rr),
                                        b.idx(OpKind::IMod, d, b.cst(QG))})
                            : b.ld(qT, {d, rr});
      b.st(b.compute(OpKind::Add, {b.ld(sT, {t, rr}), b.compute(OpKind::Mul, {qd, kd}, f)}, f), sT,
           {t, rr});
      b.endFor();
      b.endFor();
      b.endFor();
      b.endFor();
    }
    // Scale, mask, causal limit; then each row's new max, the rescale and the weights.
    KILN_CHECK(attentionMaskTile(b, rows, tile));
    attentionSoftmaxTile(b, tile);
    // acc_r = acc_r * alpha_r + sum_t p_tr * v_t, G value dims at a time.
    {
      Value* g = headLoop(Dv / G);
      Value* c = laneLoop();
      Value* e = b.idx(OpKind::IAdd, b.idx(OpKind::IMul, g, b.cst(G)), c);
      attentionRescaleRows(b, tile, accT, e);
      b.endFor();
      Value* t = headLoop(TK);
      Value* vt = keyAt(t);
      readGroup(Vs, vt, g);
      c = laneLoop();
      e = b.idx(OpKind::IAdd, b.idx(OpKind::IMul, g, b.cst(G)), c);
      attentionAccumulateRows(b, tile, accT, e, t, lane(Vs, vt, g, c));
      b.endFor();
      b.endFor();
      b.endFor();
    }
    b.endFor(); // j0
    b.body().createUnchecked(OpKind::Barrier, {}, {}, {});
  }
  b.endFor(); // js

  // out = acc / l for the thread's real rows.
  attentionStoreRows(b, rows, tile, accT, Dv, inRegisters);
  return ok();
}

} // namespace kiln
