// The kernel-IR simulator (see sim.h): a program prepared once per kernel, then threads
// stepped op by op, workgroup by workgroup.
#include "runtime/sim/sim.h"

#include <cmath>
#include <memory>
#include <unordered_map>

#include "ir/printer.h"

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
  size_t forPc;
  int64_t hi;
  int64_t step;
};

struct Thread {
  size_t pc = 0;
  bool done = false;
  int64_t lid[3] = {0, 0, 0};
  std::vector<SVal> vals;
  std::vector<LoopFrame> loops;
  std::unordered_map<const Op*, std::unique_ptr<HostTensor>> priv;
};

// The kernel flattened for stepping: op list, value numbering, loop partners, and a
// 0-d tensor op per `compute` so that scalar arithmetic reuses the interpreter's kernels.
struct Program {
  const Func& f;
  std::vector<const Op*> ops;
  std::unordered_map<const Value*, size_t> id;
  std::vector<size_t> partner; // for <-> end_for
  std::unordered_map<const Op*, std::unique_ptr<Op>> computeOps;
  size_t configPc = SIZE_MAX;
  std::vector<int64_t> workgroup{1, 1, 1};

  explicit Program(const Func& fn) : f(fn) {}
};

Result<std::unique_ptr<Program>> prepare(const Func& f) {
  auto p = std::make_unique<Program>(f);
  for (size_t i = 0; i < f.numArgs(); ++i) p->id.emplace(f.arg(i), p->id.size());
  std::vector<size_t> open;
  for (const auto& op : f.ops()) {
    size_t pc = p->ops.size();
    p->ops.push_back(op.get());
    p->partner.push_back(SIZE_MAX);
    for (size_t r = 0; r < op->numResults(); ++r) p->id.emplace(op->result(r), p->id.size());
    switch (op->kind()) {
    case OpKind::For: open.push_back(pc); break;
    case OpKind::EndFor:
      if (open.empty()) return error(op->loc(), "end_for without for in @" + f.name());
      p->partner[pc] = open.back();
      p->partner[open.back()] = pc;
      open.pop_back();
      break;
    case OpKind::KernelConfig:
      p->configPc = pc;
      p->workgroup = op->attrs().getInts("workgroup");
      if (p->workgroup.size() != 3) return error(op->loc(), "kernel_config needs 3 workgroup dims");
      break;
    case OpKind::Compute: {
      std::optional<OpKind> fn = lookupOp(op->attrs().getStr("fn"));
      if (!fn || opInfo(*fn).level != OpLevel::Tensor)
        return error(op->loc(), "compute names no tensor op");
      Attrs a = op->attrs();
      a.erase("fn");
      Type rt = Type::tensor(op->result(0)->type().elem(), {});
      p->computeOps.emplace(op.get(),
                            std::make_unique<Op>(*fn, std::vector<Type>{rt}, a, op->loc()));
      break;
    }
    default: break;
    }
  }
  if (!open.empty()) return error(p->ops[open.back()]->loc(), "for without end_for");
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
    for (;;) {
      size_t atBarrier = 0, finished = 0;
      for (Thread& th : threads) {
        KILN_TRY(bool barrier, step(th));
        barrier ? ++atBarrier : ++finished;
      }
      if (atBarrier == 0) return ok();
      if (finished != 0)
        return error(p_.f.loc(), "kernel @" + p_.f.name() + ": in workgroup " + wgStr() + ", " +
                                     std::to_string(atBarrier) +
                                     " threads wait at a barrier that " + std::to_string(finished) +
                                     " threads never reach");
      ++stats.barriers;
    }
  }

  // Runs the uniform prologue of one thread up to kernel_config and returns the grid.
  Result<Grid> prologueGrid() {
    Thread th;
    initThread(th);
    if (p_.configPc == SIZE_MAX)
      return error(p_.f.loc(), "kernel @" + p_.f.name() + " has no kernel_config");
    while (th.pc < p_.configPc) KILN_CHECK(exec(th, *p_.ops[th.pc]));
    const Op& cfg = *p_.ops[p_.configPc];
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

  // Steps a thread until a barrier (true) or its end (false).
  Result<bool> step(Thread& th) {
    while (!th.done && th.pc < p_.ops.size()) {
      const Op& op = *p_.ops[th.pc];
      if (op.kind() == OpKind::Barrier) {
        ++th.pc;
        return true;
      }
      KILN_CHECK(exec(th, op));
    }
    th.done = true;
    return false;
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

  Status exec(Thread& th, const Op& op) {
    size_t pc = th.pc;
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
    case OpKind::For: {
      int64_t lo = in(0).i, hi = in(1).i, st = in(2).i;
      if (st <= 0) return fail(th, op, "loop step " + std::to_string(st) + " is not positive");
      if (lo < hi) {
        res().i = lo;
        th.loops.push_back({pc, hi, st});
      } else {
        th.pc = p_.partner[pc] + 1;
      }
      return ok();
    }
    case OpKind::EndFor: {
      LoopFrame& fr = th.loops.back();
      SVal& iv = val(th, p_.ops[fr.forPc]->result(0));
      if (!__builtin_add_overflow(iv.i, fr.step, &iv.i) && iv.i < fr.hi) {
        th.pc = fr.forPc + 1;
      } else {
        th.loops.pop_back();
      }
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
