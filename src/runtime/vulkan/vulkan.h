// The `vulkan` driver: every physical device with a compute queue that the Vulkan loader
// offers is vulkan[N], running the SPIR-V kernels of `vulkan` executables (payload.h) and, on
// the host with the interpreter, the tensor-level kernels of `ref` executables (those the
// vulkan backend could not lower), in order with the device's own commands (submit.cpp).
//
//   loader.cpp          opens libvulkan.so.1 with dlopen (a machine without it still runs every
//                       other driver), creates the instance once per process, with the Khronos
//                       validation layer and a debug messenger living as long as the instance
//                       when KILN_VULKAN_VALIDATION=1
//   driver.cpp          enumerates devices, describes them (kiln devices), opens them
//   device.cpp          the logical device: one compute queue, the features kernels may need,
//                       buffers, timeline semaphores
//   submit.cpp          submissions: one VkCommandBuffer per run of device commands, barriers
//                       from the recorded commands' buffer hazards, ref dispatches between runs
//   executable.cpp      checks each kernel against the live device, builds its pipeline once at
//                       load; pipeline_cache.cpp keeps the VkPipelineCache on disk
//
// Memory: one allocation per buffer, in a device-local memory type; when that type is also
// host-visible and coherent (lavapipe, ReBAR) buffers are mapped once and host reads and
// writes are memcpy, else they go through a staging buffer and a transfer on the queue.
// Errors name the device ("vulkan[0] (llvmpipe ...)"); a lost device fails every later call.
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "runtime/hal.h"
#include "runtime/host/host.h"
#include "runtime/recycler.h"
#include "runtime/vulkan/payload.h"

namespace kiln::hal::vulkan {

Driver* vulkanDriver();

// Warnings and errors the validation layer reported in this process (each is also printed to
// stderr); tests fail when it is not zero.
uint64_t validationMessageCount();

#define KILN_VK_GLOBAL_FNS(X)                                                                      \
  X(vkCreateInstance)                                                                              \
  X(vkEnumerateInstanceLayerProperties)                                                            \
  X(vkEnumerateInstanceExtensionProperties)                                                        \
  X(vkEnumerateInstanceVersion)

#define KILN_VK_INSTANCE_FNS(X)                                                                    \
  X(vkDestroyInstance)                                                                             \
  X(vkEnumeratePhysicalDevices)                                                                    \
  X(vkGetPhysicalDeviceProperties2)                                                                \
  X(vkGetPhysicalDeviceFeatures2)                                                                  \
  X(vkGetPhysicalDeviceQueueFamilyProperties)                                                      \
  X(vkGetPhysicalDeviceMemoryProperties)                                                           \
  X(vkEnumerateDeviceExtensionProperties)                                                          \
  X(vkCreateDevice)                                                                                \
  X(vkGetDeviceProcAddr)

#define KILN_VK_DEVICE_FNS(X)                                                                      \
  X(vkDestroyDevice)                                                                               \
  X(vkGetDeviceQueue)                                                                              \
  X(vkDeviceWaitIdle)                                                                              \
  X(vkCreateBuffer)                                                                                \
  X(vkDestroyBuffer)                                                                               \
  X(vkGetBufferMemoryRequirements)                                                                 \
  X(vkAllocateMemory)                                                                              \
  X(vkFreeMemory)                                                                                  \
  X(vkBindBufferMemory)                                                                            \
  X(vkMapMemory)                                                                                   \
  X(vkUnmapMemory)                                                                                 \
  X(vkCreateShaderModule)                                                                          \
  X(vkDestroyShaderModule)                                                                         \
  X(vkCreateDescriptorSetLayout)                                                                   \
  X(vkDestroyDescriptorSetLayout)                                                                  \
  X(vkCreatePipelineLayout)                                                                        \
  X(vkDestroyPipelineLayout)                                                                       \
  X(vkCreateComputePipelines)                                                                      \
  X(vkDestroyPipeline)                                                                             \
  X(vkCreatePipelineCache)                                                                         \
  X(vkDestroyPipelineCache)                                                                        \
  X(vkGetPipelineCacheData)                                                                        \
  X(vkCreateDescriptorPool)                                                                        \
  X(vkDestroyDescriptorPool)                                                                       \
  X(vkAllocateDescriptorSets)                                                                      \
  X(vkUpdateDescriptorSets)                                                                        \
  X(vkCreateCommandPool)                                                                           \
  X(vkDestroyCommandPool)                                                                          \
  X(vkAllocateCommandBuffers)                                                                      \
  X(vkFreeCommandBuffers)                                                                          \
  X(vkBeginCommandBuffer)                                                                          \
  X(vkEndCommandBuffer)                                                                            \
  X(vkCmdBindPipeline)                                                                             \
  X(vkCmdBindDescriptorSets)                                                                       \
  X(vkCmdPushConstants)                                                                            \
  X(vkCmdDispatch)                                                                                 \
  X(vkCmdCopyBuffer)                                                                               \
  X(vkCmdFillBuffer)                                                                               \
  X(vkCmdPipelineBarrier)                                                                          \
  X(vkCreateQueryPool)                                                                             \
  X(vkDestroyQueryPool)                                                                            \
  X(vkCmdResetQueryPool)                                                                           \
  X(vkCmdWriteTimestamp)                                                                           \
  X(vkGetQueryPoolResults)                                                                         \
  X(vkQueueSubmit)                                                                                 \
  X(vkCreateSemaphore)                                                                             \
  X(vkDestroySemaphore)                                                                            \
  X(vkWaitSemaphores)                                                                              \
  X(vkSignalSemaphore)                                                                             \
  X(vkGetSemaphoreCounterValue)

#define KILN_VK_DECLARE(name) PFN_##name name = nullptr;

// The Vulkan entry points, loaded from the loader library; device-level ones go through the
// loader's dispatch (vkGetInstanceProcAddr), which serves every device of the instance.
struct Api {
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  KILN_VK_GLOBAL_FNS(KILN_VK_DECLARE)
  KILN_VK_INSTANCE_FNS(KILN_VK_DECLARE)
  KILN_VK_DEVICE_FNS(KILN_VK_DECLARE)
  PFN_vkCreateDebugUtilsMessengerEXT vkCreateDebugUtilsMessengerEXT = nullptr;
  PFN_vkDestroyDebugUtilsMessengerEXT vkDestroyDebugUtilsMessengerEXT = nullptr;
};

// "VK_ERROR_OUT_OF_DEVICE_MEMORY" and a hint for the codes users meet.
std::string resultName(VkResult r);

// Teardown at exit. kiln's instance and devices live in function-local statics, destroyed
// after the exit handlers a driver registers while it loads (NVIDIA's tears itself down
// there: a vkDestroyDevice after it crashed every process at exit). watchProcessExit(),
// called once a driver is loaded and once a device is created, registers a handler that runs
// before kiln's statics are destroyed and sets processExiting(); from then on destructors
// leave their Vulkan objects to the end of the process instead of calling into the driver.
void watchProcessExit();
bool processExiting();

// The process's Vulkan instance, created on first use; an instance that could not be created
// (no loader, no driver) is an error that stays the same for the whole process.
class Instance {
public:
  static Result<std::shared_ptr<Instance>> get();
  ~Instance();
  const Api& api() const { return api_; }
  VkInstance handle() const { return instance_; }
  bool validation() const { return validation_; }
  // Devices with a compute queue, in the loader's order: device N is vulkan[N].
  const std::vector<VkPhysicalDevice>& devices() const { return devices_; }

private:
  Api api_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  bool validation_ = false;
  std::vector<VkPhysicalDevice> devices_;
  friend Result<std::shared_ptr<Instance>> createInstance();
};

// What a physical device offers, read once.
struct DeviceProps {
  VkPhysicalDeviceProperties props{};
  VkPhysicalDeviceVulkan11Properties vk11{};
  VkPhysicalDeviceVulkan12Properties vk12{};
  VkPhysicalDeviceSubgroupSizeControlProperties subgroupControl{};
  VkPhysicalDeviceFeatures2 features{};
  VkPhysicalDeviceVulkan11Features features11{};
  VkPhysicalDeviceVulkan12Features features12{};
  VkPhysicalDeviceSubgroupSizeControlFeatures subgroupControlFeatures{};
  VkPhysicalDeviceMemoryProperties memory{};
  std::set<std::string> extensions;
  int64_t computeFamily = -1;
  uint32_t timestampBits = 0;    // the compute family's timestampValidBits (0: no timestamps)
  uint64_t localMemoryBytes = 0; // the largest device-local heap

  bool hasExtension(const std::string& e) const { return extensions.count(e) != 0; }
  // "llvmpipe (LLVM 15.0.6, 256 bits), Mesa 22.3.6 (LLVM 15.0.6), Vulkan 1.3, ..."
  std::string describe() const;
};
DeviceProps queryDevice(const Api& api, VkPhysicalDevice pd);

class VulkanDevice;

class VulkanBuffer : public Buffer {
public:
  VulkanBuffer(std::shared_ptr<VulkanDevice> device, uint64_t bytes, uint64_t allocated,
               VkBuffer buffer, VkDeviceMemory memory, uint8_t* mapped);
  ~VulkanBuffer() override;
  Device& device() override;
  uint64_t byteSize() const override { return bytes_; }
  // Bytes reserved on the device: byteSize rounded up to 4 (fills and bindings work in words).
  uint64_t allocatedSize() const { return allocated_; }
  Status write(uint64_t offset, const void* src, uint64_t bytes) override;
  Status read(uint64_t offset, void* dst, uint64_t bytes) const override;
  uint8_t* map() override { return mapped_; }
  VkBuffer handle() const { return buffer_; }
  const VulkanDevice& owner() const { return *device_; }
  // The queue serial of the last submission that used this buffer (its destruction waits).
  std::atomic<uint64_t> lastUse{0};

private:
  std::shared_ptr<VulkanDevice> device_;
  uint64_t bytes_, allocated_;
  VkBuffer buffer_;
  VkDeviceMemory memory_;
  uint8_t* mapped_;
};

// A timeline VkSemaphore with a host-side failure state.
class VulkanSemaphore : public Semaphore {
public:
  VulkanSemaphore(std::shared_ptr<VulkanDevice> device, VkSemaphore sem);
  ~VulkanSemaphore() override;
  uint64_t value() const override;
  void signal(uint64_t value) override;
  void fail(Diags why) override;
  Status wait(uint64_t target) const override;
  VkSemaphore handle() const { return sem_; }
  const VulkanDevice& owner() const { return *device_; }

private:
  std::shared_ptr<VulkanDevice> device_;
  VkSemaphore sem_;
  mutable std::mutex mu_;
  bool failed_ = false;
  Diags why_;
};

// One kernel's pipeline and what a dispatch of it needs.
struct VulkanKernel {
  kiln::vulkan::VulkanKernelInfo info;
  std::vector<uint32_t> pushOffsets;
  uint32_t pushBytes = 0;
  VkDescriptorSetLayout setLayout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
};

class VulkanExecutable : public Executable {
public:
  static Result<std::unique_ptr<VulkanExecutable>> load(std::shared_ptr<VulkanDevice> device,
                                                        const std::string& payload);
  ~VulkanExecutable() override;
  const std::string& target() const override { return target_; }
  size_t numKernels() const override { return kernels_.size(); }
  const std::string& kernelName(size_t index) const override { return kernels_[index].info.name; }
  const VulkanKernel& kernel(size_t index) const { return kernels_[index]; }
  const VulkanDevice& owner() const { return *device_; }

private:
  explicit VulkanExecutable(std::shared_ptr<VulkanDevice> device) : device_(std::move(device)) {}
  std::string target_ = "vulkan";
  std::shared_ptr<VulkanDevice> device_;
  std::vector<VulkanKernel> kernels_;
};

class VulkanDevice : public Device, public std::enable_shared_from_this<VulkanDevice> {
public:
  static Result<std::shared_ptr<VulkanDevice>> create(std::shared_ptr<Instance> instance,
                                                      int64_t ordinal);
  ~VulkanDevice() override;

  const DeviceId& id() const override { return id_; }
  std::string description() const override { return props_.describe(); }
  DeviceLimits limits() const override;
  MemoryStats memoryStats() const override;
  void resetPeak() override;
  Result<std::unique_ptr<Buffer>> allocate(uint64_t bytes) override;
  Result<std::unique_ptr<Executable>> loadExecutable(const std::string& target,
                                                     const std::string& payload) override;
  std::unique_ptr<CommandBuffer> createCommandBuffer() override;
  std::unique_ptr<Semaphore> createSemaphore(uint64_t initial) override;
  Status submit(CommandBuffer& cb, const Semaphore* wait, uint64_t waitValue, Semaphore& signal,
                uint64_t signalValue) override;
  // With a profiler set, every run gets a timestamp query pool (one pair of timestamps around
  // each dispatch) and submit waits for it and reports each dispatch's time. False when the
  // compute queue has no timestamps.
  bool setProfiler(DispatchProfiler* profiler) override;

  const Api& api() const { return instance_->api(); }
  VkDevice handle() const { return device_; }
  const DeviceProps& props() const { return props_; }
  bool pushDescriptors() const { return pushDescriptor_ != nullptr; }
  // "vulkan[0]", the location of this device's errors.
  Loc loc() const { return Loc::named(id_.str()); }
  // An error for a failed Vulkan call: names the device and the call; a lost device is
  // marked so that every later call fails at once.
  Diag vkError(const std::string& what, VkResult r) const;
  Status alive() const;
  // Waits until the queue has finished every submission up to `serial`.
  Status waitSerial(uint64_t serial) const;
  // Waits until timeline `sem` reaches `value` (at most timeoutNs once blocked): polls it for
  // up to KILN_VULKAN_SPIN_US microseconds (default 200) first, then blocks in
  // vkWaitSemaphores.
  VkResult waitTimeline(VkSemaphore sem, uint64_t value, uint64_t timeoutNs) const;
  // Releases a buffer's memory (accounting) once it is destroyed.
  void released(uint64_t bytes);
  // A destroyed buffer's VkBuffer and memory, kept for a later allocation of the same size
  // (runtime/recycler.h; vkAllocateMemory is slow on NVIDIA's driver) up to half the device's
  // memory, else freed once the queue is done with them. The next owner waits for lastUse.
  struct KeptBuffer {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    uint8_t* mapped = nullptr;
    uint64_t lastUse = 0;
  };
  void recycle(uint64_t bytes, uint64_t allocated, KeptBuffer kept);
  // Runs `record` in a one-time command buffer and waits for it (staging transfers).
  Status runNow(const std::function<void(VkCommandBuffer)>& record);
  // Test hook: behave from now on as a device that reported VK_ERROR_DEVICE_LOST.
  void simulateDeviceLost() { lost_ = true; }
  // vkQueueSubmit calls so far (tests count the VkCommandBuffers a submission became).
  uint64_t queueSubmits() const {
    std::lock_guard<std::mutex> lock(queueMu_);
    return serial_;
  }
  // Host reads and writes go through staging buffers (memory not host-visible, or
  // KILN_VULKAN_STAGING=1).
  bool staging() const { return !hostVisible_; }
  uint32_t stagingType() const { return stagingType_; }
  Result<std::pair<VkBuffer, VkDeviceMemory>> createRaw(uint64_t bytes, uint32_t type,
                                                        uint8_t** mapped);
  // The device's reusable staging buffer (host-visible, mapped), grown to at least `bytes`
  // (at most kKeptStagingBytes: larger transfers allocate their own); `lock` holds it while
  // the caller copies through it.
  struct StagingBuffer {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    uint8_t* ptr = nullptr;
    uint64_t bytes = 0;
  };
  static constexpr uint64_t kKeptStagingBytes = uint64_t(64) << 20;
  Result<StagingBuffer*> stagingBuffer(uint64_t bytes, std::unique_lock<std::mutex>& lock);

private:
  VulkanDevice(std::shared_ptr<Instance> instance, int64_t ordinal, VkPhysicalDevice pd);
  Status init();
  // A run of device commands (no ref dispatch) recorded into one VkCommandBuffer, not yet
  // submitted.
  struct Recorded {
    VkCommandBuffer cb = VK_NULL_HANDLE;
    VkDescriptorPool pool = VK_NULL_HANDLE;
    std::vector<VulkanBuffer*> used;
    VkQueryPool queries = VK_NULL_HANDLE; // while profiling: 2 timestamps per dispatch
    std::vector<const host::HostCommandBuffer::Command*> timed;
  };
  using Commands = std::span<const host::HostCommandBuffer::Command>;
  Status record(VkCommandBuffer vcb, Commands commands, VkDescriptorPool pool,
                Recorded* timing = nullptr);
  // Reads a finished run's timestamps into the profiler and frees its query pool.
  Status reportTimes(Recorded& run);
  Status recordDispatch(VkCommandBuffer vcb, const host::HostCommandBuffer::Command& c,
                        VkDescriptorPool pool);
  Result<VkDescriptorPool> descriptorPoolFor(Commands commands);
  // Records `commands` (queueMu_ held).
  Result<Recorded> recordRun(Commands commands);
  // Frees a run that was recorded but not submitted (queueMu_ held).
  void discard(Recorded& run);
  // Submits a recorded run that waits for `wait` (may be null) and signals `signal` on the
  // device; returns its queue serial. On failure the run is freed.
  Result<uint64_t> submitRecorded(Recorded& run, const VulkanSemaphore* wait, uint64_t waitValue,
                                  VulkanSemaphore* signal, uint64_t signalValue);
  void reclaim();

  std::shared_ptr<Instance> instance_;
  DeviceId id_;
  VkPhysicalDevice physical_;
  DeviceProps props_;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t memoryType_ = 0;
  bool hostVisible_ = false;
  uint64_t spinNs_ = 200'000;
  uint32_t stagingType_ = 0;
  std::mutex stagingMu_;
  StagingBuffer staging_;
  void freeStaging();
  DispatchProfiler* profiler_ = nullptr;
  PFN_vkCmdPushDescriptorSetKHR pushDescriptor_ = nullptr;

  // The queue: submissions are serialized; each signals queueTimeline_ to its serial.
  mutable std::mutex queueMu_;
  VkCommandPool commandPool_ = VK_NULL_HANDLE;
  VkSemaphore queueTimeline_ = VK_NULL_HANDLE;
  uint64_t serial_ = 0;
  struct InFlight {
    uint64_t serial;
    VkCommandBuffer cb;
    VkDescriptorPool pool;
  };
  std::deque<InFlight> inFlight_;
  std::unique_ptr<Recycler<KeptBuffer>> recycler_; // sized once the memory is known (init)
  void destroy(const KeptBuffer& b);
  mutable std::atomic<bool> lost_{false};

  mutable std::mutex statsMu_;
  MemoryStats stats_;
};

} // namespace kiln::hal::vulkan
