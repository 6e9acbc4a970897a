// VulkanDevice: the logical device (one compute queue and the features kernels may declare),
// buffers and their memory, timeline semaphores. Submissions are in submit.cpp.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "runtime/ref/ref.h"
#include "runtime/vulkan/vulkan.h"

namespace kiln::hal::vulkan {

namespace {

bool envIs(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}

uint64_t roundUp4(uint64_t bytes) { return bytes < 4 ? 4 : (bytes + 3) / 4 * 4; }

} // namespace

VulkanDevice::VulkanDevice(std::shared_ptr<Instance> instance, int64_t ordinal, VkPhysicalDevice pd)
    : instance_(std::move(instance)), id_{"vulkan", ordinal}, physical_(pd) {}

Result<std::shared_ptr<VulkanDevice>> VulkanDevice::create(std::shared_ptr<Instance> instance,
                                                           int64_t ordinal) {
  if (ordinal < 0 || static_cast<size_t>(ordinal) >= instance->devices().size())
    return error(Loc{}, "device vulkan[" + std::to_string(ordinal) + "] does not exist");
  VkPhysicalDevice pd = instance->devices()[ordinal];
  std::shared_ptr<VulkanDevice> dev(new VulkanDevice(std::move(instance), ordinal, pd));
  KILN_CHECK(dev->init());
  return dev;
}

Status VulkanDevice::init() {
  const Api& vk = api();
  props_ = queryDevice(vk, physical_);
  recycler_ = std::make_unique<Recycler<KeptBuffer>>(props_.localMemoryBytes / 2,
                                                     Recycler<KeptBuffer>::Order::OldestFirst);
  std::string name = id_.str() + " (" + props_.props.deviceName + ")";
  uint32_t version = props_.props.apiVersion;
  if (version < VK_API_VERSION_1_2)
    return error(loc(), name + " supports Vulkan " + std::to_string(VK_API_VERSION_MAJOR(version)) +
                            "." + std::to_string(VK_API_VERSION_MINOR(version)) +
                            "; kiln needs Vulkan 1.2 (update its driver)");
  if (!props_.features12.timelineSemaphore)
    return error(loc(), name + " lacks timeline semaphores, which kiln needs");
  if (props_.computeFamily < 0) return error(loc(), name + " has no compute queue");

  // Enable what kernels may declare (executable.cpp checks each kernel against this set).
  VkPhysicalDeviceFeatures2 f{};
  f.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  const VkPhysicalDeviceFeatures& have = props_.features.features;
  f.features.shaderInt64 = have.shaderInt64;
  f.features.shaderInt16 = have.shaderInt16;
  f.features.shaderFloat64 = have.shaderFloat64;
  VkPhysicalDeviceVulkan11Features f11{};
  f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  f11.storageBuffer16BitAccess = props_.features11.storageBuffer16BitAccess;
  VkPhysicalDeviceVulkan12Features f12{};
  f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  const VkPhysicalDeviceVulkan12Features& h12 = props_.features12;
  f12.shaderFloat16 = h12.shaderFloat16;
  f12.shaderInt8 = h12.shaderInt8;
  f12.storageBuffer8BitAccess = h12.storageBuffer8BitAccess;
  f12.shaderBufferInt64Atomics = h12.shaderBufferInt64Atomics;
  f12.vulkanMemoryModel = h12.vulkanMemoryModel;
  f12.vulkanMemoryModelDeviceScope = h12.vulkanMemoryModelDeviceScope;
  f12.timelineSemaphore = VK_TRUE;
  VkPhysicalDeviceSubgroupSizeControlFeatures fsc{};
  fsc.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES;
  fsc.subgroupSizeControl = props_.subgroupControlFeatures.subgroupSizeControl;
  fsc.computeFullSubgroups = props_.subgroupControlFeatures.computeFullSubgroups;
  f.pNext = &f11;
  f11.pNext = &f12;
  std::vector<const char*> extensions;
  bool core13 = version >= VK_API_VERSION_1_3;
  if (fsc.subgroupSizeControl || fsc.computeFullSubgroups) {
    f12.pNext = &fsc;
    if (!core13) extensions.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  }
  bool wantPush = props_.hasExtension(VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME) &&
                  !envIs("KILN_VULKAN_PUSH_DESCRIPTORS", "0");
  if (wantPush) extensions.push_back(VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);

  float priority = 1.0f;
  VkDeviceQueueCreateInfo q{};
  q.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  q.queueFamilyIndex = static_cast<uint32_t>(props_.computeFamily);
  q.queueCount = 1;
  q.pQueuePriorities = &priority;
  VkDeviceCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  ci.pNext = &f;
  ci.queueCreateInfoCount = 1;
  ci.pQueueCreateInfos = &q;
  ci.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  ci.ppEnabledExtensionNames = extensions.data();
  if (VkResult r = vk.vkCreateDevice(physical_, &ci, nullptr, &device_); r != VK_SUCCESS) {
    device_ = VK_NULL_HANDLE;
    return vkError("vkCreateDevice", r);
  }
  watchProcessExit();
  vk.vkGetDeviceQueue(device_, q.queueFamilyIndex, 0, &queue_);
  if (wantPush)
    pushDescriptor_ = reinterpret_cast<PFN_vkCmdPushDescriptorSetKHR>(
        vk.vkGetDeviceProcAddr(device_, "vkCmdPushDescriptorSetKHR"));

  // Device-local memory, mapped when it is also host-visible, coherent and cached (one
  // memory, as on lavapipe); staging memory is host-visible and coherent, cached if any is.
  // A discrete GPU's device-local host-visible memory (NVIDIA's BAR heap, 0x7 on an H100) is
  // uncached for the CPU: reading a prefill's 16 MB result from it took most of a 500 ms
  // call. There, buffers live in device-local memory and host reads and writes go through
  // the staging buffer.
  const VkPhysicalDeviceMemoryProperties& mem = props_.memory;
  constexpr VkMemoryPropertyFlags kHost =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  constexpr VkMemoryPropertyFlags kCached = kHost | VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
  int64_t local = -1, mapped = -1, staging = -1, cached = -1;
  for (uint32_t t = 0; t < mem.memoryTypeCount; ++t) {
    VkMemoryPropertyFlags fl = mem.memoryTypes[t].propertyFlags;
    bool isLocal = fl & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    if (isLocal && local < 0) local = t;
    if (isLocal && (fl & kCached) == kCached && mapped < 0) mapped = t;
    if ((fl & kHost) == kHost && staging < 0) staging = t;
    if ((fl & kCached) == kCached && cached < 0) cached = t;
  }
  if (cached >= 0) staging = cached;
  if (local < 0) local = staging;
  if (local < 0 || staging < 0)
    return error(loc(), name + " offers no usable memory type (device-local and host-visible)");
  hostVisible_ = mapped >= 0 && !envIs("KILN_VULKAN_STAGING", "1");
  if (const char* spin = std::getenv("KILN_VULKAN_SPIN_US"); spin && *spin)
    spinNs_ = uint64_t(std::clamp<long long>(std::atoll(spin), 0, 100'000)) * 1000;
  memoryType_ = static_cast<uint32_t>(hostVisible_ ? mapped : local);
  stagingType_ = static_cast<uint32_t>(staging);

  VkCommandPoolCreateInfo pool{};
  pool.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  pool.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
  pool.queueFamilyIndex = q.queueFamilyIndex;
  if (VkResult r = vk.vkCreateCommandPool(device_, &pool, nullptr, &commandPool_); r != VK_SUCCESS)
    return vkError("vkCreateCommandPool", r);
  VkSemaphoreTypeCreateInfo type{};
  type.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO;
  type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  VkSemaphoreCreateInfo sci{};
  sci.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO;
  sci.pNext = &type;
  if (VkResult r = vk.vkCreateSemaphore(device_, &sci, nullptr, &queueTimeline_); r != VK_SUCCESS)
    return vkError("vkCreateSemaphore", r);
  return ok();
}

VulkanDevice::~VulkanDevice() {
  if (!device_ || processExiting()) return;
  const Api& vk = api();
  vk.vkDeviceWaitIdle(device_);
  {
    std::lock_guard<std::mutex> lock(queueMu_);
    for (const InFlight& f : inFlight_) {
      vk.vkFreeCommandBuffers(device_, commandPool_, 1, &f.cb);
      if (f.pool) vk.vkDestroyDescriptorPool(device_, f.pool, nullptr);
    }
    inFlight_.clear();
  }
  if (recycler_)
    for (const KeptBuffer& b : recycler_->drain()) destroy(b);
  freeStaging();
  if (queueTimeline_) vk.vkDestroySemaphore(device_, queueTimeline_, nullptr);
  if (commandPool_) vk.vkDestroyCommandPool(device_, commandPool_, nullptr);
  vk.vkDestroyDevice(device_, nullptr);
}

void VulkanDevice::freeStaging() {
  if (staging_.buffer) api().vkDestroyBuffer(device_, staging_.buffer, nullptr);
  if (staging_.memory) api().vkFreeMemory(device_, staging_.memory, nullptr);
  staging_ = {};
}

Result<VulkanDevice::StagingBuffer*>
VulkanDevice::stagingBuffer(uint64_t bytes, std::unique_lock<std::mutex>& lock) {
  lock = std::unique_lock<std::mutex>(stagingMu_);
  if (staging_.bytes >= bytes) return &staging_;
  // Doubling, from 1 MiB, so that a run of growing transfers allocates a few times.
  uint64_t want = std::max<uint64_t>({bytes, uint64_t(1) << 20, 2 * staging_.bytes});
  want = std::min(want, std::max(bytes, kKeptStagingBytes));
  freeStaging();
  uint8_t* ptr = nullptr;
  KILN_TRY(auto raw, createRaw(want, stagingType_, &ptr));
  staging_ = {raw.first, raw.second, ptr, want};
  return &staging_;
}

Diag VulkanDevice::vkError(const std::string& what, VkResult r) const {
  std::string name = id_.str() + " (" + props_.props.deviceName + ")";
  if (r == VK_ERROR_DEVICE_LOST) {
    lost_ = true;
    return error(loc(), name + " was lost (VK_ERROR_DEVICE_LOST in " + what +
                            "): a kernel faulted or ran too long, or the driver reset the GPU; "
                            "the device cannot be used again in this process");
  }
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) {
    MemoryStats s = memoryStats();
    return error(loc(), name + " is out of " +
                            (r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? "device" : "host") + " memory (" +
                            resultName(r) + " in " + what + "; " + std::to_string(s.bytesInUse) +
                            " bytes in use of " + std::to_string(props_.localMemoryBytes) + ")");
  }
  return error(loc(), name + ": " + what + " failed: " + resultName(r));
}

Status VulkanDevice::alive() const {
  if (lost_)
    return error(loc(), id_.str() + " (" + props_.props.deviceName +
                            ") was lost earlier (VK_ERROR_DEVICE_LOST); the device cannot be "
                            "used again in this process");
  return ok();
}

DeviceLimits VulkanDevice::limits() const {
  return {props_.vk11.maxMemoryAllocationSize, props_.localMemoryBytes};
}

MemoryStats VulkanDevice::memoryStats() const {
  std::lock_guard<std::mutex> lock(statsMu_);
  return stats_;
}

void VulkanDevice::resetPeak() {
  std::lock_guard<std::mutex> lock(statsMu_);
  stats_.peakBytes = stats_.bytesInUse;
}

void VulkanDevice::released(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(statsMu_);
  stats_.bytesInUse -= bytes;
}

Result<std::pair<VkBuffer, VkDeviceMemory>> VulkanDevice::createRaw(uint64_t bytes, uint32_t type,
                                                                    uint8_t** mapped) {
  const Api& vk = api();
  VkBufferCreateInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  bi.size = bytes;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
             VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer buffer = VK_NULL_HANDLE;
  if (VkResult r = vk.vkCreateBuffer(device_, &bi, nullptr, &buffer); r != VK_SUCCESS)
    return vkError("vkCreateBuffer of " + std::to_string(bytes) + " bytes", r);
  VkMemoryRequirements req;
  vk.vkGetBufferMemoryRequirements(device_, buffer, &req);
  if (!(req.memoryTypeBits & (1u << type))) {
    vk.vkDestroyBuffer(device_, buffer, nullptr);
    return error(loc(), id_.str() + ": buffers cannot live in the chosen memory type");
  }
  VkMemoryAllocateInfo ai{};
  ai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = type;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkResult r = vk.vkAllocateMemory(device_, &ai, nullptr, &memory);
  if (r == VK_SUCCESS) r = vk.vkBindBufferMemory(device_, buffer, memory, 0);
  void* ptr = nullptr;
  if (r == VK_SUCCESS && mapped) r = vk.vkMapMemory(device_, memory, 0, VK_WHOLE_SIZE, 0, &ptr);
  if (r != VK_SUCCESS) {
    vk.vkDestroyBuffer(device_, buffer, nullptr);
    if (memory) vk.vkFreeMemory(device_, memory, nullptr);
    return vkError("allocating " + std::to_string(bytes) + " bytes", r);
  }
  if (mapped) *mapped = static_cast<uint8_t*>(ptr);
  return std::make_pair(buffer, memory);
}

Result<std::unique_ptr<Buffer>> VulkanDevice::allocate(uint64_t bytes) {
  KILN_CHECK(alive());
  uint64_t allocated = roundUp4(bytes);
  uint64_t most = props_.vk11.maxMemoryAllocationSize;
  if (bytes > most || allocated > most)
    return error(loc(), id_.str() + " (" + props_.props.deviceName + ") cannot allocate " +
                            std::to_string(bytes) + " bytes in one buffer: its limit is " +
                            std::to_string(most) + " bytes (maxMemoryAllocationSize)");
  KeptBuffer b;
  if (std::optional<KeptBuffer> kept = recycler_->take(allocated)) {
    b = *kept;
    if (Status waited = waitSerial(b.lastUse); !waited.ok()) {
      destroy(b);
      return waited.diags();
    }
  } else {
    auto raw = createRaw(allocated, memoryType_, hostVisible_ ? &b.mapped : nullptr);
    if (!raw.ok()) {
      // Out of memory, perhaps only because freed buffers are kept: free them, try again.
      std::vector<KeptBuffer> freed = recycler_->drain();
      for (const KeptBuffer& f : freed) {
        (void)waitSerial(f.lastUse);
        destroy(f);
      }
      if (!freed.empty())
        raw = createRaw(allocated, memoryType_, hostVisible_ ? &b.mapped : nullptr);
    }
    KILN_TRY(auto made, std::move(raw));
    b.buffer = made.first;
    b.memory = made.second;
  }
  {
    std::lock_guard<std::mutex> lock(statsMu_);
    stats_.bytesInUse += bytes;
    stats_.allocations += 1;
    if (stats_.bytesInUse > stats_.peakBytes) stats_.peakBytes = stats_.bytesInUse;
  }
  return std::unique_ptr<Buffer>(std::make_unique<VulkanBuffer>(
      shared_from_this(), bytes, allocated, b.buffer, b.memory, b.mapped));
}

void VulkanDevice::destroy(const KeptBuffer& b) {
  api().vkDestroyBuffer(device_, b.buffer, nullptr);
  api().vkFreeMemory(device_, b.memory, nullptr);
}

void VulkanDevice::recycle(uint64_t bytes, uint64_t allocated, KeptBuffer kept) {
  released(bytes);
  if (std::optional<KeptBuffer> left = recycler_->keep(allocated, kept)) {
    // Work still reading or writing the buffer finishes first (a lost device finishes nothing).
    (void)waitSerial(left->lastUse);
    destroy(*left);
  }
}

Result<std::unique_ptr<Executable>> VulkanDevice::loadExecutable(const std::string& target,
                                                                 const std::string& payload) {
  KILN_CHECK(alive());
  // The kernels the vulkan backend left tensor-level run on the interpreter, on the host,
  // between the device's own commands (submit.cpp).
  if (target == "ref") {
    KILN_TRY(std::unique_ptr<ref::RefExecutable> exe, ref::RefExecutable::load(target, payload));
    return std::unique_ptr<Executable>(std::move(exe));
  }
  if (target != "vulkan")
    return error(loc(), "cannot load an executable for target '" + target +
                            "' (vulkan devices load targets 'vulkan' and 'ref')");
  KILN_TRY(std::unique_ptr<VulkanExecutable> exe,
           VulkanExecutable::load(shared_from_this(), payload));
  return std::unique_ptr<Executable>(std::move(exe));
}

std::unique_ptr<CommandBuffer> VulkanDevice::createCommandBuffer() {
  return std::make_unique<host::HostCommandBuffer>();
}

std::unique_ptr<Semaphore> VulkanDevice::createSemaphore(uint64_t initial) {
  VkSemaphoreTypeCreateInfo type{};
  type.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO;
  type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  type.initialValue = initial;
  VkSemaphoreCreateInfo sci{};
  sci.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO;
  sci.pNext = &type;
  VkSemaphore sem = VK_NULL_HANDLE;
  VkResult r = lost_ ? VK_ERROR_DEVICE_LOST : api().vkCreateSemaphore(device_, &sci, nullptr, &sem);
  auto out = std::make_unique<VulkanSemaphore>(shared_from_this(), sem);
  // The interface cannot fail here: a semaphore that could not be created is failed instead.
  if (r != VK_SUCCESS) out->fail(Diags{{vkError("vkCreateSemaphore", r)}});
  return out;
}

// --- buffers

VulkanBuffer::VulkanBuffer(std::shared_ptr<VulkanDevice> device, uint64_t bytes, uint64_t allocated,
                           VkBuffer buffer, VkDeviceMemory memory, uint8_t* mapped)
    : device_(std::move(device)), bytes_(bytes), allocated_(allocated), buffer_(buffer),
      memory_(memory), mapped_(mapped) {}

VulkanBuffer::~VulkanBuffer() {
  if (processExiting()) return;
  device_->recycle(bytes_, allocated_, {buffer_, memory_, mapped_, lastUse.load()});
}

Device& VulkanBuffer::device() { return *device_; }

Status VulkanBuffer::write(uint64_t offset, const void* src, uint64_t bytes) {
  KILN_CHECK(host::checkHostAccess(*device_, bytes_, offset, bytes, "a host write"));
  KILN_CHECK(device_->alive());
  KILN_CHECK(device_->waitSerial(lastUse));
  if (bytes == 0) return ok();
  if (mapped_) {
    std::memcpy(mapped_ + offset, src, bytes);
    return ok();
  }
  VkBuffer dst = buffer_;
  if (bytes <= VulkanDevice::kKeptStagingBytes) {
    std::unique_lock<std::mutex> lock;
    KILN_TRY(VulkanDevice::StagingBuffer * st, device_->stagingBuffer(bytes, lock));
    std::memcpy(st->ptr, src, bytes);
    return device_->runNow([&](VkCommandBuffer cb) {
      VkBufferCopy region{0, offset, bytes};
      device_->api().vkCmdCopyBuffer(cb, st->buffer, dst, 1, &region);
    });
  }
  uint8_t* staged = nullptr;
  KILN_TRY(auto raw, device_->createRaw(bytes, device_->stagingType(), &staged));
  std::memcpy(staged, src, bytes);
  Status s = device_->runNow([&](VkCommandBuffer cb) {
    VkBufferCopy region{0, offset, bytes};
    device_->api().vkCmdCopyBuffer(cb, raw.first, dst, 1, &region);
  });
  device_->api().vkDestroyBuffer(device_->handle(), raw.first, nullptr);
  device_->api().vkFreeMemory(device_->handle(), raw.second, nullptr);
  return s;
}

Status VulkanBuffer::read(uint64_t offset, void* dst, uint64_t bytes) const {
  KILN_CHECK(host::checkHostAccess(*device_, bytes_, offset, bytes, "a host read"));
  KILN_CHECK(device_->alive());
  KILN_CHECK(device_->waitSerial(lastUse));
  if (bytes == 0) return ok();
  if (mapped_) {
    std::memcpy(dst, mapped_ + offset, bytes);
    return ok();
  }
  VkBuffer src = buffer_;
  if (bytes <= VulkanDevice::kKeptStagingBytes) {
    std::unique_lock<std::mutex> lock;
    KILN_TRY(VulkanDevice::StagingBuffer * st, device_->stagingBuffer(bytes, lock));
    KILN_CHECK(device_->runNow([&](VkCommandBuffer cb) {
      VkBufferCopy region{offset, 0, bytes};
      device_->api().vkCmdCopyBuffer(cb, src, st->buffer, 1, &region);
    }));
    std::memcpy(dst, st->ptr, bytes);
    return ok();
  }
  uint8_t* staged = nullptr;
  KILN_TRY(auto raw, device_->createRaw(bytes, device_->stagingType(), &staged));
  Status s = device_->runNow([&](VkCommandBuffer cb) {
    VkBufferCopy region{offset, 0, bytes};
    device_->api().vkCmdCopyBuffer(cb, src, raw.first, 1, &region);
  });
  if (s.ok()) std::memcpy(dst, staged, bytes);
  device_->api().vkDestroyBuffer(device_->handle(), raw.first, nullptr);
  device_->api().vkFreeMemory(device_->handle(), raw.second, nullptr);
  return s;
}

} // namespace kiln::hal::vulkan
