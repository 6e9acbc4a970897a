// The pass registry and the named pipelines: the tables `kiln opt --pass=...` reads.
//
// Add a pass by writing its file and one row below. Test-only passes are never listed.
#include <algorithm>

#include "passes/passes.h"

namespace kiln {

const std::vector<PassInfo>& registeredPasses() {
  static const std::vector<PassInfo> passes = [] {
    std::vector<PassInfo> v = {
        // name           description                                                  factory
        {"affinity",
         "place every value on a declared device: clone cheap ops per consuming device, "
         "one transfer per remaining cross-device edge",
         createAffinityPass},
        {"canonicalize", "fold small constants and apply exact algebraic identities",
         createCanonicalizePass},
        {"collapse-dims",
         "merge adjacent parallel dims of dispatches when contiguous and no larger in shared "
         "memory",
         createCollapseDimsPass},
        {"cse", "merge ops that compute the same value from the same operands", createCsePass},
        {"dce", "remove ops whose results are unused and that have no side effects", createDcePass},
        {"schedule", "lower tensor functions to a host schedule with one kernel per op (ref[0])",
         [] { return createSchedulePass(); }},
        {"fuse", "form dispatches: group tensor ops into kernel functions called by dispatch",
         createFusePass},
        {"tile", "choose workgroup shapes and tiles that fit the target (--target, --tile-config)",
         createTilePass},
        {"lower", "turn tensor-level kernels into kernel IR and check their resources",
         createLowerPass},
        {"pad",
         "pad iteration spaces to tile multiples; guard accesses where bounds cannot prove them",
         createPadPass},
        {"shape-infer", "replace '?' dims by what the shape rules compute; check known ones",
         createShapeInferPass},
    };
    std::sort(v.begin(), v.end(),
              [](const PassInfo& a, const PassInfo& b) { return a.name < b.name; });
    return v;
  }();
  return passes;
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
      // fuse first: the others transform dispatches. collapse-dims before tile: tiles are
      // chosen for the final iteration space. pad after tile: it needs the tiles. lower last.
      {"codegen", "shape-infer,fuse,collapse-dims,tile,pad,lower",
       "dispatch formation and lowering to kernel IR"},
  };
  return pipelines;
}

} // namespace kiln
