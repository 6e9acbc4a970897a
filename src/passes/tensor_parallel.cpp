// Tensor parallelism: the sharding rules, the rounds that choose column splits, and the
// rewrite that gives every op one copy per device of its group (tensor_parallel.h).
#include "passes/tensor_parallel.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "ir/core/shape_rules.h"
#include "ir/io/weights.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"
#include "passes/placement.h"

namespace kiln {

namespace {

// How a value is spread over its group: every device holds all of it, piece i of T along
// `dim`, or a summand of it.
struct Sharding {
  enum Kind : uint8_t { Rep, Split, Partial };
  Kind kind = Rep;
  int64_t dim = -1;
  static Sharding rep() { return {}; }
  static Sharding split(int64_t d) { return {Split, d}; }
  static Sharding partial() { return {Partial, -1}; }
  bool isSplit() const { return kind == Split; }
  bool operator==(const Sharding&) const = default;
};

// What one op needs of its operands and gives every result.
struct OpPlan {
  std::vector<Sharding> operands;
  Sharding result;
  bool columnSplit = false; // a matmul whose right operand is split by output columns
  bool rowSplit = false;    // a matmul contracting split operands: partial sums
};

std::optional<int64_t> staticDim(const Type& t, int64_t d) {
  if (d < 0 || d >= t.rank() || t.dim(d).isUnknown()) return std::nullopt;
  return t.dim(d).expr().constantValue();
}

int64_t normAxis(int64_t a, int64_t rank) { return a < 0 ? a + rank : a; }

// The weight op a value is computed from by views and casts only (a transposed or converted
// weight), or null.
const Op* weightOf(const Value* v) {
  while (v->def() && (v->def()->kind() == OpKind::Transpose || v->def()->kind() == OpKind::Cast ||
                      v->def()->kind() == OpKind::Reshape))
    v = v->def()->operand(0);
  return v->def() && v->def()->kind() == OpKind::Weight ? v->def() : nullptr;
}

bool weightDerived(const Value* v) { return weightOf(v) != nullptr; }

// The sharding rules. Partial operands count as replicated (an all_reduce makes them so).
class Planner {
public:
  Planner(int64_t t, const SymbolTable& syms) : t_(t), syms_(syms) {}

  // Whether dim d of `type` is static and splits into T pieces.
  bool divisible(const Type& type, int64_t d) const {
    std::optional<int64_t> n = staticDim(type, d);
    return n && *n >= t_ && *n % t_ == 0;
  }

  // `whole`: the op is a matmul whose weight is pinned replicated, so never cut.
  OpPlan plan(const Op& op, std::vector<Sharding> in, bool columnCandidate,
              bool whole = false) const {
    for (Sharding& s : in)
      if (s.kind == Sharding::Partial) s = Sharding::rep();
    bool anySplit =
        std::any_of(in.begin(), in.end(), [](const Sharding& s) { return s.isSplit(); });
    if (op.numResults() == 0 || op.has(kCollective)) return replicate(op);
    if (op.kind() == OpKind::Matmul) return matmul(op, in, columnCandidate && !whole, whole);
    if (!anySplit) return replicate(op);
    if (op.has(kElementwise)) return elementwise(op, in);
    const Type& x = op.operand(0)->type();
    const Type& r = op.result(0)->type();
    const int64_t d = in[0].dim;
    switch (op.kind()) {
    case OpKind::Transpose: {
      std::vector<int64_t> perm = op.attrs().getInts("perm");
      for (size_t i = 0; i < perm.size(); ++i)
        if (perm[i] == d) return unary(op, in[0], static_cast<int64_t>(i));
      return replicate(op);
    }
    case OpKind::Reshape: return unary(op, in[0], reshapeDim(x, r, d));
    case OpKind::Broadcast: {
      int64_t e = d + r.rank() - x.rank();
      return unary(op, in[0], staticDim(x, d) == staticDim(r, e) ? e : -1);
    }
    case OpKind::Slice: {
      for (int64_t a : op.attrs().getInts("axes"))
        if (normAxis(a, x.rank()) == d) return replicate(op);
      return unary(op, in[0], d);
    }
    case OpKind::ReduceSum:
    case OpKind::ReduceMean:
    case OpKind::ReduceMax:
    case OpKind::ReduceMin:
    case OpKind::ReduceProd: {
      std::vector<int64_t> axes = op.attrs().getInts("axes");
      if (axes.empty()) return replicate(op);
      return reduced(op, in[0], axes, op.attrs().getInt("keepdims") != 0);
    }
    case OpKind::ArgMax:
    case OpKind::ArgMin:
      return reduced(op, in[0], {op.attrs().getInt("axis")}, op.attrs().getInt("keepdims") != 0);
    case OpKind::Softmax:
    case OpKind::LogSoftmax:
    case OpKind::Cumsum:
    case OpKind::TopK: return reduced(op, in[0], {op.attrs().getInt("axis")}, true);
    case OpKind::Split: {
      if (normAxis(op.attrs().getInt("axis"), x.rank()) == d) return replicate(op);
      return unary(op, in[0], d);
    }
    case OpKind::Concat: {
      int64_t axis = normAxis(op.attrs().getInt("axis"), x.rank());
      for (const Sharding& s : in)
        if (s.isSplit() && s.dim != axis && divisible(r, s.dim)) {
          OpPlan p;
          p.operands.assign(op.numOperands(), s);
          p.result = s;
          return p;
        }
      return replicate(op);
    }
    case OpKind::Attention: return attention(op, in);
    default: return replicate(op);
    }
  }

private:
  OpPlan replicate(const Op& op) const {
    OpPlan p;
    p.operands.assign(op.numOperands(), Sharding::rep());
    return p;
  }

  // One operand split along its dim; the results along `e` (-1 or not divisible: replicate).
  OpPlan unary(const Op& op, const Sharding& s, int64_t e) const {
    if (e < 0) return replicate(op);
    for (size_t r = 0; r < op.numResults(); ++r)
      if (!divisible(op.result(r)->type(), e)) return replicate(op);
    OpPlan p = replicate(op);
    p.operands[0] = s;
    p.result = Sharding::split(e);
    return p;
  }

  // A reduction over `axes`: a split on another dim survives (renumbered without keepdims).
  OpPlan reduced(const Op& op, const Sharding& s, const std::vector<int64_t>& axes,
                 bool keepdims) const {
    int64_t rank = op.operand(0)->type().rank(), removed = 0;
    for (int64_t a : axes) {
      int64_t n = normAxis(a, rank);
      if (n == s.dim) return replicate(op);
      if (n < s.dim) ++removed;
    }
    return unary(op, s, keepdims ? s.dim : s.dim - removed);
  }

  // The result dim that holds operand dim d after a reshape, when the split survives: the
  // dims before it hold as many elements on both sides (symbolic dims compare as products,
  // so [1, seq, 64] -> [1, seq, 4, 16] keeps a split of dim 2 on dim 2), so piece i of T is
  // the same elements (-1 otherwise).
  int64_t reshapeDim(const Type& x, const Type& r, int64_t d) const {
    SymExpr before = SymExpr::constant(1);
    for (int64_t i = 0; i < d; ++i) {
      if (x.dim(i).isUnknown()) return -1;
      before = before * x.dim(i).expr();
    }
    SymExpr acc = SymExpr::constant(1);
    for (int64_t e = 0; e < r.rank(); ++e) {
      if (divisible(r, e) && provablyEqual(acc, before, syms_)) return e;
      if (r.dim(e).isUnknown()) return -1;
      acc = acc * r.dim(e).expr();
    }
    return -1;
  }

  OpPlan elementwise(const Op& op, const std::vector<Sharding>& in) const {
    const Type& r = op.result(0)->type();
    for (size_t k = 0; k < in.size(); ++k) {
      if (!in[k].isSplit()) continue;
      int64_t e = in[k].dim + r.rank() - op.operand(k)->type().rank();
      if (!divisible(r, e)) continue;
      OpPlan p;
      p.result = Sharding::split(e);
      for (size_t j = 0; j < in.size(); ++j) {
        const Type& t = op.operand(j)->type();
        int64_t dj = e - (r.rank() - t.rank());
        // An operand broadcast along the split dim is read whole by every device.
        p.operands.push_back(dj >= 0 && staticDim(t, dj) == staticDim(r, e) ? Sharding::split(dj)
                                                                            : Sharding::rep());
      }
      return p;
    }
    return replicate(op);
  }

  OpPlan matmul(const Op& op, const std::vector<Sharding>& in, bool columnCandidate,
                bool whole) const {
    const Type &a = op.operand(0)->type(), &b = op.operand(1)->type(), &r = op.result(0)->type();
    const int64_t ra = a.rank(), rb = b.rank(), rr = r.rank();
    if (ra < 2 || rb < 2) return replicate(op);
    const Sharding &sa = in[0], &sb = in[1];
    OpPlan p = replicate(op);
    // A batch dim: the other operand is split alike where it has the dim, else read whole.
    auto batch = [&](size_t k, int64_t d) {
      const Type& self = k == 0 ? a : b;
      const Type& other = k == 0 ? b : a;
      int64_t e = d + rr - self.rank();
      int64_t od = e - (rr - other.rank());
      p.operands[k] = Sharding::split(d);
      p.operands[1 - k] =
          od >= 0 && od < other.rank() - 2 && staticDim(other, od) == staticDim(r, e)
              ? Sharding::split(od)
              : Sharding::rep();
      p.result = Sharding::split(e);
      return p;
    };
    auto contraction = [&]() {
      if (whole || !divisible(a, ra - 1) || !divisible(b, rb - 2)) return replicate(op);
      p.operands = {Sharding::split(ra - 1), Sharding::split(rb - 2)};
      p.result = Sharding::partial();
      p.rowSplit = true;
      return p;
    };
    if (sa.isSplit() && sa.dim < ra - 2 && divisible(r, sa.dim + rr - ra)) return batch(0, sa.dim);
    if (sb.isSplit() && sb.dim < rb - 2 && divisible(r, sb.dim + rr - rb)) return batch(1, sb.dim);
    if (sa.isSplit() && sa.dim == ra - 2 && divisible(r, rr - 2)) {
      p.operands[0] = sa;
      p.result = Sharding::split(rr - 2);
      return p;
    }
    if (sa.isSplit() && sa.dim == ra - 1) return contraction();
    if (sb.isSplit() && sb.dim == rb - 2) return contraction();
    if ((sb.isSplit() && sb.dim == rb - 1 && !whole) || (columnCandidate && !sa.isSplit())) {
      if (!divisible(r, rr - 1)) return replicate(op);
      p.operands[1] = Sharding::split(rb - 1);
      p.result = Sharding::split(rr - 1);
      p.columnSplit = !sb.isSplit();
      return p;
    }
    return replicate(op);
  }

  // By heads or batch: q, k and v split alike along one of their leading dims (by heads, Hq
  // and Hkv both divide by T, so every device keeps whole groups of query heads with their
  // K/V head); a mask with that dim too, else whole.
  OpPlan attention(const Op& op, const std::vector<Sharding>& in) const {
    const Type& q = op.operand(0)->type();
    const int64_t rq = q.rank();
    int64_t d = -1;
    for (size_t k = 0; k < 3 && d < 0; ++k)
      if (in[k].isSplit() && in[k].dim < rq - 2 && op.operand(k)->type().rank() == rq)
        d = in[k].dim;
    if (d < 0) return replicate(op);
    OpPlan p;
    for (size_t k = 0; k < 3; ++k) {
      const Type& t = op.operand(k)->type();
      if (t.rank() != rq || !divisible(t, d)) return replicate(op);
      if (d < rq - 3 && staticDim(t, d) != staticDim(q, d)) return replicate(op);
      p.operands.push_back(Sharding::split(d));
    }
    if (op.numOperands() > 3) {
      const Type& mask = op.operand(3)->type();
      int64_t dm = d - (rq - mask.rank());
      p.operands.push_back(dm >= 0 && staticDim(mask, dm) == staticDim(q, d) ? Sharding::split(dm)
                                                                             : Sharding::rep());
    }
    p.result = Sharding::split(d);
    return p;
  }

  int64_t t_;
  const SymbolTable& syms_;
};

// One analysis round: every value's sharding, and the column splits whose split values had
// to be gathered before a row split or a result (`blamed`).
struct Analysis {
  std::set<const Op*> blamed;
};

// Shardings the user pinned (--shard), by op.
using Pins = std::map<const Op*, Sharding>;

// A matmul whose weight operand comes from a weight pinned replicated: it is never cut.
bool keptWhole(const Op& op, const Pins& pins) {
  if (op.kind() != OpKind::Matmul) return false;
  const Op* w = weightOf(op.operand(1));
  auto it = w ? pins.find(w) : pins.end();
  return it != pins.end() && it->second.kind == Sharding::Rep;
}

Analysis analyze(const Func& f, const Planner& planner, const std::set<const Op*>& columns,
                 const Pins& pins) {
  std::unordered_map<const Value*, Sharding> sharding;
  std::unordered_map<const Value*, std::set<const Op*>> origins;
  Analysis out;
  auto of = [&](const Value* v) {
    auto it = sharding.find(v);
    return it == sharding.end() ? Sharding::rep() : it->second;
  };
  for (const auto& op : f.ops()) {
    if (op->has(kTerminator)) continue; // a split result is gathered once, at the end
    if (op->kind() == OpKind::Transfer) {
      sharding[op->result()] = of(op->operand(0));
      origins[op->result()] = origins[op->operand(0)];
      continue;
    }
    std::vector<Sharding> in;
    for (const Value* v : op->operands()) in.push_back(of(v));
    OpPlan p = planner.plan(*op, in, columns.count(op.get()) != 0, keptWhole(*op, pins));
    std::set<const Op*> from;
    for (size_t k = 0; k < in.size(); ++k) {
      const std::set<const Op*>& o = origins[op->operand(k)];
      if (in[k].isSplit() && !(p.operands[k] == in[k])) out.blamed.insert(o.begin(), o.end());
      if (in[k] == p.operands[k] && in[k].kind != Sharding::Rep) from.insert(o.begin(), o.end());
    }
    if (p.columnSplit) from.insert(op.get());
    Sharding result = p.result;
    if (auto pin = pins.find(op.get()); pin != pins.end() && !(pin->second == p.result)) {
      if (p.result.isSplit()) out.blamed.insert(from.begin(), from.end());
      result = pin->second;
      if (!result.isSplit()) from.clear();
    }
    for (size_t r = 0; r < op->numResults(); ++r) {
      sharding[op->result(r)] = result;
      origins[op->result(r)] = from;
    }
  }
  return out;
}

// The rewrite: every original op becomes T copies (or collectives), inserted before it.
class Materializer {
public:
  Materializer(Module& m, Func& f, int64_t t, const std::set<const Op*>& columns, const Pins& pins,
               TensorParallelStats& stats)
      : m_(m), f_(f), t_(t), planner_(t, m.symbols()), columns_(columns), pins_(pins),
        stats_(stats) {
    const auto& decls = m.devices();
    for (size_t j = 0; j < decls.size(); ++j) {
      if (j % static_cast<size_t>(t) == 0) groups_.emplace_back();
      groups_.back().push_back(decls[j].target);
      where_[decls[j].target] = {j / static_cast<size_t>(t), j % static_cast<size_t>(t)};
    }
  }

  Status run() {
    std::vector<Op*> originals = f_.opsSnapshot();
    // An argument is replicated: copied from its device to the others of its group (copies
    // that no op reads are dropped at the end).
    before_ = originals.empty() ? nullptr : originals.front();
    for (size_t i = 0; i < f_.numArgs(); ++i) {
      Value* a = f_.arg(i);
      KILN_TRY(auto at, locate(f_.argDevice(i), f_.loc(), "argument " + std::to_string(i)));
      Dist d{Sharding::rep(), at.first, std::vector<Value*>(static_cast<size_t>(t_), nullptr)};
      for (size_t l = 0; l < d.parts.size(); ++l) {
        if (l == at.second) {
          d.parts[l] = a;
          continue;
        }
        Attrs to;
        to.set("to", device(at.first, l).str());
        KILN_TRY(Op * t, make(OpKind::Transfer, {a}, to, {}, f_.loc(), device(at.first, l)));
        d.parts[l] = t->result();
      }
      dist_[a] = d;
    }
    for (Op* op : originals) {
      before_ = op;
      if (op->has(kTerminator)) {
        for (size_t i = 0; i < op->numOperands(); ++i) {
          KILN_TRY(Dist d, convert(op->operand(i), Sharding::rep()));
          KILN_TRY(auto at, locate(f_.resultDevice(i), op->loc(), "result " + std::to_string(i)));
          if (at.first != d.group)
            return error(op->loc(), "tensor parallel: result " + std::to_string(i) +
                                        " is on another device group than its value");
          KILN_TRY(Value * v, part(d, at.second));
          op->setOperand(i, v);
        }
        continue;
      }
      KILN_CHECK(rewrite(*op));
    }
    for (Op* op : originals)
      if (!op->has(kTerminator)) op->dropOperands();
    for (auto it = originals.rbegin(); it != originals.rend(); ++it)
      if (!(*it)->has(kTerminator)) f_.erase(*it);
    // Replicas nobody reads (a whole weight whose devices load its shards) go.
    std::vector<Op*> ops = f_.opsSnapshot();
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
      Op* op = *it;
      bool used = op->has(kSideEffects);
      for (size_t r = 0; r < op->numResults() && !used; ++r) used = op->result(r)->hasUses();
      if (!used) f_.erase(op);
    }
    return ok();
  }

private:
  struct Dist {
    Sharding s;
    size_t group = 0;
    std::vector<Value*> parts; // one per lane, on that lane's device
  };

  Result<std::pair<size_t, size_t>> locate(const std::optional<DeviceTarget>& d, const Loc& loc,
                                           const std::string& what) const {
    if (!d) return error(loc, "tensor parallel: " + what + " has no device; run affinity first");
    auto it = where_.find(*d);
    if (it == where_.end())
      return error(loc,
                   "tensor parallel: " + what + " runs on " + d->str() + ", which is not declared");
    return it->second;
  }

  const DeviceTarget& device(size_t group, size_t lane) const { return groups_[group][lane]; }

  // A new op before the op being rewritten; result types from the shape rules (`declared`
  // for ops that take them from there).
  Result<Op*> make(OpKind kind, const std::vector<Value*>& operands, const Attrs& attrs,
                   const std::vector<Type>& declared, const Loc& loc,
                   std::optional<DeviceTarget> dev) {
    std::vector<Type> types;
    for (const Value* v : operands) types.push_back(v->type());
    KILN_TRY(std::vector<Type> results,
             inferResultTypes(kind, types, attrs, declared, m_.symbols(), loc));
    auto op = std::make_unique<Op>(kind, std::move(results), attrs, loc);
    op->setDevice(std::move(dev));
    Op* raw = f_.insert(std::move(op), before_);
    for (Value* v : operands) raw->addOperand(v);
    if (raw->has(kCollective)) ++stats_.collectives;
    return raw;
  }

  // Part `lane` of a value (every value has one on each device of its group).
  Result<Value*> part(const Dist& d, size_t lane) const {
    if (lane >= d.parts.size() || !d.parts[lane])
      return error(before_ ? before_->loc() : f_.loc(),
                   "tensor parallel: internal: a value has no part on lane " +
                       std::to_string(lane));
    return d.parts[lane];
  }

  Result<Dist> collective(OpKind kind, const Dist& from, const Attrs& extra, Sharding to) {
    std::vector<Value*> parts;
    std::vector<std::string> devices;
    for (size_t l = 0; l < from.parts.size(); ++l) {
      KILN_TRY(Value * p, part(from, l));
      parts.push_back(p);
      devices.push_back(device(from.group, l).str());
    }
    Attrs a = extra;
    a.set("devices", devices);
    KILN_TRY(Op * c, make(kind, parts, a, {}, before_->loc(), std::nullopt));
    Dist out{to, from.group, {}};
    for (size_t r = 0; r < c->numResults(); ++r) out.parts.push_back(c->result(r));
    return out;
  }

  // `orig` (an original value) with sharding `need`, converting (and caching) as needed.
  Result<Dist> convert(const Value* orig, Sharding need) {
    auto it = dist_.find(orig);
    if (it == dist_.end()) return error(before_->loc(), "tensor parallel: internal: unknown value");
    const Dist have = it->second;
    if (have.s == need) return have;
    auto key = std::make_tuple(orig, need.kind, need.dim);
    if (auto c = converted_.find(key); c != converted_.end()) return c->second;
    Dist out;
    if (need.kind == Sharding::Rep) {
      Attrs a;
      if (have.s.isSplit()) {
        a.set("axis", have.s.dim);
        KILN_TRY(out, collective(OpKind::AllGather, have, a, need));
      } else {
        a.set("reduce", std::string("sum"));
        KILN_TRY(out, collective(OpKind::AllReduce, have, a, need));
      }
    } else if (need.isSplit() && have.s.kind == Sharding::Partial) {
      Attrs a;
      a.set("reduce", std::string("sum"));
      a.set("axis", need.dim);
      KILN_TRY(out, collective(OpKind::ReduceScatter, have, a, need));
    } else if (need.isSplit()) {
      KILN_TRY(Dist whole, convert(orig, Sharding::rep()));
      out = Dist{need, whole.group, {}};
      // An argument is cut where it arrives and each device gets only its piece (the whole
      // copies are then unused and dropped).
      std::optional<size_t> home;
      for (size_t l = 0; l < whole.parts.size() && orig->isArg(); ++l)
        if (whole.parts[l] == orig) home = l;
      for (size_t l = 0; l < static_cast<size_t>(t_); ++l) {
        KILN_TRY(Value * p, part(whole, home.value_or(l)));
        KILN_TRY(Value * s, slice(p, need.dim, l, whole.group, home.value_or(l)));
        if (home && *home != l) {
          Attrs to;
          to.set("to", device(whole.group, l).str());
          KILN_TRY(Op * t,
                   make(OpKind::Transfer, {s}, to, {}, before_->loc(), device(whole.group, l)));
          s = t->result();
        }
        out.parts.push_back(s);
      }
    } else {
      return error(before_->loc(), "tensor parallel: internal: a partial sum is never required");
    }
    converted_[key] = out;
    return out;
  }

  // Piece `lane` of replicated part `v` along dim d: a shard of the weight it comes from when
  // it is a weight (through transposes and casts), else a slice.
  Result<Value*> slice(Value* v, int64_t d, size_t lane, size_t group) {
    return slice(v, d, lane, group, lane);
  }
  // Piece `lane` cut on the device of lane `on`.
  Result<Value*> slice(Value* v, int64_t d, size_t lane, size_t group, size_t on) {
    if (on == lane) {
      KILN_TRY(Value * w, weightShard(v, d, lane, group));
      if (w) return w;
    }
    int64_t piece = *staticDim(v->type(), d) / t_;
    Attrs a;
    a.set("starts", std::vector<int64_t>{static_cast<int64_t>(lane) * piece});
    a.set("ends", std::vector<int64_t>{static_cast<int64_t>(lane + 1) * piece});
    a.set("axes", std::vector<int64_t>{d});
    a.set("steps", std::vector<int64_t>{1});
    KILN_TRY(Op * s, make(OpKind::Slice, {v}, a, {}, before_->loc(), device(group, on)));
    return s->result();
  }

  Result<Value*> weightShard(Value* v, int64_t d, size_t lane, size_t group) {
    Op* def = v->def();
    if (!def) return nullptr;
    const DeviceTarget& dev = device(group, lane);
    if (def->kind() == OpKind::Transpose) {
      std::vector<int64_t> perm = def->attrs().getInts("perm");
      KILN_TRY(Value * inner,
               weightShard(def->operand(0), perm[static_cast<size_t>(d)], lane, group));
      if (!inner) return nullptr;
      KILN_TRY(Op * t, make(OpKind::Transpose, {inner}, def->attrs(), {}, def->loc(), dev));
      return t->result();
    }
    if (def->kind() == OpKind::Cast) {
      KILN_TRY(Value * inner, weightShard(def->operand(0), d, lane, group));
      if (!inner) return nullptr;
      KILN_TRY(Op * c, make(OpKind::Cast, {inner}, def->attrs(), {}, def->loc(), dev));
      return c->result();
    }
    if (def->kind() != OpKind::Weight) return nullptr;
    std::string name = def->attrs().getStr("name");
    const WeightDecl* decl = m_.lookupWeight(name);
    if (!decl || decl->shard || !decl->type.isStatic()) return nullptr;
    Shape shape = decl->type.shape();
    shape[static_cast<size_t>(d)] = Dim(*staticDim(decl->type, d) / t_);
    Type type(decl->type.elem(), std::move(shape));
    std::string shardName = name + ".dim" + std::to_string(d) + ".part" + std::to_string(lane) +
                            "of" + std::to_string(t_);
    if (!m_.lookupWeight(shardName)) {
      WeightDecl s{shardName,    type,      decl->file,
                   decl->tensor, decl->loc, WeightShard{d, static_cast<int64_t>(lane), t_}};
      // An imported model's weights live in memory: its shard is cut there.
      if (const HostTensor* whole = m_.weightData(name)) {
        KILN_TRY(HostTensor piece, WeightStore::shardOf(s, *whole, "memory"));
        m_.setWeightData(shardName, std::move(piece));
      }
      KILN_CHECK(m_.addWeight(std::move(s)));
      ++stats_.shardedWeights;
      sharded_.insert(name);
    }
    Attrs a;
    a.set("name", shardName);
    KILN_TRY(Op * w, make(OpKind::Weight, {}, a, {type}, def->loc(), dev));
    return w->result();
  }

  Status rewrite(Op& op) {
    if (op.has(kCollective))
      return error(op.loc(), "tensor parallel: the module already holds collectives; it is "
                             "partitioned once");
    KILN_TRY(auto at, locate(op.device(), op.loc(), "op '" + std::string(op.name()) + "'"));
    const size_t group = at.first;
    if (op.kind() == OpKind::Transfer) {
      // Between pipeline stages: each device sends its part to its peer in the next group.
      Dist src = dist_.at(op.operand(0));
      if (src.s.kind == Sharding::Partial) {
        KILN_TRY(src, convert(op.operand(0), Sharding::rep()));
      }
      Dist out{src.s, group, {}};
      for (size_t l = 0; l < static_cast<size_t>(t_); ++l) {
        KILN_TRY(Value * p, part(src, l));
        Attrs a;
        a.set("to", device(group, l).str());
        KILN_TRY(Op * t, make(OpKind::Transfer, {p}, a, {}, op.loc(), device(group, l)));
        out.parts.push_back(t->result());
      }
      dist_[op.result()] = out;
      return ok();
    }
    std::vector<Sharding> in;
    for (const Value* v : op.operands()) in.push_back(dist_.at(v).s);
    OpPlan p = planner_.plan(op, in, columns_.count(&op) != 0, keptWhole(op, pins_));
    stats_.columnSplits += p.columnSplit;
    stats_.rowSplits += p.rowSplit;
    std::vector<Dist> operands;
    for (size_t k = 0; k < op.numOperands(); ++k) {
      KILN_TRY(Dist d, convert(op.operand(k), p.operands[k]));
      operands.push_back(std::move(d));
    }
    std::vector<Type> declared;
    for (size_t r = 0; r < op.numResults(); ++r) {
      Type t = op.result(r)->type();
      if (p.result.isSplit()) {
        Shape s = t.shape();
        s[static_cast<size_t>(p.result.dim)] = Dim(*staticDim(t, p.result.dim) / t_);
        t = Type(t.elem(), std::move(s));
      }
      declared.push_back(std::move(t));
    }
    std::vector<Dist> results(op.numResults(), Dist{p.result, group, {}});
    for (size_t l = 0; l < static_cast<size_t>(t_); ++l) {
      std::vector<Value*> args;
      for (Dist& d : operands) {
        KILN_TRY(Value * v, part(d, l));
        args.push_back(v);
      }
      KILN_TRY(Op * c, make(op.kind(), args, op.attrs(), declared, op.loc(), device(group, l)));
      for (size_t r = 0; r < c->numResults(); ++r) results[r].parts.push_back(c->result(r));
    }
    for (size_t r = 0; r < op.numResults(); ++r) dist_[op.result(r)] = results[r];
    if (auto pin = pins_.find(&op); pin != pins_.end() && !(pin->second == p.result))
      for (size_t r = 0; r < op.numResults(); ++r) {
        KILN_TRY(Dist d, convert(op.result(r), pin->second));
        dist_[op.result(r)] = d;
      }
    return ok();
  }

  Module& m_;
  Func& f_;
  int64_t t_;
  Planner planner_;
  const std::set<const Op*>& columns_;
  const Pins& pins_;
  TensorParallelStats& stats_;
  std::vector<std::vector<DeviceTarget>> groups_;
  std::map<DeviceTarget, std::pair<size_t, size_t>> where_;
  std::unordered_map<const Value*, Dist> dist_;
  std::map<std::tuple<const Value*, Sharding::Kind, int64_t>, Dist> converted_;
  Op* before_ = nullptr;

public:
  std::set<std::string> sharded_; // weights some device loads a shard of
};

} // namespace

namespace {

std::string shardingText(const Sharding& s) {
  return s.isSplit() ? "split:" + std::to_string(s.dim) : "replicated";
}

// The --shard specs, applied to the ops they match.
Result<Pins> pinShardings(const Module& m, const std::vector<std::string>& specs, int tensor) {
  Pins pins;
  std::map<const Op*, std::string> by;
  Diags diags;
  Planner planner(tensor, m.symbols());
  for (const std::string& spec : specs) {
    Loc where = Loc::named("shard=" + spec);
    size_t eq = spec.rfind('=');
    std::string what = eq == std::string::npos ? "" : spec.substr(eq + 1);
    Sharding s;
    if (what.rfind("split:", 0) == 0 && what.size() > 6 && what.size() < 12 &&
        what.find_first_not_of("-0123456789", 6) == std::string::npos) {
      s = Sharding::split(std::stoll(what.substr(6)));
    } else if (what != "replicated" || eq == 0) {
      diags.add(error(where, "expected PATTERN=replicated or PATTERN=split:D, like "
                             "'blocks.*.wq=split:1'"));
      continue;
    }
    std::string pattern = spec.substr(0, eq);
    size_t matched = 0;
    for (const auto& f : m.funcs())
      for (const auto& op : f->ops()) {
        if (op->has(kTerminator) || op->numResults() == 0 || !opMatches(*op, pattern)) continue;
        ++matched;
        Sharding mine = s;
        const Type& t = op->result(0)->type();
        std::string value = !op->result(0)->name().empty() ? "value %" + op->result(0)->name()
                            : op->kind() == OpKind::Weight
                                ? "weight @" + op->attrs().getStr("name")
                                : "the result of '" + std::string(op->name()) + "'";
        if (mine.isSplit()) {
          if (mine.dim < 0) mine.dim += t.rank();
          if (mine.dim < 0 || mine.dim >= t.rank() || !planner.divisible(t, mine.dim)) {
            Diag d = error(op->loc(), value + " is pinned to " + what + " ('" + spec + "'), but " +
                                          t.str() + " has no static dim " + what.substr(6) +
                                          " that splits into " + std::to_string(tensor) +
                                          " equal pieces");
            diags.add(std::move(d));
            continue;
          }
        }
        auto prev = pins.find(op.get());
        if (prev != pins.end() && !(prev->second == mine)) {
          Diag d =
              error(op->loc(), value + " is given two shardings: " + shardingText(prev->second) +
                                   " (by '" + by[op.get()] + "') and " + shardingText(mine) +
                                   " (by '" + spec + "')");
          d.notes.push_back(note(op->loc(), "the op: " + printOp(*op)));
          diags.add(std::move(d));
          continue;
        }
        pins[op.get()] = mine;
        by[op.get()] = spec;
      }
    if (matched == 0) diags.add(error(where, "pattern '" + pattern + "' matches no op"));
  }
  if (diags.hasErrors()) return diags;
  return pins;
}

} // namespace

Result<TensorParallelStats> partitionTensor(Module& m, int tensor,
                                            const std::vector<std::string>& shardSpecs) {
  TensorParallelStats stats;
  Loc where = Loc::named("partition=tensor:" + std::to_string(tensor));
  if (tensor <= 1 && !shardSpecs.empty())
    return error(Loc::named("shard=" + shardSpecs.front()),
                 "shardings are pinned for tensor parallelism; give partition=tensor:T too");
  size_t n = m.devices().size();
  if (tensor < 1 || n < static_cast<size_t>(tensor) || n % static_cast<size_t>(tensor) != 0)
    return error(where, "tensor parallelism over " + std::to_string(tensor) +
                            " devices needs a multiple of " + std::to_string(tensor) +
                            " declared devices, found " + std::to_string(n) +
                            (n < static_cast<size_t>(tensor) ? "; declare more devices" : ""));
  if (tensor == 1) return stats;
  Planner planner(tensor, m.symbols());
  KILN_TRY(Pins pins, pinShardings(m, shardSpecs, tensor));
  std::set<std::string> sharded;
  for (const auto& fp : m.funcs()) {
    Func& f = *fp;
    // Every matmul whose right operand is a weight may split it by columns; rounds withdraw
    // those whose split values end up gathered.
    std::set<const Op*> columns;
    for (const auto& op : f.ops())
      if (op->kind() == OpKind::Matmul && weightDerived(op->operand(1))) columns.insert(op.get());
    for (;;) {
      ++stats.rounds;
      Analysis a = analyze(f, planner, columns, pins);
      size_t before = columns.size();
      for (const Op* o : a.blamed)
        if (!pins.count(o)) columns.erase(o); // a pinned split stays
      if (columns.size() == before) break;
    }
    Materializer mat(m, f, tensor, columns, pins, stats);
    KILN_CHECK(mat.run());
    sharded.insert(mat.sharded_.begin(), mat.sharded_.end());
  }
  // A weight every device loads in shards is no longer declared whole (a module would
  // otherwise have to carry or find it).
  std::set<std::string> loaded;
  for (const auto& f : m.funcs())
    for (const auto& op : f->ops())
      if (op->kind() == OpKind::Weight) loaded.insert(op->attrs().getStr("name"));
  for (const std::string& w : sharded)
    if (!loaded.count(w)) m.removeWeight(w);
  KILN_CHECK(verifyModule(m));
  KILN_CHECK(verifyPlacement(m));
  return stats;
}

} // namespace kiln
