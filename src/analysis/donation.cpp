// Donation analysis: finds the op that writes each donated argument's result in place.
#include "analysis/donation.h"

#include <map>

#include "ir/text/printer.h"

namespace kiln {

bool writesInPlace(const Op& op, size_t k) {
  if (op.numResults() != 1 || k >= op.numOperands()) return false;
  if (op.operand(k)->type().str() != op.result(0)->type().str()) return false;
  if (op.kind() == OpKind::ScatterNd) return k == 0;
  if (op.kind() == OpKind::Dispatch) {
    std::vector<int64_t> ip = op.attrs().getInts("in_place");
    return ip.size() == 2 && ip[0] == static_cast<int64_t>(k) && ip[1] == 0;
  }
  return op.has(kElementwise);
}

namespace {

std::string argName(const Func& f, size_t i) {
  const std::string& n = f.arg(i)->name();
  return n.empty() ? "argument " + std::to_string(i) : "%" + n;
}

// The argument itself, or a transfer of it read by `writer` alone.
bool isArgOrItsTransfer(const Value* v, const Value* arg, const Op* writer) {
  if (v == arg) return true;
  const Op* t = v->def();
  if (!t || t->kind() != OpKind::Transfer || t->operand(0) != arg) return false;
  for (const Use& u : v->uses())
    if (u.user != writer) return false;
  return true;
}

} // namespace

Result<std::vector<Donation>> analyzeDonations(Func& f) {
  std::vector<Donation> out;
  Op* ret = f.terminator();
  if (!ret) return out;
  std::map<const Op*, size_t> pos;
  for (const auto& op : f.ops()) pos.emplace(op.get(), pos.size());
  std::map<const Op*, size_t> writerOf; // writer -> the argument it already takes
  for (size_t i = 0; i < f.numArgs(); ++i) {
    std::optional<size_t> r = f.argDonation(i);
    if (!r) continue;
    Value* arg = f.arg(i);
    std::string name = argName(f, i);
    std::string what =
        "donation of " + name + " to result " + std::to_string(*r) + " of @" + f.name() + ": ";
    if (*r >= ret->numOperands())
      return error(f.loc(), what + "@" + f.name() + " has " + std::to_string(ret->numOperands()) +
                                " results");
    Donation d;
    d.arg = i;
    d.result = *r;
    Value* v = ret->operand(*r);
    if (v == arg) {
      out.push_back(d);
      continue;
    }
    Op* w = v->def();
    if (!w)
      return error(f.loc(), what + "the result is " + argName(f, v->index()) +
                                ", which is not computed from " + name);
    std::optional<size_t> k;
    for (size_t o = 0; o < w->numOperands() && !k; ++o)
      if (isArgOrItsTransfer(w->operand(o), arg, w)) k = o;
    if (!k)
      return error(w->loc(), what + "the result is computed by '" + std::string(w->name()) +
                                 "', which does not read " + name +
                                 "; the op that computes a donated result must read the "
                                 "argument and write over it");
    if (!writesInPlace(*w, *k))
      return error(w->loc(), what + "'" + std::string(w->name()) +
                                 "' cannot write its result over " + name +
                                 ": only an elementwise op of the argument's type or scatter_nd "
                                 "(with the argument as its data) reads its input exactly "
                                 "where it writes");
    if (auto [it, fresh] = writerOf.emplace(w, i); !fresh)
      return error(w->loc(), what + "'" + std::string(w->name()) + "' already writes over " +
                                 argName(f, it->second) + " (its result is returned twice)");
    d.writer = w;
    d.operand = *k;
    d.output = v->index();
    // The writer must be the argument's last reader.
    const Op* transfer = w->operand(*k) == arg ? nullptr : w->operand(*k)->def();
    for (const Use& u : arg->uses()) {
      if (u.user == transfer || u.user == w) {
        if (u.user == w && !writesInPlace(*w, u.operandIndex))
          return error(w->loc(), what + "'" + std::string(w->name()) + "' also reads " + name +
                                     " through operand " + std::to_string(u.operandIndex) +
                                     ", not where it writes");
        continue;
      }
      if (u.user->kind() == OpKind::Return)
        return error(f.loc(), what + name + " is also returned as result " +
                                  std::to_string(u.operandIndex) +
                                  ", which would see the overwritten value");
      if (pos.at(u.user) > pos.at(w)) {
        Diag e =
            error(u.user->loc(), what + "'" + std::string(u.user->name()) + "' reads " + name +
                                     " after '" + std::string(w->name()) + "' has written over it");
        e.notes.push_back(note(w->loc(), "the write in place: " + printOp(*w)));
        return e;
      }
    }
    out.push_back(d);
  }
  return out;
}

} // namespace kiln
