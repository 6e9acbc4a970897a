// Multi-anchor fusion patterns for `fuse` (fuse.cpp): a recognised pattern forms one
// dispatch around several anchors (two contractions and a softmax, for attention), which
// single-anchor grouping never does. fuse consults the table at each op (from the last one
// up) before single-anchor grouping: a pattern's group joins its users' group by
// elementwise-into-producer (its epilogue) or starts one; the ops before it (elementwise
// producers, views) then join it by the usual rules, and an anchor outside it never does.
//
// A pattern is registered only together with the lowering that emits its group (see
// lower/strategy.h): none is registered yet.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "passes/codegen.h"
#include "passes/pass.h"

namespace kiln {

struct FusionPattern {
  std::string name;
  // The ops of one instance whose last op in source order is `root` (root included), or
  // empty when the pattern does not match there. fuse forms the group only when every op
  // is computing, not yet grouped, supported by `lower`, not a donated argument's writer,
  // and the set is convex (no path leaves it and comes back).
  std::function<std::vector<const Op*>(const Op& root)> match;
};

// The registered patterns, in priority order.
const std::vector<FusionPattern>& fusionPatterns();

// fuse with a given pattern table (createFusePass(opts) in passes.h uses fusionPatterns()).
std::unique_ptr<Pass> createFusePass(const CodegenOptions& opts,
                                     std::vector<FusionPattern> patterns);

} // namespace kiln
