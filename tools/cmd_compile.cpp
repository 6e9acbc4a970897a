// `kiln compile`: a source model to a .kmod module file (or the IR of one stage).
#include <iostream>

#include "cli.h"
#include "ir/printer.h"
#include "runtime/module_format.h"

namespace kiln::cli {

const char* const kCompileHelp = R"(usage: kiln compile FILE.kir|FILE.onnx|- -o OUT.kmod [flags]

Compiles a module for a device and writes a .kmod module file (kiln run, kiln dump).

  -o, --output=FILE     where to write (the .kmod, or the text of --emit)
  --device=KIND[N]      device the module runs on (default ref[0])
  --emit=kir            write the verified input IR instead of a module
  --emit=schedule       write the host schedule and its kernels as IR text, with peak
                        memory and the sum of tensor sizes per function
  --external-weights    reference the weight files (absolute paths) instead of embedding
                        the weights in the module
  -h, --help            show this help
)";

int runCompile(const std::vector<std::string>& args) {
  static const std::vector<FlagSpec> specs = {
      {"output", true, false, "o"},
      {"device", true, false, ""},
      {"emit", true, false, ""},
      {"external-weights", false, false, ""},
  };
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
  if (emit != "kmod" && emit != "kir" && emit != "schedule")
    return fail(
        error(Loc::named("--emit"), "unknown value '" + emit + "' (expected kir or schedule)"));
  if (emit == "kmod" && !a.has("output"))
    return fail(error(Loc{}, "kiln compile needs -o OUT.kmod (or --emit=kir|schedule)"));
  CompileOptions opts;
  if (a.has("device")) {
    auto id = checkDevice(a.get("device"));
    if (!id.ok()) return fail(id.diags());
    opts.device = id->str();
  }
  opts.embedWeights = !a.has("external-weights");

  auto module = loadInputModule(a.positional[0]);
  if (!module.ok()) return fail(module.diags());
  std::string text;
  if (emit == "kir") {
    text = printModule(**module);
  } else {
    auto program = compileProgram(module.take(), opts);
    if (!program.ok()) return fail(program.diags());
    if (emit == "schedule") {
      text = printSchedule(*program);
    } else {
      Status s = writeProgramFile(a.get("output"), *program);
      return s.ok() ? 0 : fail(s.diags());
    }
  }
  if (!a.has("output")) {
    std::cout << text;
    return 0;
  }
  Status s = writeTextFile(a.get("output"), text);
  return s.ok() ? 0 : fail(s.diags());
}

} // namespace kiln::cli
