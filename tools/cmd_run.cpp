// `kiln run`: evaluate one function of a module on a device, with inputs from .npy files
// or literals, writing or printing its results.
#include <filesystem>
#include <iostream>

#include "cli.h"
#include "ir/interp.h"
#include "ir/npy.h"
#include "ir/weights.h"

namespace kiln::cli {

const char* const kRunHelp = R"(usage: kiln run FILE.kir|MODEL.onnx|- [flags]

Runs one function of a module and prints or writes its results.

  --device=KIND[N]      device to run on (default ref; this build has: ref)
  --function=NAME       function to run (default: main, else the only function)
  --input=@FILE.npy     next argument from a .npy file (repeatable, in argument order)
  --input=LITERAL       next argument from a literal: 2x3xf32=1 2 3 4 5 6, f32=7,
                        4xi64=0 (one value fills all), nan/inf/-inf, true/false for i1
  --output=@FILE.npy    write the next result to FILE.npy (repeatable, in result order)
  --output-dir=DIR      write result i to DIR/i.npy (DIR is created if missing)
  -h, --help            show this help

Without --output or --output-dir each result is printed as `result[i]: tensor<...> [...]`.
)";

namespace {

// Devices this build can run on; the executor adds more as drivers land.
const char* const kDeviceKinds[] = {"ref"};

Status checkDevice(const std::string& spec) {
  Loc loc = Loc::named("--device");
  std::string kind = spec;
  int64_t ordinal = 0;
  if (size_t open = spec.find('['); open != std::string::npos) {
    kind = spec.substr(0, open);
    std::string num = spec.substr(open + 1);
    if (num.size() < 2 || num.back() != ']' ||
        num.find_first_not_of("0123456789") != num.size() - 1 || num.size() > 10)
      return error(loc, "bad device '" + spec + "': expected KIND or KIND[N], such as ref[0]");
    ordinal = std::stoll(num.substr(0, num.size() - 1));
  }
  std::string available;
  bool known = false;
  for (const char* k : kDeviceKinds) {
    available += (available.empty() ? "" : ", ") + std::string(k);
    known = known || kind == k;
  }
  if (!known)
    return error(loc, "unknown device kind '" + kind + "' (available: " + available + ")");
  if (ordinal != 0)
    return error(loc, "device " + spec + " does not exist; this build has " + kind + "[0]");
  return ok();
}

Result<const Func*> pickFunction(const Module& m, const std::string& requested) {
  std::string names;
  for (const auto& f : m.funcs()) names += (names.empty() ? "@" : ", @") + f->name();
  if (!requested.empty()) {
    std::string name = requested.starts_with("@") ? requested.substr(1) : requested;
    if (const Func* f = m.lookupFunc(name)) return f;
    return error(Loc::named("--function"),
                 "no function @" + name + " in the module (functions: " + names + ")");
  }
  if (m.funcs().empty()) return error(Loc{}, "the module has no functions to run");
  if (const Func* f = m.lookupFunc("main")) return f;
  if (m.funcs().size() == 1) return m.funcs()[0].get();
  return error(Loc{}, "the module has no @main and " + std::to_string(m.funcs().size()) +
                          " functions; choose one with --function (functions: " + names + ")");
}

Result<HostTensor> loadInput(const std::string& spec, size_t index) {
  if (spec.starts_with("@")) return readNpy(spec.substr(1));
  return parseTensorLiteral(spec, Loc::named("--input[" + std::to_string(index) + "]"));
}

} // namespace

int runRun(const std::vector<std::string>& args) {
  static const std::vector<FlagSpec> specs = {
      {"device", true, false, ""}, {"function", true, false, ""},   {"input", true, true, ""},
      {"output", true, true, ""},  {"output-dir", true, false, ""},
  };
  auto parsed = parseArgs(args, specs, "run");
  if (!parsed.ok()) return fail(parsed.diags());
  const ParsedArgs& a = *parsed;
  if (a.help) {
    std::cout << kRunHelp;
    return 0;
  }
  if (a.positional.size() != 1)
    return fail(error(Loc{}, "kiln run needs exactly one input file (or - for stdin), got " +
                                 std::to_string(a.positional.size())));
  if (Status dev = checkDevice(a.get("device", "ref")); !dev.ok()) return fail(dev.diags());
  if (a.has("output") && a.has("output-dir"))
    return fail(error(Loc{}, "--output and --output-dir cannot be combined"));
  for (const std::string& o : a.all("output"))
    if (!o.starts_with("@") || o.size() < 2)
      return fail(error(Loc::named("--output"), "expected @FILE.npy, got '" + o + "'"));

  std::map<std::string, HostTensor> imported;
  auto module = loadModel(a.positional[0], imported);
  if (!module.ok()) return fail(module.diags());
  const Module& m = **module;
  auto func = pickFunction(m, a.get("function"));
  if (!func.ok()) return fail(func.diags());
  const Func& f = **func;
  size_t numResults = f.resultTypes().size();
  if (a.has("output") && a.all("output").size() != numResults)
    return fail(error(Loc::named("--output"),
                      "@" + f.name() + " returns " + std::to_string(numResults) +
                          (numResults == 1 ? " result but " : " results but ") +
                          std::to_string(a.all("output").size()) + " --output files were given"));

  std::vector<HostTensor> inputs;
  Diags inputErrors;
  for (size_t i = 0; i < a.all("input").size(); ++i) {
    auto t = loadInput(a.all("input")[i], i);
    if (t.ok())
      inputs.push_back(t.take());
    else
      inputErrors.append(t.diags());
  }
  if (inputErrors.hasErrors()) return fail(inputErrors);

  WeightStore weights(m);
  for (auto& [name, t] : imported) weights.preload(name, t);
  auto results = interpret(f, inputs, weights);
  if (!results.ok()) return fail(results.diags());

  if (a.has("output")) {
    for (size_t i = 0; i < results->size(); ++i)
      if (Status s = writeNpy(a.all("output")[i].substr(1), (*results)[i]); !s.ok())
        return fail(s.diags());
  } else if (a.has("output-dir")) {
    std::filesystem::path dir(a.get("output-dir"));
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
      return fail(error(Loc::named(dir.string()), "cannot create directory: " + ec.message()));
    for (size_t i = 0; i < results->size(); ++i)
      if (Status s = writeNpy((dir / (std::to_string(i) + ".npy")).string(), (*results)[i]);
          !s.ok())
        return fail(s.diags());
  } else {
    for (size_t i = 0; i < results->size(); ++i)
      std::cout << "result[" << i << "]: " << formatTensor((*results)[i]) << "\n";
  }
  return 0;
}

} // namespace kiln::cli
