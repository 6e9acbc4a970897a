// Shape rules: the result types of every op, from its operand types and attributes.
//
// One function serves the builder (to type new ops), the verifier (to check declared
// result types) and shape-infer (to replace `?` dims). Dims are symbolic: rules combine
// SymExprs, and compare them under the module's symbol ranges where a rule needs an
// equality it cannot see structurally.
#pragma once

#include <vector>

#include "ir/core/attrs.h"
#include "ir/core/diag.h"
#include "ir/core/ops.h"
#include "ir/core/symexpr.h"
#include "ir/core/types.h"

namespace kiln {

// `declared` holds the result types written in the IR (or given to the builder), or is
// empty. Ops whose result shape is not a function of operands and attributes (reshape,
// broadcast, constant, weight, iota, range) take it from there; for other ops it is
// ignored. Errors are located at `loc` and name the op.
Result<std::vector<Type>> inferResultTypes(OpKind kind, const std::vector<Type>& operands,
                                           const Attrs& attrs, const std::vector<Type>& declared,
                                           const SymbolTable& syms, const Loc& loc);

// numpy broadcasting of two shapes; an error when dims are provably unequal and neither
// is 1. A `?` dim broadcast against anything gives `?` unless the other is not 1.
Result<Shape> broadcastShapes(const Shape& a, const Shape& b, const SymbolTable& syms,
                              const Loc& loc);

} // namespace kiln
