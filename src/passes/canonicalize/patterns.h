// Shared by the canonicalization pattern files: one population function per file and
// the small matchers the patterns are written with.
#pragma once

#include <functional>

#include "ir/core/host_tensor.h"
#include "ir/core/rewrite.h"

namespace kiln::canon {

void addFoldPatterns(PatternSet& set);  // fold.cpp: every op on constant operands
void addArithPatterns(PatternSet& set); // arith.cpp: add sub mul div neg max min cast
void addLogicPatterns(PatternSet& set); // logic.cpp: and or not select
void addShapePatterns(PatternSet& set); // shape.cpp: transpose reshape broadcast concat slice

// The dense value of `v` when a `constant` op defines it, else null.
const HostTensor* constantOf(const Value* v);
// True when `v` is a constant whose every element satisfies `pred` (given as f64; the
// element types kiln folds are all exact in f64 for the values patterns ask about).
bool allElements(const Value* v, const std::function<bool(double)>& pred);
// Replaces `root`'s single result by `v` when their types are exactly equal; returns
// whether it did. Every "-> x" pattern ends here, so none can change a type.
bool replaceWithValue(Op& root, Rewriter& rw, Value* v);

} // namespace kiln::canon
