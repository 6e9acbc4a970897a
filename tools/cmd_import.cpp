// `kiln import`: an ONNX model to a .kir module plus a safetensors file of its weights.
// (`kiln run` and `kiln compile` import in memory through loadSourceModule.)
#include <filesystem>
#include <iostream>

#include "cli.h"
#include "frontends/onnx/import.h"
#include "ir/io/safetensors.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"

namespace kiln::cli {

const char* const kImportHelp =
    R"(usage: kiln import MODEL.onnx [-o OUT.kir] [--weights=OUT.safetensors]

Imports an ONNX model (opsets 7 to 17) as kiln IR: one function @main whose arguments
are the graph inputs (dim_param names become symbols) and whose results are the graph
outputs. Initializers larger than 64 elements become weights written to --weights
(default: OUT.kir with the extension .safetensors); smaller ones become constants.

  -o, --output=FILE.kir     where to write the IR (default: standard output)
  --weights=FILE            where to write the weights (safetensors)
  --symbol=NAME=LO:HI       range of the symbol made from dim_param NAME (default 1:65536;
                            repeatable), e.g. --symbol=seq=1:2048
  -h, --help                show this help
)";

int runImport(const std::vector<std::string>& args) {
  static const std::vector<FlagSpec> specs = {
      {"output", true, false, "o"}, {"weights", true, false, ""}, {"symbol", true, true, ""}};
  auto parsed = parseArgs(args, specs, "import");
  if (!parsed.ok()) return fail(parsed.diags());
  const ParsedArgs& a = *parsed;
  if (a.help) {
    std::cout << kImportHelp;
    return 0;
  }
  if (a.positional.size() != 1)
    return fail(error(Loc{}, "kiln import needs exactly one .onnx file, got " +
                                 std::to_string(a.positional.size())));
  std::string out = a.get("output");
  std::filesystem::path weightsPath = a.get("weights");
  if (weightsPath.empty() && !out.empty() && out != "-")
    weightsPath = std::filesystem::path(out).replace_extension(".safetensors");
  onnx::ImportOptions opts;
  if (!weightsPath.empty()) {
    std::filesystem::path base = out.empty() || out == "-"
                                     ? std::filesystem::current_path()
                                     : std::filesystem::absolute(out).parent_path();
    opts.weightsFile =
        std::filesystem::absolute(weightsPath).lexically_relative(base).generic_string();
  }
  for (const std::string& spec : a.all("symbol")) {
    size_t eq = spec.find('='), colon = spec.find(':', eq == std::string::npos ? 0 : eq);
    int64_t lo = 0, hi = 0;
    bool good = eq != std::string::npos && eq > 0 && colon != std::string::npos;
    try {
      if (good) {
        size_t n1 = 0, n2 = 0;
        lo = std::stoll(spec.substr(eq + 1, colon - eq - 1), &n1);
        hi = std::stoll(spec.substr(colon + 1), &n2);
        good = n1 == colon - eq - 1 && n2 == spec.size() - colon - 1 && lo >= 0 && lo <= hi;
      }
    } catch (const std::exception&) {
      good = false;
    }
    if (!good)
      return fail(error(Loc::named("--symbol"),
                        "expected NAME=LO:HI with 0 <= LO <= HI, got '" + spec + "'"));
    opts.symbolRanges[spec.substr(0, eq)] = {lo, hi};
  }
  auto imported = onnx::importFile(a.positional[0], opts);
  if (!imported.ok()) return fail(imported.diags());
  if (Status v = verifyModule(*imported->module); !v.ok()) return fail(v.diags());
  if (!imported->weights.empty()) {
    if (weightsPath.empty())
      return fail(error(Loc{}, "the model has weights; give --weights=FILE.safetensors (or -o)"));
    if (Status s = writeSafetensors(weightsPath.string(), imported->weights); !s.ok())
      return fail(s.diags());
  }
  std::string text = printModule(*imported->module);
  if (out.empty() || out == "-") {
    std::cout << text;
    return 0;
  }
  if (Status s = writeTextFile(out, text); !s.ok()) return fail(s.diags());
  return 0;
}

} // namespace kiln::cli
