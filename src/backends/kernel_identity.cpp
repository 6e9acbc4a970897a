// Kernel identities (see kernel_identity.h).
#include "backends/kernel_identity.h"

#include "ir/text/printer.h"

namespace kiln {

// Kernels some launch binds one buffer to twice (an input written in place: donation).
std::set<std::string> aliasingKernels(const Module& m) {
  std::set<std::string> out;
  for (const auto& f : m.funcs())
    for (const auto& op : f->ops()) {
      if (op->kind() != OpKind::Launch) continue;
      std::set<const Value*> seen;
      for (const Value* v : op->operands())
        if (!seen.insert(v).second) out.insert(op->attrs().getStr("kernel"));
    }
  return out;
}

namespace {

std::string symbolsText(const SymbolTable& syms) {
  std::string s;
  for (const auto& [name, info] : syms.all())
    s += name + " " + std::to_string(info.lo) + " " + std::to_string(info.hi) + " " +
         std::to_string(info.divisor) + "\n";
  return s;
}

// The kernel's text with its own name replaced, so that two kernels that differ only in name
// print alike.
std::string anonymousText(const Func& k) {
  std::string text = printFunc(k);
  std::string own = "@" + k.name() + "(";
  if (size_t at = text.find(own); at != std::string::npos) text.replace(at, own.size(), "@_(");
  return text;
}

} // namespace

std::string kernelIdentity(const Module& m, const Func& k, bool aliasing) {
  return std::string(aliasing ? "alias\n" : "noalias\n") + symbolsText(m.symbols()) +
         anonymousText(k);
}

} // namespace kiln
