// kiln-onnx-conformance: runs the ONNX backend test suite (Debian's libonnx-testdata) through
// the importer and the reference interpreter.
//
// For each test_*/model.onnx under the given folders it imports the model, runs every
// test_data_set_*/ (input_N.pb -> output_N.pb) and compares with ONNX's tolerances
// (|got - want| <= atol + rtol * |want|, NaN matches NaN). It prints one line per test and
// ends with `N passed, M failed, K skipped`. Tests in a category of unsupported.txt are
// skipped; --min-rate=DIR=RATE makes the exit status 1 when a folder's pass rate (passed
// over passed + failed) falls below RATE.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "compiler/compiler.h"
#include "frontends/onnx/import.h"
#include "frontends/onnx/onnx_proto.h"
#include "frontends/onnx/tensor.h"
#include "ir/interp/interp.h"
#include "ir/io/weights.h"
#include "passes/pass_manager.h"
#include "runtime/drivers.h"
#include "runtime/executor.h"
#include "runtime/sim/sim.h"
#ifdef KILN_HAVE_VULKAN
#include "runtime/vulkan/vulkan.h"
#endif
#ifdef KILN_HAVE_SPIRV
#include "backends/spirv/spirv_backend.h"
#endif

namespace fs = std::filesystem;
using namespace kiln;
namespace pb = ::onnx;

namespace {

// Kernels the device's backend compiled, kernels it left to the ref executable, and of those
// the ones that only produce a constant.
uint64_t gCompiledKernels = 0, gRefKernels = 0, gConstantKernels = 0;

bool onlyConstants(const Func& f) {
  for (const auto& op : f.ops())
    if (op->kind() != OpKind::Constant && op->kind() != OpKind::Return) return false;
  return true;
}

struct Rule {
  std::string kind, pattern, reason;
};

struct Tolerance {
  double rtol = 1e-3, atol = 1e-7;
};

struct Config {
  std::vector<Rule> rules;
  std::map<std::string, Tolerance> tolerances;
  std::string filter;
  std::map<std::string, double> minRate;    // over tests whose ops are all supported
  std::map<std::string, double> minRateAll; // over every test not skipped
  bool verbose = false;
  // Run on the kernel-IR simulator: compile with the `codegen` pipeline (fuse, tile, pad,
  // lower) and execute the lowered kernels thread by thread.
  bool sim = false;
  // Run on a compiled device (cpu[0], vulkan[0]): compile the imported module for it and
  // call it through the executor, as `kiln run --device=D` does. Empty: ref or sim.
  std::string device;
  // --same-as-ref: a test that fails on the device is run again on the reference
  // interpreter; when it passes there, the device run is a regression and the exit status 1.
  bool sameAsRef = false;
};

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

bool readRules(const std::string& path, Config& cfg) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    size_t sp = line.find(' '), colon = line.find(": ");
    if (sp == std::string::npos || colon == std::string::npos || colon < sp) continue;
    cfg.rules.push_back({line.substr(0, sp), trim(line.substr(sp + 1, colon - sp - 1)),
                         trim(line.substr(colon + 2))});
  }
  return true;
}

bool readTolerances(const std::string& path, Config& cfg) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line.substr(0, line.find(':')));
    std::string name;
    Tolerance t;
    if (ls >> name >> t.rtol >> t.atol) cfg.tolerances[name] = t;
  }
  return true;
}

void collectOps(const pb::GraphProto& g, std::set<std::string>& ops) {
  for (const auto& n : g.node()) {
    ops.insert(n.op_type());
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collectOps(a.g(), ops);
      for (const auto& sg : a.graphs()) collectOps(sg, ops);
    }
  }
}

std::string valueKind(const pb::TypeProto& t) {
  if (t.has_sequence_type()) return "sequence";
  if (t.has_optional_type()) return "optional";
  if (t.has_map_type()) return "map";
  if (t.has_tensor_type()) return kiln::onnx::onnxTypeName(t.tensor_type().elem_type());
  return "unknown";
}

// The reason a test is skipped, or "".
std::string skipReason(const Config& cfg, const std::string& name, const pb::ModelProto& m) {
  std::set<std::string> ops, kinds;
  collectOps(m.graph(), ops);
  for (const auto& vi : m.graph().input()) kinds.insert(valueKind(vi.type()));
  for (const auto& vi : m.graph().output()) kinds.insert(valueKind(vi.type()));
  for (const Rule& r : cfg.rules) {
    if (r.kind == "op" && ops.count(r.pattern)) return "op " + r.pattern + ": " + r.reason;
    if (r.kind == "type" && kinds.count(r.pattern)) return "type " + r.pattern + ": " + r.reason;
    if (r.kind == "test" && std::regex_match(name, std::regex(r.pattern)))
      return "test: " + r.reason;
  }
  return "";
}

std::optional<std::string> readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// `expected` is the model's ONNX element type for this value (0: unknown). The test
// generator stores bfloat16 data as UINT16 bit patterns; those are read as bf16.
Result<HostTensor> readTensor(const fs::path& p, std::string& name, int32_t expected) {
  auto bytes = readFile(p);
  pb::TensorProto t;
  if (!bytes || !t.ParseFromString(*bytes))
    return error(Loc::named(p.string()), "not a TensorProto");
  name = t.name();
  if (t.data_type() == pb::TensorProto::UINT16 && expected == pb::TensorProto::BFLOAT16)
    t.set_data_type(pb::TensorProto::BFLOAT16);
  return kiln::onnx::tensorFromProto(t, p.parent_path().string(), Loc::named(p.string()));
}

struct DataSet {
  std::vector<std::pair<std::string, HostTensor>> inputs;
  std::vector<HostTensor> outputs;
};

int32_t elemTypeOf(const pb::ValueInfoProto& vi) {
  return vi.type().has_tensor_type() ? vi.type().tensor_type().elem_type() : 0;
}

Result<DataSet> readDataSet(const fs::path& dir, const pb::GraphProto& g) {
  std::set<std::string> inits;
  for (const auto& t : g.initializer()) inits.insert(t.name());
  std::vector<int32_t> inTypes, outTypes;
  for (const auto& vi : g.input())
    if (!inits.count(vi.name())) inTypes.push_back(elemTypeOf(vi));
  for (const auto& vi : g.output()) outTypes.push_back(elemTypeOf(vi));
  auto typeAt = [](const std::vector<int32_t>& v, size_t i) { return i < v.size() ? v[i] : 0; };
  DataSet ds;
  for (size_t i = 0;; ++i) {
    fs::path p = dir / ("input_" + std::to_string(i) + ".pb");
    if (!fs::exists(p)) break;
    std::string name;
    KILN_TRY(HostTensor t, readTensor(p, name, typeAt(inTypes, i)));
    ds.inputs.emplace_back(name, t);
  }
  for (size_t i = 0;; ++i) {
    fs::path p = dir / ("output_" + std::to_string(i) + ".pb");
    if (!fs::exists(p)) break;
    std::string name;
    KILN_TRY(HostTensor t, readTensor(p, name, typeAt(outTypes, i)));
    ds.outputs.push_back(t);
  }
  return ds;
}

// The largest error of `got` against `want`, or a mismatch description in `why`.
bool compare(const HostTensor& got, const HostTensor& want, const Tolerance& tol, double& maxErr,
             std::string& why) {
  if (got.shape() != want.shape()) {
    why = "shape " + Type::tensor(got.elem(), got.shape()).str() + ", expected " +
          Type::tensor(want.elem(), want.shape()).str();
    return false;
  }
  if (got.elem() != want.elem()) {
    why = "element type " + std::string(elemTypeName(got.elem())) + ", expected " +
          std::string(elemTypeName(want.elem()));
    return false;
  }
  bool flt = isFloat(want.elem());
  bool good = true;
  for (int64_t i = 0; i < want.numElements(); ++i) {
    if (!flt) {
      if (got.getI(i) != want.getI(i)) {
        maxErr = std::max(maxErr, std::fabs(double(got.getI(i)) - double(want.getI(i))));
        good = false;
      }
      continue;
    }
    double g = got.getF(i), w = want.getF(i);
    if (std::isnan(w) || std::isnan(g)) {
      if (std::isnan(w) != std::isnan(g)) {
        maxErr = INFINITY;
        good = false;
      }
      continue;
    }
    if (std::isinf(w) || std::isinf(g)) {
      if (g != w) {
        maxErr = INFINITY;
        good = false;
      }
      continue;
    }
    double err = std::fabs(g - w);
    maxErr = std::max(maxErr, err);
    if (err > tol.atol + tol.rtol * std::fabs(w)) good = false;
  }
  if (!good) why = "largest error " + std::to_string(maxErr);
  return good;
}

// Unsupported: the model uses an operator the importer does not convert; it counts as a
// failure in the totals but not in the pass rate over supported operators.
enum class Outcome { Passed, Failed, Unsupported, Skipped };

// Inputs that plausibly determine shapes (small 0-D/1-D tensors), for the second import.
std::map<std::string, HostTensor> shapeInputs(const DataSet& ds, const pb::GraphProto& g) {
  std::set<std::string> inits;
  for (const auto& t : g.initializer()) inits.insert(t.name());
  std::vector<std::string> names;
  for (const auto& vi : g.input())
    if (!inits.count(vi.name())) names.push_back(vi.name());
  std::map<std::string, HostTensor> out;
  for (size_t i = 0; i < ds.inputs.size() && i < names.size(); ++i) {
    const HostTensor& t = ds.inputs[i].second;
    if (t.rank() <= 1 && t.numElements() <= 16) out[names[i]] = t;
  }
  return out;
}

Outcome runTest(const Config& cfg, const fs::path& dir, std::string& line) {
  std::string name = dir.filename().string();
  auto bytes = readFile(dir / "model.onnx");
  pb::ModelProto model;
  if (!bytes || !model.ParseFromString(*bytes)) {
    line = "FAIL " + name + ": model.onnx does not parse";
    return Outcome::Failed;
  }
  if (std::string why = skipReason(cfg, name, model); !why.empty()) {
    line = "SKIP " + name + ": " + why;
    return Outcome::Skipped;
  }
  std::set<std::string> ops;
  collectOps(model.graph(), ops);
  std::vector<std::string> known = kiln::onnx::supportedOps();
  for (const std::string& op : ops)
    if (!std::binary_search(known.begin(), known.end(), op)) {
      line = "UNSUPPORTED " + name + ": op " + op + ": kiln has no converter for it";
      return Outcome::Unsupported;
    }
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().starts_with("test_data_set_"))
      sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  Tolerance tol;
  if (auto it = cfg.tolerances.find(name); it != cfg.tolerances.end()) tol = it->second;

  std::string modelName = name + "/model.onnx";
  auto imported = kiln::onnx::importBytes(*bytes, modelName, dir.string());
  double worst = 0;
  bool constantShapes = false;
  bool lowered = false; // the codegen pipeline ran on the imported module (--device=sim)
  std::unique_ptr<kiln::Executor> devExec; // the module compiled for cfg.device
  std::string devEntry;
  for (const fs::path& set : sets) {
    auto ds = readDataSet(set, model.graph());
    if (!ds.ok()) {
      line = "FAIL " + name + ": " + ds.diags().list[0].str();
      return Outcome::Failed;
    }
    auto imp = std::move(imported);
    if (!imp.ok()) {
      // Shape arguments given as graph inputs: import again with them as constants.
      kiln::onnx::ImportOptions opts;
      opts.constantInputs = shapeInputs(*ds, model.graph());
      auto again = kiln::onnx::importBytes(*bytes, modelName, dir.string(), opts);
      if (!again.ok()) {
        std::string msg = imp.diags().list.empty() ? "" : imp.diags().list[0].str();
        line = "FAIL " + name + ": import: " + msg;
        return Outcome::Failed;
      }
      imp = std::move(again);
      constantShapes = true;
    }
    const kiln::onnx::Imported& im = *imp;
    // input_K.pb is the K-th graph input that is not an initializer.
    std::set<std::string> inits;
    for (const auto& t : model.graph().initializer()) inits.insert(t.name());
    std::vector<std::string> graphInputs;
    for (const auto& vi : model.graph().input())
      if (!inits.count(vi.name())) graphInputs.push_back(vi.name());
    std::vector<HostTensor> inputs;
    for (const std::string& argName : im.inputNames) {
      auto pos = static_cast<size_t>(std::find(graphInputs.begin(), graphInputs.end(), argName) -
                                     graphInputs.begin());
      auto it =
          pos < ds->inputs.size() ? ds->inputs.begin() + static_cast<long>(pos) : ds->inputs.end();
      if (it == ds->inputs.end()) {
        line = "FAIL " + name + ": no data for input '" + argName + "'";
        return Outcome::Failed;
      }
      inputs.push_back(it->second);
    }
    if (im.module)
      for (const auto& [wn, t] : im.weights) im.module->setWeightData(wn, t);
    if (!cfg.device.empty() && !devExec) {
      kiln::CompileOptions co;
      co.placement.devices.devices = {cfg.device};
      devEntry = im.module->funcs()[0]->name();
      auto program = kiln::compileProgram(std::move(imp->module), co);
      if (!program.ok()) {
        line =
            "FAIL " + name + ": compile for " + cfg.device + ": " + program.diags().list[0].str();
        return Outcome::Failed;
      }
      for (const auto& f : program->host->funcs()) {
        if (program->entry(f->name())) continue;
        ++(isLoweredKernel(*f) ? gCompiledKernels : gRefKernels);
        if (!isLoweredKernel(*f) && onlyConstants(*f)) ++gConstantKernels;
      }
      auto ex = kiln::Executor::create(std::make_shared<const kiln::Program>(program.take()), {});
      if (!ex.ok()) {
        line = "FAIL " + name + ": load on " + cfg.device + ": " + ex.diags().list[0].str();
        return Outcome::Failed;
      }
      devExec = ex.take();
    }
    if (cfg.sim && !lowered) {
      PassManager pm;
      Status compiled = pm.addPipeline("codegen");
      if (compiled.ok()) compiled = pm.run(*im.module, std::cerr);
      if (!compiled.ok()) {
        line = "FAIL " + name + ": codegen: " + compiled.diags().list[0].str();
        return Outcome::Failed;
      }
      lowered = true;
    }
    Result<std::vector<HostTensor>> results = error(Loc{}, "not run");
    if (devExec) {
      results = devExec->call(devEntry, inputs);
    } else {
      WeightStore weights(*im.module);
      results = cfg.sim ? sim::runOnSim(*im.module->funcs()[0], inputs, weights)
                        : interpret(*im.module->funcs()[0], inputs, weights);
    }
    if (!results.ok()) {
      line = "FAIL " + name + ": " + results.diags().list[0].str();
      return Outcome::Failed;
    }
    if (results->size() != ds->outputs.size()) {
      line = "FAIL " + name + ": " + std::to_string(results->size()) + " outputs, expected " +
             std::to_string(ds->outputs.size());
      return Outcome::Failed;
    }
    for (size_t i = 0; i < results->size(); ++i) {
      std::string why;
      if (!compare((*results)[i], ds->outputs[i], tol, worst, why)) {
        line = "FAIL " + name + ": " + set.filename().string() + " output " + std::to_string(i) +
               ": " + why;
        return Outcome::Failed;
      }
    }
    imported = std::move(imp);
  }
  std::ostringstream os;
  os << "PASS " << name << " (largest error " << worst
     << (constantShapes ? "; shape inputs bound as constants)" : ")");
  line = os.str();
  return Outcome::Passed;
}

const char* const kHelp =
    R"(usage: kiln-onnx-conformance [--device=ref|sim|cpu|vulkan] [--same-as-ref] [--filter=REGEX] [--min-rate=DIR=RATE]... DIR...

Runs every test_*/ folder under each DIR (folders of Debian's libonnx-testdata such as
/usr/share/libonnx-testdata/data/node) and prints one line per test, then
`N passed, M failed, K skipped`.

  --device=D            ref: the reference interpreter; sim: compile with the codegen
                        pipeline and run the lowered kernels on the kernel-IR simulator;
                        cpu[0], vulkan[0] (or any compiled device): compile for it and run
                        through the executor (vulkan: lavapipe when no driver is named;
                        exit 77 (skip) when the device is absent)
  --same-as-ref         run each test that fails on the device on ref too; exit 1 when one
                        passes there (every test that passes on ref must pass on the device)
  --filter=REGEX        only tests whose folder name matches REGEX (search, not whole)
  --rules=FILE          unsupported categories (default: unsupported.txt beside the source)
  --tolerances=FILE     per-test tolerances (default: tolerances.txt beside the source)
  --min-rate=DIR=RATE   exit 1 when DIR's pass rate over tests whose ops kiln converts is
                        below RATE (a fraction)
  --min-rate-all=DIR=RATE  the same over every test that is not skipped

Lines: PASS NAME (largest error E), FAIL NAME: why, UNSUPPORTED NAME: op OP: why (counted
as failed), SKIP NAME: category from unsupported.txt.
)";

} // namespace

int main(int argc, char** argv) {
  Config cfg;
  std::vector<std::string> dirs;
  std::string rules = KILN_CONFORMANCE_DIR "/unsupported.txt";
  std::string tolerances = KILN_CONFORMANCE_DIR "/tolerances.txt";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const std::string& flag) -> std::optional<std::string> {
      if (a.starts_with(flag + "=")) return a.substr(flag.size() + 1);
      return std::nullopt;
    };
    if (a == "-h" || a == "--help") {
      std::cout << kHelp;
      return 0;
    } else if (auto v = value("--device")) {
      if (*v == "sim" || *v == "sim[0]") {
        cfg.sim = true;
      } else if (*v != "ref" && *v != "ref[0]") {
        cfg.device = v->find('[') == std::string::npos ? *v + "[0]" : *v;
      }
    } else if (a == "--same-as-ref") {
      cfg.sameAsRef = true;
    } else if (auto f = value("--filter")) {
      cfg.filter = *f;
    } else if (auto r = value("--rules")) {
      rules = *r;
    } else if (auto t = value("--tolerances")) {
      tolerances = *t;
    } else if (auto m = value("--min-rate"), ma = value("--min-rate-all"); m || ma) {
      const std::string& spec = m ? *m : *ma;
      size_t eq = spec.rfind('=');
      if (eq == std::string::npos) {
        std::cerr << "kiln-onnx-conformance: error: " << a << ": expected DIR=RATE\n";
        return 1;
      }
      (m ? cfg.minRate : cfg.minRateAll)[spec.substr(0, eq)] =
          std::atof(spec.substr(eq + 1).c_str());
    } else if (a.starts_with("-")) {
      std::cerr << "kiln-onnx-conformance: error: unknown flag '" << a << "'\n";
      return 1;
    } else {
      dirs.push_back(a);
    }
  }
  if (dirs.empty()) {
    std::cerr << kHelp;
    return 1;
  }
  if (!readRules(rules, cfg) || !readTolerances(tolerances, cfg)) {
    std::cerr << "kiln-onnx-conformance: error: cannot read " << rules << " or " << tolerances
              << "\n";
    return 1;
  }
  if (!cfg.device.empty()) {
    if (cfg.device.starts_with("vulkan") && !std::getenv("VK_DRIVER_FILES") &&
        !std::getenv("VK_ICD_FILENAMES"))
      setenv("VK_DRIVER_FILES", "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json", 1);
#ifdef KILN_HAVE_VULKAN
    // The instance before the device registry, so the registry is destroyed first at exit.
    if (cfg.device.starts_with("vulkan")) (void)hal::vulkan::Instance::get();
#endif
    auto id = hal::parseDeviceId(cfg.device, Loc::named("--device"));
    auto dev = id.ok() ? hal::openDevice(*id, Loc::named("--device"))
                       : Result<std::shared_ptr<hal::Device>>(id.diags());
    if (!dev.ok()) {
      std::cout << "SKIP: " << dev.diags().str() << "\n";
      return 77;
    }
  }
  std::regex filter(cfg.filter.empty() ? ".*" : cfg.filter);
  int passed = 0, failed = 0, skipped = 0, regressions = 0;
  bool belowRate = false;
  for (const std::string& d : dirs) {
    if (!fs::is_directory(d)) {
      std::cerr << "kiln-onnx-conformance: error: " << d << " is not a folder\n";
      return 1;
    }
    std::vector<fs::path> tests;
    for (const auto& e : fs::directory_iterator(d))
      if (e.is_directory() && e.path().filename().string().starts_with("test_") &&
          std::regex_search(e.path().filename().string(), filter))
        tests.push_back(e.path());
    std::sort(tests.begin(), tests.end());
    int p = 0, f = 0, u = 0, s = 0;
    for (const fs::path& t : tests) {
      std::string line;
      Outcome o;
      try {
        o = runTest(cfg, t, line);
      } catch (const std::exception& e) {
        line = "FAIL " + t.filename().string() + ": internal error: " + e.what();
        o = Outcome::Failed;
      }
      if (o != Outcome::Passed && o != Outcome::Skipped && cfg.sameAsRef) {
        Config ref = cfg;
        ref.device.clear();
        ref.sim = false;
        std::string refLine;
        if (runTest(ref, t, refLine) == Outcome::Passed) {
          line = "REGRESSION " + line.substr(line.find(' ') + 1) + " (passes on ref)";
          ++regressions;
        }
      }
      std::cout << line << "\n" << std::flush;
      (o == Outcome::Passed ? p : o == Outcome::Failed ? f : o == Outcome::Unsupported ? u : s)++;
    }
    std::string base = fs::path(d).filename().string();
    if (base.empty()) base = fs::path(d).parent_path().filename().string();
    double rate = p + f ? double(p) / double(p + f) : 1.0;
    double all = p + f + u ? double(p) / double(p + f + u) : 1.0;
    std::cout << std::fixed << std::setprecision(1) << "# " << base << ": " << p << " passed, "
              << f + u << " failed (" << u << " with unsupported ops), " << s
              << " skipped; pass rate " << 100 * rate << "% over supported ops, " << 100 * all
              << "% over all\n"
              << std::defaultfloat;
    if (auto it = cfg.minRate.find(base); it != cfg.minRate.end() && rate < it->second) {
      std::cout << "# " << base << ": pass rate over supported ops below the required "
                << 100 * it->second << "%\n";
      belowRate = true;
    }
    if (auto it = cfg.minRateAll.find(base); it != cfg.minRateAll.end() && all < it->second) {
      std::cout << "# " << base << ": pass rate over all tests below the required "
                << 100 * it->second << "%\n";
      belowRate = true;
    }
    f += u;
    passed += p;
    failed += f;
    skipped += s;
  }
  std::cout << passed << " passed, " << failed << " failed, " << skipped << " skipped\n";
  if (!cfg.device.empty()) {
    std::cout << "# " << cfg.device << ": " << gCompiledKernels << " kernels compiled for it, "
              << gRefKernels << " left to the ref executable (" << gConstantKernels
              << " of them constants)";
#ifdef KILN_HAVE_SPIRV
    std::cout << "; " << spirv::spirvModulesValidated() << " SPIR-V modules validated";
#endif
    std::cout << "\n";
  }
  if (regressions)
    std::cout << "# " << regressions << " tests pass on ref but not on " << cfg.device << "\n";
  uint64_t validation = hal::vulkanValidationMessages();
  if (validation)
    std::cout << "# FAIL: the Vulkan validation layer reported " << validation
              << " messages (above)\n";
  return belowRate || regressions || validation ? 1 : 0;
}
