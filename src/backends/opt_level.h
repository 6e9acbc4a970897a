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

// Whether LLVM's SLP vectorizer may run on the kernel: not when it keeps a max or min in f64
// (a reduction's wide accumulators; f32 data accumulates its max in f64). Fully unrolled,
// a 20 x 20 max reduction with 8 partial lanes (tests/lit/lower/reduce-flat.kir) kept the
// SLP vectorizer busy for 18 s on x86-64-v3 and 70 s on v4, a sum 0.16 s; without it 0.17
// s. The loop vectorizer still vectorizes those kernels.
bool slpSafe(const Func& k);

// The LLVM pipeline a lowered kernel is optimized with: rule.contraction when the kernel
// accumulates products in a loop (accumulatesProducts), else rule.other.
//
// The default rule (O3 for contractions, O2 for the rest) was measured on the 2-core
// development machine (docs/cli.md, "Optimization levels"): the GEMM, convolution and
// attention microkernels keep O3, the level their tiles were tuned under (almost all of the
// LLVM time goes to them; a cheaper level for them was not measured);
// the elementwise, copy, pad, im2col, gather, transpose, pooling and plain reduction kernels
// took about half their O3 time at O2 (MobileNetV3-Small: 3.2 s -> 1.6 s) and ran as fast
// (ResNet-18's 25 such kernels: 879 ms at O2, 911 ms at O3). O1 compiled them no faster than
// O2 (1.4 s) and has no loop or SLP vectorizer, so the rest get O2.
OptLevel chooseOptLevel(const Func& k, const OptLevelRule& rule = {});

// An --opt-level / KILN_OPT_LEVEL value: "auto" (the default rule), one level for every
// kernel ("O1", "O2", "O3", or "1", "2", "3"), or "C/R": C for contraction kernels, R for the
// rest ("O3/O1"). Errors are located at `where`.
Result<OptLevelRule> parseOptLevelRule(const std::string& text,
                                       const Loc& where = Loc::named("--opt-level"));

// The rule a compile uses: `flag` when not empty (kiln compile --opt-level), else
// $KILN_OPT_LEVEL when set and not empty, else the default. A bad value is an error naming
// where it came from.
Result<OptLevelRule> resolveOptLevelRule(const std::string& flag);

} // namespace kiln
