// VulkanExecutable: parses the payload, checks every kernel against the live device (limits the
// SPIR-V validator cannot see, capabilities, extensions, SPIR-V version) and refuses with one
// error per kernel that names each thing it needs and the device lacks; then builds every
// pipeline once, through the on-disk pipeline cache.
#include <xxhash.h>

#include <algorithm>
#include <functional>

#include "runtime/vulkan/pipeline_cache.h"
#include "runtime/vulkan/vulkan.h"

namespace kiln::hal::vulkan {

namespace {

using kiln::vulkan::VulkanKernelInfo;

struct CapabilityCheck {
  uint32_t capability;
  std::function<bool(const DeviceProps&)> offered;
  const char* feature; // what the device must report
};

// Capabilities a kernel may declare, and the device feature each needs (device.cpp enables
// every one the device has).
const std::vector<CapabilityCheck>& capabilityChecks() {
  auto subgroupOp = [](VkSubgroupFeatureFlags op) {
    return [op](const DeviceProps& d) {
      return (d.vk11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
             (d.vk11.subgroupSupportedOperations & op) == op;
    };
  };
  static const std::vector<CapabilityCheck> checks = {
      {1, [](const DeviceProps&) { return true; }, "Vulkan"},
      {9, [](const DeviceProps& d) { return d.features12.shaderFloat16 != 0; }, "shaderFloat16"},
      {10, [](const DeviceProps& d) { return d.features.features.shaderFloat64 != 0; },
       "shaderFloat64"},
      {11, [](const DeviceProps& d) { return d.features.features.shaderInt64 != 0; },
       "shaderInt64"},
      {12, [](const DeviceProps& d) { return d.features12.shaderBufferInt64Atomics != 0; },
       "shaderBufferInt64Atomics"},
      {22, [](const DeviceProps& d) { return d.features.features.shaderInt16 != 0; },
       "shaderInt16"},
      {39, [](const DeviceProps& d) { return d.features12.shaderInt8 != 0; }, "shaderInt8"},
      {61, subgroupOp(VK_SUBGROUP_FEATURE_BASIC_BIT), "subgroup operations (basic) in compute"},
      {62, subgroupOp(VK_SUBGROUP_FEATURE_VOTE_BIT), "subgroup vote operations in compute"},
      {63, subgroupOp(VK_SUBGROUP_FEATURE_ARITHMETIC_BIT),
       "subgroup arithmetic operations in compute"},
      {64, subgroupOp(VK_SUBGROUP_FEATURE_BALLOT_BIT), "subgroup ballot operations in compute"},
      {65, subgroupOp(VK_SUBGROUP_FEATURE_SHUFFLE_BIT), "subgroup shuffle operations in compute"},
      {66, subgroupOp(VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT),
       "subgroup relative shuffles in compute"},
      {67, subgroupOp(VK_SUBGROUP_FEATURE_CLUSTERED_BIT),
       "clustered subgroup operations in compute"},
      {68, subgroupOp(VK_SUBGROUP_FEATURE_QUAD_BIT), "subgroup quad operations in compute"},
      {4433, [](const DeviceProps& d) { return d.features11.storageBuffer16BitAccess != 0; },
       "storageBuffer16BitAccess"},
      {4448, [](const DeviceProps& d) { return d.features12.storageBuffer8BitAccess != 0; },
       "storageBuffer8BitAccess"},
      // Kernels keep IEEE NaN, infinities and signed zeros in 32-bit floats (and in 64-bit
      // ones where they use them; checked below).
      {4466, [](const DeviceProps& d) { return d.vk12.shaderSignedZeroInfNanPreserveFloat32 != 0; },
       "shaderSignedZeroInfNanPreserveFloat32"},
      {5345, [](const DeviceProps& d) { return d.features12.vulkanMemoryModel != 0; },
       "vulkanMemoryModel"},
      {5346, [](const DeviceProps& d) { return d.features12.vulkanMemoryModelDeviceScope != 0; },
       "vulkanMemoryModelDeviceScope"},
  };
  return checks;
}

// SPIR-V extensions a kernel may declare: all are core in Vulkan 1.2, which kiln requires;
// what they allow is checked through the capabilities above.
bool knownExtension(const std::string& e) {
  static const char* const known[] = {
      "SPV_KHR_storage_buffer_storage_class", "SPV_KHR_16bit_storage",  "SPV_KHR_8bit_storage",
      "SPV_KHR_vulkan_memory_model",          "SPV_KHR_float_controls", "SPV_KHR_shader_ballot"};
  for (const char* k : known)
    if (e == k) return true;
  return false;
}

// The newest SPIR-V version a device of this Vulkan version consumes.
uint32_t maxSpirvVersion(uint32_t api) {
  if (api >= VK_API_VERSION_1_3) return 0x00010600;
  if (api >= VK_API_VERSION_1_2) return 0x00010500;
  if (api >= VK_API_VERSION_1_1) return 0x00010300;
  return 0x00010000;
}

std::string spirvVersion(uint32_t v) {
  return std::to_string((v >> 16) & 0xff) + "." + std::to_string((v >> 8) & 0xff);
}

// Everything kernel `k` needs that the device lacks, one phrase each.
std::vector<std::string> missing(const VulkanDevice& dev, const VulkanKernelInfo& k,
                                 uint32_t pushBytes, uint32_t spirvVersionWord) {
  const DeviceProps& d = dev.props();
  const VkPhysicalDeviceLimits& l = d.props.limits;
  std::vector<std::string> out;
  auto n = [](uint64_t v) { return std::to_string(v); };
  if (k.sharedMemoryBytes > l.maxComputeSharedMemorySize)
    out.push_back(n(k.sharedMemoryBytes) + " bytes of shared memory (the device has " +
                  n(l.maxComputeSharedMemorySize) + ", maxComputeSharedMemorySize)");
  uint64_t invocations = uint64_t(k.workgroupSize[0]) * k.workgroupSize[1] * k.workgroupSize[2];
  for (int i = 0; i < 3; ++i)
    if (k.workgroupSize[i] > l.maxComputeWorkGroupSize[i])
      out.push_back("a workgroup of " + n(k.workgroupSize[i]) + " along axis " + n(i) +
                    " (the device allows " + n(l.maxComputeWorkGroupSize[i]) +
                    ", maxComputeWorkGroupSize)");
  if (invocations > l.maxComputeWorkGroupInvocations)
    out.push_back(n(invocations) + " invocations per workgroup (the device allows " +
                  n(l.maxComputeWorkGroupInvocations) + ", maxComputeWorkGroupInvocations)");
  if (uint32_t sg = k.requiredSubgroupSize) {
    const auto& sc = d.subgroupControl;
    if (!d.subgroupControlFeatures.subgroupSizeControl ||
        !(sc.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT))
      out.push_back("subgroup size " + n(sg) + " (the device cannot require a subgroup size, " +
                    "subgroupSizeControl; its size is " + n(d.vk11.subgroupSize) + ")");
    else if (sg < sc.minSubgroupSize || sg > sc.maxSubgroupSize)
      out.push_back("subgroup size " + n(sg) + " (the device offers " + n(sc.minSubgroupSize) +
                    (sc.minSubgroupSize == sc.maxSubgroupSize ? std::string()
                                                              : " to " + n(sc.maxSubgroupSize)) +
                    ")");
    if (sc.maxComputeWorkgroupSubgroups &&
        invocations > uint64_t(sg) * sc.maxComputeWorkgroupSubgroups)
      out.push_back(n(invocations / sg) + " subgroups of " + n(sg) + " per workgroup (the " +
                    "device allows " + n(sc.maxComputeWorkgroupSubgroups) +
                    ", maxComputeWorkgroupSubgroups)");
    if (k.fullSubgroups && !d.subgroupControlFeatures.computeFullSubgroups)
      out.push_back("full subgroups (computeFullSubgroups)");
    if (k.fullSubgroups && k.workgroupSize[0] % sg != 0)
      out.push_back("full subgroups of " + n(sg) + " with a workgroup width of " +
                    n(k.workgroupSize[0]) + ", not a multiple of it");
  }
  if (k.bindings.size() > l.maxPerStageDescriptorStorageBuffers)
    out.push_back(n(k.bindings.size()) + " storage buffers (the device allows " +
                  n(l.maxPerStageDescriptorStorageBuffers) +
                  ", maxPerStageDescriptorStorageBuffers)");
  for (size_t i = 0; i < k.bindings.size(); ++i)
    if (k.bindings[i].maxBytes > l.maxStorageBufferRange)
      out.push_back("binding " + n(i) + " of up to " + n(k.bindings[i].maxBytes) +
                    " bytes (one binding may address " + n(l.maxStorageBufferRange) +
                    ", maxStorageBufferRange)");
  if (pushBytes > l.maxPushConstantsSize)
    out.push_back(n(pushBytes) + " bytes of push constants (the device allows " +
                  n(l.maxPushConstantsSize) + ", maxPushConstantsSize)");
  if (spirvVersionWord > maxSpirvVersion(d.props.apiVersion))
    out.push_back("SPIR-V " + spirvVersion(spirvVersionWord) + " (the device's Vulkan " +
                  n(VK_API_VERSION_MAJOR(d.props.apiVersion)) + "." +
                  n(VK_API_VERSION_MINOR(d.props.apiVersion)) + " reads up to SPIR-V " +
                  spirvVersion(maxSpirvVersion(d.props.apiVersion)) + ")");
  for (uint32_t cap : k.capabilities) {
    const CapabilityCheck* check = nullptr;
    for (const CapabilityCheck& c : capabilityChecks())
      if (c.capability == cap) check = &c;
    if (!check)
      out.push_back("capability " + kiln::vulkan::capabilityName(cap) +
                    " (this runtime does not enable it)");
    else if (!check->offered(d))
      out.push_back("capability " + kiln::vulkan::capabilityName(cap) + " (device feature " +
                    check->feature + ")");
  }
  auto declares = [&](uint32_t cap) {
    return std::find(k.capabilities.begin(), k.capabilities.end(), cap) != k.capabilities.end();
  };
  if (declares(4466) && declares(10) && !d.vk12.shaderSignedZeroInfNanPreserveFloat64)
    out.push_back("capability SignedZeroInfNanPreserve for 64-bit floats (device property "
                  "shaderSignedZeroInfNanPreserveFloat64)");
  for (const std::string& e : k.extensions)
    if (!knownExtension(e))
      out.push_back("SPIR-V extension " + e +
                    " (this runtime does not "
                    "enable it)");
  return out;
}

} // namespace

Result<std::unique_ptr<VulkanExecutable>>
VulkanExecutable::load(std::shared_ptr<VulkanDevice> device, const std::string& payload) {
  KILN_TRY(kiln::vulkan::VulkanPayload p, kiln::vulkan::parseVulkanPayload(payload));
  VulkanDevice& dev = *device;
  std::string devName = dev.id().str() + " (" + dev.props().props.deviceName + ")";
  Diags problems;
  for (const VulkanKernelInfo& k : p.kernels) {
    uint32_t pushBytes = kiln::vulkan::pushConstantBytes(k.push);
    std::vector<std::string> lacks = missing(dev, k, pushBytes, k.spirv[1]);
    if (lacks.empty()) continue;
    std::string list;
    for (size_t i = 0; i < lacks.size(); ++i)
      list += (i == 0 ? "" : i + 1 == lacks.size() ? " and " : ", ") + lacks[i];
    problems.add(error(dev.loc(), "kernel '" + k.name + "' cannot run on " + devName +
                                      ": it needs " + list +
                                      "; compile for this device (--device=" + dev.id().str() +
                                      ") or a target within its limits"));
  }
  if (problems.hasErrors()) return problems;

  std::unique_ptr<VulkanExecutable> exe(new VulkanExecutable(device));
  const Api& vk = dev.api();
  VkDevice vd = dev.handle();
  PipelineCache cache(dev, XXH3_64bits(payload.data(), payload.size()));
  for (VulkanKernelInfo& info : p.kernels) {
    exe->kernels_.push_back(VulkanKernel{});
    VulkanKernel& k = exe->kernels_.back();
    k.info = std::move(info);
    k.pushBytes = kiln::vulkan::pushConstantBytes(k.info.push, &k.pushOffsets);
    std::string what = "kernel '" + k.info.name + "'";

    std::vector<VkDescriptorSetLayoutBinding> bindings(k.info.bindings.size());
    for (size_t i = 0; i < bindings.size(); ++i) {
      bindings[i].binding = static_cast<uint32_t>(i);
      bindings[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      bindings[i].descriptorCount = 1;
      bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    VkDescriptorSetLayoutCreateInfo sl{};
    sl.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
    sl.flags = dev.pushDescriptors() ? VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR : 0;
    sl.bindingCount = static_cast<uint32_t>(bindings.size());
    sl.pBindings = bindings.data();
    if (VkResult r = vk.vkCreateDescriptorSetLayout(vd, &sl, nullptr, &k.setLayout);
        r != VK_SUCCESS)
      return dev.vkError("vkCreateDescriptorSetLayout for " + what, r);
    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, k.pushBytes};
    VkPipelineLayoutCreateInfo pl{};
    pl.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
    pl.setLayoutCount = 1;
    pl.pSetLayouts = &k.setLayout;
    pl.pushConstantRangeCount = k.pushBytes ? 1 : 0;
    pl.pPushConstantRanges = &range;
    if (VkResult r = vk.vkCreatePipelineLayout(vd, &pl, nullptr, &k.layout); r != VK_SUCCESS)
      return dev.vkError("vkCreatePipelineLayout for " + what, r);

    VkShaderModuleCreateInfo sm{};
    sm.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    sm.codeSize = k.info.spirv.size() * sizeof(uint32_t);
    sm.pCode = k.info.spirv.data();
    VkShaderModule module = VK_NULL_HANDLE;
    if (VkResult r = vk.vkCreateShaderModule(vd, &sm, nullptr, &module); r != VK_SUCCESS)
      return dev.vkError("vkCreateShaderModule for " + what, r);
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo sg{};
    sg.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO;
    sg.requiredSubgroupSize = k.info.requiredSubgroupSize;
    VkComputePipelineCreateInfo cp{};
    cp.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
    cp.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    cp.stage.pNext = k.info.requiredSubgroupSize ? &sg : nullptr;
    cp.stage.flags =
        k.info.fullSubgroups ? VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT : 0;
    cp.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cp.stage.module = module;
    cp.stage.pName = k.info.entryPoint.c_str();
    cp.layout = k.layout;
    VkResult r = vk.vkCreateComputePipelines(vd, cache.handle(), 1, &cp, nullptr, &k.pipeline);
    vk.vkDestroyShaderModule(vd, module, nullptr);
    if (r != VK_SUCCESS) {
      k.pipeline = VK_NULL_HANDLE;
      return dev.vkError("vkCreateComputePipelines for " + what, r);
    }
  }
  cache.save();
  return exe;
}

VulkanExecutable::~VulkanExecutable() {
  if (processExiting()) return;
  const Api& vk = device_->api();
  VkDevice vd = device_->handle();
  // Submissions that use the pipelines finish first (a lost device runs nothing more).
  if (device_->alive().ok()) vk.vkDeviceWaitIdle(vd);
  for (VulkanKernel& k : kernels_) {
    if (k.pipeline) vk.vkDestroyPipeline(vd, k.pipeline, nullptr);
    if (k.layout) vk.vkDestroyPipelineLayout(vd, k.layout, nullptr);
    if (k.setLayout) vk.vkDestroyDescriptorSetLayout(vd, k.setLayout, nullptr);
  }
}

} // namespace kiln::hal::vulkan
