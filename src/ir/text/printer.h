// Printer: the canonical text form of a module.
//
// Printing is deterministic; parse(print(m)) prints byte-identically to print(m).
// Op results are numbered %0, %1, ... in order; function arguments keep their names
// (sanitized, made unique) or are %argN.
#pragma once

#include <functional>
#include <string>

#include "ir/core/ir.h"

namespace kiln {

struct PrintOptions {
  bool locs = false; // append `loc("file":line:col)` / `loc("name")` to every op
  // printModule prints only the functions this accepts (all when empty).
  std::function<bool(const Func&)> funcFilter = nullptr;
};

std::string printModule(const Module& m, const PrintOptions& opts = {});
std::string printFunc(const Func& f, const PrintOptions& opts = {});
// One op on one line as it appears in its function (for diagnostics and debugging).
std::string printOp(const Op& op);
// Attribute values in their text form (also used by the parser's tests).
std::string printAttrValue(const AttrValue& v);

} // namespace kiln
