// Passes and their registry.
//
// A pass is one file in src/passes/ that begins with Requires / Guarantees / Invalidates
// and a tiny before/after example, defines a Pass subclass and a factory declared in
// passes.h, and is registered by name with a one-line description in passes.cpp's table.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace kiln {

class Pass {
public:
  virtual ~Pass() = default;
  // Transforms the module; a user-caused failure is returned as diagnostics.
  virtual Status run(Module& m) = 0;
};

struct PassInfo {
  std::string name;
  std::string description;
  std::function<std::unique_ptr<Pass>()> create;
};

// Every registered pass, sorted by name.
const std::vector<PassInfo>& registeredPasses();
const PassInfo* lookupPass(const std::string& name);

// Named pipelines: name → comma-separated pass list (e.g. "default" =
// "shape-infer,canonicalize,cse,dce").
struct PipelineInfo {
  std::string name;
  std::string passes;
  std::string description;
};
const std::vector<PipelineInfo>& registeredPipelines();

} // namespace kiln
