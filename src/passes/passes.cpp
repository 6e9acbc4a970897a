// The pass registry and the named pipelines: the tables `kiln opt --pass=...` reads.
//
// Add a pass by writing its file and one row below. Test-only passes are never listed.
#include <algorithm>

#include "passes/pass_manager.h"
#include "passes/passes.h"

namespace kiln {

namespace {

using Factory = std::function<Result<std::unique_ptr<Pass>>(const PassOptions&)>;

// A pass without options.
Factory plain(std::unique_ptr<Pass> (*create)()) {
  return [create](const PassOptions&) -> Result<std::unique_ptr<Pass>> { return create(); };
}

// A codegen pass: `target=NAME`, `tile-config=FILE` (codegen.h).
Factory codegen(std::unique_ptr<Pass> (*create)(const CodegenOptions&)) {
  return [create](const PassOptions& text) -> Result<std::unique_ptr<Pass>> {
    KILN_TRY(CodegenOptions o, codegenOptionsFrom(text));
    return create(o);
  };
}

} // namespace

const std::vector<PassInfo>& registeredPasses() {
  static const std::vector<PassInfo> passes = [] {
    const std::vector<std::string>& cg = codegenOptionKeys();
    std::vector<PassInfo> v = {
        // name, description, option keys, factory
        {"affinity",
         "place every value on a declared device: clone cheap ops per consuming device, "
         "one transfer per remaining cross-device edge",
         {},
         plain(createAffinityPass)},
        {"attention",
         "rewrite softmax(scale * Q.K^T + mask) . V chains into attention ops (causal masks "
         "become the causal flag, grouped kv heads are read in place)",
         {},
         plain(createAttentionPass)},
        {"canonicalize",
         "fold small constants and apply exact algebraic identities",
         {},
         plain(createCanonicalizePass)},
        {"collapse-dims",
         "merge adjacent parallel dims of dispatches when contiguous and no larger in shared "
         "memory",
         cg, codegen(createCollapseDimsPass)},
        {"conv-depthwise",
         "on cpu targets, depthwise 2-D convolutions as sums of shifted views times "
         "per-channel weights (elementwise, vectorized by rows)",
         cg, codegen(createConvDepthwisePass)},
        {"conv-gemm",
         "on cpu targets, group-1 2-D convolutions as matmuls (1x1: a view of the input; "
         "else im2col patches) for the GEMM strategy",
         cg, codegen(createConvGemmPass)},
        {"cse",
         "merge ops that compute the same value from the same operands",
         {},
         plain(createCsePass)},
        {"dce",
         "remove ops whose results are unused and that have no side effects",
         {},
         plain(createDcePass)},
        {"schedule",
         "lower tensor functions to a host schedule with one kernel per op (device=ref[0])",
         {"device"},
         [](const PassOptions& text) -> Result<std::unique_ptr<Pass>> {
           ScheduleOptions o;
           if (auto d = text.find("device"); d != text.end()) {
             KILN_TRY(DeviceTarget t, parseDeviceTarget(d->second, Loc::named("device")));
             o.device = t.str();
           }
           return createSchedulePass(o);
         }},
        {"fuse", "form dispatches: group tensor ops into kernel functions called by dispatch", cg,
         codegen(createFusePass)},
        {"gemv-split",
         "on cpu targets, decode-step matmuls (at most 4 rows) over a large [K, N] B as "
         "partial matmuls over contiguous K slices of B plus their sum",
         cg, codegen(createGemvSplitPass)},
        {"pack-weights",
         "on cpu targets, f32 GEMM weights held in memory stored as the micro-kernel reads "
         "them (B as [ceil(N / NR), K, NR] strips, a deep A as [ceil(M / MR), K, MR] "
         "panels), so that the matmul reads them in place",
         cg, codegen(createPackWeightsPass)},
        {"pad-gemm",
         "on cpu targets, a zero pad of a 1x1 convolution's GEMM output moves to the GEMM's "
         "input; the GEMM computes the padded map and selects its border to 0",
         cg, codegen(createPadGemmPass)},
        {"pool-pad",
         "on cpu targets, float max pools whose windows reach past the input read a copy "
         "padded with -inf, with whole windows and no bounds checks",
         cg, codegen(createPoolPadPass)},
        {"tile", "choose workgroup shapes and tiles that fit the target", cg,
         codegen(createTilePass)},
        {"lower", "turn tensor-level kernels into kernel IR and check their resources", cg,
         codegen(createLowerPass)},
        {"pad",
         "pad iteration spaces to tile multiples; guard accesses where bounds cannot prove them",
         cg, codegen(createPadPass)},
        {"shape-infer",
         "replace '?' dims by what the shape rules compute; check known ones",
         {},
         plain(createShapeInferPass)},
    };
    std::sort(v.begin(), v.end(),
              [](const PassInfo& a, const PassInfo& b) { return a.name < b.name; });
    return v;
  }();
  return passes;
}

void addCodegenPasses(PassManager& pm, const CodegenOptions& opts) {
  pm.addPass("conv-gemm", createConvGemmPass(opts));
  pm.addPass("conv-depthwise", createConvDepthwisePass(opts));
  pm.addPass("pool-pad", createPoolPadPass(opts));
  pm.addPass("pad-gemm", createPadGemmPass(opts));
  pm.addPass("gemv-split", createGemvSplitPass(opts));
  pm.addPass("pack-weights", createPackWeightsPass(opts));
  pm.addPass("fuse", createFusePass(opts));
  pm.addPass("collapse-dims", createCollapseDimsPass(opts));
  pm.addPass("tile", createTilePass(opts));
  pm.addPass("pad", createPadPass(opts));
  pm.addPass("lower", createLowerPass(opts));
}

const PassInfo* lookupPass(const std::string& name) {
  for (const PassInfo& p : registeredPasses())
    if (p.name == name) return &p;
  return nullptr;
}

const std::vector<PipelineInfo>& registeredPipelines() {
  static const std::vector<PipelineInfo> pipelines = {
      // shape-infer first: identities compare exact types, so `?` dims would hide matches.
      // canonicalize before cse: folding and identities expose equal ops; dce last sweeps
      // what cse left behind.
      {"default", "shape-infer,canonicalize,cse,dce", "the standard cleanup of a tensor graph"},
      // conv-gemm, conv-depthwise, pool-pad, pad-gemm, gemv-split and pack-weights before fuse:
      // the matmuls, elementwise taps, pads, sums and weight views they make form dispatches
      // (pack-weights after gemv-split: a decode step's slices of B stay unpacked). fuse
      // next: the others transform dispatches. collapse-dims before tile: tiles are chosen
      // for the final iteration space. pad after tile: it needs the tiles. lower last.
      {"codegen",
       "shape-infer,conv-gemm,conv-depthwise,pool-pad,pad-gemm,gemv-split,pack-weights,fuse,"
       "collapse-dims,tile,pad,lower",
       "dispatch formation and lowering to kernel IR"},
  };
  return pipelines;
}

} // namespace kiln
