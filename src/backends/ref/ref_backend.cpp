// The ref backend (see ref_backend.h).
#include "backends/ref/ref_backend.h"

namespace kiln {

namespace {

class RefBackend : public TargetBackend {
public:
  const std::string& name() const override {
    static const std::string n = "ref";
    return n;
  }
  bool acceptsTarget(const std::string&) const override { return false; }
  bool runsTensorKernels() const override { return true; }
  std::string targetNames() const override { return ""; }
  Status addCodegenPasses(PassManager&, const BackendOptions&,
                          const std::vector<DeviceTarget>&) const override {
    return ok();
  }
  Result<std::string> serialize(const Module& m, const std::vector<const Func*>& kernels,
                                const BackendOptions&) const override {
    return kernelIrText(m, kernels);
  }
};

} // namespace

const TargetBackend* refBackend() {
  static const RefBackend b;
  return &b;
}

} // namespace kiln
