// The compile driver: a verified tensor-level module in, a Program (what a .kmod holds)
// out. Pipeline:
//   1. place: placeModule (resolve devices, --place, --partition, shape-infer, affinity)
//      when the program uses more than one device or any placement flag, else shape-infer;
//   2. group the devices by target backend (backends/backend.h; ref[0] and ref[1] share
//      "ref") and run each backend's codegen pipeline over its devices' ops (sim and cpu:
//      fuse, collapse-dims, tile, pad, lower; ref: none);
//   3. schedule (one kernel per dispatch or op, on its op's device);
//   4. memory analysis per entry, and one executable per backend, serialized by it from the
//      kernels launched on its devices.
// Any mix of devices compiles into one module (cpu with ref, sim with ref, ...).
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

#include "backends/kernel_cache.h"
#include "passes/compile_timer.h"
#include "passes/placement.h"
#include "runtime/program.h"
#include "target/tile_config.h"

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
  // Codegen targets (kiln compile --target, repeatable): each goes to the backends in use that
  // accept the name ("cpu:x86-64-v3" to cpu devices, any target.h row to sim devices); a
  // backend no name fits uses its default. A name no backend in use accepts is an error.
  std::vector<std::string> targets;
  // Manual tiles for every backend's `tile` (--tile-config).
  TileOverrides tileOverrides;
  // When set, receives the executables' code as text where a backend has such a form:
  // "llvm" (optimized LLVM IR) or "asm" (assembly) for the cpu backend, "spirv" (SPIR-V
  // disassembly) for the vulkan backend.
  std::string codeTextKind;
  std::string* codeText = nullptr;
  // --donate specs, `[@FUNC:]ARG[:RESULT]` (analysis/donation_specs.h): arguments whose storage
  // their result is written into, in addition to the `donate` the module's text declares.
  std::vector<std::string> donate;
  // Run the `attention` pass (passes/attention.cpp) before placement: softmax(Q.K^T).V
  // chains become attention ops (kiln compile --no-attention turns it off).
  bool recognizeAttention = true;
  // Records every phase (placement, each codegen pass, schedule, each backend's kernel
  // deduplication, compilation and linking) with counts, and reports progress
  // (kiln compile --time-passes, --progress).
  CompileTimer* timer = nullptr;
  // Threads that compile kernels at once (kiln compile --jobs; 0: the hardware's threads). The
  // module is byte-identical for any count.
  unsigned jobs = 0;
  // Compiled kernels kept on disk across compiles (backends/kernel_cache.h). Off unless
  // cache.dir is set; kiln compile sets it to defaultKernelCacheDir() unless --no-cache.
  KernelCacheOptions cache;
  // LLVM optimization levels per kernel kind (kiln compile --opt-level, backends/opt_level.h):
  // empty is $KILN_OPT_LEVEL, else the default rule (O3 for kernels that accumulate products in
  // a loop, O2 for the rest). Part of every kernel's cache key.
  std::string optLevel;
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
