// VulkanDriver: vulkan[N] is the N-th physical device with a compute queue; what each offers
// is read once (queryDevice) and described by `kiln devices`.
#include <algorithm>

#include "runtime/vulkan/vulkan.h"

namespace kiln::hal::vulkan {

namespace {

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

std::string kib(uint64_t bytes) {
  return bytes % 1024 ? std::to_string(bytes) + " bytes" : std::to_string(bytes >> 10) + " KiB";
}

class VulkanDriver : public Driver {
public:
  const std::string& name() const override { return name_; }
  std::string target() const override { return "vulkan"; }
  // "ref": the kernels the vulkan backend leaves tensor-level (device.cpp, submit.cpp).
  bool loads(const std::string& target) const override {
    return target == "vulkan" || target == "ref";
  }
  std::vector<DeviceInfo> enumerate() override {
    Result<std::shared_ptr<Instance>> inst = Instance::get();
    if (!inst.ok()) return {};
    std::vector<DeviceInfo> out;
    const std::vector<VkPhysicalDevice>& pds = (*inst)->devices();
    for (size_t i = 0; i < pds.size(); ++i)
      out.push_back({DeviceId{"vulkan", static_cast<int64_t>(i)},
                     queryDevice((*inst)->api(), pds[i]).describe()});
    return out;
  }
  std::string unavailableReason() override {
    Result<std::shared_ptr<Instance>> inst = Instance::get();
    if (inst.ok()) return "";
    return inst.diags().list.empty() ? "unknown" : inst.diags().list[0].message;
  }
  Result<std::shared_ptr<Device>> open(int64_t ordinal) override {
    KILN_TRY(std::shared_ptr<Instance> inst, Instance::get());
    KILN_TRY(std::shared_ptr<VulkanDevice> dev, VulkanDevice::create(inst, ordinal));
    return std::shared_ptr<Device>(dev);
  }

private:
  std::string name_ = "vulkan";
};

} // namespace

DeviceProps queryDevice(const Api& api, VkPhysicalDevice pd) {
  DeviceProps d;
  d.subgroupControl.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES;
  d.vk12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES;
  d.vk11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES;
  d.vk11.pNext = &d.vk12;
  VkPhysicalDeviceProperties2 props{};
  props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  props.pNext = &d.vk11;

  uint32_t n = 0;
  api.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  api.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, exts.data());
  exts.resize(n);
  for (const VkExtensionProperties& e : exts) d.extensions.insert(e.extensionName);

  // Structures of Vulkan 1.3 or of extensions go in the chain only where the device has them.
  VkPhysicalDeviceProperties base{};
  api.vkGetPhysicalDeviceProperties2(pd, &props);
  base = props.properties;
  bool sizeControl = base.apiVersion >= VK_API_VERSION_1_3 ||
                     d.hasExtension(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  if (sizeControl) {
    d.vk12.pNext = &d.subgroupControl;
    api.vkGetPhysicalDeviceProperties2(pd, &props);
  }
  d.props = props.properties;
  d.vk11.pNext = nullptr;
  d.vk12.pNext = nullptr;
  d.subgroupControl.pNext = nullptr;

  d.subgroupControlFeatures.sType =
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES;
  d.features12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  d.features12.pNext = sizeControl ? &d.subgroupControlFeatures : nullptr;
  d.features11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  d.features11.pNext = &d.features12;
  d.features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  d.features.pNext = &d.features11;
  api.vkGetPhysicalDeviceFeatures2(pd, &d.features);
  d.features.pNext = d.features11.pNext = d.features12.pNext = nullptr;

  api.vkGetPhysicalDeviceMemoryProperties(pd, &d.memory);
  for (uint32_t h = 0; h < d.memory.memoryHeapCount; ++h)
    if (d.memory.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      d.localMemoryBytes = std::max<uint64_t>(d.localMemoryBytes, d.memory.memoryHeaps[h].size);

  uint32_t families = 0;
  api.vkGetPhysicalDeviceQueueFamilyProperties(pd, &families, nullptr);
  std::vector<VkQueueFamilyProperties> fam(families);
  api.vkGetPhysicalDeviceQueueFamilyProperties(pd, &families, fam.data());
  // A compute-only family first (a dedicated queue on discrete GPUs), else any with compute.
  for (int pass = 0; pass < 2 && d.computeFamily < 0; ++pass)
    for (uint32_t i = 0; i < families && d.computeFamily < 0; ++i) {
      VkQueueFlags f = fam[i].queueFlags;
      if ((f & VK_QUEUE_COMPUTE_BIT) && (pass == 1 || !(f & VK_QUEUE_GRAPHICS_BIT))) {
        d.computeFamily = i;
        d.timestampBits = fam[i].timestampValidBits;
      }
    }
  return d;
}

std::string DeviceProps::describe() const {
  const VkPhysicalDeviceLimits& l = props.limits;
  std::string s = props.deviceName;
  std::string driver = vk12.driverName;
  if (*vk12.driverInfo) driver += std::string(" ") + vk12.driverInfo;
  if (!driver.empty()) s += ", driver " + driver;
  s += ", Vulkan " + std::to_string(VK_API_VERSION_MAJOR(props.apiVersion)) + "." +
       std::to_string(VK_API_VERSION_MINOR(props.apiVersion));
  s += ", " + mib(localMemoryBytes) + " memory";
  s += ", subgroup " + std::to_string(vk11.subgroupSize);
  if (subgroupControl.minSubgroupSize &&
      subgroupControl.minSubgroupSize != subgroupControl.maxSubgroupSize)
    s += " (" + std::to_string(subgroupControl.minSubgroupSize) + "-" +
         std::to_string(subgroupControl.maxSubgroupSize) + ")";
  s += ", shared memory " + kib(l.maxComputeSharedMemorySize);
  s += ", workgroup " + std::to_string(l.maxComputeWorkGroupInvocations) + " invocations (" +
       std::to_string(l.maxComputeWorkGroupSize[0]) + "x" +
       std::to_string(l.maxComputeWorkGroupSize[1]) + "x" +
       std::to_string(l.maxComputeWorkGroupSize[2]) + ")";
  s += ", storage buffer range " + mib(l.maxStorageBufferRange);
  return s;
}

Driver* vulkanDriver() {
  static VulkanDriver driver;
  return &driver;
}

} // namespace kiln::hal::vulkan
