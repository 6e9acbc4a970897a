// LLVM optimization levels per kernel: which pipeline (O1, O2, O3) a lowered kernel is
// optimized with, and the override for experiments (kiln compile --opt-level, KILN_OPT_LEVEL).
#pragma once

#include <string>

#include "ir/core/diag.h"
#include "ir/core/ir.h"

namespace kiln {

enum class OptLevel { O1 = 1, O2 = 2, O3 = 3 };

// "O1", "O2", "O3".
const char* optLevelName(OptLevel l);

// The levels a compile uses: `contraction` for kernels that accumulate products in a loop,
// `other` for the rest.
struct OptLevelRule {
  OptLevel contraction = OptLevel::O3;
  OptLevel other = OptLevel::O2;
  bool operator==(const OptLevelRule&) const = default;
};

// Whether the kernel accumulates products in a loop (matmul, convolution, attention, a
// matmul fused with a row reduction): a store of add(x, mul(a, b)) (either operand order)
// inside a `for`, where x is a load of the buffer the sum is stored back to, or the same
// through a loop-carried value (yield add(acc, mul(a, b)) with acc the loop's argument).
bool accumulatesProducts(const Func& k);

// The LLVM pipeline a lowered kernel is optimized with: rule.contraction when the kernel
// accumulates products in a loop (accumulatesProducts), else rule.other.
//
// The default rule (O3 for contractions, O2 for the rest) was measured on the 2-core
// development machine (docs/cli.md, "Optimization levels"): the GEMM, convolution and
// attention microkernels are where O3's unrolling and vectorization pay (and most of the
// compile time goes), elementwise, copy, pad, gather, transpose and plain reduction kernels
// compile faster at O2 and run as fast; O1 leaves their loops unvectorized and runs them slower.
OptLevel chooseOptLevel(const Func& k, const OptLevelRule& rule = {});

// An --opt-level / KILN_OPT_LEVEL value: "auto" (the default rule), one level for every
// kernel ("O1", "O2", "O3", or "1", "2", "3"), or "C/R": C for contraction kernels, R for the
// rest ("O3/O1").
Result<OptLevelRule> parseOptLevelRule(const std::string& text);

// The rule a compile uses: `flag` when not empty (kiln compile --opt-level), else
// $KILN_OPT_LEVEL when set and not empty, else the default. A bad value is an error naming
// where it came from.
Result<OptLevelRule> resolveOptLevelRule(const std::string& flag);

} // namespace kiln
