// dataDependentIndices: the index values of a lowered kernel computed from data: an `icast`
// of a scalar (gather and scatter indices) and every index computed from one (index
// arithmetic, sselect, a `for` with such a bound, carried indices and region results,
// conservatively). Every other index is derived by `lower` from ids, loop counters,
// constants and symbols and lies in range by construction; backends check these ones
// before an access (an i1 condition is a scalar, so a select between two in-range
// indices stays unchecked).
#pragma once

#include <unordered_set>

#include "ir/core/ir.h"

namespace kiln {

std::unordered_set<const Value*> dataDependentIndices(const Func& kernel);

} // namespace kiln
