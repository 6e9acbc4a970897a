// Verifier: checks the invariants every pass may rely on and must preserve.
//
// Every error is located at the offending op (or function / weight) and, for ops, carries
// a note that prints the op. Checks, by level:
//
// Module
//   M1  function names are unique
//   M2  weight names are unique
//   M3  every symbol used in a weight's type is declared
// Function
//   F1  the body is not empty and its last op is a terminator; no other op is one
//   F2  `return` has one operand per declared result, each of a compatible type (below)
//   F3  every symbol used in argument and declared result types is declared
//   F4  use lists are exact: each argument's and result's uses name an op of this
//       function whose operand at that index is the value, each (op, index) once
//   F5  a donated argument names a result of the same type, and no result takes two donations
// Op, generic (every level)
//   O1  every operand is non-null and is an argument of this function, an argument of a
//       block enclosing the op, or a result of an earlier op whose block encloses the op
//       (a region's values stay inside it), and the operand's use list records this use
//   O2  operand count within the op table's [min, max]; result count equals the table's
//       (at least one where the table says variadic)
//   O3  every required attribute is present, no unknown name, each of the table's kind
//   O4  every symbol used in a result type is declared
//   O5  `return` carries no device (the function's results do)
// Op, tensor level
//   T1  result types are compatible with what inferResultTypes (shape_rules.h) infers
//   T2  `weight` names a declared weight whose type is compatible with its result
//   T3  `constant`'s dense value has exactly the result type (element type and shape)
//   T4  `transfer`'s `to` is a device target (kind[ordinal]); a transfer's device, when
//       set, is its `to`
//   T5  `dispatch` names a function of the module that contains no dispatch (kernels do not
//       nest, so dispatching never recurses); before `lower` its arguments and results
//       are compatible with the operands and results; after it the kernel takes one buffer
//       per operand then one per result, of the same element types and dims
// Op, host level
//   H1  `device` is KIND[N] (or KIND) and `launch`'s `outputs` is within its operand count; its
//       `workgroups`, when set, are 3 symbolic expressions of declared symbols, and its `push`
//       names declared symbols
//   H2  `free` frees a buffer made by alloc_buffer or transfer_to in this function, and nothing
//       uses a buffer after its `free` (nor frees it twice), nor a `view` of it
//   H3  host ops and tensor ops do not share a function (`return` belongs to both)
//   H4  `view` is of a buffer (not an argument) and keeps its element type and, where both
//       are static, its element count
//   H5  a `launch` writes no buffer that later calls reuse: not a `load_weight` or
//       `load_constant` (nor a view of one); a `load_constant`'s value has its result type
// After affinity (verifyPlacement, run by the affinity pass and by tests)
//   P1  every argument, declared result and op other than `return` has a device, and
//       every device is declared in the module
//   P2  every operand of an op other than `transfer` lives on the op's device (a value
//       lives where its op runs; an argument where it is placed); each `return` operand
//       lives on its result's device
//   P3  a `transfer` moves a value between two different devices, and no value is
//       transferred twice to the same device
// Kernels (functions that contain kernel-level ops; `lower` makes them)
//   K1  arguments are global buffers, there are no results, and the only tensor-level op
//       is the final `return` (without operands)
//   K2  `for` and `if` own their regions (one: the body; two: then and else), each ending
//       in `yield` and holding no other terminator; `yield` appears only there. A value
//       defined in a region is used only inside it (O1 checks visibility). `for` takes lo,
//       hi, step and one init per carried value; its body's arguments are the index
//       counter then the carried values, of the inits' types, and the body yields values
//       of those types, which are also the results. `if` takes an i1 scalar; both blocks
//       yield values of the result types
//   K5  subgroup ops need kernel_config's `subgroup`, which divides the workgroup's thread
//       count; reduce takes a scalar and an fn of add mul max min (numbers) and or xor (i1);
//       broadcast and shuffle take a scalar or index and an index lane
//   K3  operand and result types fit the op: index arithmetic on indices, one index per
//       buffer dim for loads and stores, stored values and loaded results of the buffer's
//       element type, masks and conditions i1 scalars, `alloc` of a shared or private
//       buffer with static dims, `compute` on scalars naming an elementwise tensor op
//   K4  at most one `kernel_config`, outside every loop, with a 3-entry positive workgroup
//
// "Compatible" types have the same element type and rank, and each pair of dims is
// provably equal under the module's symbol ranges or has a `?` on either side (`?` means
// not inferred yet; shape-infer replaces it).
#include "ir/verify/verifier.h"

#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ir/core/shape_rules.h"
#include "ir/text/printer.h"

namespace kiln {

namespace {

bool compatible(const Type& a, const Type& b, const SymbolTable& syms) {
  if (a.elem() != b.elem() || a.rank() != b.rank()) return false;
  for (int64_t i = 0; i < a.rank(); ++i) {
    const Dim& x = a.dim(i);
    const Dim& y = b.dim(i);
    if (x.isUnknown() || y.isUnknown()) continue;
    if (!provablyEqual(x.expr(), y.expr(), syms)) return false;
  }
  return true;
}

// The first undeclared symbol in a type, if any.
std::optional<std::string> undeclaredSymbol(const Type& t, const SymbolTable& syms) {
  std::set<std::string> used;
  for (const Dim& d : t.shape())
    if (!d.isUnknown()) d.expr().collectSymbols(used);
  for (const std::string& s : used)
    if (!syms.lookup(s)) return s;
  return std::nullopt;
}

class FuncVerifier {
public:
  FuncVerifier(const Func& f, const SymbolTable& syms, const Module* m)
      : f_(f), syms_(syms), m_(m) {}

  Diags run() {
    walkOps(f_, [&](const Op& op) {
      opIndex_.emplace(&op, opIndex_.size());
      if (op.info().level == OpLevel::Kernel) isKernel_ = true;
    });
    checkTerminator();
    for (size_t i = 0; i < f_.numArgs(); ++i) {
      checkTypeSymbols(f_.arg(i)->type(), f_.loc(), "argument " + std::to_string(i));
      checkUses(f_.arg(i), f_.loc());
    }
    for (const Type& t : f_.resultTypes()) checkTypeSymbols(t, f_.loc(), "declared result");
    checkDonations();
    walkOps(f_, [&](const Op& op) { checkOp(op); });
    if (isKernel_) checkKernelStructure();
    return std::move(diags_);
  }

private:
  void funcError(std::string msg) { diags_.add(error(f_.loc(), std::move(msg))); }

  void opError(const Op& op, std::string msg) {
    Diag d = error(op.loc(), std::move(msg));
    d.notes.push_back(note(op.loc(), "in: " + printOp(op)));
    diags_.add(std::move(d));
  }

  void checkTypeSymbols(const Type& t, const Loc& loc, const std::string& what) {
    if (auto s = undeclaredSymbol(t, syms_))
      diags_.add(error(loc, what + " of @" + f_.name() + " uses undeclared symbol '" + *s + "'"));
  }

  // F1, F2
  void checkTerminator() {
    if (f_.ops().empty()) return funcError("function @" + f_.name() + " has no return");
    for (const auto& op : f_.ops())
      if (op->has(kTerminator) && op.get() != f_.ops().back().get())
        opError(*op, "'" + std::string(op->name()) + "' must be the last op of @" + f_.name());
    const Op& last = *f_.ops().back();
    if (!last.has(kTerminator))
      return opError(last, "function @" + f_.name() + " must end with return");
    const auto& want = f_.resultTypes();
    if (last.numOperands() != want.size())
      return opError(last, "return has " + std::to_string(last.numOperands()) + " operands but @" +
                               f_.name() + " declares " + std::to_string(want.size()) + " results");
    for (size_t i = 0; i < want.size(); ++i) {
      const Value* v = last.operand(i);
      if (v && !compatible(v->type(), want[i], syms_))
        opError(last, "return operand " + std::to_string(i) + " has type " + v->type().str() +
                          " but @" + f_.name() + " declares " + want[i].str());
    }
  }

  // F5
  void checkDonations() {
    std::vector<int> donor(f_.resultTypes().size(), -1);
    for (size_t i = 0; i < f_.numArgs(); ++i) {
      std::optional<size_t> r = f_.argDonation(i);
      if (!r) continue;
      std::string what = "argument " + std::to_string(i) + " of @" + f_.name();
      if (*r >= donor.size()) {
        funcError(what + " is donated to result " + std::to_string(*r) + ", but @" + f_.name() +
                  " has " + std::to_string(donor.size()) + " results");
        continue;
      }
      const Type& want = f_.resultTypes()[*r];
      if (f_.arg(i)->type().str() != want.str())
        funcError(what + " has type " + f_.arg(i)->type().str() + " but the result " +
                  std::to_string(*r) + " it is donated to has type " + want.str() +
                  "; a donation needs the same type");
      if (donor[*r] >= 0)
        funcError("result " + std::to_string(*r) + " of @" + f_.name() +
                  " takes two donations (arguments " + std::to_string(donor[*r]) + " and " +
                  std::to_string(i) + ")");
      donor[*r] = static_cast<int>(i);
    }
  }

  // F4: every recorded use is live, points back at the value, and appears once.
  void checkUses(const Value* v, const Loc& where) {
    std::set<std::pair<const Op*, unsigned>> seen;
    for (const Use& u : v->uses()) {
      std::string what = "a value's use list";
      if (!opIndex_.count(u.user)) {
        diags_.add(error(where, what + " names an op outside @" + f_.name() + " (stale use)"));
        continue;
      }
      if (u.operandIndex >= u.user->numOperands() || u.user->operand(u.operandIndex) != v)
        opError(*u.user, what + " records operand " + std::to_string(u.operandIndex) +
                             " of this op, which is not that value (stale use)");
      if (!seen.insert({u.user, u.operandIndex}).second)
        opError(*u.user,
                what + " records operand " + std::to_string(u.operandIndex) + " of this op twice");
    }
  }

  // O1: the value is defined before `op` in this function.
  bool definedBefore(const Value* v, const Op& op) const {
    if (v->isArg()) return v->argOf() == &f_;
    if (v->isBlockArg()) {
      const Op* owner = v->blockArgOf()->parentOp();
      return owner && opIndex_.count(owner) && op.block() && op.block()->isWithin(v->blockArgOf());
    }
    auto it = opIndex_.find(v->def());
    return it != opIndex_.end() && it->second < opIndex_.at(&op) && op.block() &&
           op.block()->isWithin(v->def()->block());
  }

  void checkOp(const Op& op) {
    const OpInfo& info = op.info();
    std::string name = "'" + std::string(info.name) + "'";
    bool operandsOk = true;
    for (size_t i = 0; i < op.numOperands(); ++i) {
      const Value* v = op.operand(i);
      if (!v) {
        opError(op, "operand " + std::to_string(i) + " is null");
        operandsOk = false;
        continue;
      }
      if (!definedBefore(v, op)) {
        opError(op,
                "operand " + std::to_string(i) + " is not defined before its use in @" + f_.name());
        operandsOk = false;
        continue;
      }
      size_t count = 0;
      for (const Use& u : v->uses()) count += u.user == &op && u.operandIndex == i;
      if (count != 1)
        opError(op, "operand " + std::to_string(i) + "'s use list records this use " +
                        std::to_string(count) + " times");
    }
    for (size_t r = 0; r < op.numResults(); ++r) {
      checkUses(op.result(r), op.loc());
      if (auto s = undeclaredSymbol(op.result(r)->type(), syms_))
        opError(op, "result " + std::to_string(r) + " uses undeclared symbol '" + *s + "'");
    }

    if (op.has(kTerminator) && op.device())
      opError(op, name + " carries no device; place the function's results instead");
    bool shapeOk = checkCounts(op, info, name) && checkAttrs(op, info, name);
    if (!operandsOk || !shapeOk) return;
    switch (info.level) {
    case OpLevel::Tensor:
      if (isKernel_) {
        if (!op.has(kTerminator) || op.numOperands() != 0)
          opError(op, "kernel @" + f_.name() + " contains the tensor-level op " + name +
                          " (only a `return` without operands may end a kernel)");
        break;
      }
      if (op.kind() != OpKind::Return) tensorOps_.push_back(&op);
      if (op.kind() != OpKind::Return && firstHost_)
        opError(op, "tensor op in @" + f_.name() + ", which also has host ops (first: '" +
                        std::string(firstHost_->name()) + "')");
      for (const Value* v : op.operands())
        if (v && freed_.count(v)) opError(op, "uses a buffer after its free");
      checkTensorOp(op, info);
      break;
    case OpLevel::Host: checkHostOp(op); break;
    case OpLevel::Kernel:
      if (!isKernel_) break;
      checkKernelOp(op, name);
      break;
    }
  }

  // H1, H2, H3, H4, H5
  void checkHostOp(const Op& op) {
    if (op.attrs().has("device")) {
      std::string d = op.attrs().getStr("device");
      size_t open = d.find('[');
      bool good = !d.empty() && open != 0;
      if (good && open != std::string::npos)
        good = d.size() > open + 2 && d.back() == ']' &&
               d.find_first_not_of("0123456789", open + 1) == d.size() - 1;
      if (!good) opError(op, "device '" + d + "' is not KIND[N], such as ref[0]");
    }
    if (op.kind() == OpKind::Launch) {
      int64_t outs = op.attrs().getInt("outputs");
      if (outs < 0 || static_cast<size_t>(outs) > op.numOperands())
        opError(op, "launch has " + std::to_string(outs) + " outputs but " +
                        std::to_string(op.numOperands()) + " operands");
      checkLaunchGrid(op);
      for (size_t i =
               op.numOperands() - std::min<size_t>(std::max<int64_t>(outs, 0), op.numOperands());
           i < op.numOperands(); ++i)
        if (const Op* kept = residentSource(op.operand(i)))
          opError(op, "launch writes the buffer of '" + std::string(kept->name()) +
                          "', which later calls reuse (operand " + std::to_string(i) + ")");
    }
    if (op.kind() == OpKind::LoadConstant) {
      const HostTensor* value = op.attrs().getDense("value");
      Type valueType = Type::tensor(value->elem(), value->shape());
      if (valueType != op.result()->type())
        opError(op, "load_constant value has type " + valueType.str() + " but the result is " +
                        op.result()->type().str());
    }
    for (const Value* v : op.operands())
      if (v && freed_.count(v)) opError(op, "uses a buffer after its free");
    if (op.kind() == OpKind::Free) {
      const Value* v = op.operand(0);
      if (v && (v->isArg() || (v->def()->kind() != OpKind::AllocBuffer &&
                               v->def()->kind() != OpKind::TransferTo)))
        opError(op, "free of a value that alloc_buffer or transfer_to did not make");
      if (v) free(v);
    }
    if (op.kind() == OpKind::View) {
      const Value* v = op.operand(0);
      const Type &from = v ? v->type() : op.result()->type(), &to = op.result()->type();
      if (v && v->isArg())
        opError(op, "view of a function argument (a host tensor); a view is of a buffer");
      else if (from.elem() != to.elem())
        opError(op, "view changes the element type from " + from.str() + " to " + to.str());
      else if (from.numElements() && to.numElements() && *from.numElements() != *to.numElements())
        opError(op, "view of " + from.str() + " as " + to.str() + " changes the element count");
      if (v) views_[v].push_back(op.result());
    }
    if (!firstHost_) firstHost_ = &op;
    if (!tensorOps_.empty())
      opError(op, "host op in @" + f_.name() + ", which also has tensor ops (first: '" +
                      std::string(tensorOps_.front()->name()) + "')");
  }

  // H1: the grid and push constants a launch hands the executor.
  void checkLaunchGrid(const Op& op) {
    if (const AttrValue* w = op.attrs().find("workgroups")) {
      const auto* exprs = std::get_if<std::vector<std::string>>(w);
      if (exprs && exprs->size() != 3)
        opError(op, "launch has " + std::to_string(exprs->size()) +
                        " workgroups expressions; it needs 3 (x, y, z)");
      for (size_t i = 0; exprs && exprs->size() == 3 && i < 3; ++i) {
        Result<SymExpr> e = parseSymExpr((*exprs)[i], op.loc());
        if (!e.ok()) {
          opError(op, "launch workgroups[" + std::to_string(i) + "] '" + (*exprs)[i] +
                          "' is not a symbolic expression: " + e.diags().list.front().message);
          continue;
        }
        std::set<std::string> used;
        e->collectSymbols(used);
        for (const std::string& s : used)
          if (!syms_.lookup(s))
            opError(op, "launch workgroups[" + std::to_string(i) +
                            "] uses the undeclared symbol '" + s + "'");
      }
    }
    for (const std::string& s : op.attrs().getStrs("push"))
      if (!syms_.lookup(s)) opError(op, "launch pushes the undeclared symbol '" + s + "'");
  }

  // O2
  bool checkCounts(const Op& op, const OpInfo& info, const std::string& name) {
    auto n = static_cast<int>(op.numOperands());
    if (n < info.minOperands || (info.maxOperands >= 0 && n > info.maxOperands)) {
      opError(op, name + " has " + std::to_string(n) + " operands; the op table allows " +
                      std::to_string(info.minOperands) + " to " +
                      (info.maxOperands < 0 ? "any number" : std::to_string(info.maxOperands)));
      return false;
    }
    auto r = static_cast<int>(op.numResults());
    if (!info.resultCountFits(op.numResults())) {
      opError(op, name + " has " + std::to_string(r) + " results; the op table says " +
                      (info.numResults < 0 ? "at least 1" : std::to_string(info.numResults)));
      return false;
    }
    if (op.numRegions() != numRegionsOf(op.kind())) {
      opError(op, name + " has " + std::to_string(op.numRegions()) + " regions; it takes " +
                      std::to_string(numRegionsOf(op.kind())));
      return false;
    }
    return true;
  }

  // O3
  bool checkAttrs(const Op& op, const OpInfo& info, const std::string& name) {
    bool good = true;
    for (const auto& [attr, value] : op.attrs().entries()) {
      const AttrSpec* spec = nullptr;
      for (const AttrSpec& s : info.attrs)
        if (s.name == attr) spec = &s;
      if (!spec) {
        opError(op, name + " has no attribute '" + attr + "'");
        good = false;
      } else if (attrKindOf(value) != spec->kind) {
        opError(op, "attribute '" + attr + "' of " + name + " must be " +
                        std::string(attrKindName(spec->kind)) + ", found " +
                        std::string(attrKindName(attrKindOf(value))));
        good = false;
      }
    }
    for (const AttrSpec& s : info.attrs)
      if (!s.optional && !op.attrs().has(s.name)) {
        opError(op, name + " needs attribute '" + std::string(s.name) + "'");
        good = false;
      }
    return good;
  }

  // T1, T2, T3
  void checkTensorOp(const Op& op, const OpInfo& info) {
    std::vector<Type> operandTypes, declared;
    for (const Value* v : op.operands()) operandTypes.push_back(v->type());
    for (size_t r = 0; r < op.numResults(); ++r) declared.push_back(op.result(r)->type());
    std::string name = "'" + std::string(info.name) + "'";

    Result<std::vector<Type>> inferred =
        inferResultTypes(op.kind(), operandTypes, op.attrs(), declared, syms_, op.loc());
    if (!inferred.ok()) {
      for (Diag d : inferred.diags().list) {
        d.notes.push_back(note(op.loc(), "in: " + printOp(op)));
        diags_.add(std::move(d));
      }
    } else if (inferred->size() != declared.size()) {
      opError(op, name + " declares " + std::to_string(declared.size()) +
                      " results but its shape rule gives " + std::to_string(inferred->size()));
    } else {
      for (size_t r = 0; r < declared.size(); ++r)
        if (!compatible(declared[r], (*inferred)[r], syms_))
          opError(op, name + " result " + std::to_string(r) + " is declared " + declared[r].str() +
                          " but its operands give " + (*inferred)[r].str());
    }

    if (op.kind() == OpKind::Dispatch) checkDispatch(op);
    if (op.kind() == OpKind::Loop || op.kind() == OpKind::RunLoop) checkLoopBody(op);
    if (op.kind() == OpKind::Weight) {
      std::string w = op.attrs().getStr("name");
      const WeightDecl* decl = m_ ? m_->lookupWeight(w) : nullptr;
      if (!decl)
        opError(op, "weight '" + w + "' is not declared in the module");
      else if (!compatible(decl->type, declared[0], syms_))
        opError(op, "weight @" + w + " is declared " + decl->type.str() + " but used as " +
                        declared[0].str());
    }
    if (op.kind() == OpKind::Transfer) {
      std::string to = op.attrs().getStr("to");
      Result<DeviceTarget> t = parseDeviceTarget(to, op.loc());
      if (!t.ok())
        opError(op, "transfer's `to` must be a device like ref[1]: " + t.diags().list[0].message);
      else if (op.device() && *op.device() != *t)
        opError(op, "transfer to " + to + " is placed on " + op.device()->str());
    }
    if (op.has(kCollective)) {
      std::vector<std::string> devices = op.attrs().getStrs("devices");
      for (size_t i = 0; i < devices.size(); ++i) {
        Result<DeviceTarget> t = parseDeviceTarget(devices[i], op.loc());
        if (!t.ok()) {
          opError(op, "devices[" + std::to_string(i) +
                          "] must be a device like ref[1]: " + t.diags().list[0].message);
          continue;
        }
        for (size_t j = 0; j < i; ++j)
          if (devices[j] == devices[i])
            opError(op, "device " + devices[i] +
                            " is listed twice; a collective takes one "
                            "operand per device");
      }
      if (op.device())
        opError(op, std::string(op.name()) + " spans its devices and is placed on none (its "
                                             "`devices` say where each operand lives)");
    }
    if (op.kind() == OpKind::Collective && op.numOperands() % 2 != 0)
      opError(op, "collective takes inputs and as many output buffers, an even number of "
                  "operands, not " +
                      std::to_string(op.numOperands()));
    if (op.kind() == OpKind::Constant) {
      const HostTensor* value = op.attrs().getDense("value");
      Type valueType = Type::tensor(value->elem(), value->shape());
      if (valueType != declared[0])
        opError(op, "constant value has type " + valueType.str() + " but the result is " +
                        declared[0].str());
    }
  }

  // T5
  // A loop's body: a function of the module taking (i64 iteration, i1 condition, carried...,
  // invariants...) and returning (i1 condition, carried..., scan slices...), the carried types
  // unchanged and each scan slice typed as its scan output without the first dim.
  void checkLoopBody(const Op& op) {
    std::string b = op.attrs().getStr("body");
    const Func* body = m_ ? m_->lookupFunc(b) : nullptr;
    if (!body) return opError(op, "the loop body @" + b + " is not defined");
    if (body == &f_) return opError(op, "the loop body @" + b + " is the function itself");
    size_t carried = static_cast<size_t>(std::max<int64_t>(op.attrs().getInt("carried"), 0));
    bool host = op.kind() == OpKind::RunLoop;
    size_t scans = host ? static_cast<size_t>(std::max<int64_t>(
                              op.attrs().has("scans") ? op.attrs().getInt("scans") : 0, 0))
                        : op.numResults() - std::min(op.numResults(), carried);
    if (host && op.numOperands() < carried + scans)
      return opError(op, "run_loop has " + std::to_string(op.numOperands()) + " operands; its " +
                             std::to_string(carried) + " carried and " + std::to_string(scans) +
                             " scan outputs need more");
    size_t inputs = host ? op.numOperands() - carried - scans : op.numOperands();
    if (body->numArgs() != inputs || body->resultTypes().size() != carried + 1 + scans)
      return opError(op, "the loop body @" + b + " takes " + std::to_string(body->numArgs()) +
                             " arguments and returns " +
                             std::to_string(body->resultTypes().size()) +
                             " values; the loop needs " + std::to_string(inputs) + " and " +
                             std::to_string(carried + 1 + scans));
    for (size_t i = 0; i < inputs; ++i)
      if (!compatible(body->arg(i)->type(), op.operand(i)->type(), syms_))
        return opError(op, "loop operand " + std::to_string(i) + " has type " +
                               op.operand(i)->type().str() + " but the body @" + b + " takes " +
                               body->arg(i)->type().str());
    if (body->resultTypes()[0] != Type(ElemType::I1, {}))
      return opError(op, "the loop body @" + b + " must return the condition (tensor<i1>) first");
    for (size_t k = 0; k < carried; ++k)
      if (!compatible(body->resultTypes()[k + 1], op.operand(k + 2)->type(), syms_))
        return opError(op, "the loop body @" + b + " returns carried value " + std::to_string(k) +
                               " as " + body->resultTypes()[k + 1].str() + ", not its type " +
                               op.operand(k + 2)->type().str());
    for (size_t j = 0; j < scans; ++j) {
      const Type& out =
          host ? op.operand(inputs + carried + j)->type() : op.result(carried + j)->type();
      const Type& slice = body->resultTypes()[1 + carried + j];
      Shape rest(out.shape().begin() + std::min<int64_t>(out.rank(), 1), out.shape().end());
      if (out.rank() < 1 || !compatible(slice, Type(out.elem(), rest), syms_))
        return opError(op, "the loop body @" + b + " returns scan slice " + std::to_string(j) +
                               " as " + slice.str() + "; the scan output " + out.str() +
                               " stacks slices of " + Type(out.elem(), rest).str());
    }
  }

  void checkDispatch(const Op& op) {
    std::string k = op.attrs().getStr("kernel");
    const Func* callee = m_ ? m_->lookupFunc(k) : nullptr;
    if (!callee) return opError(op, "dispatch names kernel @" + k + ", which is not defined");
    if (callee == &f_) return opError(op, "kernel @" + k + " dispatches itself");
    for (const auto& inner : callee->ops())
      if (inner->kind() == OpKind::Dispatch)
        return opError(op, "kernel @" + k + " itself contains a dispatch; kernels do not nest");
    bool lowered = callee->numArgs() > 0 && callee->arg(0)->type().isBuffer();
    size_t want = lowered ? op.numOperands() + op.numResults() : op.numOperands();
    if (callee->numArgs() != want)
      return opError(op, "kernel @" + k + " takes " + std::to_string(callee->numArgs()) +
                             " arguments, the dispatch passes " + std::to_string(want));
    auto sameData = [&](const Type& buf, const Type& t) {
      return buf.elem() == t.elem() && compatible(t.withShape(buf.shape()), t, syms_);
    };
    for (size_t i = 0; i < op.numOperands(); ++i) {
      const Type& a = callee->arg(i)->type();
      const Type& v = op.operand(i)->type();
      if (lowered ? !sameData(a, v) : !compatible(a, v, syms_))
        opError(op, "dispatch operand " + std::to_string(i) + " has type " + v.str() +
                        " but kernel @" + k + " takes " + a.str());
    }
    for (size_t r = 0; r < op.numResults(); ++r) {
      const Type& v = op.result(r)->type();
      if (lowered) {
        const Type& a = callee->arg(op.numOperands() + r)->type();
        if (!sameData(a, v))
          opError(op, "dispatch result " + std::to_string(r) + " has type " + v.str() +
                          " but kernel @" + k + " writes " + a.str());
      } else if (r >= callee->resultTypes().size() ||
                 !compatible(callee->resultTypes()[r], v, syms_)) {
        opError(op, "dispatch result " + std::to_string(r) + " has type " + v.str() +
                        " which kernel @" + k + " does not return");
      }
    }
    if (!lowered && callee->resultTypes().size() != op.numResults())
      opError(op, "kernel @" + k + " returns " + std::to_string(callee->resultTypes().size()) +
                      " values, the dispatch has " + std::to_string(op.numResults()) + " results");
  }

  // K1 (arguments), K2, K4 (placement), K5 (subgroup size)
  void checkKernelStructure() {
    for (size_t i = 0; i < f_.numArgs(); ++i) {
      const Type& t = f_.arg(i)->type();
      if (!t.isBuffer() || t.space() != MemSpace::Global)
        funcError("kernel @" + f_.name() + " argument " + std::to_string(i) + " has type " +
                  t.str() + "; kernel arguments are global buffers");
    }
    if (!f_.resultTypes().empty()) funcError("kernel @" + f_.name() + " must not return values");
    int configs = 0;
    const Op* config = nullptr;
    const Op* firstSubgroupOp = nullptr;
    walkOps(f_, [&](const Op& op) {
      if (op.kind() == OpKind::KernelConfig) {
        if (++configs > 1) opError(op, "a kernel has at most one kernel_config");
        if (op.parentOp()) opError(op, "kernel_config must not be inside a region");
        config = &op;
      }
      if ((op.has(kSubgroup) || op.kind() == OpKind::LaneId) && !firstSubgroupOp)
        firstSubgroupOp = &op;
      if (op.kind() == OpKind::Yield && !op.parentOp())
        opError(op, "yield outside a region (a kernel ends with return)");
      for (size_t r = 0; r < op.numRegions(); ++r) checkRegion(op, *op.region(r));
    });
    if (firstSubgroupOp) {
      if (!config || !config->attrs().has("subgroup")) {
        opError(*firstSubgroupOp, "subgroup ops need kernel_config's subgroup size");
      } else {
        int64_t sg = config->attrs().getInt("subgroup");
        std::vector<int64_t> wg = config->attrs().getInts("workgroup");
        int64_t threads = 1;
        for (int64_t w : wg) threads *= w > 0 ? w : 1;
        if (sg < 1 || threads % sg != 0)
          opError(*config, "subgroup size " + std::to_string(sg) +
                               " does not divide the workgroup's " + std::to_string(threads) +
                               " threads");
      }
    }
  }

  // K2: a region ends in `yield` with values of the types its op expects, and holds no other
  // terminator.
  void checkRegion(const Op& op, const Block& b) {
    std::string name = "'" + std::string(op.name()) + "'";
    const Op* term = b.terminator();
    for (const auto& inner : b.ops())
      if (inner->has(kTerminator) && inner.get() != term)
        opError(*inner, "'" + std::string(inner->name()) + "' must end its region");
    if (!term || term->kind() != OpKind::Yield) {
      opError(op, "a region of " + name + " must end with yield");
      return;
    }
    if (term->numOperands() != op.numResults()) {
      opError(*term, "yield has " + std::to_string(term->numOperands()) + " operands but " + name +
                         " has " + std::to_string(op.numResults()) + " results");
      return;
    }
    for (size_t i = 0; i < op.numResults(); ++i)
      if (term->operand(i) && term->operand(i)->type() != op.result(i)->type())
        opError(*term, "yield operand " + std::to_string(i) + " has type " +
                           term->operand(i)->type().str() + " but " + name + " result " +
                           std::to_string(i) + " has type " + op.result(i)->type().str());
  }

  // K3, K4 (attributes)
  void checkKernelOp(const Op& op, const std::string& name) {
    auto isIdx = [&](size_t i) { return op.operand(i)->type().isIndex(); };
    auto isBool1 = [&](size_t i) {
      const Type& t = op.operand(i)->type();
      return t.isScalar() && t.elem() == ElemType::I1;
    };
    auto resultIs = [&](const Type& t) {
      return op.numResults() == 1 && op.result(0)->type() == t;
    };
    auto need = [&](bool cond, const std::string& what) {
      if (!cond) opError(op, name + " " + what);
    };
    // Buffer access: operand `b` is the buffer, indices follow from `first`.
    auto checkAccess = [&](size_t b, size_t first) -> const Type* {
      const Type& buf = op.operand(b)->type();
      if (!buf.isBuffer()) {
        opError(op,
                name + " operand " + std::to_string(b) + " must be a buffer, found " + buf.str());
        return nullptr;
      }
      if (op.numOperands() - first != static_cast<size_t>(buf.rank()))
        opError(op, name + " takes one index per dim of " + buf.str() + ", found " +
                        std::to_string(op.numOperands() - first));
      for (size_t i = first; i < op.numOperands(); ++i)
        need(isIdx(i), "index operand " + std::to_string(i) + " must have type index");
      return &buf;
    };
    switch (op.kind()) {
    case OpKind::KernelConfig: {
      for (size_t i = 0; i < 3; ++i) need(isIdx(i), "grid operands must be indices");
      std::vector<int64_t> wg = op.attrs().getInts("workgroup");
      bool good = wg.size() == 3;
      for (int64_t w : wg) good = good && w >= 1;
      need(good, "needs workgroup = [x, y, z] with every entry >= 1");
      break;
    }
    case OpKind::WorkgroupId:
    case OpKind::LocalId: {
      int64_t a = op.attrs().getInt("axis");
      need(a >= 0 && a < 3, "axis must be 0, 1 or 2");
      need(resultIs(Type::index()), "returns an index");
      break;
    }
    case OpKind::SymbolValue:
      need(syms_.lookup(op.attrs().getStr("name")) != nullptr, "names an undeclared symbol");
      need(resultIs(Type::index()), "returns an index");
      break;
    case OpKind::IConst: need(resultIs(Type::index()), "returns an index"); break;
    case OpKind::SConst: need(op.result(0)->type().isScalar(), "returns a scalar"); break;
    case OpKind::IAdd:
    case OpKind::ISub:
    case OpKind::IMul:
    case OpKind::IFloorDiv:
    case OpKind::ICeilDiv:
    case OpKind::IMod:
    case OpKind::IMin:
    case OpKind::IMax:
      need(isIdx(0) && isIdx(1) && resultIs(Type::index()), "takes and returns indices");
      break;
    case OpKind::ICmp: {
      std::string p = op.attrs().getStr("pred");
      need(p == "lt" || p == "le" || p == "gt" || p == "ge" || p == "eq" || p == "ne",
           "pred must be one of lt le gt ge eq ne");
      need(isIdx(0) && isIdx(1) && resultIs(Type::scalar(ElemType::I1)),
           "compares two indices into an i1");
      break;
    }
    case OpKind::SSelect: {
      const Type& a = op.operand(1)->type();
      need(isBool1(0), "condition must be an i1 scalar");
      need((a.isIndex() || a.isScalar()) && op.operand(2)->type() == a && resultIs(a),
           "selects between two indices or two scalars of the result type");
      break;
    }
    case OpKind::ICast: {
      const Type& a = op.operand(0)->type();
      const Type& r = op.result(0)->type();
      need((a.isIndex() && r.isScalar()) || (a.isScalar() && !isFloat(a.elem()) && r.isIndex()),
           "converts an index to a scalar or an integer scalar to an index");
      break;
    }
    case OpKind::Compute: {
      std::optional<OpKind> fn = op.attrs().getOp("fn");
      need(fn && opInfo(*fn).has(kElementwise) &&
               static_cast<int>(op.numOperands()) >= opInfo(*fn).minOperands &&
               static_cast<int>(op.numOperands()) <= opInfo(*fn).maxOperands,
           "fn must name an elementwise tensor op taking " + std::to_string(op.numOperands()) +
               " operands");
      for (size_t i = 0; i < op.numOperands(); ++i)
        need(op.operand(i)->type().isScalar(), "operands must be scalars");
      need(op.result(0)->type().isScalar(), "returns a scalar");
      break;
    }
    case OpKind::Alloc: {
      const Type& t = op.result(0)->type();
      need(t.isBuffer() && t.space() != MemSpace::Global && t.isStatic(),
           "allocates a shared or private buffer with static dims");
      if (op.attrs().has("uninit")) {
        int64_t u = op.attrs().getInt("uninit");
        need(u == 0 || u == 1, "uninit must be 0 or 1");
        need(u == 0 || t.space() == MemSpace::Private, "uninit = 1 needs a private buffer");
      }
      break;
    }
    case OpKind::Load:
    case OpKind::VectorLoad:
      if (const Type* b = checkAccess(0, 1)) {
        const Type& r = op.result(0)->type();
        bool vec = op.kind() == OpKind::VectorLoad;
        need(r.elem() == b->elem() && (vec ? r.isVector() : r.isScalar()),
             std::string("returns a ") + (vec ? "vector" : "scalar") +
                 " of the buffer's element type");
      }
      break;
    case OpKind::Prefetch: checkAccess(0, 1); break;
    case OpKind::MaskedLoad:
      need(isBool1(1), "mask must be an i1 scalar");
      if (const Type* b = checkAccess(0, 2))
        need(resultIs(Type::scalar(b->elem())), "returns a scalar of the buffer's element type");
      break;
    case OpKind::Store:
    case OpKind::VectorStore:
      if (const Type* b = checkAccess(1, 2)) {
        const Type& v = op.operand(0)->type();
        bool vec = op.kind() == OpKind::VectorStore;
        need(v.elem() == b->elem() && (vec ? v.isVector() : v.isScalar()),
             "stores a value of the buffer's element type");
      }
      break;
    case OpKind::MaskedStore:
      need(isBool1(0), "mask must be an i1 scalar");
      if (const Type* b = checkAccess(2, 3))
        need(op.operand(1)->type() == Type::scalar(b->elem()),
             "stores a scalar of the buffer's element type");
      break;
    case OpKind::For: {
      need(isIdx(0) && isIdx(1) && isIdx(2), "takes lo, hi and step indices");
      size_t carried = op.numOperands() - 3;
      need(op.numResults() == carried, "has one result per carried value (init operand)");
      if (op.numRegions() != 1) break;
      const Block& body = *op.region(0);
      if (body.numArgs() != carried + 1 || !body.arg(0)->type().isIndex()) {
        opError(op, name + "'s body takes the index counter and " + std::to_string(carried) +
                        " carried values");
        break;
      }
      for (size_t k = 0; k < carried && k < op.numResults(); ++k) {
        const Type& t = op.operand(3 + k)->type();
        need(body.arg(k + 1)->type() == t && op.result(k)->type() == t,
             "carried value " + std::to_string(k) +
                 " has one type as init, body argument and result");
        need(t.isIndex() || t.isScalar() || t.isVector(),
             "carries indices, scalars or vectors, not buffers");
      }
      break;
    }
    case OpKind::If:
      need(isBool1(0), "condition must be an i1 scalar");
      for (size_t r = 0; r < op.numRegions(); ++r)
        need(op.region(r)->numArgs() == 0, "blocks take no arguments");
      for (size_t k = 0; k < op.numResults(); ++k) {
        const Type& t = op.result(k)->type();
        need(t.isIndex() || t.isScalar() || t.isVector(),
             "results are indices, scalars or vectors, not buffers");
      }
      break;
    case OpKind::LaneId: need(resultIs(Type::index()), "returns an index"); break;
    case OpKind::SubgroupReduce: {
      std::optional<OpKind> fn = op.attrs().getOp("fn");
      bool known = fn && (*fn == OpKind::Add || *fn == OpKind::Mul || *fn == OpKind::Max ||
                          *fn == OpKind::Min || *fn == OpKind::And || *fn == OpKind::Or ||
                          *fn == OpKind::Xor);
      need(known, "fn must be one of add mul max min and or xor");
      const Type& t = op.operand(0)->type();
      need(t.isScalar() && resultIs(t), "combines a scalar into a scalar of its type");
      if (known && t.isScalar()) {
        bool logical = *fn == OpKind::And || *fn == OpKind::Or || *fn == OpKind::Xor;
        need(logical == (t.elem() == ElemType::I1),
             "and, or and xor combine i1 scalars; add, mul, max and min numbers");
      }
      break;
    }
    case OpKind::SubgroupBroadcast:
    case OpKind::SubgroupShuffle: {
      const Type& t = op.operand(0)->type();
      need((t.isScalar() || t.isIndex()) && resultIs(t) && isIdx(1),
           "takes a scalar or index and a lane index, and returns the value's type");
      break;
    }
    default: break;
    }
  }

  const Func& f_;
  const SymbolTable& syms_;
  const Module* m_;
  bool isKernel_ = false;
  std::unordered_map<const Op*, size_t> opIndex_;
  Diags diags_;
  std::vector<const Op*> tensorOps_;                                  // H3
  const Op* firstHost_ = nullptr;                                     // H3
  std::unordered_set<const Value*> freed_;                            // H2
  std::unordered_map<const Value*, std::vector<const Value*>> views_; // buffer -> its views

  // The load_weight or load_constant whose buffer `v` is (through views), or null.
  static const Op* residentSource(const Value* v) {
    while (v && !v->isArg() && v->def()->kind() == OpKind::View) v = v->def()->operand(0);
    if (!v || v->isArg()) return nullptr;
    OpKind k = v->def()->kind();
    return k == OpKind::LoadWeight || k == OpKind::LoadConstant ? v->def() : nullptr;
  }

  // A freed buffer takes its views (and theirs) with it.
  void free(const Value* v) {
    std::vector<const Value*> work = {v};
    while (!work.empty()) {
      const Value* w = work.back();
      work.pop_back();
      if (!freed_.insert(w).second) continue;
      if (auto it = views_.find(w); it != views_.end())
        work.insert(work.end(), it->second.begin(), it->second.end());
    }
  }
};

Status finish(Diags d) {
  if (d.hasErrors()) return d;
  return ok();
}

} // namespace

Status verifyFunc(const Func& f) {
  static const SymbolTable kNoSymbols;
  const Module* m = f.parent();
  return finish(FuncVerifier(f, m ? m->symbols() : kNoSymbols, m).run());
}

std::optional<DeviceTarget> deviceOf(const Value* v) {
  if (v->isArg()) return v->argOf()->argDevice(v->index());
  const Op& def = *v->def();
  if (def.has(kCollective)) return collectiveDevice(def, v->index());
  return def.device();
}

std::optional<DeviceTarget> collectiveDevice(const Op& op, size_t i) {
  std::vector<std::string> devices = op.attrs().getStrs("devices");
  if (i >= devices.size()) return std::nullopt;
  Result<DeviceTarget> t = parseDeviceTarget(devices[i], op.loc());
  if (!t.ok()) return std::nullopt;
  return *t;
}

Status verifyPlacement(const Module& m) {
  Diags diags;
  auto inDecl = [&](const std::optional<DeviceTarget>& d) { return d && m.findDevice(*d); };
  auto opError = [&](const Op& op, std::string msg) {
    Diag d = error(op.loc(), std::move(msg));
    d.notes.push_back(note(op.loc(), "in: " + printOp(op)));
    diags.add(std::move(d));
  };
  for (const auto& f : m.funcs()) {
    std::string fn = "@" + f->name();
    for (size_t i = 0; i < f->numArgs(); ++i)
      if (!inDecl(f->argDevice(i)))
        diags.add(error(f->loc(),
                        "argument " + std::to_string(i) + " of " + fn + " has no declared device"));
    for (size_t i = 0; i < f->resultTypes().size(); ++i)
      if (!inDecl(f->resultDevice(i)))
        diags.add(error(f->loc(),
                        "result " + std::to_string(i) + " of " + fn + " has no declared device"));
    for (const auto& op : f->ops()) {
      if (op->has(kTerminator)) {
        for (size_t i = 0; i < op->numOperands(); ++i)
          if (deviceOf(op->operand(i)) != f->resultDevice(i))
            opError(*op,
                    "result " + std::to_string(i) + " of " + fn + " is not on its declared device");
        continue;
      }
      if (op->has(kCollective)) {
        for (size_t i = 0; i < op->numOperands(); ++i) {
          std::optional<DeviceTarget> d = collectiveDevice(*op, i);
          if (!inDecl(d))
            opError(*op, "operand " + std::to_string(i) + " of '" + std::string(op->name()) +
                             "' has no declared device in its `devices`");
          else if (deviceOf(op->operand(i)) != d)
            opError(*op, "operand " + std::to_string(i) + " lives on " +
                             (deviceOf(op->operand(i)) ? deviceOf(op->operand(i))->str()
                                                       : std::string("no device")) +
                             ", not on " + d->str() + " where the collective takes it");
        }
        continue;
      }
      if (!inDecl(op->device())) {
        opError(*op, "'" + std::string(op->name()) + "' has no declared device after affinity");
        continue;
      }
      if (op->kind() == OpKind::Transfer) {
        if (deviceOf(op->operand(0)) == op->device())
          opError(*op, "transfer to the device its operand already lives on");
        for (const Use& u : op->operand(0)->uses())
          if (u.user != op.get() && u.user->kind() == OpKind::Transfer &&
              u.user->device() == op->device())
            opError(*op, "value transferred twice to " + op->device()->str());
        continue;
      }
      for (size_t i = 0; i < op->numOperands(); ++i)
        if (deviceOf(op->operand(i)) != op->device())
          opError(*op, "operand " + std::to_string(i) + " lives on " +
                           (deviceOf(op->operand(i)) ? deviceOf(op->operand(i))->str()
                                                     : std::string("no device")) +
                           ", not on the op's device " + op->device()->str());
    }
  }
  return finish(std::move(diags));
}

Status verifyModule(const Module& m) {
  Diags diags;
  std::unordered_map<std::string, const Func*> funcs;
  for (const auto& f : m.funcs()) {
    auto [it, fresh] = funcs.emplace(f->name(), f.get());
    if (!fresh) {
      Diag d = error(f->loc(), "function @" + f->name() + " is defined twice");
      d.notes.push_back(note(it->second->loc(), "first defined here"));
      diags.add(std::move(d));
    }
  }
  std::unordered_map<std::string, const WeightDecl*> weights;
  for (const WeightDecl& w : m.weights()) {
    auto [it, fresh] = weights.emplace(w.name, &w);
    if (!fresh) {
      Diag d = error(w.loc, "weight @" + w.name + " is declared twice");
      d.notes.push_back(note(it->second->loc, "first declared here"));
      diags.add(std::move(d));
    }
    if (auto s = undeclaredSymbol(w.type, m.symbols()))
      diags.add(error(w.loc, "weight @" + w.name + " uses undeclared symbol '" + *s + "'"));
  }
  for (const auto& f : m.funcs()) diags.append(FuncVerifier(*f, m.symbols(), &m).run());
  return finish(std::move(diags));
}

} // namespace kiln
