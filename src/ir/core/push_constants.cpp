// pushConstantSymbols: one order for the compiler and every driver.
#include "ir/core/push_constants.h"

#include <algorithm>
#include <set>

namespace kiln {

namespace {

void addSymbols(const Type& t, std::vector<std::string>& out) {
  for (const Dim& d : t.shape()) {
    if (d.isUnknown()) continue;
    std::set<std::string> used;
    d.expr().collectSymbols(used);
    for (const std::string& s : used)
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
}

} // namespace

std::vector<std::string> pushConstantSymbols(const Func& kernel) {
  std::vector<std::string> out;
  walkOps(kernel, [&](const Op& op) {
    if (op.kind() == OpKind::SymbolValue) {
      std::string name = op.attrs().getStr("name");
      if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(std::move(name));
    }
  });
  for (size_t i = 0; i < kernel.numArgs(); ++i) addSymbols(kernel.arg(i)->type(), out);
  walkOps(kernel, [&](const Op& op) {
    for (size_t r = 0; r < op.numResults(); ++r) addSymbols(op.result(r)->type(), out);
  });
  for (const Type& t : kernel.resultTypes()) addSymbols(t, out);
  std::vector<std::string> args, bound;
  for (size_t i = 0; i < kernel.numArgs(); ++i) addSymbols(kernel.arg(i)->type(), args);
  walkOps(kernel, [&](const Op& op) {
    if (!op.has(kDataShaped)) return;
    for (size_t r = 0; r < op.numResults(); ++r) addSymbols(op.result(r)->type(), bound);
  });
  std::erase_if(out, [&](const std::string& s) {
    return std::find(bound.begin(), bound.end(), s) != bound.end() &&
           std::find(args.begin(), args.end(), s) == args.end();
  });
  return out;
}

} // namespace kiln
