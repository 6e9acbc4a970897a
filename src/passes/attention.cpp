// attention: recognizes softmax(scale * Q.Kᵀ + mask) . V and rewrites it into one
// `attention` op, so that no `seq x seq` score tensor remains.
//
// Requires:    shape-infer (types are compared exactly).
// Guarantees:  every recognized chain is one `attention`; a mask that is provably causal
//              (an additive triu(-inf), or a masked fill where iota(col) > iota(row) +
//              Sk - Sq, or where a lower-triangular boolean table gathered at rows
//              i + Sk - Sq and columns j is false) becomes `causal = 1` and
//              no mask operand; grouped kv heads expanded by reshape/broadcast/reshape are
//              read in place (no broadcast materialized).
// Invalidates: the rounding of the scores (the chain's f32 intermediates become the
//              attention kernel's accumulation), and an index error the mask table would
//              give past its end (the table is no longer read).
//
//   %s = matmul %q, %kt : 1x4x{s}x{s}            %o = attention %q, %k, %v
//   %t = div %s, 2.83 ; %u = add %t, triu(-inf)   =>     {causal = 1, scale = 0.354}
//   %p = softmax %u {axis = 3} ; %o = matmul %p, %v
//
// A chain is rewritten only when each intermediate (scores, scaled, masked, softmax) has
// one user, the softmax is along the last axis, q, k and v share their rank (>= 3), batch
// dims and element type, and the kv heads divide the query heads. Anything else that only
// looks similar is left alone (tests/lit/attention/).
#include <cmath>
#include <optional>

#include "ir/core/builder.h"
#include "ir/io/weights.h"
#include "passes/canonicalize/patterns.h"
#include "passes/passes.h"

namespace kiln {

namespace {

using canon::constantOf;

bool oneUse(const Value* v) { return v->uses().size() == 1; }

Op* defOf(const Value* v, OpKind k) {
  Op* d = v ? v->def() : nullptr;
  return d && d->kind() == k ? d : nullptr;
}

// The value of a one-element float constant.
std::optional<double> scalarConstant(const Value* v) {
  const HostTensor* t = constantOf(v);
  if (!t || t->numElements() != 1 || !isFloat(t->elem())) return std::nullopt;
  return t->getF(0);
}

// True when every element of `v` is -inf: a constant, or a broadcast of one.
bool allNegInf(const Value* v) {
  while (Op* b = defOf(v, OpKind::Broadcast)) v = b->operand(0);
  const HostTensor* t = constantOf(v);
  if (!t || !isFloat(t->elem())) return false;
  for (int64_t i = 0; i < t->numElements(); ++i)
    if (!(std::isinf(t->getF(i)) && t->getF(i) < 0)) return false;
  return true;
}

// `v` with single-use multiplications and divisions by float scalar constants peeled off
// (their factor folded into `scale`), as long as the type does not change.
Value* peelScale(Value* v, double& scale) {
  for (;;) {
    Op* d = v->def();
    if (!d || (d->kind() != OpKind::Mul && d->kind() != OpKind::Div) || !oneUse(v)) return v;
    std::optional<double> c = scalarConstant(d->operand(1));
    if (!c || d->operand(0)->type() != v->type()) return v;
    scale = d->kind() == OpKind::Mul ? scale * *c : scale / *c;
    v = d->operand(0);
  }
}

// ---- symbolic integers: shape arithmetic the exporters emit ------------------------------

std::optional<SymExpr> symElement(const Value* v, int64_t i, int depth = 0);

// The value of a one-element integer tensor, as a symbolic expression.
std::optional<SymExpr> symScalar(const Value* v, int depth = 0) {
  if (depth > 16 || !isInteger(v->type().elem()) || !v->type().isStatic()) return std::nullopt;
  for (const Dim& d : v->type().shape())
    if (d.value() != 1) return std::nullopt;
  return symElement(v, 0, depth + 1);
}

// Element `i` (C order) of a static integer tensor, as a symbolic expression.
std::optional<SymExpr> symElement(const Value* v, int64_t i, int depth) {
  if (depth > 16 || !v->def()) return std::nullopt;
  const Op& d = *v->def();
  switch (d.kind()) {
  case OpKind::Constant: {
    const HostTensor* t = d.attrs().getDense("value");
    if (!t || !isInteger(t->elem()) || i < 0 || i >= t->numElements()) return std::nullopt;
    return SymExpr::constant(t->getI(i));
  }
  case OpKind::Dim: {
    const Type& t = d.operand(0)->type();
    int64_t axis = d.attrs().getInt("axis");
    if (axis < 0) axis += t.rank();
    if (i != 0 || axis < 0 || axis >= t.rank() || t.dim(axis).isUnknown()) return std::nullopt;
    return t.dim(axis).expr();
  }
  case OpKind::Reshape: return symElement(d.operand(0), i, depth + 1);
  case OpKind::Concat: {
    if (v->type().rank() != 1) return std::nullopt;
    for (const Value* part : d.operands()) {
      if (part->type().rank() != 1 || !part->type().isStatic()) return std::nullopt;
      int64_t n = part->type().dim(0).value();
      if (i < n) return symElement(part, i, depth + 1);
      i -= n;
    }
    return std::nullopt;
  }
  case OpKind::Gather: {
    // A 1-D table indexed by a one-element constant.
    if (d.operand(0)->type().rank() != 1 || i != 0) return std::nullopt;
    const HostTensor* ix = constantOf(d.operand(1));
    if (!ix || ix->numElements() != 1 || !d.operand(0)->type().isStatic()) return std::nullopt;
    int64_t j = ix->getI(0), n = d.operand(0)->type().dim(0).value();
    if (j < 0) j += n;
    return symElement(d.operand(0), j, depth + 1);
  }
  case OpKind::Add:
  case OpKind::Sub: {
    std::optional<SymExpr> a = symScalar(d.operand(0), depth + 1);
    std::optional<SymExpr> b = symScalar(d.operand(1), depth + 1);
    if (!a || !b || i != 0) return std::nullopt;
    return d.kind() == OpKind::Add ? *a + *b : *a - *b;
  }
  default: return std::nullopt;
  }
}

// An index vector whose element i is i + offset (a `range` from 0 by 1, plus a scalar).
std::optional<SymExpr> rangeOffset(const Value* v) {
  if (v->type().rank() != 1 || !isInteger(v->type().elem())) return std::nullopt;
  if (Op* r = defOf(v, OpKind::Range)) {
    double start = r->attrs().getFloat("start"), delta = r->attrs().getFloat("delta");
    if (delta != 1 || start != std::floor(start)) return std::nullopt;
    return SymExpr::constant(static_cast<int64_t>(start));
  }
  if (Op* a = defOf(v, OpKind::Add)) {
    std::optional<SymExpr> base = rangeOffset(a->operand(0));
    std::optional<SymExpr> off = symScalar(a->operand(1));
    if (base && off && a->operand(0)->type() == v->type()) return *base + *off;
  }
  return std::nullopt;
}

// ---- causal masks ------------------------------------------------------------------------

// `m` without broadcasts and reshapes that keep its last two dims.
const Value* stripLeading(const Value* m) {
  for (;;) {
    Op* d = m->def();
    if (!d || (d->kind() != OpKind::Broadcast && d->kind() != OpKind::Reshape)) return m;
    const Type &in = d->operand(0)->type(), &out = m->type();
    if (in.rank() < 2 || out.rank() < 2 || in.dim(in.rank() - 1) != out.dim(out.rank() - 1) ||
        in.dim(in.rank() - 2) != out.dim(out.rank() - 2))
      return m;
    for (int64_t i = 0; i + 2 < in.rank(); ++i)
      if (!in.dim(i).isStatic() || in.dim(i).value() != 1) return m; // a real batch of masks
    m = d->operand(0);
  }
}

// Scores are B.. x H x Sq x Sk; causal hides key j from query i when j > i + Sk - Sq.
struct Scores {
  Dim sq, sk;
};

// An additive mask equal to triu(-inf, k = 1 + Sk - Sq) over Sq x Sk.
bool isCausalAdditive(const Value* m, const Scores& s) {
  m = stripLeading(m);
  Op* t = defOf(m, OpKind::Triu);
  if (!t || m->type().rank() != 2 || !allNegInf(t->operand(0))) return false;
  if (m->type().dim(0) != s.sq || m->type().dim(1) != s.sk) return false;
  SymExpr k = SymExpr::constant(t->attrs().getInt("k"));
  return k == s.sk.expr() - s.sq.expr() + SymExpr::constant(1);
}

// A boolean table T whose element (a, b) is b <= a everywhere.
bool isLowerTriangular(const HostTensor& t) {
  if (t.shape().size() != 2) return false;
  int64_t rows = t.shape()[0], cols = t.shape()[1];
  for (int64_t a = 0; a < rows; ++a)
    for (int64_t b = 0; b < cols; ++b)
      if ((t.getI(a * cols + b) != 0) != (b <= a)) return false;
  return true;
}

// When `v` (of rank 2) is iota along `axis` plus a scalar, that scalar.
std::optional<SymExpr> iotaOffset(const Value* v, int64_t axis) {
  if (Op* i = defOf(v, OpKind::Iota))
    return i->attrs().getInt("axis") == axis ? std::optional(SymExpr::constant(0)) : std::nullopt;
  Op* a = defOf(v, OpKind::Add);
  if (!a || a->operand(0)->type() != v->type()) return std::nullopt;
  std::optional<SymExpr> base = iotaOffset(a->operand(0), axis);
  std::optional<SymExpr> off = symScalar(a->operand(1));
  if (base && off) return *base + *off;
  return std::nullopt;
}

// A comparison col > row + c (or row + c < col) of iotas over Sq x Sk: hides key j from
// query i when j > i + c, which is causal when c = Sk - Sq.
bool isCausalComparison(const Value* cond, const Scores& s) {
  Op* c = cond->def();
  if (!c || (c->kind() != OpKind::Gt && c->kind() != OpKind::Lt)) return false;
  const Value* col = c->operand(c->kind() == OpKind::Gt ? 0 : 1);
  const Value* row = c->operand(c->kind() == OpKind::Gt ? 1 : 0);
  if (col->type().shape() != cond->type().shape() || row->type().shape() != cond->type().shape())
    return false;
  std::optional<SymExpr> colOff = iotaOffset(col, 1), rowOff = iotaOffset(row, 0);
  return colOff && rowOff && *rowOff - *colOff == s.sk.expr() - s.sq.expr();
}

// A condition that is true exactly where the causal mask hides a key: an iota comparison,
// or not(T[rows, cols]) with T lower-triangular, rows = range + (Sk - Sq), cols = range + 0.
bool isCausalHidden(const Value* cond, const Scores& s, WeightStore& weights) {
  cond = stripLeading(cond);
  if (cond->type().rank() == 2 && cond->type().dim(0) == s.sq && cond->type().dim(1) == s.sk &&
      isCausalComparison(cond, s))
    return true;
  Op* n = defOf(cond, OpKind::Not);
  if (!n || cond->type().rank() != 2) return false;
  const Value* g = n->operand(0);
  std::optional<SymExpr> rowOff, colOff;
  // Two gathers over a 2-D table, one per axis, in either order.
  for (int step = 0; step < 2; ++step) {
    Op* d = defOf(g, OpKind::Gather);
    if (!d || d->operand(0)->type().rank() != 2) return false;
    int64_t axis = d->attrs().getInt("axis");
    std::optional<SymExpr> off = rangeOffset(d->operand(1));
    if (!off || (axis != 0 && axis != 1)) return false;
    (axis == 0 ? rowOff : colOff) = off;
    g = d->operand(0);
  }
  if (!rowOff || !colOff || cond->type().dim(0) != s.sq || cond->type().dim(1) != s.sk)
    return false;
  if (!(*colOff == SymExpr::constant(0)) || !(*rowOff == s.sk.expr() - s.sq.expr())) return false;
  if (g->type().elem() != ElemType::I1) return false;
  if (const HostTensor* t = constantOf(g)) return isLowerTriangular(*t);
  if (Op* w = defOf(g, OpKind::Weight)) {
    Result<HostTensor> t = weights.get(w->attrs().getStr("name"));
    return t.ok() && isLowerTriangular(*t);
  }
  return false;
}

// ---- kv operands -------------------------------------------------------------------------

bool isIdentity(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// When `y` = reshape(broadcast(reshape(x))) repeats each slice of x's dim h `rep` times
// (the grouped-query expansion: x's dim h of n becomes n*rep), returns x and h.
std::optional<std::pair<Value*, int64_t>> groupedExpansion(const Value* y) {
  Op* r2 = defOf(y, OpKind::Reshape);
  Op* bc = r2 ? defOf(r2->operand(0), OpKind::Broadcast) : nullptr;
  Op* r1 = bc ? defOf(bc->operand(0), OpKind::Reshape) : nullptr;
  if (!r1) return std::nullopt;
  Value* x = r1->operand(0);
  const Shape &xs = x->type().shape(), &s1 = r1->result()->type().shape(),
              &sb = bc->result()->type().shape(), &ys = y->type().shape();
  if (s1.size() != xs.size() + 1 || sb.size() != s1.size() || ys.size() != xs.size())
    return std::nullopt;
  for (size_t h = 0; h < xs.size(); ++h) {
    // s1 = xs with a 1 after dim h; sb stretches it to rep; ys merges dims h and h+1.
    bool match = s1[h + 1] == Dim(1) && sb[h + 1].isStatic() && xs[h].isStatic();
    for (size_t i = 0; match && i < xs.size(); ++i) {
      size_t j = i <= h ? i : i + 1;
      match = s1[j] == xs[i] && sb[j] == xs[i] && (i == h || ys[i] == xs[i]);
    }
    if (match && ys[h] == Dim(xs[h].value() * sb[h + 1].value())) return std::make_pair(x, h);
  }
  return std::nullopt;
}

// transpose(y, perm) in head layout (B.. x H x S x D), reading grouped heads in place; a
// transpose it creates is appended to `created`.
class KvBuilder {
public:
  KvBuilder(Builder& b, int64_t rank, std::vector<Op*>& created)
      : b_(b), rank_(rank), created_(created) {}

  Result<Value*> build(Value* y, std::vector<int64_t> perm) {
    for (int guard = 0; guard < 8; ++guard) {
      if (Op* t = defOf(y, OpKind::Transpose)) {
        std::vector<int64_t> inner = t->attrs().getInts("perm");
        if (inner.size() != perm.size()) break;
        std::vector<int64_t> composed(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) composed[i] = inner[static_cast<size_t>(perm[i])];
        perm = composed;
        y = t->operand(0);
        continue;
      }
      if (auto g = groupedExpansion(y); g && perm[static_cast<size_t>(rank_ - 3)] == g->second) {
        y = g->first;
        continue;
      }
      break;
    }
    if (isIdentity(perm)) return y;
    Attrs a;
    a.set("perm", perm);
    KILN_TRY(Op * t, b_.create(OpKind::Transpose, {y}, a));
    created_.push_back(t);
    return t->result();
  }

private:
  Builder& b_;
  int64_t rank_;
  std::vector<Op*>& created_;
};

std::vector<int64_t> swapLast(int64_t rank) {
  std::vector<int64_t> p(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) p[static_cast<size_t>(i)] = i;
  std::swap(p[static_cast<size_t>(rank - 1)], p[static_cast<size_t>(rank - 2)]);
  return p;
}

std::vector<int64_t> identity(int64_t rank) {
  std::vector<int64_t> p(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) p[static_cast<size_t>(i)] = i;
  return p;
}

// ---- the rewrite -------------------------------------------------------------------------

// Rewrites the chain ending at `pv` = matmul(softmax(...), v) when it is attention; returns
// whether it did.
Result<bool> rewrite(Func& f, Op& pv, WeightStore& weights) {
  Value* probs = pv.operand(0);
  Op* sm = defOf(probs, OpKind::Softmax);
  int64_t r = probs->type().rank();
  if (!sm || !oneUse(probs) || r < 3 || pv.operand(1)->type().rank() != r) return false;
  int64_t axis = sm->attrs().getInt("axis");
  if (axis != r - 1 && axis != -1) return false;
  Value* masked = sm->operand(0);
  if (!oneUse(masked)) return false;
  Scores s{masked->type().dim(r - 2), masked->type().dim(r - 1)};

  // The mask: additive (either operand of an add), a masked fill select(c, -inf, x), or none.
  Value* scaled = masked;
  Value* mask = nullptr;
  Value* hidden = nullptr; // a select's condition
  Value* fill = nullptr;   // its -inf
  if (Op* add = defOf(masked, OpKind::Add)) {
    for (int side = 0; side < 2 && !mask; ++side) {
      Value *x = add->operand(static_cast<size_t>(side)),
            *m = add->operand(static_cast<size_t>(1 - side));
      if (x->type() != masked->type() || !oneUse(x)) continue;
      Op* xd = x->def();
      if (!xd ||
          (xd->kind() != OpKind::Matmul && xd->kind() != OpKind::Mul && xd->kind() != OpKind::Div))
        continue;
      scaled = x;
      mask = m;
    }
    if (!mask) return false;
  } else if (Op* sel = defOf(masked, OpKind::Select)) {
    if (!allNegInf(sel->operand(1)) || sel->operand(2)->type() != masked->type() ||
        !oneUse(sel->operand(2)))
      return false;
    scaled = sel->operand(2);
    hidden = sel->operand(0);
    fill = sel->operand(1);
  }
  double scale = 1;
  Value* scores = peelScale(scaled, scale);
  Op* qk = defOf(scores, OpKind::Matmul);
  if (!qk || !oneUse(scores)) return false;
  Value* q = peelScale(qk->operand(0), scale);
  Value* kt = qk->operand(1);
  if (q->type().rank() != r || kt->type().rank() != r) return false;
  ElemType e = q->type().elem();
  if (!isFloat(e) || kt->type().elem() != e || pv.operand(1)->type().elem() != e ||
      probs->type().elem() != e)
    return false;

  Builder b(&f, &pv);
  b.setLoc(pv.loc());
  b.setDevice(pv.device());
  // The ops made so far, erased (last first) when the rewrite gives up.
  std::vector<Op*> created;
  auto giveUp = [&] {
    for (auto it = created.rbegin(); it != created.rend(); ++it) f.erase(*it);
    return false;
  };
  KvBuilder kv(b, r, created);
  KILN_TRY(Value * k, kv.build(kt, swapLast(r)));
  KILN_TRY(Value * v, kv.build(pv.operand(1), identity(r)));
  const Shape &qs = q->type().shape(), &ks = k->type().shape(), &vs = v->type().shape();
  for (int64_t d = 0; d < r - 3; ++d)
    if (qs[static_cast<size_t>(d)] != ks[static_cast<size_t>(d)] ||
        qs[static_cast<size_t>(d)] != vs[static_cast<size_t>(d)])
      return giveUp();
  const Dim &hq = qs[static_cast<size_t>(r - 3)], &hk = ks[static_cast<size_t>(r - 3)];
  if (hk != vs[static_cast<size_t>(r - 3)]) return giveUp();
  if (!(hq == hk) &&
      !(hq.isStatic() && hk.isStatic() && hk.value() > 0 && hq.value() % hk.value() == 0))
    return giveUp();

  bool causal = false;
  std::vector<Value*> operands{q, k, v};
  if (mask) {
    causal = isCausalAdditive(mask, s);
    if (!causal) operands.push_back(mask);
  } else if (hidden) {
    causal = isCausalHidden(hidden, s, weights);
    if (!causal) {
      // The mask the fill applies: -inf where hidden, else 0 (the condition's shape).
      Value* zero = b.scalar(e, 0.0);
      created.push_back(zero->def());
      Result<Op*> m = b.create(OpKind::Select, {hidden, fill, zero});
      if (!m.ok()) return giveUp();
      created.push_back(*m);
      operands.push_back((*m)->result());
    }
  }
  Attrs a;
  a.set("scale", scale);
  a.set("causal", static_cast<int64_t>(causal));
  Result<Op*> att = b.create(OpKind::Attention, operands, a);
  if (!att.ok()) return giveUp();
  created.push_back(*att);
  if ((*att)->result()->type() != pv.result()->type()) return giveUp();
  pv.result()->replaceAllUsesWith((*att)->result());
  return true;
}

class AttentionPass : public Pass {
public:
  Status run(Module& m) override {
    WeightStore weights(m);
    for (const auto& f : m.funcs()) {
      bool changed = false;
      for (Op* op : f->opsSnapshot()) {
        if (op->kind() != OpKind::Matmul || op->numOperands() != 2) continue;
        KILN_TRY(bool done, rewrite(*f, *op, weights));
        changed |= done;
      }
      if (changed) KILN_CHECK(createDcePass()->run(m));
    }
    return ok();
  }
};

} // namespace

std::unique_ptr<Pass> createAttentionPass() { return std::make_unique<AttentionPass>(); }

} // namespace kiln
