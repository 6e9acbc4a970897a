// The live-set walk behind FunctionStats (see memory.h).
#include "compiler/memory.h"

#include <set>
#include <unordered_map>

namespace kiln {

namespace {

SymExpr bytesOf(const Type& t) {
  SymExpr n = SymExpr::constant(elemTypeBytes(t.elem()));
  for (const Dim& d : t.shape()) n = n * d.expr();
  return n;
}

} // namespace

Result<FunctionStats> analyzeMemory(const Func& host, const SymbolTable& syms) {
  FunctionStats s;
  s.name = host.name();
  // Every symbol at its upper bound: the worst case the schedule must fit.
  SymbolBinding worst;
  std::set<std::string> used;
  for (const auto& op : host.ops())
    for (size_t r = 0; r < op->numResults(); ++r)
      for (const Dim& d : op->result(r)->type().shape())
        if (!d.isUnknown()) d.expr().collectSymbols(used);
  for (const std::string& name : used) {
    const SymbolInfo* info = syms.lookup(name);
    if (!info) return error(host.loc(), "memory: symbol '" + name + "' has no declared range");
    worst[name] = info->hi;
    s.boundAt += (s.boundAt.empty() ? "" : ", ") + name + "=" + std::to_string(info->hi);
  }
  auto eval = [&](const SymExpr& e, const Loc& loc) -> Result<uint64_t> {
    std::optional<int64_t> v = e.evaluate(worst);
    if (!v || *v < 0) return error(loc, "memory: cannot evaluate " + e.str());
    return static_cast<uint64_t>(*v);
  };

  std::unordered_map<const Value*, SymExpr> live;
  SymExpr liveExpr, totalExpr;
  for (const auto& op : host.ops()) {
    switch (op->kind()) {
    case OpKind::AllocBuffer:
    case OpKind::TransferTo:
    case OpKind::LoadWeight:
    case OpKind::LoadConstant: {
      for (const Dim& d : op->result()->type().shape())
        if (d.isUnknown()) return error(op->loc(), "memory: a buffer has a `?` dim");
      SymExpr b = bytesOf(op->result()->type());
      live[op->result()] = b;
      liveExpr = liveExpr + b;
      totalExpr = totalExpr + b;
      if (op->kind() == OpKind::LoadWeight) {
        KILN_TRY(uint64_t w, eval(b, op->loc()));
        s.weightBytes += w;
      }
      KILN_TRY(uint64_t now, eval(liveExpr, op->loc()));
      if (now > s.peakBytes || s.peakExpr.empty()) {
        s.peakBytes = now;
        s.peakExpr = liveExpr.str();
      }
      break;
    }
    case OpKind::Free:
      if (auto it = live.find(op->operand(0)); it != live.end()) {
        liveExpr = liveExpr - it->second;
        live.erase(it);
      }
      break;
    case OpKind::Launch: ++s.dispatches; break;
    default: break;
    }
  }
  KILN_TRY(s.totalBytes, eval(totalExpr, host.loc()));
  s.totalExpr = totalExpr.str();
  if (s.peakExpr.empty()) s.peakExpr = "0";
  return s;
}

} // namespace kiln
