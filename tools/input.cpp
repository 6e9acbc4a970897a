// Loading what the user names on the command line: a source model to compile, or a
// program to run (a .kmod file, or a source model compiled in memory).
#include <algorithm>
#include <filesystem>

#include "cli.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/module_format.h"
#include "target/tile_config.h"

namespace kiln::cli {

bool isModuleFile(const std::string& path) { return path.ends_with(".kmod"); }

Result<std::unique_ptr<Module>> loadInputModule(const std::string& path) {
  if (path == "-") return loadModule(path);
  return loadSourceModule(path);
}

Result<std::shared_ptr<const Program>>
loadProgramInput(const std::string& path, const PlacementOptions& placement,
                 const std::vector<std::string>& donate, bool recognizeAttention,
                 const std::function<Status(const Module&)>& check) {
  if (isModuleFile(path)) {
    if (!donate.empty())
      return error(Loc::named("--donate"), "a .kmod keeps the donations it was compiled with; "
                                           "give --donate to kiln compile");
    KILN_TRY(Program p, loadProgramFile(path));
    return std::make_shared<const Program>(std::move(p));
  }
  KILN_TRY(std::unique_ptr<Module> m, loadInputModule(path));
  if (check) KILN_CHECK(check(*m));
  CompileOptions opts;
  opts.placement = placement;
  opts.donate = donate;
  opts.recognizeAttention = recognizeAttention;
  // In memory the weights stay in their files, read lazily as the interpreter would.
  opts.embedWeights = false;
  KILN_TRY(Program p, compileProgram(std::move(m), opts));
  return std::make_shared<const Program>(std::move(p));
}

Result<std::string> pickEntry(const std::vector<std::string>& entries,
                              const std::string& requested) {
  auto has = [&](const std::string& n) {
    return std::find(entries.begin(), entries.end(), n) != entries.end();
  };
  std::string names;
  for (const std::string& e : entries) names += (names.empty() ? "@" : ", @") + e;
  if (!requested.empty()) {
    std::string name = requested.starts_with("@") ? requested.substr(1) : requested;
    if (has(name)) return name;
    return error(Loc::named("--function"),
                 "no function @" + name + " in the module (functions: " + names + ")");
  }
  if (entries.empty()) return error(Loc{}, "the module has no functions to run");
  if (has("main")) return std::string("main");
  if (entries.size() == 1) return entries[0];
  return error(Loc{}, "the module has no @main and " + std::to_string(entries.size()) +
                          " functions; choose one with --function (functions: " + names + ")");
}

Result<std::string> pickEntry(const Program& p, const std::string& requested) {
  return pickEntry(p.entries, requested);
}

Result<HostTensor> loadInputTensor(const std::string& spec, size_t index) {
  if (spec.starts_with("@")) return readNpy(spec.substr(1));
  return parseTensorLiteral(spec, Loc::named("--input[" + std::to_string(index) + "]"));
}

Result<std::vector<HostTensor>> loadInputTensors(const std::vector<std::string>& specs) {
  std::vector<HostTensor> inputs;
  Diags errors;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto t = loadInputTensor(specs[i], i);
    if (t.ok())
      inputs.push_back(t.take());
    else
      errors.append(t.diags());
  }
  if (errors.hasErrors()) return errors;
  return inputs;
}

const std::vector<FlagSpec>& placementFlagSpecs() {
  static const std::vector<FlagSpec> specs = {
      {"device", true, true, ""},     {"devices", true, false, ""}, {"place", true, true, ""},
      {"partition", true, false, ""}, {"shard", true, true, ""},
  };
  return specs;
}

std::vector<FlagSpec> withPlacementFlags(std::vector<FlagSpec> specs) {
  for (const FlagSpec& s : placementFlagSpecs()) specs.push_back(s);
  return specs;
}

Result<PlacementOptions> placementFlags(const ParsedArgs& a) {
  PlacementOptions o;
  o.devices.devices = a.all("device");
  if (a.has("devices")) {
    if (a.get("devices") != "auto")
      return error(Loc{}, "--devices takes only 'auto', got '" + a.get("devices") + "'");
    o.devices.autoDeclare = true;
  }
  o.place = a.all("place");
  if (a.has("partition")) {
    KILN_TRY(PartitionSpec spec, parsePartitionSpec(a.get("partition")));
    o.stages = spec.stages;
    o.tensor = spec.tensor;
  }
  o.shard = a.all("shard");
  return o;
}

Result<hal::DeviceId> checkDevice(const std::string& spec) {
  Loc loc = Loc::named("--device");
  KILN_TRY(hal::DeviceId id, hal::parseDeviceId(spec, loc));
  KILN_CHECK(hal::openDevice(id, loc));
  return id;
}

Status applyCpuThreadsFlag(const ParsedArgs& a) {
  if (!a.has("cpu-threads")) return ok();
  const std::string v = a.get("cpu-threads");
  if (v.empty() || v.size() > 4 || v.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(v) < 1 || std::stoi(v) > 1024)
    return error(Loc::named("--cpu-threads"),
                 "expected a thread count from 1 to 1024, got '" + v + "'");
  hal::cpu::setCpuThreads(std::stoi(v));
  return ok();
}

Result<CodegenFlags> codegenFlags(const ParsedArgs& a) {
  CodegenFlags f;
  std::string target = a.has("target") ? a.all("target").back() : "cpu";
  KILN_TRY(f.target, lookupTarget(target));
  if (a.has("target")) f.passDefaults["target"] = target;
  if (a.has("tile-config")) {
    // Read once here, so a bad file is reported against the flag before any pass runs.
    KILN_CHECK(readTileConfig(a.get("tile-config")));
    f.passDefaults["tile-config"] = a.get("tile-config");
  }
  return f;
}

} // namespace kiln::cli
