// The compile driver: a verified tensor-level module in, a Program (what a .kmod holds)
// out. Pipeline: placement (placeModule: resolve devices, --place, --partition,
// shape-infer, affinity) when the program uses more than one device or any placement
// flag, else shape-infer alone; for a module on its own on a sim or cpu device, the
// codegen pipeline (fuse, collapse-dims, tile, pad, lower); schedule (one kernel per
// dispatch or op, on its op's device); memory analysis per entry; one executable payload
// per target the devices need (ref[0] and ref[1] share target "ref"; a cpu payload holds
// the kernels' code from the CPU backend, src/backends/cpu).
//
// On ref devices a compiled module gives exactly the interpreter's results; on cpu, results
// within the rounding of contracted multiply-adds and f32 matmul accumulation.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "passes/placement.h"
#include "runtime/program.h"

namespace kiln {

struct CompileOptions {
  // --device (repeatable; the first is the default device, ref[0] when none), --devices=auto,
  // --place, --partition. The module is placed (affinity runs) when it names a device, when
  // any of these says more than "one device", or when `placement.affinity` asks for it.
  PlacementOptions placement;
  // Called with the placed module, before the schedule (kiln compile --report=placement).
  std::function<Status(const Module&)> afterPlacement;
  // Copy every weight into the module; otherwise the module references the weight files
  // (weights held in memory by the Module, an imported model's, are embedded regardless).
  bool embedWeights = true;
  // The CPU code's target when a cpu device runs the module: "cpu" (the host) or a level
  // such as "cpu:x86-64-v3" (src/backends/cpu/cpu_backend.h).
  std::string cpuTarget = "cpu";
  // When set, receives the cpu executable's code as text instead of a shared object:
  // "llvm" (optimized LLVM IR) or "asm" (x86-64 assembly) — kiln compile --emit=llvm|asm.
  std::string cpuTextKind;
  std::string* cpuText = nullptr;
  // --donate specs, `[@FUNC:]ARG[:RESULT]` (compiler/donation.h): arguments whose storage
  // their result is written into, in addition to the `donate` the module's text declares.
  std::vector<std::string> donate;
};

// The device a module runs on when nothing names one: cpu[0] when this build has the CPU
// backend, ref[0] otherwise.
std::string defaultDeviceName();

Result<Program> compileProgram(std::unique_ptr<Module> module, const CompileOptions& opts);

// A model file (.kir; .onnx through the importer) parsed and verified (source.cpp).
Result<std::unique_ptr<Module>> loadSourceModule(const std::string& path);
// .kir text from memory, parsed and verified; `name` locates its errors.
Result<std::unique_ptr<Module>> loadSourceText(std::string_view text, const std::string& name);

// The schedule as one module of IR text, memory per entry as comments first (kiln compile
// --emit=schedule); it parses back and `kiln run` runs it as it is.
std::string printSchedule(const Program& program);

} // namespace kiln
