// `kiln opt`: parse, verify, run passes, print.
#include <iostream>

#include "cli.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/codegen.h"
#include "passes/pass_manager.h"

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
  --target=NAME         codegen target: cpu, vulkan:lavapipe, vulkan:nvidia-sm90,
                        vulkan:generic, amdgpu:gfx90a, amdgpu:gfx942, amdgpu:gfx1100
  --tile-config=FILE    manual tiles per kernel (JSON, see docs/codegen.md)
  --emit=kernels        print a report of the kernels (workgroup, shared memory and the
                        target's limit) instead of the module; runs --pass=codegen when
                        no --pass is given
  -o, --output=FILE     write the module to FILE instead of stdout
  -h, --help            show this help
)";

int runOpt(const std::vector<std::string>& args) {
  static const std::vector<FlagSpec> specs = {
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
  };
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
  bool emitKernels = false;
  if (a.has("emit")) {
    if (a.get("emit") != "kernels")
      return fail(error(Loc{}, "--emit: expected 'kernels', got '" + a.get("emit") + "'"));
    emitKernels = true;
  }
  CodegenContext& cg = codegenContext();
  if (a.has("target")) {
    auto t = lookupTarget(a.get("target"));
    if (!t.ok()) return fail(t.diags());
    cg.target = *t;
  }
  if (a.has("tile-config")) {
    auto cfg = readTileConfig(a.get("tile-config"));
    if (!cfg.ok()) return fail(cfg.diags());
    cg.overrides = *cfg;
  }
  // Build the pipeline before reading the input, so a misspelled pass fails fast.
  PassManager pm(pmOpts);
  if (a.has("pass") || emitKernels) {
    Status added = pm.addPipeline(a.has("pass") ? a.get("pass") : "codegen");
    if (!added.ok()) return fail(added.diags());
  }

  auto module = loadModule(a.positional[0]);
  if (!module.ok()) return fail(module.diags());
  Module& m = **module;
  if (!pm.passNames().empty()) {
    // Dumps go to stderr, as in LLVM's tools, so stdout holds only the final module.
    Status ran = pm.run(m, std::cerr);
    if (!ran.ok()) return fail(ran.diags());
    Status verified = verifyModule(m);
    if (!verified.ok()) return fail(verified.diags());
  }

  if (emitKernels) {
    std::cout << kernelReport(m, cg.target);
    return 0;
  }
  PrintOptions printOpts;
  printOpts.locs = a.has("print-locs");
  std::string text = printModule(m, printOpts);
  if (a.has("output")) {
    Status written = writeTextFile(a.get("output"), text);
    if (!written.ok()) return fail(written.diags());
  } else {
    std::cout << text;
  }
  return 0;
}

} // namespace kiln::cli
