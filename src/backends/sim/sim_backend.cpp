// The sim backend (see sim_backend.h).
#include "backends/sim/sim_backend.h"

#include "passes/passes.h"

namespace kiln {

namespace {

class SimBackend : public TargetBackend {
public:
  const std::string& name() const override {
    static const std::string n = "sim";
    return n;
  }
  bool acceptsTarget(const std::string& target) const override { return lookupTarget(target).ok(); }
  bool runsTensorKernels() const override { return true; }
  std::string targetNames() const override {
    std::string s;
    for (const std::string& n : kiln::targetNames()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }
  Status addCodegenPasses(PassManager& pm, const BackendOptions& o,
                          const std::vector<DeviceTarget>& devices) const override {
    CodegenOptions c;
    KILN_TRY(c.target, lookupTarget(o.target.empty() ? "cpu" : o.target));
    c.overrides = o.overrides;
    c.devices = devices;
    kiln::addCodegenPasses(pm, c);
    return ok();
  }
  Result<std::string> serialize(const Module& m, const std::vector<const Func*>& kernels,
                                const BackendOptions&) const override {
    return kernelIrText(m, kernels);
  }
};

} // namespace

const TargetBackend* simBackend() {
  static const SimBackend b;
  return &b;
}

} // namespace kiln
