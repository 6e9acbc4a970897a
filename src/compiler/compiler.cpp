// compileProgram: runs the pipeline and assembles the Program.
#include "compiler/compiler.h"

#include <algorithm>
#include <iostream>
#include <optional>
#include <set>

#include "analysis/donation.h"
#include "analysis/donation_specs.h"
#include "backends/backend.h"
#include "compiler/memory.h"
#include "ir/io/weights.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"
#include "passes/codegen.h"
#include "passes/pass_manager.h"
#include "passes/passes.h"
#include "runtime/drivers.h"
#include "target/target.h"

namespace kiln {

namespace {

// The backend that compiles for a device: its driver's executable target's.
Result<const TargetBackend*> backendOf(const DeviceTarget& device) {
  hal::Driver* driver = hal::lookupDriver(device.kind);
  if (!driver)
    return error(Loc::named(device.str()), "unknown device kind '" + device.kind +
                                               "' (available: " + hal::driverNames() + ")");
  const TargetBackend* b = lookupTargetBackend(driver->target());
  if (!b)
    return error(Loc::named(device.str()),
                 driver->target() == "cpu"
                     ? "this kiln was built without LLVM 19, so it has no CPU backend; install "
                       "llvm-19-dev and liblld-19-dev and rebuild"
                     : "this kiln has no compiler backend for target '" + driver->target() + "'");
  return b;
}

Result<DeviceTarget> deviceOf(const std::string& name) {
  return hal::parseDeviceId(name, Loc::named(name));
}

// Whether the module names a device anywhere (declarations, ops, arguments, results).
bool mentionsDevices(const Module& m) {
  if (!m.devices().empty()) return true;
  for (const auto& f : m.funcs()) {
    for (size_t i = 0; i < f->numArgs(); ++i)
      if (f->argDevice(i)) return true;
    for (size_t i = 0; i < f->resultTypes().size(); ++i)
      if (f->resultDevice(i)) return true;
    for (const auto& op : f->ops())
      if (op->device()) return true;
  }
  return false;
}

// Whether some entry still holds tensor ops (a module that is already a schedule, such as
// `kiln compile --emit=schedule` output, has host ops only and is not placed again).
bool needsSchedule(const Module& m, const std::vector<std::string>& entries) {
  for (const std::string& e : entries)
    for (const auto& op : m.lookupFunc(e)->ops())
      if (op->info().level == OpLevel::Host) return false;
  return true;
}

// One backend's share of the module: the devices it compiles for, in order of first use.
struct BackendGroup {
  const TargetBackend* backend;
  std::vector<DeviceTarget> devices;
  BackendOptions options;
};

// Each backend's options: the --target names it accepts (the last wins) and the tiles. A
// name that no backend in use accepts is an error listing what they take.
Status chooseTargets(std::vector<BackendGroup>& groups, const CompileOptions& opts) {
  for (BackendGroup& g : groups) {
    g.options.devices = g.devices;
    g.options.overrides = opts.tileOverrides;
    g.options.textKind = opts.codeTextKind;
    g.options.text = opts.codeText;
  }
  for (const std::string& t : opts.targets) {
    bool taken = false;
    for (BackendGroup& g : groups)
      if (g.backend->acceptsTarget(t)) {
        g.options.target = t;
        if (std::find(g.options.targets.begin(), g.options.targets.end(), t) ==
            g.options.targets.end())
          g.options.targets.push_back(t);
        taken = true;
      }
    if (taken) continue;
    KILN_CHECK(lookupTarget(t)); // a name of no target at all: say which names exist
    std::string takes;
    for (const BackendGroup& g : groups) {
      std::string names = g.backend->targetNames();
      takes += (takes.empty() ? "" : "; ") + g.devices.front().str() +
               (names.empty() ? " takes no codegen target" : " takes " + names);
    }
    return error(Loc::named("target"),
                 "no device of this module compiles for target '" + t + "' (" + takes + ")");
  }
  return ok();
}

// Adds `device` to its backend's group.
Status addDevice(std::vector<BackendGroup>& groups, const DeviceTarget& device) {
  KILN_TRY(const TargetBackend* b, backendOf(device));
  for (BackendGroup& g : groups)
    if (g.backend == b) {
      if (std::find(g.devices.begin(), g.devices.end(), device) == g.devices.end())
        g.devices.push_back(device);
      return ok();
    }
  groups.push_back({b, {device}, {}});
  return ok();
}

// A module that embeds its weights (not --external-weights) holds them in memory before
// codegen, as an imported ONNX model does, so that pack-weights (the one codegen pass that
// reads weight data) stores a .kir's safetensors weights as the cpu micro-kernel reads
// them too. A .kir (bench/run.py's decoder layers) packed B's panels per block and K step
// at run time instead: the TinyLlama layer at prefill 128, alternating rounds, 61 -> 53 ms
// on two threads and 105 -> 78 on one; the Llama-3-8B layer's bf16 weights 502 -> 450 ms
// on one thread, within noise on two. The embedding would read them anyway (the same
// storage); a weight that cannot be read is left to it, and it reports the error.
void holdWeights(Module& m) {
  WeightStore store(m);
  for (const auto& f : m.funcs())
    for (const auto& op : f->ops()) {
      if (op->kind() != OpKind::Weight) continue;
      const std::string& name = op->attrs().getStr("name");
      const WeightDecl* decl = m.lookupWeight(name);
      if (!decl || decl->shard || m.weightData(name)) continue;
      Result<HostTensor> data = store.get(name);
      if (data.ok()) m.setWeightData(name, data.take());
    }
}

// Runs each backend's codegen pipeline over the ops of its devices (every op when the module
// was not placed: then it all runs on the one device of the one group).
Status runCodegen(Module& m, const std::vector<BackendGroup>& groups, bool placed,
                  CompileTimer* timer) {
  for (const BackendGroup& g : groups) {
    ScopedPhase phase(timer, "codegen " + g.backend->name());
    PassManagerOptions pmo;
    pmo.timer = timer;
    PassManager pm(pmo);
    KILN_CHECK(g.backend->addCodegenPasses(pm, g.options,
                                           placed ? g.devices : std::vector<DeviceTarget>{}));
    KILN_CHECK(pm.run(m, std::cerr));
  }
  return ok();
}

} // namespace

std::string defaultDeviceName() {
  if (lookupTargetBackend("cpu") && hal::lookupDriver("cpu")) return "cpu[0]";
  return "ref[0]";
}

Result<Program> compileProgram(std::unique_ptr<Module> module, const CompileOptions& opts) {
  const PlacementOptions& po = opts.placement;
  std::string defaultDevice = defaultDeviceName();
  for (size_t i = 0; i < po.devices.devices.size(); ++i) {
    KILN_TRY(hal::DeviceId id, hal::parseDeviceId(po.devices.devices[i], Loc::named("device")));
    if (i == 0) defaultDevice = id.str();
  }
  CompileTimer* timer = opts.timer;
  KILN_CHECK(applyDonations(*module, opts.donate));
  {
    ScopedPhase phase(timer, "verify input");
    KILN_CHECK(verifyModule(*module));
  }
  Program p;
  std::set<std::string> kernelNames = kernelFunctions(*module);
  for (const auto& f : module->funcs())
    if (!kernelNames.count(f->name())) p.entries.push_back(f->name());
  bool schedule = needsSchedule(*module, p.entries);
  if (schedule && opts.recognizeAttention) {
    KILN_CHECK(createShapeInferPass()->run(*module));
    KILN_CHECK(createAttentionPass()->run(*module));
  }
  // Exact identities and constant folding before placement and codegen: an exported layer
  // norm's pow(x, 2) becomes x * x (ViT-B/16's 25 variance kernels called powf per element,
  // 0.9 ms each on one thread).
  if (schedule) {
    ScopedPhase phase(timer, "canonicalize");
    KILN_CHECK(createShapeInferPass()->run(*module));
    KILN_CHECK(createCanonicalizePass()->run(*module));
  }
  bool placed = schedule && (po.devices.devices.size() > 1 || po.devices.autoDeclare ||
                             !po.place.empty() || po.stages || po.tensor > 1 || !po.shard.empty() ||
                             po.affinity || mentionsDevices(*module));
  std::optional<ScopedPhase> placing;
  placing.emplace(timer, placed ? "placement" : "shape-infer");
  if (placed) {
    PlacementOptions withAffinity = po;
    withAffinity.affinity = true;
    // Placing needs a declared device: the default one, unless something declares some.
    if (po.devices.devices.empty() && !po.devices.autoDeclare && module->devices().empty())
      withAffinity.devices.devices.push_back(defaultDevice);
    KILN_CHECK(placeModule(*module, withAffinity,
                           [](Module& m) { return createShapeInferPass()->run(m); }));
    if (!module->devices().empty()) defaultDevice = module->devices().front().target.str();
  } else {
    KILN_CHECK(createShapeInferPass()->run(*module));
  }
  if (opts.afterPlacement) KILN_CHECK(opts.afterPlacement(*module));
  // Every donation can be written in place (fuse and schedule rely on it).
  if (schedule)
    for (const std::string& e : p.entries) KILN_CHECK(analyzeDonations(*module->lookupFunc(e)));
  placing.reset();

  // The backends of the devices the ops run on, in order of first use.
  std::vector<BackendGroup> groups;
  KILN_TRY(DeviceTarget fallback, deviceOf(defaultDevice));
  if (placed) {
    for (const std::string& e : p.entries)
      for (const auto& op : module->lookupFunc(e)->ops())
        if (op->device()) KILN_CHECK(addDevice(groups, *op->device()));
  }
  if (groups.empty()) KILN_CHECK(addDevice(groups, fallback));
  KILN_CHECK(chooseTargets(groups, opts));
  // A module that is already a schedule keeps its kernels as they are.
  if (schedule && opts.embedWeights) holdWeights(*module);
  if (schedule) KILN_CHECK(runCodegen(*module, groups, placed, timer));

  {
    ScopedPhase phase(timer, "schedule");
    ScheduleOptions so;
    so.device = defaultDevice;
    KILN_CHECK(createSchedulePass(so)->run(*module));
  }
  {
    ScopedPhase phase(timer, "verify schedule");
    KILN_CHECK(verifyModule(*module));
  }

  // Devices in order of first use; the kernels each backend's devices launch.
  std::map<const TargetBackend*, std::set<std::string>> launched;
  std::vector<const TargetBackend*> order;
  for (const std::string& e : p.entries)
    for (const auto& op : module->lookupFunc(e)->ops()) {
      if (!op->attrs().has("device")) continue;
      std::string d = op->attrs().getStr("device");
      KILN_TRY(DeviceTarget device, deviceOf(d));
      KILN_TRY(const TargetBackend* b, backendOf(device));
      if (std::find(p.devices.begin(), p.devices.end(), d) == p.devices.end())
        p.devices.push_back(d);
      if (std::find(order.begin(), order.end(), b) == order.end()) order.push_back(b);
      if (op->kind() == OpKind::Launch) launched[b].insert(op->attrs().getStr("kernel"));
    }
  if (order.empty()) order.push_back(groups.front().backend);
  // Declared devices keep their declaration order (MPI ranks take them in this order, so
  // rank r holds tensor-parallel group r); others follow in order of first use.
  std::stable_sort(p.devices.begin(), p.devices.end(),
                   [&](const std::string& a, const std::string& b) {
                     auto rank = [&](const std::string& d) {
                       const auto& decls = module->devices();
                       for (size_t i = 0; i < decls.size(); ++i)
                         if (decls[i].target.str() == d) return i;
                       return decls.size();
                     };
                     return rank(a) < rank(b);
                   });

  {
    ScopedPhase phase(timer, "memory analysis");
    for (const std::string& e : p.entries) {
      KILN_TRY(FunctionStats s, analyzeMemory(*module->lookupFunc(e), module->symbols()));
      p.stats.push_back(std::move(s));
    }
  }
  // Each backend's executable holds the kernels its devices launch (in module order); a
  // backend whose executables hold compiled code only (cpu) hands the kernels it could not
  // lower to the ref executable, which its devices load beside their own.
  std::map<const TargetBackend*, std::vector<const Func*>> kernelsOf;
  const TargetBackend* ref = lookupTargetBackend("ref");
  std::vector<const TargetBackend*> users = order;
  KernelCache cache(opts.cache);
  for (const auto& f : module->funcs())
    for (const TargetBackend* b : users) {
      if (!launched[b].count(f->name())) continue;
      const TargetBackend* to = b->runsTensorKernels() || isLoweredKernel(*f) ? b : ref;
      if (std::find(order.begin(), order.end(), to) == order.end()) order.push_back(to);
      std::vector<const Func*>& v = kernelsOf[to];
      if (std::find(v.begin(), v.end(), f.get()) == v.end()) v.push_back(f.get());
    }
  for (const TargetBackend* b : order) {
    // A backend left without kernels needs no executable, unless no backend has any.
    auto it = kernelsOf.find(b);
    if (it == kernelsOf.end() && (!kernelsOf.empty() || b != order.front())) continue;
    BackendOptions bo;
    for (const BackendGroup& g : groups)
      if (g.backend == b) bo = g.options;
    bo.timer = timer;
    bo.jobs = opts.jobs;
    bo.optLevel = opts.optLevel;
    bo.cache = &cache;
    ScopedPhase phase(timer, "executable " + b->name());
    KILN_TRY(
        std::string payload,
        b->serialize(*module, it == kernelsOf.end() ? std::vector<const Func*>{} : it->second, bo));
    p.executables.push_back({b->name(), std::move(payload)});
  }

  ScopedPhase weights(timer, "weights");
  WeightStore store(*module);
  for (const auto& f : module->funcs())
    for (const auto& op : f->ops()) {
      if (op->kind() != OpKind::LoadWeight) continue;
      std::string name = op->attrs().getStr("name");
      // Weights held in memory (an imported model's) have no file to reference.
      if (p.embeddedWeights.count(name) || (!opts.embedWeights && !module->weightData(name)))
        continue;
      KILN_TRY(HostTensor t, store.get(name));
      p.embeddedWeights[name] = t;
    }
  p.host = std::move(module);
  return p;
}

std::string printSchedule(const Program& p) {
  std::string out;
  for (const FunctionStats& s : p.stats) {
    out += "// @" + s.name + ": " + std::to_string(s.dispatches) + " dispatches, peak memory " +
           std::to_string(s.peakBytes) + " bytes, sum of tensors " + std::to_string(s.totalBytes) +
           " bytes";
    if (!s.boundAt.empty()) out += " (at " + s.boundAt + ")";
    out += "\n//   peak = " + s.peakExpr + "\n//   sum  = " + s.totalExpr + "\n";
  }
  // One module, host functions first then the kernels: it parses back, and `kiln run`
  // runs it as it is (launched kernels are not scheduled again).
  std::string targets;
  for (const ExecutableImage& e : p.executables)
    targets += (targets.empty() ? "" : ", ") + e.target;
  out += "// kernels for target " + targets + ": the functions that launches name\n\n";
  out += printModule(*p.host);
  return out;
}

} // namespace kiln
