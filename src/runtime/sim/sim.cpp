// The kernel-IR simulator (see sim.h): a program prepared once per kernel (the structured
// regions flattened into a list of steps with jumps), then threads stepped op by op,
// workgroup by workgroup.
#include "runtime/sim/sim.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "ir/text/printer.h"

namespace kiln::sim {

namespace {

// A value in one thread: indices and integer scalars in i, float scalars in f, buffers
// by pointer, vectors in lanes.
struct SVal {
  double f = 0;
  int64_t i = 0;
  HostTensor* buf = nullptr;
  std::vector<double> lanes;
};

struct LoopFrame {
  int64_t hi;
  int64_t step;
};

// One step of the flattened kernel. `for` becomes ForEnter (bounds, first iteration or a
// jump past the loop) ... body ... ForNext (the yield: next carried values, back to the
// body or out); `if` becomes IfEnter (to the then steps or the else steps) ... IfExit (the
// yield of the branch that ran: the results, then past the if).
enum class Ctl : uint8_t { Op, ForEnter, ForNext, IfEnter, IfExit };

struct Step {
  Ctl ctl = Ctl::Op;
  const Op* op = nullptr;    // the op, or the for / if
  const Op* yield = nullptr; // ForNext, IfExit: the region's yield
  size_t jump = SIZE_MAX;    // ForEnter: past the loop; IfEnter: the else steps; exits: past
  size_t body = SIZE_MAX;    // ForNext: the body's first step
};

// Why a thread stopped stepping.
enum class Stop : uint8_t { Barrier, Subgroup, Done };

struct Thread {
  size_t pc = 0;
  bool done = false;
  int64_t lid[3] = {0, 0, 0};
  std::vector<SVal> vals;
  std::vector<LoopFrame> loops;
  std::vector<SVal> carried; // scratch for a yield's values
  std::unordered_map<const Op*, std::unique_ptr<HostTensor>> priv;
};

// The kernel flattened for stepping: steps, value numbering, and a 0-d tensor op per
// `compute` and `subgroup_reduce` so that scalar arithmetic reuses the interpreter's kernels.
struct Program {
  const Func& f;
  std::vector<Step> steps;
  std::unordered_map<const Value*, size_t> id;
  std::unordered_map<const Op*, std::unique_ptr<Op>> computeOps;
  size_t configPc = SIZE_MAX;
  std::vector<int64_t> workgroup{1, 1, 1};
  int64_t subgroup = 1;

  explicit Program(const Func& fn) : f(fn) {}
};

// A scalar op of kind `fn` over 0-d tensors of the result's element type.
Status addComputeOp(Program& p, const Op& op, std::optional<OpKind> fn, Attrs a) {
  if (!fn || opInfo(*fn).level != OpLevel::Tensor)
    return error(op.loc(), "'" + std::string(op.name()) + "' names no tensor op");
  a.erase("fn");
  Type rt = Type::tensor(op.result(0)->type().elem(), {});
  p.computeOps.emplace(&op, std::make_unique<Op>(*fn, std::vector<Type>{rt}, a, op.loc()));
  return ok();
}

size_t addStep(Program& p, Step s) {
  p.steps.push_back(s);
  return p.steps.size() - 1;
}

// The ops of `b` up to its yield, as steps.
Status flatten(Program& p, const Block& b) {
  for (const auto& opPtr : b.ops()) {
    const Op& op = *opPtr;
    for (size_t r = 0; r < op.numResults(); ++r) p.id.emplace(op.result(r), p.id.size());
    for (size_t r = 0; r < op.numRegions(); ++r)
      for (size_t a = 0; a < op.region(r)->numArgs(); ++a)
        p.id.emplace(op.region(r)->arg(a), p.id.size());
    switch (op.kind()) {
    case OpKind::Yield: break; // the parent's exit step
    case OpKind::For: {
      if (op.numRegions() != 1) return error(op.loc(), "malformed for in @" + p.f.name());
      const Block& body = *op.region(0);
      const Op* yield = body.terminator();
      if (!yield || yield->kind() != OpKind::Yield || body.numArgs() != op.numOperands() - 2 ||
          yield->numOperands() != op.numOperands() - 3 || op.numResults() != yield->numOperands())
        return error(op.loc(), "malformed for in @" + p.f.name());
      size_t enter = addStep(p, {Ctl::ForEnter, &op});
      size_t first = p.steps.size();
      KILN_CHECK(flatten(p, body));
      size_t next = addStep(p, {Ctl::ForNext, &op, yield});
      p.steps[next].body = first;
      p.steps[next].jump = p.steps[enter].jump = p.steps.size();
      break;
    }
    case OpKind::If: {
      if (op.numRegions() != 2) return error(op.loc(), "malformed if in @" + p.f.name());
      const Op* yields[2] = {op.region(0)->terminator(), op.region(1)->terminator()};
      if (!yields[0] || !yields[1] || yields[0]->numOperands() != op.numResults() ||
          yields[1]->numOperands() != op.numResults())
        return error(op.loc(), "malformed if in @" + p.f.name());
      size_t enter = addStep(p, {Ctl::IfEnter, &op});
      KILN_CHECK(flatten(p, *op.region(0)));
      size_t thenExit = addStep(p, {Ctl::IfExit, &op, yields[0]});
      p.steps[enter].jump = p.steps.size();
      KILN_CHECK(flatten(p, *op.region(1)));
      size_t elseExit = addStep(p, {Ctl::IfExit, &op, yields[1]});
      p.steps[thenExit].jump = p.steps[elseExit].jump = p.steps.size();
      break;
    }
    case OpKind::KernelConfig:
      p.configPc = addStep(p, {Ctl::Op, &op});
      p.workgroup = op.attrs().getInts("workgroup");
      p.subgroup = op.attrs().getInt("subgroup", 1);
      if (p.workgroup.size() != 3) return error(op.loc(), "kernel_config needs 3 workgroup dims");
      break;
    case OpKind::Compute:
      KILN_CHECK(addComputeOp(p, op, op.attrs().getOp("fn"), op.attrs()));
      addStep(p, {Ctl::Op, &op});
      break;
    case OpKind::SubgroupReduce:
      KILN_CHECK(addComputeOp(p, op, op.attrs().getOp("fn"), {}));
      addStep(p, {Ctl::Op, &op});
      break;
    default: addStep(p, {Ctl::Op, &op}); break;
    }
  }
  return ok();
}

Result<std::unique_ptr<Program>> prepare(const Func& f) {
  auto p = std::make_unique<Program>(f);
  for (size_t i = 0; i < f.numArgs(); ++i) p->id.emplace(f.arg(i), p->id.size());
  KILN_CHECK(flatten(*p, f.body()));
  return p;
}

HostTensor scalarTensor(ElemType e, const SVal& v) {
  HostTensor t(e, {});
  if (isFloat(e))
    t.setF(0, v.f);
  else
    t.setI(0, v.i);
  return t;
}

SVal fromTensor(const HostTensor& t, int64_t at = 0) {
  SVal v;
  if (isFloat(t.elem()))
    v.f = t.getF(at);
  else
    v.i = t.getI(at);
  return v;
}

// Rounds a double to the scalar type (integers truncate, then wrap).
SVal fromDouble(ElemType e, double d) {
  HostTensor t(e, {});
  t.setF(0, d);
  return fromTensor(t);
}

class Runner {
public:
  Runner(const Program& p, const SymbolBinding& dims, std::span<BufferRef> bindings)
      : p_(p), dims_(dims), bindings_(bindings) {}

  Status runWorkgroup(int64_t wx, int64_t wy, int64_t wz, SimStats& stats) {
    wg_[0] = wx, wg_[1] = wy, wg_[2] = wz;
    shared_.clear();
    const auto& w = p_.workgroup;
    std::vector<Thread> threads(static_cast<size_t>(w[0] * w[1] * w[2]));
    size_t t = 0;
    for (int64_t z = 0; z < w[2]; ++z)
      for (int64_t y = 0; y < w[1]; ++y)
        for (int64_t x = 0; x < w[0]; ++x) {
          Thread& th = threads[t++];
          th.lid[0] = x, th.lid[1] = y, th.lid[2] = z;
          initThread(th);
        }
    stats.threads += static_cast<int64_t>(threads.size());
    std::vector<Stop> at(threads.size(), Stop::Done);
    std::vector<char> runs(threads.size(), 1);
    auto sg = static_cast<size_t>(std::max<int64_t>(p_.subgroup, 1));
    for (;;) {
      for (size_t t = 0; t < threads.size(); ++t)
        if (runs[t]) {
          KILN_TRY(at[t], step(threads[t]));
          runs[t] = 0;
        }
      // Subgroups whose threads all wait at one subgroup op run it together and go on.
      bool exchanged = false;
      for (size_t g = 0; g * sg < threads.size(); ++g) {
        size_t lo = g * sg, hi = std::min(lo + sg, threads.size());
        bool any = false;
        for (size_t t = lo; t < hi; ++t) any = any || at[t] == Stop::Subgroup;
        if (!any) continue;
        for (size_t t = lo; t < hi; ++t)
          if (at[t] != Stop::Subgroup || threads[t].pc != threads[lo].pc)
            return fail(threads[t], *p_.steps[threads[lo].pc].op,
                        "the threads of subgroup " + std::to_string(g) +
                            " do not all reach this subgroup op together");
        KILN_CHECK(exchange(std::span<Thread>(threads.data() + lo, hi - lo)));
        for (size_t t = lo; t < hi; ++t) runs[t] = 1;
        exchanged = true;
      }
      if (exchanged) continue;
      size_t atBarrier = 0, finished = 0;
      for (Stop s : at) s == Stop::Barrier ? ++atBarrier : ++finished;
      if (atBarrier == 0) return ok();
      if (finished != 0)
        return error(p_.f.loc(), "kernel @" + p_.f.name() + ": in workgroup " + wgStr() + ", " +
                                     std::to_string(atBarrier) +
                                     " threads wait at a barrier that " + std::to_string(finished) +
                                     " threads never reach");
      ++stats.barriers;
      std::fill(runs.begin(), runs.end(), 1);
    }
  }

  // Runs the uniform prologue of one thread up to kernel_config and returns the grid.
  Result<Grid> prologueGrid() {
    Thread th;
    initThread(th);
    if (p_.configPc == SIZE_MAX)
      return error(p_.f.loc(), "kernel @" + p_.f.name() + " has no kernel_config");
    while (th.pc < p_.configPc) KILN_CHECK(exec(th));
    const Op& cfg = *p_.steps[p_.configPc].op;
    Grid g{val(th, cfg.operand(0)).i, val(th, cfg.operand(1)).i, val(th, cfg.operand(2)).i};
    return g;
  }

private:
  void initThread(Thread& th) {
    th.vals.assign(p_.id.size(), SVal{});
    for (size_t i = 0; i < bindings_.size() && i < p_.f.numArgs(); ++i)
      th.vals[i].buf = &bindings_[i].tensor;
  }

  SVal& val(Thread& th, const Value* v) { return th.vals[p_.id.at(v)]; }

  std::string wgStr() const {
    return "(" + std::to_string(wg_[0]) + ", " + std::to_string(wg_[1]) + ", " +
           std::to_string(wg_[2]) + ")";
  }

  Diag fail(const Thread& th, const Op& op, const std::string& msg) const {
    Diag d =
        error(op.loc(), "kernel @" + p_.f.name() + ": " + msg + " (workgroup " + wgStr() +
                            ", thread (" + std::to_string(th.lid[0]) + ", " +
                            std::to_string(th.lid[1]) + ", " + std::to_string(th.lid[2]) + "))");
    d.notes.push_back(note(op.loc(), "in: " + printOp(op)));
    return d;
  }

  // Steps a thread until a barrier (passed), a subgroup op (not yet run) or its end.
  Result<Stop> step(Thread& th) {
    while (!th.done && th.pc < p_.steps.size()) {
      const Step& st = p_.steps[th.pc];
      if (st.ctl == Ctl::Op && st.op->kind() == OpKind::Barrier) {
        ++th.pc;
        return Stop::Barrier;
      }
      if (st.ctl == Ctl::Op && st.op->has(kSubgroup)) return Stop::Subgroup;
      KILN_CHECK(exec(th));
    }
    th.done = true;
    return Stop::Done;
  }

  // Runs the subgroup op every thread of `group` (in lane order) waits at.
  Status exchange(std::span<Thread> group) {
    const Op& op = *p_.steps[group[0].pc].op;
    auto lane = [&](Thread& th) -> Result<size_t> {
      int64_t l = val(th, op.operand(1)).i;
      if (l < 0 || l >= static_cast<int64_t>(group.size()))
        return fail(th, op,
                    "lane " + std::to_string(l) + " is outside the subgroup of " +
                        std::to_string(group.size()));
      return static_cast<size_t>(l);
    };
    std::vector<SVal> out(group.size());
    switch (op.kind()) {
    case OpKind::SubgroupReduce: {
      const Op& tmpl = *p_.computeOps.at(&op);
      ElemType e = op.result(0)->type().elem();
      SVal acc = val(group[0], op.operand(0));
      for (size_t t = 1; t < group.size(); ++t) {
        std::vector<HostTensor> args{scalarTensor(e, acc),
                                     scalarTensor(e, val(group[t], op.operand(0)))};
        Result<std::vector<HostTensor>> r = evalOp(tmpl, args, dims_, nullptr);
        if (!r.ok()) return fail(group[t], op, "subgroup arithmetic failed");
        acc = fromTensor((*r)[0]);
      }
      std::fill(out.begin(), out.end(), acc);
      break;
    }
    case OpKind::SubgroupBroadcast: {
      KILN_TRY(size_t from, lane(group[0]));
      for (Thread& th : group)
        if (val(th, op.operand(1)).i != static_cast<int64_t>(from))
          return fail(th, op, "the broadcast lane differs between the threads of the subgroup");
      std::fill(out.begin(), out.end(), val(group[from], op.operand(0)));
      break;
    }
    case OpKind::SubgroupShuffle:
      for (size_t t = 0; t < group.size(); ++t) {
        KILN_TRY(size_t from, lane(group[t]));
        out[t] = val(group[from], op.operand(0));
      }
      break;
    default: return fail(group[0], op, "is not a subgroup op the simulator runs");
    }
    for (size_t t = 0; t < group.size(); ++t) {
      val(group[t], op.result(0)) = out[t];
      ++group[t].pc;
    }
    return ok();
  }

  // Runs the control part of a step (Ctl other than Op).
  Status control(Thread& th, const Step& st) {
    const Op& op = *st.op;
    auto setAll = [&](const std::vector<SVal>& from, auto target) {
      for (size_t k = 0; k < from.size(); ++k) val(th, target(k)) = from[k];
    };
    auto gather = [&](const Op& src, size_t first) {
      th.carried.clear();
      for (size_t k = first; k < src.numOperands(); ++k)
        th.carried.push_back(val(th, src.operand(k)));
    };
    const Block* body = op.numRegions() ? op.region(0) : nullptr;
    switch (st.ctl) {
    case Ctl::ForEnter: {
      int64_t lo = val(th, op.operand(0)).i, hi = val(th, op.operand(1)).i;
      int64_t stp = val(th, op.operand(2)).i;
      if (stp <= 0) return fail(th, op, "loop step " + std::to_string(stp) + " is not positive");
      gather(op, 3);
      if (lo < hi) {
        val(th, body->arg(0)).i = lo;
        setAll(th.carried, [&](size_t k) { return body->arg(k + 1); });
        th.loops.push_back({hi, stp});
        ++th.pc;
      } else {
        setAll(th.carried, [&](size_t k) { return op.result(k); });
        th.pc = st.jump;
      }
      return ok();
    }
    case Ctl::ForNext: {
      gather(*st.yield, 0);
      LoopFrame fr = th.loops.back();
      SVal& iv = val(th, body->arg(0));
      if (!__builtin_add_overflow(iv.i, fr.step, &iv.i) && iv.i < fr.hi) {
        setAll(th.carried, [&](size_t k) { return body->arg(k + 1); });
        th.pc = st.body;
      } else {
        th.loops.pop_back();
        setAll(th.carried, [&](size_t k) { return op.result(k); });
        th.pc = st.jump;
      }
      return ok();
    }
    case Ctl::IfEnter: th.pc = val(th, op.operand(0)).i ? th.pc + 1 : st.jump; return ok();
    case Ctl::IfExit:
      gather(*st.yield, 0);
      setAll(th.carried, [&](size_t k) { return op.result(k); });
      th.pc = st.jump;
      return ok();
    case Ctl::Op: break;
    }
    return ok();
  }

  // The flat element offset of a buffer access, or an error naming the index.
  Result<int64_t> offset(Thread& th, const Op& op, const HostTensor& buf, size_t first,
                         int64_t lanes = 1) {
    int64_t off = 0;
    std::string idx;
    bool inBounds = op.numOperands() - first == buf.shape().size();
    for (size_t k = first; k < op.numOperands(); ++k) {
      int64_t i = val(th, op.operand(k)).i;
      size_t d = k - first;
      idx += (idx.empty() ? "" : ", ") + std::to_string(i);
      int64_t extent = d < buf.shape().size() ? buf.shape()[d] : 0;
      int64_t last = (k + 1 == op.numOperands()) ? i + lanes - 1 : i;
      if (i < 0 || last >= extent) inBounds = false;
      off = off * extent + i;
    }
    if (!inBounds) {
      std::string shape;
      for (int64_t d : buf.shape()) shape += (shape.empty() ? "" : "x") + std::to_string(d);
      return fail(th, op,
                  "out-of-bounds access at [" + idx + "] of a buffer of shape [" + shape + "]");
    }
    return off;
  }

  Result<HostTensor*> bufferOf(Thread& th, const Op& op, const Value* v) {
    HostTensor* b = val(th, v).buf;
    if (!b) return fail(th, op, "uses a buffer that is not bound");
    return b;
  }

  Status exec(Thread& th) {
    const Step& st = p_.steps[th.pc];
    if (st.ctl != Ctl::Op) return control(th, st);
    const Op& op = *st.op;
    ++th.pc;
    auto res = [&]() -> SVal& { return val(th, op.result(0)); };
    auto in = [&](size_t k) -> SVal& { return val(th, op.operand(k)); };
    auto idx2 = [&](auto f) -> Status {
      int64_t a = in(0).i, b = in(1).i, r = 0;
      if (!f(a, b, r)) return fail(th, op, "index arithmetic overflows or divides by zero");
      res().i = r;
      return ok();
    };
    switch (op.kind()) {
    case OpKind::KernelConfig:
    case OpKind::Barrier: return ok();
    case OpKind::WorkgroupId: res().i = wg_[op.attrs().getInt("axis")]; return ok();
    case OpKind::LocalId: res().i = th.lid[op.attrs().getInt("axis")]; return ok();
    case OpKind::LaneId: {
      const auto& w = p_.workgroup;
      int64_t linear = th.lid[0] + w[0] * (th.lid[1] + w[1] * th.lid[2]);
      res().i = linear % std::max<int64_t>(p_.subgroup, 1);
      return ok();
    }
    case OpKind::SymbolValue: {
      auto it = dims_.find(op.attrs().getStr("name"));
      if (it == dims_.end()) return fail(th, op, "symbol has no value");
      res().i = it->second;
      return ok();
    }
    case OpKind::IConst: res().i = op.attrs().getInt("value"); return ok();
    case OpKind::SConst:
      res() = fromDouble(op.result(0)->type().elem(), op.attrs().getFloat("value"));
      return ok();
    case OpKind::IAdd:
      return idx2(
          [](int64_t a, int64_t b, int64_t& r) { return !__builtin_add_overflow(a, b, &r); });
    case OpKind::ISub:
      return idx2(
          [](int64_t a, int64_t b, int64_t& r) { return !__builtin_sub_overflow(a, b, &r); });
    case OpKind::IMul:
      return idx2(
          [](int64_t a, int64_t b, int64_t& r) { return !__builtin_mul_overflow(a, b, &r); });
    case OpKind::IFloorDiv:
      return idx2([](int64_t a, int64_t b, int64_t& r) {
        if (b == 0 || (a == INT64_MIN && b == -1)) return false;
        r = a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
        return true;
      });
    case OpKind::ICeilDiv:
      return idx2([](int64_t a, int64_t b, int64_t& r) {
        if (b == 0 || (a == INT64_MIN && b == -1)) return false;
        r = a / b + ((a % b != 0) && ((a < 0) == (b < 0)));
        return true;
      });
    case OpKind::IMod:
      return idx2([](int64_t a, int64_t b, int64_t& r) {
        if (b == 0) return false;
        r = b == -1 ? 0 : a % b;
        if (r != 0 && ((r < 0) != (b < 0))) r += b;
        return true;
      });
    case OpKind::IMin: res().i = std::min(in(0).i, in(1).i); return ok();
    case OpKind::IMax: res().i = std::max(in(0).i, in(1).i); return ok();
    case OpKind::ICmp: {
      std::string p = op.attrs().getStr("pred");
      int64_t a = in(0).i, b = in(1).i;
      bool r = p == "lt"   ? a < b
               : p == "le" ? a <= b
               : p == "gt" ? a > b
               : p == "ge" ? a >= b
               : p == "eq" ? a == b
                           : a != b;
      res().i = r;
      return ok();
    }
    case OpKind::SSelect: res() = in(0).i ? in(1) : in(2); return ok();
    case OpKind::ICast: {
      const Type& rt = op.result(0)->type();
      if (rt.isIndex()) {
        res().i = in(0).i;
      } else {
        HostTensor t(rt.elem(), {});
        t.setI(0, in(0).i);
        res() = fromTensor(t);
      }
      return ok();
    }
    case OpKind::Compute: return compute(th, op);
    case OpKind::Alloc: {
      const Type& t = op.result(0)->type();
      if (t.space() == MemSpace::Shared) {
        auto& slot = shared_[&op];
        if (!slot) slot = std::make_unique<HostTensor>(t.elem(), t.staticShape());
        res().buf = slot.get();
      } else {
        auto& slot = th.priv[&op];
        slot = std::make_unique<HostTensor>(t.elem(), t.staticShape());
        // Unspecified contents: NaN (every byte 0xff) or, for integers, 0x5a bytes, so that a
        // read before a write shows in the results.
        if (uninitAlloc(op))
          std::memset(slot->mutableData(), isFloat(t.elem()) ? 0xff : 0x5a, slot->byteSize());
        res().buf = slot.get();
      }
      return ok();
    }
    case OpKind::Load: {
      KILN_TRY(HostTensor * b, bufferOf(th, op, op.operand(0)));
      KILN_TRY(int64_t off, offset(th, op, *b, 1));
      res() = fromTensor(*b, off);
      return ok();
    }
    case OpKind::MaskedLoad: {
      if (!in(1).i) {
        res() = fromDouble(op.result(0)->type().elem(), op.attrs().getFloat("other"));
        return ok();
      }
      KILN_TRY(HostTensor * b, bufferOf(th, op, op.operand(0)));
      KILN_TRY(int64_t off, offset(th, op, *b, 2));
      res() = fromTensor(*b, off);
      return ok();
    }
    case OpKind::Store:
    case OpKind::MaskedStore: {
      size_t first = op.kind() == OpKind::Store ? 0 : 1;
      if (first == 1 && !in(0).i) return ok();
      KILN_TRY(HostTensor * b, bufferOf(th, op, op.operand(first + 1)));
      KILN_TRY(int64_t off, offset(th, op, *b, first + 2));
      const SVal& v = in(first);
      if (isFloat(b->elem()))
        b->setF(off, v.f);
      else
        b->setI(off, v.i);
      return ok();
    }
    case OpKind::VectorLoad: {
      KILN_TRY(HostTensor * b, bufferOf(th, op, op.operand(0)));
      int64_t lanes = op.result(0)->type().dim(0).value();
      KILN_TRY(int64_t off, offset(th, op, *b, 1, lanes));
      SVal& r = res();
      r.lanes.resize(static_cast<size_t>(lanes));
      for (int64_t l = 0; l < lanes; ++l) r.lanes[static_cast<size_t>(l)] = b->getF(off + l);
      return ok();
    }
    case OpKind::VectorStore: {
      KILN_TRY(HostTensor * b, bufferOf(th, op, op.operand(1)));
      const SVal& v = in(0);
      auto lanes = static_cast<int64_t>(v.lanes.size());
      KILN_TRY(int64_t off, offset(th, op, *b, 2, lanes));
      for (int64_t l = 0; l < lanes; ++l) b->setF(off + l, v.lanes[static_cast<size_t>(l)]);
      return ok();
    }
    case OpKind::Prefetch: { // a hint: nothing is read, but its indices must be in range
      KILN_TRY(HostTensor * b, bufferOf(th, op, op.operand(0)));
      KILN_TRY(int64_t off, offset(th, op, *b, 1));
      (void)off;
      return ok();
    }
    case OpKind::Return: th.done = true; return ok();
    default: return fail(th, op, "is not a kernel-level op the simulator runs");
    }
  }

  Status compute(Thread& th, const Op& op) {
    const Op& tmpl = *p_.computeOps.at(&op);
    std::vector<HostTensor> args;
    for (const Value* v : op.operands()) args.push_back(scalarTensor(v->type().elem(), val(th, v)));
    Result<std::vector<HostTensor>> r = evalOp(tmpl, args, dims_, nullptr);
    if (!r.ok()) {
      Diag d = fail(th, op, "scalar arithmetic failed");
      for (const Diag& n : r.diags().list) d.notes.push_back(note(n.loc, n.message));
      return d;
    }
    val(th, op.result(0)) = fromTensor((*r)[0]);
    return ok();
  }

  const Program& p_;
  const SymbolBinding& dims_;
  std::span<BufferRef> bindings_;
  int64_t wg_[3] = {0, 0, 0};
  std::unordered_map<const Op*, std::unique_ptr<HostTensor>> shared_;
};

thread_local SimStats gStats;

} // namespace

Result<Grid> kernelGrid(const Func& kernel, const SymbolBinding& dims) {
  KILN_TRY(auto p, prepare(kernel));
  Runner r(*p, dims, {});
  return r.prologueGrid();
}

Status runKernel(const Func& kernel, std::span<BufferRef> bindings, const SymbolBinding& dims,
                 Grid grid) {
  if (bindings.size() != kernel.numArgs())
    return error(kernel.loc(), "kernel @" + kernel.name() + " takes " +
                                   std::to_string(kernel.numArgs()) + " buffers, got " +
                                   std::to_string(bindings.size()));
  for (size_t i = 0; i < bindings.size(); ++i) {
    const Type& t = kernel.arg(i)->type();
    const HostTensor& b = bindings[i].tensor;
    bool good = b.elem() == t.elem() && b.rank() == t.rank();
    for (int64_t d = 0; good && d < t.rank(); ++d) {
      std::optional<int64_t> v =
          t.dim(d).isUnknown() ? std::nullopt : t.dim(d).expr().evaluate(dims);
      good = v && *v == b.shape()[static_cast<size_t>(d)];
    }
    if (!good)
      return error(kernel.loc(), "kernel @" + kernel.name() + " buffer " + std::to_string(i) +
                                     " does not match its type " + t.str());
  }
  KILN_TRY(auto p, prepare(kernel));
  const auto& w = p->workgroup;
  if (w[0] < 1 || w[1] < 1 || w[2] < 1 || w[0] * w[1] * w[2] > 4096)
    return error(kernel.loc(), "kernel @" + kernel.name() + " has an invalid workgroup size");
  if (grid.x < 0 || grid.y < 0 || grid.z < 0)
    return error(kernel.loc(), "kernel @" + kernel.name() + " has a negative grid");
  Runner r(*p, dims, bindings);
  ++gStats.kernels;
  for (int64_t z = 0; z < grid.z; ++z)
    for (int64_t y = 0; y < grid.y; ++y)
      for (int64_t x = 0; x < grid.x; ++x) {
        ++gStats.workgroups;
        KILN_CHECK(r.runWorkgroup(x, y, z, gStats));
      }
  return ok();
}

namespace detail {
SimStats& stats() { return gStats; }
} // namespace detail

} // namespace kiln::sim
