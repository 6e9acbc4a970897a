// `kiln opt`: parse, verify, run passes, print.
#include <iostream>

#include "backends/backend.h"
#include "cli.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"
#include "passes/affinity.h"
#include "passes/codegen.h"
#include "passes/pass_manager.h"
#include "passes/placement.h"
#include "passes/placement_report.h"

namespace kiln::cli {

const char* const kOptHelp = R"(usage: kiln opt FILE.kir|- [flags]

Parses a module (stdin for -), verifies it, runs the passes given with --pass, verifies
the result and prints it.

  --pass=A,B,...        passes or named pipelines to run, in order
  --print-after=NAME    print the module after pass NAME (repeatable) to stderr
  --print-after-all     print the module after every pass to stderr
  --verify-each         verify after every pass, naming the pass that broke the IR
  --time-passes         print each pass's time to stderr at the end
  --print-locs          print each op's source location as loc(...)

Devices and placement (docs/devices.md):
  --device=KIND[N]      declare a device target: ref[0], cpu[0], vulkan[1], hip[7]
                        (repeatable; the module's `device` lines count too)
  --devices=auto        declare every device the program references
  --place=PATTERN=DEV   pin ops whose name, value name, node name or weight name
                        matches the glob PATTERN to device DEV (repeatable)
  --partition=SPEC      pipeline:P (P stages over the first P devices),
                        tensor:T (tensor parallel over groups of T devices) or
                        pipeline:P,tensor:T (docs/devices.md, docs/distributed.md)
  --shard=PATTERN=SHARDING  with tensor:T, give the results of the ops PATTERN matches
                        the sharding `replicated` or `split:D` (repeatable)
  --no-transfers        a value needed on another device is an error, not a transfer
  --report=placement    print the placement report instead of the module
  --emit=placement-dot  print a Graphviz graph coloured by device instead of the module
  Any of --place, --partition, --no-transfers, --report, --emit=placement-dot runs
  affinity after the --pass pipeline.
  --target=NAME         codegen target: cpu, cpu:x86-64-v2|v3|v4, vulkan:lavapipe,
                        vulkan:nvidia-sm90, vulkan:generic, amdgpu:gfx90a, amdgpu:gfx942,
                        amdgpu:gfx1100; the `target` option of every codegen pass the
                        --pass text does not give one (as in --pass=tile{target=NAME})
  --tile-config=FILE    manual tiles per kernel (JSON, see docs/codegen.md); the codegen
                        passes' `tile-config` option
  --emit=kernels        print a report of the kernels (workgroup, shared memory and the
                        target's limit) instead of the module; runs --pass=codegen when
                        no --pass is given
  -o, --output=FILE     write the module to FILE instead of stdout
  -h, --help            show this help
)";

int runOpt(const std::vector<std::string>& args) {
  static const std::vector<FlagSpec> specs = withPlacementFlags({
      {"pass", true, false, ""},
      {"print-after", true, true, ""},
      {"print-after-all", false, false, ""},
      {"verify-each", false, false, ""},
      {"time-passes", false, false, ""},
      {"print-locs", false, false, ""},
      {"target", true, false, ""},
      {"tile-config", true, false, ""},
      {"emit", true, false, ""},
      {"output", true, false, "o"},
      {"no-transfers", false, false, ""},
      {"report", true, false, ""},
  });
  auto parsed = parseArgs(args, specs, "opt");
  if (!parsed.ok()) return fail(parsed.diags());
  const ParsedArgs& a = *parsed;
  if (a.help) {
    std::cout << kOptHelp;
    return 0;
  }
  if (a.positional.size() != 1)
    return fail(error(Loc{}, "kiln opt needs exactly one input file (or - for stdin), got " +
                                 std::to_string(a.positional.size())));

  PassManagerOptions pmOpts;
  for (const std::string& name : a.all("print-after")) {
    if (!lookupPass(name)) return fail(error(Loc{}, "--print-after: no pass named '" + name + "'"));
    pmOpts.printAfter.insert(name);
  }
  pmOpts.printAfterAll = a.has("print-after-all");
  pmOpts.verifyEach = a.has("verify-each");
  pmOpts.timePasses = a.has("time-passes");
  std::string emit = a.get("emit");
  if (!emit.empty() && emit != "kernels" && emit != "placement-dot")
    return fail(error(Loc{}, "--emit: expected 'kernels' or 'placement-dot', got '" + emit + "'"));
  bool emitKernels = emit == "kernels";
  bool emitDot = emit == "placement-dot";
  auto codegen = codegenFlags(a);
  if (!codegen.ok()) return fail(codegen.diags());
  pmOpts.defaults = codegen->passDefaults;
  // Build the pipeline before reading the input, so a misspelled pass fails fast.
  PassManager pm(pmOpts);
  if (a.has("pass") || emitKernels) {
    Status added = pm.addPipeline(a.has("pass") ? a.get("pass") : "codegen");
    if (!added.ok()) return fail(added.diags());
  }

  auto placement = placementFlags(a);
  if (!placement.ok()) return fail(placement.diags());
  placement->allowTransfers = !a.has("no-transfers");
  if (a.has("report") && a.get("report") != "placement")
    return fail(error(Loc{}, "--report takes only 'placement', got '" + a.get("report") + "'"));
  placement->affinity = !placement->place.empty() || placement->stages || placement->tensor > 1 ||
                        !placement->shard.empty() || a.has("no-transfers") || a.has("report") ||
                        emitDot;

  auto module = loadModule(a.positional[0]);
  if (!module.ok()) return fail(module.diags());
  Module& m = **module;
  Status placed = placeModule(m, *placement, [&](Module& mod) -> Status {
    if (pm.passNames().empty()) return ok();
    // Dumps go to stderr, as in LLVM's tools, so stdout holds only the final module.
    KILN_CHECK(pm.run(mod, std::cerr));
    return verifyModule(mod);
  });
  if (!placed.ok()) return fail(placed.diags());
  std::string side;
  if (a.has("report")) {
    auto report = placementReport(m);
    if (!report.ok()) return fail(report.diags());
    side += *report;
  }
  if (emitDot) {
    auto dot = placementDot(m);
    if (!dot.ok()) return fail(dot.diags());
    side += *dot;
  }

  if (emitKernels) {
    auto report = kernelsReport(m, codegen->target);
    if (!report.ok()) return fail(report.diags());
    std::cout << *report;
    return 0;
  }
  PrintOptions printOpts;
  printOpts.locs = a.has("print-locs");
  std::string text = printModule(m, printOpts);
  if (a.has("output")) {
    Status written = writeTextFile(a.get("output"), text);
    if (!written.ok()) return fail(written.diags());
  } else if (side.empty()) {
    std::cout << text;
  }
  std::cout << side;
  return 0;
}

} // namespace kiln::cli
