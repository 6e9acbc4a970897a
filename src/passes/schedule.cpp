// schedule: lowers each tensor function to a host schedule plus one kernel per op.
//
// Requires:    every dim is known (run shape-infer first). Functions that already hold host
//              ops, and the kernels their launches or dispatches name, are left as they
//              are (a hand-written or partly scheduled module).
// Guarantees:  each function holds only host ops and `return`: arguments are uploaded
//              with `transfer_to`, each tensor op becomes `alloc_buffer` of its results and a
//              `launch` of a new kernel function @F.kN (the op alone, tensor-level, run by
//              the target's executable) — a `dispatch` formed by `fuse` launches the kernel
//              it names — weights become `load_weight`; a `reshape` of a buffer on its own
//              device becomes a `view` of it (no kernel, no copy) unless the buffer is a
//              donated argument's upload or written in place; every buffer that is
//              not returned is freed right after its last use or its views' last use, so the
//              live set, not the sum of all tensors, bounds memory; `wait` precedes `return`.
//              Every `launch` in the module (hand-written ones too) carries `push`, the symbols
//              its kernel reads (ir/core/push_constants.h), and, for a lowered kernel,
//              `workgroups`, its grid (analysis/kernel_grid.h); a launch that already records
//              them must agree.
// Invalidates: nothing (tensor-level analyses do not apply to host functions).
//
// Devices: an op placed on a device (`on ref[1]`, from affinity) runs there, a weight is
// loaded on its op's device, an argument is uploaded once to each device that uses it
// (a `transfer` of an argument becomes that upload), a tensor-level `transfer` becomes a
// host `transfer_to` its `to` device, a collective (`all_reduce`, ...) becomes an
// `alloc_buffer` per device and one host `collective` over the inputs and outputs, a `loop`
// becomes an `alloc_buffer` per result (deferred for a scan output, whose length run_loop
// binds) and a host `run_loop` of its body (an entry function), and
// `wait` runs on every device used, in order of first use. Ops without a device use
// `ScheduleOptions::device`, so an unplaced module schedules exactly as on one device.
//
//   func @f(%x: tensor<4xf32>) -> (tensor<4xf32>) {     func @f(%x: tensor<4xf32>) -> (...) {
//     %0 = exp %x : tensor<4xf32>                  =>     %0 = transfer_to %x {device = "ref[0]"}
//     return %0                                           %1 = alloc_buffer {device = "ref[0]"}
//   }                                                     launch %0, %1 {kernel = "f.k0", ...}
//                                                         free %0
//                                                         wait {device = "ref[0]"}
//                                                         return %1
//
// Donation (analysis/donation.h): the op that writes a donated argument's result launches with
// the argument's upload as its output buffer (the upload is marked `donated = 1` and, being
// returned, never freed); a result that is the donated argument itself returns its upload.
//
// One op per kernel keeps the ref target exact; codegen's `fuse` outlines bigger groups
// into the same kind of kernel function, which `dispatch` names.
#include <algorithm>
#include <map>
#include <set>

#include "analysis/donation.h"
#include "analysis/kernel_grid.h"
#include "ir/core/push_constants.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"
#include "passes/codegen.h"
#include "passes/passes.h"

namespace kiln {

namespace {

bool isTensorFunc(const Func& f) {
  for (const auto& op : f.ops())
    if (op->info().level != OpLevel::Tensor) return false;
  return true;
}

Op* insertOp(Func& f, Op* before, OpKind kind, const std::vector<Value*>& operands, Attrs attrs,
             std::vector<Type> types, const Loc& loc) {
  auto op = std::make_unique<Op>(kind, std::move(types), std::move(attrs), loc);
  Op* raw = f.insert(std::move(op), before);
  for (Value* v : operands) raw->addOperand(v);
  return raw;
}

class SchedulePass : public Pass {
public:
  explicit SchedulePass(ScheduleOptions opts) : opts_(std::move(opts)) {}

  Status run(Module& m) override {
    std::set<std::string> kernels = kernelFunctions(m);
    std::vector<Func*> funcs;
    for (const auto& f : m.funcs())
      if (isTensorFunc(*f) && !kernels.count(f->name())) funcs.push_back(f.get());
    for (Func* f : funcs) KILN_CHECK(schedule(m, *f));
    for (const auto& f : m.funcs())
      for (const auto& op : f->ops())
        if (op->kind() == OpKind::Launch) KILN_CHECK(describeLaunch(m, *op));
    return ok();
  }

private:
  // The device attribute for host ops on `device`, remembered for the final waits.
  Attrs deviceAttr(const std::string& device) {
    if (std::find(used_.begin(), used_.end(), device) == used_.end()) used_.push_back(device);
    Attrs a;
    a.set("device", device);
    return a;
  }

  std::string deviceOf(const Op& op) const {
    if (op.kind() == OpKind::Transfer) return op.attrs().getStr("to");
    return op.device() ? op.device()->str() : opts_.device;
  }

  // The device on which `use` reads an argument: its op's, or the function result's.
  std::string useDevice(const Func& f, const Use& use) const {
    if (use.user->has(kCollective)) {
      std::optional<DeviceTarget> d = collectiveDevice(*use.user, use.operandIndex);
      return d ? d->str() : opts_.device;
    }
    if (use.user->kind() != OpKind::Return) return deviceOf(*use.user);
    std::optional<DeviceTarget> d = f.resultDevice(use.operandIndex);
    return d ? d->str() : opts_.device;
  }

  // Uploads each used argument once per device that reads it, before everything else.
  void uploadArgs(Func& f) {
    Op* first = f.ops().empty() ? nullptr : f.ops().front().get();
    std::vector<Op*> argTransfers;
    for (size_t i = 0; i < f.numArgs(); ++i) {
      Value* arg = f.arg(i);
      std::vector<Use> uses = arg->uses();
      std::vector<std::string> devices;
      for (const Use& u : uses) {
        std::string d = useDevice(f, u);
        if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
      }
      for (const std::string& d : devices) {
        Op* t = insertOp(f, first, OpKind::TransferTo, {}, deviceAttr(d), {arg->type()}, f.loc());
        for (const Use& u : uses) {
          if (useDevice(f, u) != d) continue;
          if (u.user->kind() == OpKind::Transfer) {
            u.user->result()->replaceAllUsesWith(t->result());
            argTransfers.push_back(u.user);
          } else {
            u.user->setOperand(u.operandIndex, t->result());
          }
        }
        t->addOperand(arg);
      }
    }
    for (Op* t : argTransfers) {
      t->dropOperands();
      f.erase(t);
    }
  }

  Status schedule(Module& m, Func& f) {
    for (const auto& op : f.ops())
      for (size_t r = 0; r < op->numResults(); ++r)
        if (op->result(r)->type().hasUnknownDims())
          return error(op->loc(), "schedule: result " + std::to_string(r) + " of '" +
                                      std::string(op->name()) +
                                      "' has a `?` dim; run shape-infer first");
    used_.clear();
    KILN_TRY(std::vector<Donation> donations, analyzeDonations(f));
    // Arguments live on the host: upload each used one once per device that reads it.
    uploadArgs(f);
    std::map<const Op*, const Donation*> writers;
    for (const Donation& d : donations) {
      if (d.writer) {
        writers[d.writer] = &d;
        markDonated(d.writer->operand(d.operand));
      } else {
        markDonated(f.terminator()->operand(d.result));
      }
    }
    std::set<const Op*> copies = reshapesThatCopy(f, donations);
    size_t kernelCount = 0;
    // Symbols known so far: the arguments' (bound from the inputs' shapes), then each
    // data-dependent one once the op that produces it has run.
    std::set<std::string> bound;
    for (size_t i = 0; i < f.numArgs(); ++i) collectTypeSymbols(f.arg(i)->type(), bound);
    for (Op* op : f.opsSnapshot()) {
      if (op->info().level != OpLevel::Tensor) continue;
      std::string device = deviceOf(*op);
      if (op->kind() == OpKind::Return) {
        if (used_.empty()) used_.push_back(opts_.device);
        for (const std::string& d : std::vector<std::string>(used_))
          insertOp(f, op, OpKind::Wait, {}, deviceAttr(d), {}, op->loc());
        continue;
      }
      // A collective writes one buffer on each of its devices from the buffers it reads there.
      if (op->has(kCollective)) {
        std::vector<Value*> operands = op->operands();
        for (size_t r = 0; r < op->numResults(); ++r) {
          std::optional<DeviceTarget> d = collectiveDevice(*op, r);
          if (!d)
            return error(op->loc(), "schedule: '" + std::string(op->name()) +
                                        "' names no valid device for its operand " +
                                        std::to_string(r));
          Op* a = insertOp(f, op, OpKind::AllocBuffer, {}, deviceAttr(d->str()),
                           {op->result(r)->type()}, op->loc());
          operands.push_back(a->result());
        }
        Attrs c;
        c.set("kind", std::string(op->name()));
        if (op->attrs().has("reduce")) c.set("reduce", op->attrs().getStr("reduce"));
        if (op->attrs().has("axis")) c.set("axis", op->attrs().getInt("axis"));
        insertOp(f, op, OpKind::Collective, operands, std::move(c), {}, op->loc());
        replaceByOutputs(f, op, operands);
        continue;
      }
      // A loop runs on the host: `run_loop` calls its body (scheduled like any function)
      // per iteration and writes the final carried values into buffers on the loop's device;
      // a scan output's buffer is deferred: run_loop allocates it once the iteration count,
      // its length, is known, and binds that data-dependent symbol.
      if (op->kind() == OpKind::Loop) {
        std::vector<Value*> operands = op->operands();
        int64_t carried = op->attrs().getInt("carried");
        for (size_t r = 0; r < op->numResults(); ++r) {
          Attrs a = deviceAttr(device);
          if (static_cast<int64_t>(r) >= carried) a.set("deferred", int64_t{1});
          Op* alloc = insertOp(f, op, OpKind::AllocBuffer, {}, std::move(a),
                               {op->result(r)->type()}, op->loc());
          operands.push_back(alloc->result());
        }
        for (const std::string& s : newDataSymbols(m, *op, bound)) bound.insert(s);
        Attrs l;
        l.set("body", op->attrs().getStr("body"));
        l.set("carried", carried);
        if (static_cast<int64_t>(op->numResults()) > carried)
          l.set("scans", static_cast<int64_t>(op->numResults()) - carried);
        insertOp(f, op, OpKind::RunLoop, operands, std::move(l), {}, op->loc());
        replaceByOutputs(f, op, operands);
        continue;
      }
      if (op->kind() == OpKind::Transfer) {
        Op* t = insertOp(f, op, OpKind::TransferTo, {op->operand(0)}, deviceAttr(device),
                         {op->result()->type()}, op->loc());
        op->result()->replaceAllUsesWith(t->result());
        op->dropOperands();
        f.erase(op);
        continue;
      }
      if (op->kind() == OpKind::Weight) {
        Attrs a = deviceAttr(device);
        a.set("name", op->attrs().getStr("name"));
        Op* w = insertOp(f, op, OpKind::LoadWeight, {}, std::move(a), {op->result()->type()},
                         op->loc());
        op->result()->replaceAllUsesWith(w->result());
        f.erase(op);
        continue;
      }
      // A constant is uploaded once per device and kept, not computed by a kernel per call.
      if (op->kind() == OpKind::Constant) {
        Attrs a = deviceAttr(device);
        a.set("value", *op->attrs().getDense("value"));
        Op* c = insertOp(f, op, OpKind::LoadConstant, {}, std::move(a), {op->result()->type()},
                         op->loc());
        op->result()->replaceAllUsesWith(c->result());
        f.erase(op);
        continue;
      }
      // A reshape of a buffer on its device is a view of it, not a kernel that copies.
      if (op->kind() == OpKind::Reshape && !copies.count(op) && viewable(*op, device)) {
        Op* v =
            insertOp(f, op, OpKind::View, {op->operand(0)}, {}, {op->result()->type()}, op->loc());
        op->result()->replaceAllUsesWith(v->result());
        op->dropOperands();
        f.erase(op);
        continue;
      }
      // A dispatch formed by `fuse` already names its kernel; any other op becomes one.
      std::string name;
      if (op->kind() == OpKind::Dispatch) {
        name = op->attrs().getStr("kernel");
      } else {
        name = f.name() + ".k" + std::to_string(kernelCount++);
        if (m.lookupFunc(name))
          return error(op->loc(), "schedule: a function @" + name + " exists");
        m.addFunc(outline(*op, name));
      }
      // The data-dependent symbols this op binds: its kernel also returns each one's value,
      // which `bind_symbol` reads after the launch.
      std::vector<std::string> binds = newDataSymbols(m, *op, bound);
      if (!binds.empty()) KILN_CHECK(returnSymbolValues(m, *op, name, binds));
      std::vector<Value*> operands = op->operands();
      auto w = writers.find(op);
      // Its kernel writes only part of its output, trusting it to hold the operand already.
      if (op->attrs().has("in_place") && w == writers.end())
        return error(op->loc(), "schedule: the dispatch of @" + name +
                                    " is marked in_place, but it does not write a donated "
                                    "argument's result (see docs/donation.md)");
      for (size_t r = 0; r < op->numResults(); ++r) {
        if (w != writers.end() && w->second->output == r) {
          operands.push_back(op->operand(w->second->operand)); // written in place
          continue;
        }
        Op* a = insertOp(f, op, OpKind::AllocBuffer, {}, deviceAttr(device),
                         {op->result(r)->type()}, op->loc());
        operands.push_back(a->result());
      }
      std::vector<Value*> counts;
      for (size_t i = 0; i < binds.size(); ++i) {
        Op* a = insertOp(f, op, OpKind::AllocBuffer, {}, deviceAttr(device),
                         {Type(ElemType::I64, {})}, op->loc());
        counts.push_back(a->result());
      }
      operands.insert(operands.end(), counts.begin(), counts.end());
      Attrs d = deviceAttr(device);
      d.set("kernel", name);
      d.set("outputs", static_cast<int64_t>(op->numResults() + binds.size()));
      if (op->attrs().has("strategy")) d.set("strategy", op->attrs().getStr("strategy"));
      insertOp(f, op, OpKind::Launch, operands, std::move(d), {}, op->loc());
      for (size_t i = 0; i < binds.size(); ++i) {
        Attrs b;
        b.set("name", binds[i]);
        insertOp(f, op, OpKind::BindSymbol, {counts[i]}, std::move(b), {}, op->loc());
        bound.insert(binds[i]);
      }
      replaceByOutputs(f, op, operands);
    }
    insertFrees(f);
    return ok();
  }

  // Ends tensor op `op`, now carried out by host ops: each of its results is the buffer its
  // host form writes, operands[op's operand count + r].
  static void replaceByOutputs(Func& f, Op* op, const std::vector<Value*>& operands) {
    for (size_t r = 0; r < op->numResults(); ++r)
      op->result(r)->replaceAllUsesWith(operands[op->numOperands() + r]);
    op->dropOperands();
    f.erase(op);
  }

  static void collectTypeSymbols(const Type& t, std::set<std::string>& out) {
    for (const Dim& d : t.shape())
      if (!d.isUnknown()) d.expr().collectSymbols(out);
  }

  // The data-dependent symbols in `op`'s result types that are not bound yet.
  static std::vector<std::string> newDataSymbols(const Module& m, const Op& op,
                                                 const std::set<std::string>& bound) {
    std::set<std::string> used;
    for (size_t r = 0; r < op.numResults(); ++r) collectTypeSymbols(op.result(r)->type(), used);
    std::vector<std::string> out;
    for (const std::string& s : used) {
      const SymbolInfo* info = m.symbols().lookup(s);
      if (info && info->dataDependent && !bound.count(s)) out.push_back(s);
    }
    return out;
  }

  // Makes kernel @name (the op's, tensor-level) also return, for each symbol of `syms`, its
  // value: a `dim` of the first result dim that is that symbol.
  static Status returnSymbolValues(Module& m, const Op& op, const std::string& name,
                                   const std::vector<std::string>& syms) {
    Func* k = m.lookupFunc(name);
    if (!k || isLoweredKernel(*k))
      return error(op.loc(), "schedule: '" + std::string(op.name()) +
                                 "' binds a data-dependent symbol, but its kernel @" + name +
                                 " is not a tensor-level function");
    Op* ret = k->terminator();
    std::vector<Type> types = k->resultTypes();
    for (const std::string& s : syms) {
      Value* found = nullptr;
      int64_t axis = 0;
      for (size_t r = 0; r < ret->numOperands() && !found; ++r) {
        const Type& t = ret->operand(r)->type();
        for (int64_t d = 0; d < t.rank() && !found; ++d)
          if (!t.dim(d).isUnknown() && t.dim(d).expr().symbolName() == s) {
            found = ret->operand(r);
            axis = d;
          }
      }
      if (!found)
        return error(op.loc(), "schedule: no result of @" + name +
                                   " has the data-dependent symbol '" + s + "' as a dim");
      Attrs a;
      a.set("axis", axis);
      Op* dim = insertOp(*k, ret, OpKind::Dim, {found}, std::move(a), {Type(ElemType::I64, {})},
                         op.loc());
      ret->addOperand(dim->result());
      types.push_back(dim->result()->type());
    }
    k->setResultTypes(std::move(types));
    return ok();
  }

  // The tensor a value reshapes, through any chain of reshapes.
  static const Value* reshapeRoot(const Value* v) {
    while (v->def() && v->def()->kind() == OpKind::Reshape) v = v->def()->operand(0);
    return v;
  }

  // The reshapes that must stay copies: those of a tensor that a kernel writes in place (a
  // view would see the write). Decided before scheduling replaces the tensors by buffers.
  static std::set<const Op*> reshapesThatCopy(const Func& f,
                                              const std::vector<Donation>& donations) {
    std::set<const Value*> written;
    for (const Donation& d : donations)
      if (d.writer) written.insert(reshapeRoot(d.writer->operand(d.operand)));
    std::set<const Op*> out;
    for (const auto& op : f.ops())
      if (op->kind() == OpKind::Reshape && written.count(reshapeRoot(op->operand(0))))
        out.insert(op.get());
    return out;
  }

  // Whether reshape `op` (on `device`) may view its operand's buffer: the buffer (through
  // views) is one this function allocates, uploads or loads on that device, and not a
  // donated argument's upload.
  static bool viewable(const Op& op, const std::string& device) {
    const Value* root = op.operand(0);
    while (root->def() && root->def()->kind() == OpKind::View) root = root->def()->operand(0);
    const Op* def = root->def();
    if (!def || !def->attrs().has("device") || def->attrs().getStr("device") != device)
      return false;
    if (def->kind() == OpKind::TransferTo && def->attrs().getInt("donated")) return false;
    return def->kind() == OpKind::AllocBuffer || def->kind() == OpKind::TransferTo ||
           def->kind() == OpKind::LoadWeight || def->kind() == OpKind::LoadConstant;
  }

  // Records what the executor hands the kernel: its push constants and, when lowered, its
  // grid. A kernel the module does not hold (a launch of another module's executable) is left.
  static Status describeLaunch(const Module& m, Op& launch) {
    std::string name = launch.attrs().getStr("kernel");
    const Func* k = m.lookupFunc(name);
    if (!k) return ok();
    KILN_CHECK(agree(launch, "push", pushConstantSymbols(*k)));
    if (!isLoweredKernel(*k)) return ok();
    KILN_TRY(auto grid, kernelGrid(*k));
    if (const auto* given = launch.attrs().find("workgroups")) {
      const auto* exprs = std::get_if<std::vector<std::string>>(given);
      bool same = exprs && exprs->size() == 3;
      for (size_t i = 0; same && i < 3; ++i) {
        Result<SymExpr> e = parseSymExpr((*exprs)[i], launch.loc());
        same = e.ok() && *e == grid[i];
      }
      if (!same)
        return error(launch.loc(), "launch of @" + name + " records workgroups " +
                                       printAttrValue(*given) + " but the kernel computes " +
                                       printAttrValue(kernelGridStrings(grid)));
      return ok();
    }
    launch.attrs().set("workgroups", kernelGridStrings(grid));
    return ok();
  }

  static Status agree(Op& launch, const char* attr, std::vector<std::string> want) {
    if (const AttrValue* given = launch.attrs().find(attr)) {
      if (!attrEqual(*given, AttrValue(want)))
        return error(launch.loc(), "launch of @" + launch.attrs().getStr("kernel") + " records " +
                                       attr + " = " + printAttrValue(*given) +
                                       " but the kernel reads " + printAttrValue(want));
      return ok();
    }
    if (!want.empty()) launch.attrs().set(attr, std::move(want));
    return ok();
  }

  // Marks the upload of a donated argument (what `v` is after uploadArgs).
  static void markDonated(Value* v) {
    if (v->def() && v->def()->kind() == OpKind::TransferTo)
      v->def()->attrs().set("donated", int64_t(1));
  }

  // The op alone in a function of its operands, returning its results.
  static std::unique_ptr<Func> outline(const Op& op, const std::string& name) {
    auto k = std::make_unique<Func>(name, op.loc());
    std::vector<Value*> args;
    for (const Value* v : op.operands()) args.push_back(k->addArg(v->type()));
    std::vector<Type> types;
    for (size_t r = 0; r < op.numResults(); ++r) types.push_back(op.result(r)->type());
    Op* clone = insertOp(*k, nullptr, op.kind(), args, op.attrs(), types, op.loc());
    std::vector<Value*> results;
    for (size_t r = 0; r < clone->numResults(); ++r) results.push_back(clone->result(r));
    insertOp(*k, nullptr, OpKind::Return, results, {}, {}, op.loc());
    k->setResultTypes(std::move(types));
    return k;
  }

  // Frees every allocated or uploaded buffer right after its last use, unless returned.
  // Weights stay resident (the executor keeps them for later calls).
  static void insertFrees(Func& f) {
    std::vector<Op*> ops = f.opsSnapshot();
    std::map<const Op*, size_t> position;
    for (size_t i = 0; i < ops.size(); ++i) position[ops[i]] = i;
    for (Op* op : ops) {
      if (op->kind() != OpKind::AllocBuffer && op->kind() != OpKind::TransferTo) continue;
      // The buffer lives as long as it or any view of it is used.
      std::vector<Value*> aliases = {op->result()};
      size_t last = position[op];
      bool returned = false;
      for (size_t i = 0; i < aliases.size(); ++i)
        for (const Use& u : aliases[i]->uses()) {
          returned = returned || u.user->kind() == OpKind::Return;
          last = std::max(last, position[u.user]);
          if (u.user->kind() == OpKind::View) aliases.push_back(u.user->result());
        }
      Value* buf = op->result();
      // The return is the last op, so a buffer it does not use has a next op to free before.
      if (returned || last + 1 >= ops.size()) continue;
      insertOp(f, ops[last + 1], OpKind::Free, {buf}, {}, {}, ops[last]->loc());
    }
  }

  ScheduleOptions opts_;
  std::vector<std::string> used_; // devices of the function being scheduled, first use first
};

} // namespace

std::unique_ptr<Pass> createSchedulePass(const ScheduleOptions& opts) {
  return std::make_unique<SchedulePass>(opts);
}

} // namespace kiln
