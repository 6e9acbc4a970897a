// Passes and their registry.
//
// A pass is one file in src/passes/ that begins with Requires / Guarantees / Invalidates
// and a tiny before/after example, defines a Pass subclass and a factory declared in
// passes.h, and is registered by name with a one-line description in passes.cpp's table.
//
// Options: a pass is created with its options, never reads global state. In pipeline text
// they follow the name in braces, `tile{target=amdgpu:gfx942,tile-config=t.json}`; from the
// API a pass is built with its factory's typed options (passes.h) and handed to
// PassManager::addPass.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/core/ir.h"

namespace kiln {

class Pass {
public:
  virtual ~Pass() = default;
  // Transforms the module; a user-caused failure is returned as diagnostics.
  virtual Status run(Module& m) = 0;
};

// Options from pipeline text: key -> value, as written.
using PassOptions = std::map<std::string, std::string>;

struct PassInfo {
  std::string name;
  std::string description;
  std::vector<std::string> options; // the keys it accepts
  // Builds the pass; a bad option value is an error (the keys were checked against
  // `options` before).
  std::function<Result<std::unique_ptr<Pass>>(const PassOptions&)> create;
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
