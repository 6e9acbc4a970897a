// CpuExecutable: parses the payload, refuses code that needs CPU features this host lacks,
// parses the kernels' IR, loads the shared object and resolves every lowered kernel's entry
// point.
#include <algorithm>

#include "runtime/cpu/cpu.h"

namespace kiln::hal::cpu {

namespace {

const Loc& where() {
  static const Loc loc = Loc::named("<cpu executable>");
  return loc;
}

bool isLoweredKernel(const Func& f) { return f.numArgs() > 0 && f.arg(0)->type().isBuffer(); }

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

// Every feature must be one the runtime can check, and present.
Status checkFeatures(const kiln::cpu::CpuPayload& p) {
  const auto& checkable = kiln::cpu::checkableCpuFeatures();
  std::vector<std::string> unknown, missing;
  for (const std::string& f : p.features) {
    if (std::find(checkable.begin(), checkable.end(), f) == checkable.end())
      unknown.push_back(f);
    else if (!kiln::cpu::hostHasCpuFeature(f))
      missing.push_back(f);
  }
  std::string cpu = p.cpu.empty() ? "an unnamed CPU" : p.cpu;
  if (!unknown.empty())
    return error(where(), "this module's CPU code was compiled for " + cpu + " and needs " +
                              joined(unknown) + ", which this runtime cannot check on the host" +
                              "; recompile it with this version of kiln");
  if (!missing.empty())
    return error(where(), "this module's CPU code was compiled for " + cpu + " and needs " +
                              joined(missing) +
                              ", which this CPU lacks; recompile with --target=cpu or a lower "
                              "level such as --target=cpu:x86-64-v3");
  return ok();
}

} // namespace

Result<std::unique_ptr<CpuExecutable>> CpuExecutable::load(const std::string& payload) {
  auto exe = std::make_unique<CpuExecutable>();
  KILN_TRY(exe->payload_, kiln::cpu::parseCpuPayload(payload));
  const kiln::cpu::CpuPayload& p = exe->payload_;
  KILN_CHECK(checkFeatures(p));
  KILN_CHECK(exe->parse("cpu", p.ir));
  if (p.kernels.size() != exe->numKernels())
    return error(where(), "the payload describes " + std::to_string(p.kernels.size()) +
                              " kernels but its IR has " + std::to_string(exe->numKernels()));
  bool anyLowered = false;
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const kiln::cpu::CpuKernelInfo& k = p.kernels[i];
    const Func& f = exe->kernel(i);
    if (k.name != f.name())
      return error(where(), "kernel " + std::to_string(i) + " is @" + f.name() +
                                " in the IR but '" + k.name + "' in the payload");
    // Kernel IR without compiled code is allowed: the device simulates it (slowly).
    if (k.lowered && !isLoweredKernel(f))
      return error(where(), "kernel @" + f.name() + " is marked lowered but is tensor-level");
    anyLowered = anyLowered || k.lowered;
  }
  exe->entries_.assign(p.kernels.size(), nullptr);
  if (!anyLowered) return exe;
  if (p.sharedObject.empty())
    return error(where(), "the payload has lowered kernels but no compiled code");
  KILN_TRY(exe->code_, SharedObject::load(p.sharedObject, where()));
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    if (!p.kernels[i].lowered) continue;
    KILN_TRY(void* sym, exe->code_->symbol(p.kernels[i].symbol, where()));
    exe->entries_[i] = reinterpret_cast<KilnCpuKernelFn>(sym);
  }
  return exe;
}

Result<sim::Grid> CpuExecutable::grid(size_t kernel, const SymbolBinding& dims) const {
  auto key = std::make_pair(kernel, dims);
  {
    std::lock_guard<std::mutex> lock(gridMu_);
    if (auto it = grids_.find(key); it != grids_.end()) return it->second;
  }
  KILN_TRY(sim::Grid g, sim::kernelGrid(this->kernel(kernel), dims));
  std::lock_guard<std::mutex> lock(gridMu_);
  constexpr size_t kMaxRemembered = 4096; // bindings vary with sequence lengths; stay bounded
  if (grids_.size() >= kMaxRemembered) grids_.clear();
  grids_.emplace(std::move(key), g);
  return g;
}

} // namespace kiln::hal::cpu
