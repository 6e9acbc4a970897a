// Strategy `attention`, split-key plan (gpu targets with subgroups, at most a few query
// rows: a decode step). One query row per workgroup, so that a decode over 32 heads keeps
// threads x 32 threads busy instead of 32: the keys are split over the workgroup's
// subgroups, and inside a subgroup the lanes split the head dims.
//
// Plan:     AttentionPlan{1, threads, subgroup}: tile [1, subgroup], workgroup [threads, 1, 1].
// Emits:    workgroup g = (batch x heads) x query row. Subgroup w of the W = threads /
//           subgroup takes keys j = w, w + W, ... (up to the row's last causal key); lane
//           l holds q's dims l, l + subgroup, ... and the same dims of the output row. Per
//           key: s = scale * subgroup_reduce(add, partial q.k_j) (+ mask), then the online
//           softmax update of the subgroup's running max m, sum l and output row, in f32.
//           Finally each subgroup writes (m, l) and its row to shared memory, barrier, and
//           the threads combine the W partial rows: M = max m_w, out = (sum acc_w
//           e^(m_w - M)) / (sum l_w e^(m_w - M)). A -inf score or running max weighs 0;
//           a row that sees no key is NaN (0 / 0) like the reference.
//
//   %o = attention %q, %k, %v           =>   for j = w, kEnd, W (m, l):  s = subgroup_reduce
//     : tensor<1x32x1x128xf32>                 ...; acc[c] = acc[c]*a + p*v[j, lane+c*32]
//                                            masked_store lane==0: m, l -> part[w]; barrier
//                                            for e = tid, 128, threads: combine the W rows
#include <cmath>

#include "passes/lower/kernel_builder.h"
#include "passes/lower/strategy.h"

namespace kiln {

Status emitSplitKeyAttention(KernelBuilder& b, const AttentionPlan& p) {
  const Op& att = *b.shape().anchor;
  const Value *qv = att.operand(0), *kv = att.operand(1), *vv = att.operand(2);
  const Value* mv = att.numOperands() == 4 ? att.operand(3) : nullptr;
  const Shape &qs = qv->type().shape(), &ks = kv->type().shape(), &vs = vv->type().shape();
  size_t r = qs.size();
  int64_t D = qs[r - 1].value(), Dv = vs[r - 1].value();
  int64_t sg = p.subgroup, W = p.threads / p.subgroup;
  int64_t cd = (D + sg - 1) / sg, cv = (Dv + sg - 1) / sg; // dims per lane
  const ElemType f = ElemType::F32;
  double scale = att.attrs().getFloat("scale");
  bool causal = att.attrs().getInt("causal") != 0;
  b.setSubgroup(sg);

  // Prologue: one workgroup per (batch-head, query row), folded under the grid cap.
  Shape bh(qs.begin(), qs.begin() + static_cast<long>(r - 2)); // B.. x Hq
  Value* heads = b.product(bh, 0, bh.size());
  Value* Sq = b.dim(qs[r - 2]);
  Value* Sk = b.dim(ks[r - 2]);
  Value* group = b.idx(OpKind::IFloorDiv, b.dim(qs[r - 3]), b.dim(ks[r - 3]), b.prologue());
  Value* total = b.idx(OpKind::IMul, Sq, heads, b.prologue());
  Value* gx =
      b.idx(OpKind::IMax, b.idx(OpKind::IMin, total, b.cst(gridCap(b.target())), b.prologue()),
            b.cst(1), b.prologue());
  b.setGrid(0, gx);
  b.setGrid(1, b.idx(OpKind::ICeilDiv, total, gx, b.prologue()));
  Value* off = b.idx(OpKind::ISub, Sk, Sq, b.prologue()); // causal: query i sees j <= i + off

  Value* wx = b.mk(b.body(), OpKind::WorkgroupId, {}, Type::index(), b.axisAttr(0));
  Value* wy = b.mk(b.body(), OpKind::WorkgroupId, {}, Type::index(), b.axisAttr(1));
  Value* tid = b.mk(b.body(), OpKind::LocalId, {}, Type::index(), b.axisAttr(0));
  Value* lane = b.mk(b.body(), OpKind::LaneId, {}, Type::index());
  Value* sub = b.idx(OpKind::IFloorDiv, tid, b.cst(sg));
  // A workgroup past the end computes row 0 on no keys (every thread reaches the barrier)
  // and stores nothing.
  Value* g = b.idx(OpKind::IAdd, b.idx(OpKind::IMul, wy, gx), wx);
  Value* live = b.cmp("lt", g, total);
  g = b.mk(b.body(), OpKind::SSelect, {live, g, b.cst(0)}, Type::index());
  Value* row = b.idx(OpKind::IMod, g, Sq);
  std::vector<Value*> hix = b.delinearize(b.idx(OpKind::IFloorDiv, g, Sq), bh);
  Value* h = hix.back();
  std::vector<Value*> kvIx(hix.begin(), hix.end() - 1);
  kvIx.push_back(b.idx(OpKind::IFloorDiv, h, group));

  // This lane's dims c * sg + lane (clamped for the load; a dim past the end counts 0).
  auto laneDim = [&](Value* c, int64_t n) {
    Value* d = b.idx(OpKind::IAdd, b.idx(OpKind::IMul, c, b.cst(sg)), lane);
    return std::pair{b.cmp("lt", d, b.cst(n)), b.idx(OpKind::IMin, d, b.cst(n - 1))};
  };
  auto priv = [&](int64_t n) {
    return b.mk(b.body(), OpKind::Alloc, {}, Type::buffer(f, {Dim(n)}, MemSpace::Private));
  };
  Value* zero = b.scst(f, 0);
  Value* negInf = b.scst(f, -INFINITY);
  Value* qP = priv(cd);
  Value* accP = priv(cv);
  {
    Value* c = b.beginFor(b.cst(0), b.cst(cd), b.cst(1));
    auto [in, d] = laneDim(c, D);
    std::vector<Value*> ix = hix;
    ix.push_back(row);
    ix.push_back(d);
    KILN_TRY(Value * x, b.emitAt(qv, ix));
    b.st(b.compute(OpKind::Select, {in, b.castTo(x, f), zero}, f), qP, {c});
    b.endFor();
  }

  // e^(x - max), or 0 where x is -inf (never exp(-inf - -inf)).
  auto weight = [&](Value* x, Value* max) {
    Value* e = b.compute(OpKind::Exp, {b.compute(OpKind::Sub, {x, max}, f)}, f);
    return b.compute(OpKind::Select, {b.compute(OpKind::Eq, {x, negInf}, ElemType::I1), zero, e},
                     f);
  };

  // The row's keys: all, or up to its causal limit; none for a workgroup past the end.
  Value* kEnd = Sk;
  if (causal)
    kEnd =
        b.idx(OpKind::IMax,
              b.idx(OpKind::IMin, Sk, b.idx(OpKind::IAdd, b.idx(OpKind::IAdd, row, off), b.cst(1))),
              b.cst(0));
  kEnd = b.mk(b.body(), OpKind::SSelect, {live, kEnd, b.cst(0)}, Type::index());
  Value* j = b.beginFor(sub, kEnd, b.cst(W), {negInf, zero});
  std::vector<Value*> ml;
  {
    Value* m = b.carried()[0];
    Value* l = b.carried()[1];
    Value* c = b.beginFor(b.cst(0), b.cst(cd), b.cst(1), {zero});
    auto [in, d] = laneDim(c, D);
    std::vector<Value*> kix = kvIx;
    kix.push_back(j);
    kix.push_back(d);
    KILN_TRY(Value * kx, b.emitAt(kv, kix));
    Value* prod = b.compute(OpKind::Mul, {b.ld(qP, {c}), b.castTo(kx, f)}, f);
    prod = b.compute(OpKind::Select, {in, prod, zero}, f);
    Value* part = b.endFor({b.compute(OpKind::Add, {b.carried()[0], prod}, f)})[0];
    Attrs add;
    add.set("fn", OpKind::Add);
    Value* dot = b.mk(b.body(), OpKind::SubgroupReduce, {part}, Type::scalar(f), add);
    Value* s = b.compute(OpKind::Mul, {dot, b.scst(f, scale)}, f);
    if (mv) {
      std::vector<Value*> six = hix;
      six.push_back(row);
      six.push_back(j);
      KILN_TRY(Value * mx, b.emitAt(mv, b.bcast(six, mv->type().shape())));
      s = b.compute(OpKind::Add, {s, b.castTo(mx, f)}, f);
    }
    Value* mNew = b.compute(OpKind::Max, {m, s}, f);
    Value* alpha = weight(m, mNew);
    Value* pj = weight(s, mNew);
    Value* lNew = b.compute(OpKind::Add, {b.compute(OpKind::Mul, {l, alpha}, f), pj}, f);
    // acc = acc * alpha + p * v_j on this lane's dims.
    c = b.beginFor(b.cst(0), b.cst(cv), b.cst(1));
    auto [vin, e] = laneDim(c, Dv);
    std::vector<Value*> vix = kvIx;
    vix.push_back(j);
    vix.push_back(e);
    KILN_TRY(Value * vx, b.emitAt(vv, vix));
    Value* ve = b.compute(OpKind::Select, {vin, b.castTo(vx, f), zero}, f);
    Value* a = b.compute(OpKind::Mul, {b.ld(accP, {c}), alpha}, f);
    b.st(b.compute(OpKind::Add, {a, b.compute(OpKind::Mul, {pj, ve}, f)}, f), accP, {c});
    b.endFor();
    ml = b.endFor({mNew, lNew});
  }

  // Each subgroup's partial result to shared memory.
  Value* parts =
      b.mk(b.body(), OpKind::Alloc, {}, Type::buffer(f, {Dim(W), Dim(2)}, MemSpace::Shared));
  Value* rows =
      b.mk(b.body(), OpKind::Alloc, {}, Type::buffer(f, {Dim(W), Dim(Dv)}, MemSpace::Shared));
  Value* first = b.cmp("eq", lane, b.cst(0));
  b.body().createUnchecked(OpKind::MaskedStore, {first, ml[0], parts, sub, b.cst(0)}, {}, {});
  b.body().createUnchecked(OpKind::MaskedStore, {first, ml[1], parts, sub, b.cst(1)}, {}, {});
  Value* c = b.beginFor(b.cst(0), b.cst(cv), b.cst(1));
  auto [sIn, se] = laneDim(c, Dv);
  b.body().createUnchecked(OpKind::MaskedStore, {sIn, b.ld(accP, {c}), rows, sub, se}, {}, {});
  b.endFor();
  b.body().createUnchecked(OpKind::Barrier, {}, {}, {});

  // Combine: the largest running max, the rescaled sums, then the rows.
  Value* w = b.beginFor(b.cst(0), b.cst(W), b.cst(1), {negInf});
  Value* M = b.endFor({b.compute(OpKind::Max, {b.carried()[0], b.ld(parts, {w, b.cst(0)})}, f)})[0];
  w = b.beginFor(b.cst(0), b.cst(W), b.cst(1), {zero});
  Value* scaled = b.compute(OpKind::Mul,
                            {b.ld(parts, {w, b.cst(1)}), weight(b.ld(parts, {w, b.cst(0)}), M)}, f);
  Value* L = b.endFor({b.compute(OpKind::Add, {b.carried()[0], scaled}, f)})[0];
  ElemType oe = att.result()->type().elem();
  Value* eEnd = b.mk(b.body(), OpKind::SSelect, {live, b.cst(Dv), b.cst(0)}, Type::index());
  Value* e = b.beginFor(tid, eEnd, b.cst(p.threads));
  w = b.beginFor(b.cst(0), b.cst(W), b.cst(1), {zero});
  Value* term =
      b.compute(OpKind::Mul, {b.ld(rows, {w, e}), weight(b.ld(parts, {w, b.cst(0)}), M)}, f);
  Value* o = b.endFor({b.compute(OpKind::Add, {b.carried()[0], term}, f)})[0];
  std::vector<Value*> oix = hix;
  oix.push_back(row);
  oix.push_back(e);
  b.st(b.castTo(b.compute(OpKind::Div, {o, L}, f), oe), b.output(0), oix);
  b.endFor();
  return ok();
}

} // namespace kiln
