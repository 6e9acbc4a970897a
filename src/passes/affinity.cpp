// affinity: places every value on a device; clones cheap ops to their consumers; inserts,
// merges and removes transfers.
//
// Requires:    every device referenced is declared (resolveDevices); at least one device.
// Guarantees:  verifyPlacement holds: every argument, result and op has a declared device;
//              every operand of an op lives on the op's device, except a transfer's; cheap
//              ops (isCheapToClone: sources, views and unpinned elementwise ops over cheap
//              values only, such as a causal mask built from iota) exist once per consuming
//              device and are never transferred: each device recomputes them; each value
//              crosses to a device through at most one transfer.
//              Pins (devices set before the pass) are kept.
// Invalidates: nothing (it only adds device annotations, clones and transfers).
//
//   device ref[0]
//   device ref[1]
//   %0 = constant {...} : tensor<4xf32> on ref[0]     %0 = constant ... on ref[0]
//   %1 = add %x, %0 : tensor<4xf32> on ref[0]    =>   %1 = constant ... on ref[1]
//   %2 = mul %1, %0 : tensor<4xf32> on ref[1]         %2 = add %x, %0 ... on ref[0]
//                                                     %3 = transfer %2 {to = "ref[1]"} ...
//                                                     %4 = mul %3, %1 ... on ref[1]
//
// The analysis. Every value that is not cheap to clone gets a lattice element: unknown
// (no bits), one device (one bit) or a set of devices (several bits), a bit set over the
// declared devices. Pinned values (an op's `on`, an argument's or result's device,
// `--place`, partitioning) start at their device and never change. Two monotone rules
// move information along use edges until nothing changes (a worklist):
//   forward   an unpinned op joins the sets of its operands (it can run where its inputs
//             are);
//   backward  a free value (unpinned, and defined without inputs that are not cheap to
//             clone: an argument, or an op over constants only) joins the sets of its
//             users, and a pinned result's device (it can be computed where it is needed).
// Join is set union, so each value's set only grows, and it can grow at most D times (D
// devices). The worklist holds a value only after its set grew, hence there are at most
// V x D updates (V values) and O(E x D) work (E use edges): the analysis terminates
// because the lattice is finite and every rule is monotone, with no iteration cap to hit.
//
// Then, in program order (operands before users), each value gets one device: its pin;
// else the device in its set (or among its operands' devices) that already holds most of
// its operand bytes, ties to the first declared; else the default device. Cheap ops are
// then cloned once per device among their consumers' (users come later, so a reverse
// sweep sees every user placed), and every remaining cross-device use reads one transfer
// per (value, device), created just before its first user on that device. Transfers already in the
// input are kept when they cross devices, merged when they duplicate another and removed
// when their value already lives on their target.
#include "passes/affinity.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "analysis/cost.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"
#include "passes/passes.h"
#include "passes/placement.h"

namespace kiln {

bool recomputable(const Op& op) {
  return op.has(kCheapToClone) || op.has(kView) ||
         (op.has(kElementwise) && !op.has(kSideEffects) && !op.device());
}

bool isCheapToClone(const Op& op) {
  std::vector<const Op*> stack = {&op};
  std::unordered_map<const Op*, bool> seen;
  while (!stack.empty()) {
    const Op* o = stack.back();
    stack.pop_back();
    if (seen.count(o)) continue;
    seen[o] = true;
    if (!recomputable(*o)) return false;
    for (const Value* v : o->operands()) {
      if (v->isArg()) return false;
      stack.push_back(v->def());
    }
  }
  return true;
}

namespace {

using Mask = uint64_t;

std::string valueName(const Value* v) {
  if (v->isArg()) return "%" + (v->name().empty() ? "arg" + std::to_string(v->index()) : v->name());
  std::string line = printOp(*v->def());
  size_t eq = line.find(" = ");
  std::string names = eq == std::string::npos ? line : line.substr(0, eq);
  if (v->def()->numResults() > 1) return names + " (result " + std::to_string(v->index()) + ")";
  return names;
}

class FuncAffinity {
public:
  FuncAffinity(Module& m, Func& f, const AffinityOptions& opts, AffinityStats& stats)
      : m_(m), f_(f), opts_(opts), stats_(stats) {}

  Status run() {
    for (const DeviceDecl& d : m_.devices()) devices_.push_back(d.target);
    KILN_CHECK(checkTransferPins());
    number();
    solve();
    choose();
    placeResults();
    cloneToConsumers();
    return insertTransfers();
  }

private:
  struct Node {
    Value* arg; // an argument, or
    Op* op;     // an op that is not cheap to clone
    bool free;
    std::optional<DeviceTarget> pin;
    int result = -1; // a collective's result (one node each, pinned to its devices[result])
  };

  // ---- nodes: arguments, then ops other than `return`, in program order --------------------

  void number() {
    size_t expected = f_.numArgs() + f_.numOps();
    nodeOfValue_.reserve(expected);
    pos_.reserve(expected);
    for (size_t i = 0; i < f_.numArgs(); ++i) {
      nodes_.push_back({f_.arg(i), nullptr, false, f_.argDevice(i)});
      nodeOfValue_[f_.arg(i)] = nodes_.size() - 1;
    }
    for (Op* op : f_.opsSnapshot()) {
      pos_[op] = pos_.size();
      if (op->has(kTerminator)) {
        ret_ = op;
        continue;
      }
      // Operands come first, so their cheapness is already known.
      auto isCheap = [&](const Value* v) { return !v->isArg() && cheapOps_.count(v->def()); };
      if (op->kind() == OpKind::Transfer && isCheap(op->operand(0))) {
        // A cheap value is never transferred: the transfer's users read it directly and
        // get their own clone.
        op->result()->replaceAllUsesWith(op->operand(0));
        pos_.erase(op);
        f_.erase(op);
        ++stats_.removedTransfers;
        continue;
      }
      bool cheap = recomputable(*op);
      for (const Value* v : op->operands()) cheap = cheap && isCheap(v);
      if (cheap) {
        cheapOps_.insert(op);
        cheapOrder_.push_back(op);
        continue;
      }
      if (op->has(kCollective)) {
        // Placed already: result r lives on devices[r].
        for (size_t r = 0; r < op->numResults(); ++r) {
          nodes_.push_back({nullptr, op, false, collectiveDevice(*op, r), static_cast<int>(r)});
          nodeOfValue_[op->result(r)] = nodes_.size() - 1;
        }
        continue;
      }
      nodes_.push_back({nullptr, op, false, op->device()});
      for (size_t r = 0; r < op->numResults(); ++r) nodeOfValue_[op->result(r)] = nodes_.size() - 1;
    }
    mask_.assign(nodes_.size(), 0);
    for (size_t n = 0; n < nodes_.size(); ++n) {
      Node& node = nodes_[n];
      if (!node.pin) {
        // Free: no operand that is a node (an argument, or an op over cheap values only).
        node.free = true;
        if (node.op)
          for (const Value* v : node.op->operands())
            node.free = node.free && !nodeOfValue_.count(v);
      }
    }
  }

  Mask bit(const DeviceTarget& t) const {
    for (size_t i = 0; i < devices_.size(); ++i)
      if (devices_[i] == t) return Mask(1) << i;
    return 0;
  }

  // ---- the worklist over the lattice -------------------------------------------------------

  // The rule edges, once, as arrays: forward_[n] are the nodes that join n's set (users
  // that are not transfers), backward_[n] the free operands that join it.
  void buildEdges() {
    forward_.assign(nodes_.size(), {});
    backward_.assign(nodes_.size(), {});
    for (size_t n = 0; n < nodes_.size(); ++n) {
      Op* op = nodes_[n].op;
      if (!op || op->kind() == OpKind::Transfer) continue;
      for (const Value* v : op->operands()) {
        auto it = nodeOfValue_.find(v);
        if (it == nodeOfValue_.end()) continue;
        auto x = static_cast<uint32_t>(it->second);
        forward_[x].push_back(static_cast<uint32_t>(n));
        if (nodes_[x].free) backward_[n].push_back(x);
      }
    }
  }

  // Nodes are numbered in program order and the worklist pops the lowest first, so forward
  // information sweeps down the function once and a node queued twice is processed once.
  void join(uint32_t n, Mask m) {
    if (nodes_[n].pin || (mask_[n] | m) == mask_[n]) return;
    mask_[n] |= m;
    ++stats_.updates;
    push(n);
  }

  void push(uint32_t n) {
    if (queued_[n]) return;
    queued_[n] = true;
    work_.push(n);
  }

  void solve() {
    buildEdges();
    queued_.assign(nodes_.size(), false);
    for (size_t n = 0; n < nodes_.size(); ++n)
      if (nodes_[n].pin) {
        mask_[n] = bit(*nodes_[n].pin);
        push(static_cast<uint32_t>(n));
      }
    // A pinned result pulls a free value that it returns.
    if (ret_)
      for (size_t i = 0; i < ret_->numOperands(); ++i)
        if (auto d = f_.resultDevice(i)) {
          auto it = nodeOfValue_.find(ret_->operand(i));
          if (it != nodeOfValue_.end() && nodes_[it->second].free)
            join(static_cast<uint32_t>(it->second), bit(*d));
        }
    while (!work_.empty()) {
      uint32_t n = work_.top();
      work_.pop();
      queued_[n] = false;
      Mask m = mask_[n];
      for (uint32_t u : forward_[n]) join(u, m);
      for (uint32_t x : backward_[n]) join(x, m);
    }
  }

  // ---- one device per value ----------------------------------------------------------------

  void choose() {
    const SymbolTable& syms = m_.symbols();
    device_.resize(nodes_.size());
    for (size_t n = 0; n < nodes_.size(); ++n) {
      Node& node = nodes_[n];
      if (node.pin) {
        device_[n] = bitIndex(bit(*node.pin));
        continue;
      }
      std::vector<int64_t> bytes(devices_.size(), 0);
      Mask candidates = mask_[n];
      if (node.op)
        for (const Value* v : node.op->operands()) {
          auto it = nodeOfValue_.find(v);
          if (it == nodeOfValue_.end()) continue;
          size_t d = device_[it->second];
          bytes[d] += valueBytes(*v, syms);
          candidates |= Mask(1) << d;
        }
      size_t best = 0;
      bool found = false;
      for (size_t d = 0; d < devices_.size(); ++d)
        if ((candidates >> d) & 1)
          if (!found || bytes[d] > bytes[best]) best = d, found = true;
      device_[n] = best;
      if (node.arg)
        f_.setArgDevice(node.arg->index(), devices_[best]);
      else
        node.op->setDevice(devices_[best]);
    }
  }

  static size_t bitIndex(Mask m) { return static_cast<size_t>(std::countr_zero(m)); }

  std::optional<DeviceTarget> placed(const Value* v) const {
    auto it = nodeOfValue_.find(v);
    if (it != nodeOfValue_.end()) return devices_[device_[it->second]];
    return std::nullopt;
  }

  // Unpinned results live where their value is computed; a cheap value returned goes to
  // the default device (it is cloned there if it has to be).
  void placeResults() {
    if (!ret_) return;
    for (size_t i = 0; i < ret_->numOperands(); ++i)
      if (!f_.resultDevice(i))
        f_.setResultDevice(i, placed(ret_->operand(i)).value_or(devices_[0]));
  }

  // Where a use needs its value: the user's device, a result's device, a transfer's target.
  std::optional<DeviceTarget> neededAt(const Use& u) const {
    if (u.user->has(kTerminator)) return f_.resultDevice(u.operandIndex);
    if (u.user->has(kCollective)) return collectiveDevice(*u.user, u.operandIndex);
    return u.user->device();
  }

  // ---- clone-to-consumers ------------------------------------------------------------------

  void cloneToConsumers() {
    for (auto it = cheapOrder_.rbegin(); it != cheapOrder_.rend(); ++it) {
      Op* op = *it;
      // Every use says where it needs the value.
      std::vector<DeviceTarget> needed;
      for (size_t r = 0; r < op->numResults(); ++r)
        for (const Use& u : op->result(r)->uses())
          if (auto d = neededAt(u);
              d && std::find(needed.begin(), needed.end(), *d) == needed.end())
            needed.push_back(*d);
      std::sort(needed.begin(), needed.end(),
                [&](const DeviceTarget& a, const DeviceTarget& b) { return bit(a) < bit(b); });
      if (!op->device()) op->setDevice(needed.empty() ? devices_[0] : needed[0]);
      clones_.clear();
      clones_[*op->device()] = op;
      for (const DeviceTarget& d : needed) cloneOn(op, d);
      for (size_t r = 0; r < op->numResults(); ++r)
        for (const Use& u : std::vector<Use>(op->result(r)->uses())) {
          std::optional<DeviceTarget> d = neededAt(u);
          if (!d) continue;
          Value* copy = clones_.at(*d)->result(r);
          if (copy != op->result(r)) u.user->setOperand(u.operandIndex, copy);
        }
      // A pinned original that no consumer on its device needs is dead; drop it.
      bool used = false;
      for (size_t r = 0; r < op->numResults(); ++r) used = used || op->result(r)->hasUses();
      if (!used && !needed.empty()) f_.erase(op);
    }
  }

  // The copy of cheap op `op` on device d (made once, placed just before `op`).
  Value* cloneOn(Op* op, const DeviceTarget& d) {
    if (op->device() && *op->device() == d) return op->result();
    auto it = clones_.find(d);
    if (it != clones_.end()) return it->second->result();
    std::vector<Type> types;
    for (size_t r = 0; r < op->numResults(); ++r) types.push_back(op->result(r)->type());
    auto copy = std::make_unique<Op>(op->kind(), std::move(types), op->attrs(), op->loc());
    for (Value* v : op->operands()) copy->addOperand(v);
    for (size_t r = 0; r < op->numResults(); ++r) copy->result(r)->setName(op->result(r)->name());
    copy->setDevice(d);
    // Just before the original: its operands are defined there, its users come later.
    Op* inserted = f_.insert(std::move(copy), op);
    clones_[d] = inserted;
    ++stats_.clones;
    return inserted->result();
  }

  // ---- transfers ---------------------------------------------------------------------------

  Status insertTransfers() {
    Diags conflicts;
    for (size_t n = 0; n < nodes_.size(); ++n) {
      Node& node = nodes_[n];
      if (node.op && erasedTransfers_.count(node.op)) continue;
      DeviceTarget home = devices_[device_[n]];
      std::vector<Value*> values;
      if (node.arg)
        values.push_back(node.arg);
      else if (node.result >= 0)
        values.push_back(node.op->result(static_cast<size_t>(node.result)));
      else
        for (size_t r = 0; r < node.op->numResults(); ++r) values.push_back(node.op->result(r));
      for (Value* v : values) {
        std::map<DeviceTarget, Op*> to; // existing or new transfer per target
        for (const Use& u : std::vector<Use>(v->uses())) {
          if (u.user->kind() != OpKind::Transfer) continue;
          Op* t = u.user;
          if (*t->device() == home) {
            t->result()->replaceAllUsesWith(v);
            eraseTransfer(t);
            ++stats_.removedTransfers;
            continue;
          }
          // Of two transfers to one device the earlier stays, so it precedes all users.
          Op*& kept = to[*t->device()];
          if (!kept) {
            kept = t;
            continue;
          }
          if (pos_.at(t) < pos_.at(kept)) std::swap(t, kept);
          t->result()->replaceAllUsesWith(kept->result());
          eraseTransfer(t);
          ++stats_.mergedTransfers;
        }
        // Removed and merged transfers handed their users over: look at the uses afresh.
        std::vector<Use> cross;
        for (const Use& u : v->uses())
          if (u.user->kind() != OpKind::Transfer)
            if (std::optional<DeviceTarget> need = neededAt(u); need && *need != home)
              cross.push_back(u);
        if (cross.empty()) continue;
        if (!opts_.allowTransfers) {
          conflicts.add(conflict(node, v, home, cross));
          continue;
        }
        // Users in program order, so that each transfer precedes all of its users.
        std::sort(cross.begin(), cross.end(),
                  [&](const Use& a, const Use& b) { return pos_.at(a.user) < pos_.at(b.user); });
        for (const Use& u : cross) {
          DeviceTarget need = *neededAt(u);
          Op*& t = to[need];
          if (!t) {
            t = makeTransfer(v, need, u.user);
          } else if (pos_.at(t) > pos_.at(u.user)) {
            f_.move(t, u.user);
          }
          pos_[t] = std::min(pos_.at(t), pos_.at(u.user));
          u.user->setOperand(u.operandIndex, t->result());
        }
      }
    }
    if (conflicts.hasErrors()) return conflicts;
    return ok();
  }

  void eraseTransfer(Op* t) {
    erasedTransfers_.insert(t);
    f_.erase(t);
  }

  Op* makeTransfer(Value* v, const DeviceTarget& d, Op* before) {
    Attrs a;
    a.set("to", d.str());
    auto t = std::make_unique<Op>(OpKind::Transfer, std::vector<Type>{v->type()}, std::move(a),
                                  v->isArg() ? f_.loc() : v->def()->loc());
    t->addOperand(v);
    t->setDevice(d);
    ++stats_.transfers;
    Op* inserted = f_.insert(std::move(t), before);
    pos_[inserted] = pos_.at(before);
    return inserted;
  }

  Diag conflict(const Node& node, const Value* v, const DeviceTarget& home,
                const std::vector<Use>& cross) {
    std::string how = node.pin ? "pinned to " : "placed on ";
    Loc where = node.op ? node.op->loc() : f_.loc();
    Diag d = error(where, "value " + valueName(v) + " is " + how + home.str() +
                              " but is consumed on another device, and transfers are disabled");
    d.notes.push_back(note(where, std::string(node.pin ? "pinned" : "placed (from its operands)") +
                                      " here: " + (node.op ? printOp(*node.op) : valueName(v))));
    for (const Use& u : cross) {
      if (u.user->has(kTerminator))
        d.notes.push_back(note(f_.loc(), "consumer: result " + std::to_string(u.operandIndex) +
                                             " of @" + f_.name() + " on " + neededAt(u)->str()));
      else
        d.notes.push_back(
            note(u.user->loc(), "consumer on " + neededAt(u)->str() + ": " + printOp(*u.user)));
    }
    return d;
  }

  // A transfer pinned to one device but told to go to another is pinned twice.
  Status checkTransferPins() {
    Diags diags;
    for (const auto& op : f_.ops()) {
      if (op->kind() != OpKind::Transfer) continue;
      std::string to = op->attrs().getStr("to");
      Result<DeviceTarget> t = parseDeviceTarget(to, op->loc());
      if (!t.ok()) {
        diags.append(t.diags());
        continue;
      }
      if (op->device() && *op->device() != *t) {
        Diag d = error(op->loc(), "transfer " + valueName(op->result()) +
                                      " is pinned to two devices: " + op->device()->str() +
                                      " (its `on`) and " + t->str() + " (its `to`)");
        d.notes.push_back(note(op->loc(), "in: " + printOp(*op)));
        diags.add(std::move(d));
        continue;
      }
      if (!bit(*t)) {
        diags.add(error(op->loc(), "transfer to undeclared device " + t->str() +
                                       "; declare device " + t->str()));
        continue;
      }
      op->setDevice(*t);
    }
    if (diags.hasErrors()) return diags;
    return ok();
  }

  Module& m_;
  Func& f_;
  const AffinityOptions& opts_;
  AffinityStats& stats_;
  std::vector<DeviceTarget> devices_;
  std::vector<Node> nodes_;
  std::unordered_map<const Value*, size_t> nodeOfValue_;
  std::unordered_set<const Op*> cheapOps_;
  std::vector<Op*> cheapOrder_;
  std::unordered_map<const Op*, size_t> pos_; // program order of the input's ops
  std::vector<Mask> mask_;
  std::vector<std::vector<uint32_t>> forward_, backward_;
  std::vector<bool> queued_;
  std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>> work_;
  std::vector<size_t> device_;
  Op* ret_ = nullptr;
  std::map<DeviceTarget, Op*> clones_;
  std::set<const Op*> erasedTransfers_;
};

class AffinityPass : public Pass {
public:
  Status run(Module& m) override {
    Result<AffinityStats> r = runAffinity(m);
    if (!r.ok()) return r.takeDiags();
    return ok();
  }
};

} // namespace

Result<AffinityStats> runAffinity(Module& m, const AffinityOptions& opts) {
  if (m.devices().empty())
    return error(Loc{}, "affinity needs at least one declared device; declare device ref[0] (or a "
                        "`device ref[0]` line)");
  KILN_CHECK(resolveDevices(m, {}));
  AffinityStats stats;
  for (const auto& f : m.funcs()) KILN_CHECK(FuncAffinity(m, *f, opts, stats).run());
  Status placed = verifyPlacement(m);
  if (!placed.ok()) {
    Diags d = placed.takeDiags();
    for (Diag& e : d.list) e.message = "internal error after affinity: " + e.message;
    return d;
  }
  return stats;
}

std::unique_ptr<Pass> createAffinityPass() { return std::make_unique<AffinityPass>(); }

} // namespace kiln
