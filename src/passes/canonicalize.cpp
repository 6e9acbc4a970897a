// canonicalize: folds constants and applies exact algebraic identities until none applies.
//
// Requires:    nothing (known result types let more identities match).
// Guarantees:  no op has only constant operands and a small static result (≤ 1024
//              elements); no identity in src/passes/canonicalize/ matches; constants are
//              the right operand of commutative ops; every result type is unchanged.
// Invalidates: op identities (ops are replaced and erased); values left unused are erased.
//
//   %1 = mul %x, %one : tensor<4xf32>   // %one = constant dense<1.0>
//   return %1                     =>    return %x
//
// The patterns live in canonicalize/, one file per group of root ops; this file is the one
// place that registers them. The rules every pattern follows are in README.md.
#include "passes/canonicalize/patterns.h"
#include "passes/passes.h"

namespace kiln {

PatternSet canonicalizePatterns() {
  PatternSet set;
  // Folding first: an op whose operands are all constant should become a constant, not
  // merely a nicer op on constants.
  canon::addFoldPatterns(set);
  canon::addArithPatterns(set);
  canon::addLogicPatterns(set);
  canon::addShapePatterns(set);
  return set;
}

namespace {

class CanonicalizePass : public Pass {
public:
  Status run(Module& m) override {
    PatternSet patterns = canonicalizePatterns();
    for (const auto& f : m.funcs()) KILN_CHECK(applyPatterns(*f, patterns));
    return ok();
  }
};

} // namespace

std::unique_ptr<Pass> createCanonicalizePass() { return std::make_unique<CanonicalizePass>(); }

} // namespace kiln
