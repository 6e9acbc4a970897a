// `kiln compile`: a source model to a .kmod module file (or the IR of one stage).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <optional>

#include "analysis/donation_specs.h"
#include "backends/backend.h"
#include "backends/opt_level.h"
#ifdef KILN_HAVE_SPIRV
#include "backends/vulkan/vulkan_backend.h"
#endif
#include "cli.h"
#include "ir/text/printer.h"
#include "passes/codegen.h"
#include "passes/pass_manager.h"
#include "passes/placement_report.h"
#include "progress.h"
#ifdef KILN_HAVE_SPIRV
#include "runtime/hal.h"
#endif
#include "runtime/module_format.h"
#include "target/tile_config.h"

namespace kiln::cli {

const char* const kCompileHelp = R"(usage: kiln compile FILE.kir|FILE.onnx|- -o OUT.kmod [flags]

Compiles a module for one or more devices and writes a .kmod module file (kiln run,
kiln dump).

  -o, --output=FILE     where to write (the .kmod, or the text of --emit: - for stdout)
  --device=KIND[N]      device the module runs on (default cpu[0], ref[0] in builds
                        without LLVM); repeatable: the
                        declared devices, the first is the default (docs/devices.md)
  --devices=auto        declare every device the program references
  --place=PATTERN=DEV   pin ops matching the glob PATTERN to device DEV (repeatable)
  --partition=SPEC      pipeline:P (P stages over the first P devices),
                        tensor:T (tensor parallel over groups of T devices) or
                        pipeline:P,tensor:T (docs/devices.md, docs/distributed.md)
  --shard=PATTERN=SHARDING  with tensor:T, give the results of the ops PATTERN matches
                        the sharding `replicated` or `split:D` (repeatable)
  --donate=[@FUNC:]ARG[:RESULT]  write result RESULT over argument ARG (a name or index) in
                        place; RESULT defaults to the one result of ARG's type (repeatable;
                        the same as `donate RESULT` after the argument in IR; docs/donation.md)
  --report=placement    print the placement report (devices, transfers, parameters) to
                        stdout; the module is still written when -o is given
  --emit=kir            write the verified input IR instead of a module
  --emit=schedule       write the host schedule and its kernels as IR text, with peak
                        memory and the sum of tensor sizes per function
  --emit=placement-dot  write a Graphviz graph of the placed program, coloured by device
  --emit=kernels        run the codegen pipeline (attention, then fuse, collapse-dims,
                        tile, pad, lower)
                        and print every kernel with its workgroup size, shared-memory bytes
                        and the target's limit (without --target: the host's cpu level)
  --emit=llvm           the cpu device's kernels as optimized LLVM IR
  --emit=asm            the cpu device's kernels as x86-64 assembly
  --emit=spirv          the vulkan devices' kernels as SPIR-V disassembly (each module
                        validated by SPIRV-Tools first)
  --target=NAME         codegen target of the devices whose backend takes it (repeatable):
                        cpu devices take cpu (this machine's CPU, the default),
                        cpu:x86-64-v2, cpu:x86-64-v3, cpu:x86-64-v4; sim devices and
                        --emit=kernels any codegen target: those, vulkan:lavapipe,
                        vulkan:nvidia-sm90, vulkan:generic, amdgpu:gfx90a, amdgpu:gfx942,
                        amdgpu:gfx1100
  --tile-config=FILE    manual tiles per kernel (docs/codegen.md)
  --no-attention        keep softmax(Q.K^T).V chains as they are (by default the
                        `attention` pass makes them one attention op; docs/attention.md)
  --external-weights    reference the weight files (absolute paths) instead of embedding
                        the weights in the module
  --jobs=N              compile up to N kernels at once (default: the hardware's threads);
                        the module is byte-identical for any N
  --opt-level=L         LLVM pipeline per cpu kernel: auto (default: O3 for kernels that
                        accumulate products in a loop, O2 for the rest), O1, O2 or O3 for
                        every kernel, or C/R (e.g. O3/O1) for contractions / the rest;
                        without it, $KILN_OPT_LEVEL if set
  --no-cache            neither read nor write the kernel cache ($KILN_CACHE_DIR, else
                        $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; docs/cli.md)
  --time-passes         print the time of every phase (import, each pass, placement,
                        schedule, kernel deduplication, LLVM, linking, writing) with kernel
                        counts and cache hits to stderr
  --progress            show the progress line (phase, kernels done of total) even when
                        stderr is not a terminal; on a terminal it appears by itself after 2 s
  -h, --help            show this help
)";

int runCompile(const std::vector<std::string>& args) {
  static const std::vector<FlagSpec> specs = withPlacementFlags({
      {"output", true, false, "o"},
      {"donate", true, true, ""},
      {"emit", true, false, ""},
      {"report", true, false, ""},
      {"external-weights", false, false, ""},
      {"no-attention", false, false, ""},
      {"target", true, true, ""},
      {"tile-config", true, false, ""},
      {"jobs", true, false, "j"},
      {"no-cache", false, false, ""},
      {"opt-level", true, false, ""},
      {"time-passes", false, false, ""},
      {"progress", false, false, ""},
  });
  auto parsed = parseArgs(args, specs, "compile");
  if (!parsed.ok()) return fail(parsed.diags());
  const ParsedArgs& a = *parsed;
  if (a.help) {
    std::cout << kCompileHelp;
    return 0;
  }
  if (a.positional.size() != 1)
    return fail(error(Loc{}, "kiln compile needs exactly one input file (or - for stdin), got " +
                                 std::to_string(a.positional.size())));
  std::string emit = a.get("emit", "kmod");
  if (emit != "kmod" && emit != "kir" && emit != "schedule" && emit != "placement-dot" &&
      emit != "kernels" && emit != "llvm" && emit != "asm" && emit != "spirv")
    return fail(error(Loc::named("--emit"), "unknown value '" + emit +
                                                "' (expected kir, schedule, placement-dot, "
                                                "kernels, llvm, asm or spirv)"));
  if (emit == "kernels" && a.all("target").size() > 1)
    return fail(error(Loc::named("--target"), "--emit=kernels takes one target"));
  auto codegen = codegenFlags(a);
  if (!codegen.ok()) return fail(codegen.diags());
  if (a.has("report") && a.get("report") != "placement")
    return fail(error(Loc::named("--report"),
                      "unknown value '" + a.get("report") + "' (expected placement)"));
  bool report = a.has("report");
  if (report && emit == "kir")
    return fail(error(Loc::named("--report"), "the placement report needs a compile; it cannot be "
                                              "combined with --emit=kir (use kiln opt)"));
  if (emit == "kmod" && a.has("output") && a.get("output") == "-")
    return fail(error(Loc::named("-o"), "a .kmod module is binary; write it to a file (- is "
                                        "standard output, for the text of --emit)"));
  if (emit == "kmod" && !a.has("output") && !report)
    return fail(error(Loc{},
                      "kiln compile needs -o OUT.kmod (or --emit=kir|schedule|placement-dot, or "
                      "--report=placement)"));
  CompileOptions opts;
  auto placement = placementFlags(a);
  if (!placement.ok()) return fail(placement.diags());
  opts.placement = *placement;
  opts.placement.affinity = report || emit == "placement-dot";
  // One device on its own must exist here, unless --target says what to compile for (ahead of
  // time, for a machine that has the device); several are checked when the module is placed.
  if (opts.placement.devices.devices.size() == 1 && !a.has("target")) {
    auto id = checkDevice(opts.placement.devices.devices[0]);
    if (!id.ok()) return fail(id.diags());
  }
  if (a.has("jobs")) {
    const std::string v = a.get("jobs");
    if (v.empty() || v.size() > 4 || v.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(v) < 1 || std::stoi(v) > 1024)
      return fail(
          error(Loc::named("--jobs"), "expected a thread count from 1 to 1024, got '" + v + "'"));
    opts.jobs = static_cast<unsigned>(std::stoi(v));
  }
  if (a.has("opt-level")) {
    // Checked here, so a bad value is reported against the flag before anything compiles.
    auto rule = parseOptLevelRule(a.get("opt-level"));
    if (!rule.ok()) return fail(rule.diags());
    opts.optLevel = a.get("opt-level");
  }
  if (!a.has("no-cache")) opts.cache.dir = defaultKernelCacheDir();
  CompileTimer timer;
  ProgressLine progress(a.has("progress"));
  if (progress.enabled())
    timer.setProgress([&](const std::string& phase, size_t done, size_t total) {
      progress.update(phase, done, total);
    });
  opts.timer = &timer;
  opts.embedWeights = !a.has("external-weights");
  opts.donate = a.all("donate");
  opts.recognizeAttention = !a.has("no-attention");
  opts.targets = a.all("target");
  if (a.has("tile-config")) {
    auto overrides = readTileConfig(a.get("tile-config"));
    if (!overrides.ok()) return fail(overrides.diags());
    opts.tileOverrides = *overrides;
  }
  std::string codeText;
  if (emit == "llvm" || emit == "asm" || emit == "spirv") {
    opts.codeTextKind = emit;
    opts.codeText = &codeText;
  }
  std::string side; // the report, or the dot graph
  opts.afterPlacement = [&](const Module& m) -> Status {
    if (report) {
      KILN_TRY(std::string r, placementReport(m));
      side += r;
    }
    if (emit == "placement-dot") {
      KILN_TRY(std::string dot, placementDot(m));
      side += dot;
    }
    return ok();
  };

  const std::string& input = a.positional[0];
  std::optional<ScopedPhase> importing(
      std::in_place, &timer, input.ends_with(".onnx") ? "import (ONNX)" : "import (text)");
  auto module = loadInputModule(a.positional[0]);
  importing.reset();
  if (!module.ok()) return fail(module.diags());
  if (Status d = applyDonations(**module, opts.donate); !d.ok()) return fail(d.diags());
  std::string text;
  if (emit == "kir") {
    text = printModule(**module);
  } else if (emit == "kernels") {
    PassManagerOptions pmOpts;
    pmOpts.defaults = codegen->passDefaults;
    // Without --target, the first declared device's kernels as a compile tiles them: a
    // vulkan device's for its row of the target table (vulkan:lavapipe for lavapipe,
    // vulkan:generic when it cannot be opened); a cpu's (and any other's) for the host's
    // level (cpu:x86-64-v4 on an AVX-512 host), not the generic 256-bit `cpu` row.
    bool chosen = a.has("target");
#ifdef KILN_HAVE_SPIRV
    const std::vector<std::string>& declared = opts.placement.devices.devices;
    std::optional<DeviceTarget> first;
    if (!chosen && !declared.empty()) {
      auto id = hal::parseDeviceId(declared.front(), Loc::named("--device"));
      if (!id.ok()) return fail(id.diags());
      first = *id;
    }
    if (first && first->kind == "vulkan") {
      // The device's row of the target table (a live description is named "ROW (device)").
      auto live = spirv::vulkanCodegenTarget("", {*first});
      if (!live.ok()) return fail(live.diags());
      std::string row = live->name.substr(0, live->name.find(" ("));
      auto desc = lookupTarget(row);
      if (!desc.ok()) return fail(desc.diags());
      pmOpts.defaults["target"] = row;
      codegen->target = *desc;
      chosen = true;
    }
#endif
    if (!chosen)
      if (const TargetBackend* cpu = lookupTargetBackend("cpu")) {
        auto level = cpu->concreteTarget("cpu");
        if (!level.ok()) return fail(level.diags());
        auto desc = lookupTarget(*level);
        if (!desc.ok()) return fail(desc.diags());
        pmOpts.defaults["target"] = *level;
        codegen->target = *desc;
      }
    PassManager pm(pmOpts);
    // As a compile would: attention chains first (unless --no-attention), then codegen.
    Status lowered =
        pm.addPipeline(opts.recognizeAttention ? "shape-infer,attention,codegen" : "codegen");
    if (lowered.ok()) lowered = pm.run(**module, std::cerr);
    if (!lowered.ok()) return fail(lowered.diags());
    auto report = kernelsReport(**module, codegen->target);
    if (!report.ok()) return fail(report.diags());
    text = *report;
  } else {
    auto program = compileProgram(module.take(), opts);
    progress.finish();
    if (!program.ok()) return fail(program.diags());
    if (emit == "llvm" || emit == "asm" || emit == "spirv") {
      // The targets whose code has this form: SPIR-V (vulkan); LLVM IR and assembly (cpu,
      // amdgpu, cuda).
      std::vector<std::string> want = emit == "spirv"
                                          ? std::vector<std::string>{"vulkan"}
                                          : std::vector<std::string>{"cpu", "amdgpu", "cuda"};
      bool found = false;
      for (const ExecutableImage& e : program->executables)
        found = found || std::find(want.begin(), want.end(), e.target) != want.end();
      if (!found)
        return fail(error(Loc::named("--emit"),
                          "--emit=" + emit + " shows the code of " +
                              (emit == "spirv" ? std::string("vulkan devices")
                                               : std::string("cpu, hip and cuda devices")) +
                              "; this module runs on none (add --device=" +
                              (emit == "spirv" ? "vulkan" : "cpu") + "[0])"));
      text = codeText;
    } else if (emit == "schedule") {
      text = printSchedule(*program);
    } else if (emit == "placement-dot") {
      text = side;
      side.clear();
    } else {
      std::cout << side;
      if (!a.has("output")) return 0;
      Status s = ok();
      {
        ScopedPhase writing(&timer, "write module");
        s = writeProgramFile(a.get("output"), *program);
      }
      progress.finish();
      if (s.ok() && a.has("time-passes")) std::cerr << timer.table();
      return s.ok() ? 0 : fail(s.diags());
    }
  }
  std::cout << side;
  progress.finish();
  if (a.has("time-passes")) std::cerr << timer.table();
  if (!a.has("output")) {
    std::cout << text;
    return 0;
  }
  Status s = writeTextFile(a.get("output"), text);
  return s.ok() ? 0 : fail(s.diags());
}

} // namespace kiln::cli
