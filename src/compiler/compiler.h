// The compile driver: a verified tensor-level module in, a Program (what a .kmod holds)
// out. Pipeline: shape-infer, schedule (one kernel per op, on one device), memory
// analysis per entry, and the executable payload for the device's target.
//
// No optimizing pass runs here, so a compiled module gives exactly the interpreter's
// results; codegen's fuse/lower plug in between schedule and the executables.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/program.h"

namespace kiln {

struct CompileOptions {
  std::string device = "ref[0]";
  // Copy every weight into the module; otherwise the module references the weight files
  // (weights held in memory by the Module, an imported model's, are embedded regardless).
  bool embedWeights = true;
};

Result<Program> compileProgram(std::unique_ptr<Module> module, const CompileOptions& opts);

// A model file (.kir; .onnx through the importer) parsed and verified (source.cpp).
Result<std::unique_ptr<Module>> loadSourceModule(const std::string& path);
// .kir text from memory, parsed and verified; `name` locates its errors.
Result<std::unique_ptr<Module>> loadSourceText(std::string_view text, const std::string& name);

// The schedule as one module of IR text, memory per entry as comments first (kiln compile
// --emit=schedule); it parses back and `kiln run` runs it as it is.
std::string printSchedule(const Program& program);

} // namespace kiln
