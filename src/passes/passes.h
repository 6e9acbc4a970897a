// The passes defined in this folder, by factory, and the canonicalization patterns.
//
// passes.cpp lists every factory in the registry with its name and description; code
// outside src/passes/ finds passes through lookupPass (pass.h), not through this header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ir/core/rewrite.h"
#include "passes/codegen.h"
#include "passes/pass.h"

namespace kiln {

class PassManager;

std::unique_ptr<Pass> createAffinityPass();
std::unique_ptr<Pass> createCanonicalizePass();
std::unique_ptr<Pass> createCsePass();
std::unique_ptr<Pass> createAttentionPass();
std::unique_ptr<Pass> createDcePass();
std::unique_ptr<Pass> createShapeInferPass();
// The codegen passes, in pipeline order (codegen.h: CodegenOptions).
std::unique_ptr<Pass> createConvDepthwisePass(const CodegenOptions& opts);
std::unique_ptr<Pass> createConvGemmPass(const CodegenOptions& opts);
std::unique_ptr<Pass> createPoolPadPass(const CodegenOptions& opts);
std::unique_ptr<Pass> createPadGemmPass(const CodegenOptions& opts);
std::unique_ptr<Pass> createPackWeightsPass(const CodegenOptions& opts);
std::unique_ptr<Pass> createGemvSplitPass(const CodegenOptions& opts);
std::unique_ptr<Pass> createFusePass(const CodegenOptions& opts);
std::unique_ptr<Pass> createCollapseDimsPass(const CodegenOptions& opts);
std::unique_ptr<Pass> createTilePass(const CodegenOptions& opts);
std::unique_ptr<Pass> createPadPass(const CodegenOptions& opts);
std::unique_ptr<Pass> createLowerPass(const CodegenOptions& opts);
// fuse, collapse-dims, tile, pad and lower with `opts`, in that order (what the registry's
// "codegen" pipeline runs after shape-infer).
void addCodegenPasses(PassManager& pm, const CodegenOptions& opts);

struct ScheduleOptions {
  std::string device = "ref[0]"; // where ops without a device (`on ...`) run
};
std::unique_ptr<Pass> createSchedulePass(const ScheduleOptions& opts = {});

// Constant folding only produces results of at most this many elements: a larger result
// would grow the IR text and the module, and computing it at run time costs no more.
inline constexpr int64_t kMaxFoldElements = 1024;

// Every canonicalization pattern (src/passes/canonicalize/), registered in one place.
PatternSet canonicalizePatterns();

} // namespace kiln
