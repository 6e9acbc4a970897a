// CpuExecutable: parses the payload, refuses code that needs CPU features this host lacks,
// loads the shared object and resolves every kernel's entry point. No IR is involved.
#include <algorithm>

#include "runtime/cpu/cpu.h"

namespace kiln::hal::cpu {

namespace {

const Loc& where() {
  static const Loc loc = Loc::named("<cpu executable>");
  return loc;
}

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
  if (p.kernels.empty()) return exe;
  if (p.sharedObject.empty()) return error(where(), "the payload has kernels but no code");
  KILN_TRY(exe->code_, SharedObject::load(p.sharedObject, where()));
  for (const kiln::cpu::CpuKernelInfo& k : p.kernels) {
    KILN_TRY(void* sym, exe->code_->symbol(k.symbol, where()));
    exe->entries_.push_back(reinterpret_cast<KilnCpuKernelFn>(sym));
  }
  return exe;
}

} // namespace kiln::hal::cpu
