// What the cpu convolution rewrites (conv-gemm, conv-depthwise) share: the geometry of a
// static 2-D conv and the pass loop that replaces each covered conv by what a rewrite builds.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "ir/core/builder.h"
#include "ir/core/ir.h"
#include "passes/codegen.h"

namespace kiln {

// A 2-D conv with static shapes and a float element type (NCHW input `x`, weights `w`,
// result `y`), its attributes with their defaults filled in.
struct Conv2d {
  std::vector<int64_t> xs, ws, ys;
  std::vector<int64_t> strides, pads, dilations; // 2, 4 and 2 values
  int64_t group = 1;
};

// The conv's geometry, or nothing when it is not a static float 2-D conv.
std::optional<Conv2d> staticConv2d(const Op& conv);

// On cpu targets, replaces every conv of `m` that `opts` covers by the value `rewrite` builds
// before it; a conv for which it returns null (or that is not a static float 2-D conv) stays.
Status rewriteConvs(Module& m, const CodegenOptions& opts,
                    const std::function<Result<Value*>(Func&, Op&, const Conv2d&)>& rewrite);

// The four phases of a padded N x C x Hp x Wp input (Hp and Wp even) stacked as
// N x C x 4 x Hp/2 x Wp/2, phase 2*a + b holding rows a, a+2, .. and columns b, b+2, ..: a
// concat of four strided slices, built with `b`. A stride-2 conv's tap (i, j) is then the
// unit-step window of phase 2*(i%2) + j%2 from row i/2, column j/2.
Result<Value*> phaseSplit(Builder& b, Value* padded);

} // namespace kiln
