// compileProgram: runs the pipeline and assembles the Program.
#include "compiler/compiler.h"

#include "passes/pass_manager.h"

#include <algorithm>
#include <iostream>
#include <set>

#include "backends/target.h"
#include "compiler/donation.h"
#include "compiler/memory.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "ir/weights.h"
#include "passes/codegen.h"
#include "passes/donate.h"
#include "passes/pass_manager.h"
#include "passes/passes.h"
#include "runtime/drivers.h"
#ifdef KILN_HAVE_LLVM
#include "backends/cpu/cpu_backend.h"
#endif

namespace kiln {

namespace {

// A device's executable target: its driver's, when the driver is built in.
Result<std::string> targetOf(const std::string& device) {
  KILN_TRY(hal::DeviceId id, hal::parseDeviceId(device, Loc::named(device)));
  hal::Driver* driver = hal::lookupDriver(id.kind);
  if (!driver)
    return error(Loc::named("--device"),
                 "unknown device kind '" + id.kind + "' (available: " + hal::driverNames() + ")");
  return driver->target();
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

// Runs the codegen pipeline for a device that runs kernel IR: sim on the current codegen
// target, cpu on the description of its CPU target.
Status lowerForDevice(Module& module, bool cpu, const std::string& cpuTarget) {
  CodegenContext& cg = codegenContext();
  CodegenContext saved = cg;
  if (cpu) {
#ifdef KILN_HAVE_LLVM
    KILN_TRY(cg.target, cpu::cpuCodegenTarget(cpuTarget));
#else
    (void)cpuTarget;
#endif
  }
  PassManager codegen;
  Status s = codegen.addPipeline("fuse,collapse-dims,tile,pad,lower");
  if (s.ok()) s = codegen.run(module, std::cerr);
  cg = saved;
  return s;
}

// The payload of the cpu executable: the lowered kernels as code.
Result<std::string> cpuExecutable(const Module& m, const std::vector<const Func*>& kernels,
                                  const CompileOptions& opts) {
#ifdef KILN_HAVE_LLVM
  cpu::CpuOutput out = opts.cpuTextKind == "llvm"  ? cpu::CpuOutput::LlvmIr
                       : opts.cpuTextKind == "asm" ? cpu::CpuOutput::Assembly
                                                   : cpu::CpuOutput::Executable;
  KILN_TRY(cpu::CpuCompiled c, cpu::compileCpuKernels(m, kernels, opts.cpuTarget, out));
  if (opts.cpuText) *opts.cpuText = c.text;
  return cpu::serializeCpuPayload(c.payload);
#else
  (void)m, (void)kernels, (void)opts;
  return error(Loc::named("--device"),
               "this kiln was built without LLVM 19, so it has no CPU "
               "backend; install llvm-19-dev and liblld-19-dev and rebuild");
#endif
}

} // namespace

std::string defaultDeviceName() {
#ifdef KILN_HAVE_LLVM
  if (hal::lookupDriver("cpu")) return "cpu[0]";
#endif
  return "ref[0]";
}

Result<Program> compileProgram(std::unique_ptr<Module> module, const CompileOptions& opts) {
  const PlacementOptions& po = opts.placement;
  std::string defaultDevice = defaultDeviceName();
  for (size_t i = 0; i < po.devices.devices.size(); ++i) {
    KILN_TRY(hal::DeviceId id, hal::parseDeviceId(po.devices.devices[i], Loc::named("--device")));
    if (i == 0) defaultDevice = id.str();
  }
  KILN_CHECK(applyDonations(*module, opts.donate));
  KILN_CHECK(verifyModule(*module));
  Program p;
  std::set<std::string> kernelNames = kernelFunctions(*module);
  for (const auto& f : module->funcs())
    if (!kernelNames.count(f->name())) p.entries.push_back(f->name());
  bool schedule = needsSchedule(*module, p.entries);
  bool placed =
      schedule && (po.devices.devices.size() > 1 || po.devices.autoDeclare || !po.place.empty() ||
                   po.stages || po.affinity || mentionsDevices(*module));
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
  bool sim = defaultDevice.starts_with("sim[");
  bool cpu = defaultDevice.starts_with("cpu[");
  // A module that is already a schedule keeps its kernels as they are.
  if ((sim || cpu) && schedule) {
    // The simulator and the CPU run kernel IR: form dispatches and lower them.
    if (placed)
      return error(Loc::named("--device"), "the " + std::string(sim ? "sim" : "cpu") +
                                               " device runs a module on its own; it cannot be "
                                               "combined with other devices or placement yet");
    KILN_CHECK(lowerForDevice(*module, cpu, opts.cpuTarget));
  }
  ScheduleOptions so;
  so.device = defaultDevice;
  KILN_CHECK(createSchedulePass(so)->run(*module));
  KILN_CHECK(verifyModule(*module));

  // Devices in order of first use; one executable per target they need.
  std::set<std::string> targets;
  std::vector<std::string> targetOrder;
  for (const std::string& e : p.entries)
    for (const auto& op : module->lookupFunc(e)->ops()) {
      if (!op->attrs().has("device")) continue;
      std::string d = op->attrs().getStr("device");
      if (std::find(p.devices.begin(), p.devices.end(), d) != p.devices.end()) continue;
      p.devices.push_back(d);
      KILN_TRY(std::string target, targetOf(d));
      if (targets.insert(target).second) targetOrder.push_back(target);
    }
  if (targetOrder.empty()) {
    KILN_TRY(std::string target, targetOf(defaultDevice));
    targetOrder.push_back(target);
  }

  std::set<std::string> entries(p.entries.begin(), p.entries.end());
  for (const std::string& e : p.entries) {
    KILN_TRY(FunctionStats s, analyzeMemory(*module->lookupFunc(e), module->symbols()));
    p.stats.push_back(std::move(s));
  }
  // A target's executable holds every kernel as IR text, except cpu's: its lowered kernels
  // are code, and the ones the backend could not lower go into a `ref` executable (IR text,
  // run by the interpreter) that the cpu device loads beside it.
  PrintOptions kernels;
  kernels.locs = true;
  for (const std::string& target : targetOrder) {
    if (target != "cpu") {
      kernels.funcFilter = [&](const Func& f) { return entries.count(f.name()) == 0; };
      p.executables.push_back({target, printModule(*module, kernels)});
      continue;
    }
    std::vector<const Func*> lowered;
    bool interpreted = false;
    for (const auto& f : module->funcs()) {
      if (entries.count(f->name())) continue;
      if (isLoweredKernel(*f))
        lowered.push_back(f.get());
      else
        interpreted = true;
    }
    KILN_TRY(std::string payload, cpuExecutable(*module, lowered, opts));
    if (!lowered.empty() || !interpreted) p.executables.push_back({target, std::move(payload)});
    if (!interpreted || targets.count("ref")) continue;
    kernels.funcFilter = [&](const Func& f) {
      return !entries.count(f.name()) && !isLoweredKernel(f);
    };
    p.executables.push_back({"ref", printModule(*module, kernels)});
  }

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
