// The vulkan backend (see vulkan_backend.h).
#include "backends/vulkan/vulkan_backend.h"

#include "backends/spirv/spirv_backend.h"
#include "passes/passes.h"
#ifdef KILN_HAVE_VULKAN
#include "runtime/vulkan/vulkan.h"
#endif

namespace kiln::spirv {

namespace {

bool isVulkanTargetName(const std::string& name) {
  return name.rfind("vulkan:", 0) == 0 && lookupTarget(name).ok();
}

#ifdef KILN_HAVE_VULKAN
// The live device's limits over the table row its name matches, or an error when the device
// cannot be opened.
Result<TargetDesc> liveTarget(int64_t ordinal) {
  KILN_TRY(std::shared_ptr<hal::vulkan::Instance> inst, hal::vulkan::Instance::get());
  if (ordinal < 0 || size_t(ordinal) >= inst->devices().size())
    return error(Loc::named("vulkan[" + std::to_string(ordinal) + "]"), "no such device");
  hal::vulkan::DeviceProps p =
      hal::vulkan::queryDevice(inst->api(), inst->devices()[size_t(ordinal)]);
  std::string name = p.props.deviceName;
  std::string row = name.find("llvmpipe") != std::string::npos ? "vulkan:lavapipe"
                    : p.props.vendorID == 0x10de               ? "vulkan:nvidia-sm90"
                                                               : "vulkan:generic";
  KILN_TRY(TargetDesc base, lookupTarget(row));
  const VkPhysicalDeviceLimits& l = p.props.limits;
  TargetDesc live;
  live.sharedMemoryBytes = l.maxComputeSharedMemorySize;
  live.maxWorkgroupInvocations = l.maxComputeWorkGroupInvocations;
  for (int i = 0; i < 3; ++i) {
    live.maxWorkgroupSize[i] = l.maxComputeWorkGroupSize[i];
    live.maxWorkgroupCount[i] = l.maxComputeWorkGroupCount[i];
  }
  if (p.vk11.subgroupSize) live.subgroupSizes = {int64_t(p.vk11.subgroupSize)};
  live.maxStorageBufferRange = l.maxStorageBufferRange;
  live.preferredVectorBits = 0; // keep the row's
  TargetDesc t = withDeviceLimits(base, live);
  t.name = row + " (vulkan[" + std::to_string(ordinal) + "]: " + name + ")";
  return t;
}
#endif

class VulkanBackend : public TargetBackend {
public:
  const std::string& name() const override {
    static const std::string n = "vulkan";
    return n;
  }
  bool acceptsTarget(const std::string& target) const override {
    return isVulkanTargetName(target);
  }
  bool runsTensorKernels() const override { return false; }
  std::string targetNames() const override {
    std::string s;
    for (const std::string& n : kiln::targetNames())
      if (isVulkanTargetName(n)) s += (s.empty() ? "" : ", ") + n;
    return s;
  }
  Status addCodegenPasses(PassManager& pm, const BackendOptions& o,
                          const std::vector<DeviceTarget>& devices) const override {
    CodegenOptions c;
    KILN_TRY(c.target, vulkanCodegenTarget(o.target, o.devices));
    c.overrides = o.overrides;
    c.devices = devices;
    kiln::addCodegenPasses(pm, c);
    return ok();
  }
  Result<std::string> serialize(const Module& m, const std::vector<const Func*>& kernels,
                                const BackendOptions& o) const override {
    SpirvTarget target;
    KILN_TRY(target.desc, vulkanCodegenTarget(o.target, o.devices));
    vulkan::VulkanPayload payload;
    std::string text;
    for (const Func* k : kernels) {
      if (!isLoweredKernel(*k))
        return error(k->loc(), "internal: the vulkan backend was given the tensor-level kernel @" +
                                   k->name());
      KILN_TRY(vulkan::VulkanKernelInfo info, emitSpirvKernel(*k, m.symbols(), target));
      if (o.textKind == "spirv") {
        KILN_TRY(std::string dis, disassembleSpirv(info.spirv));
        text += "; kernel @" + k->name() + "\n" + dis + "\n";
      }
      payload.kernels.push_back(std::move(info));
    }
    if (o.textKind == "spirv" && o.text) *o.text += text;
    return vulkan::serializeVulkanPayload(payload);
  }
};

} // namespace

Result<TargetDesc> vulkanCodegenTarget(const std::string& name,
                                       const std::vector<DeviceTarget>& devices) {
  if (!name.empty()) return lookupTarget(name);
#ifdef KILN_HAVE_VULKAN
  if (!devices.empty()) {
    Result<TargetDesc> live = liveTarget(devices.front().ordinal);
    if (live.ok()) return live;
  }
#else
  (void)devices;
#endif
  return lookupTarget("vulkan:generic");
}

const TargetBackend* vulkanBackend() {
  static const VulkanBackend b;
  return &b;
}

} // namespace kiln::spirv
