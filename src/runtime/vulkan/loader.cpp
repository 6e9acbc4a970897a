// The Vulkan loader and the process's instance.
//
// libvulkan.so.1 is opened with dlopen (KILN_VULKAN_LOADER names another file), so a machine
// without Vulkan runs every other driver and reports why vulkan has no devices. The instance
// asks for Vulkan 1.2 or later (timeline semaphores, the 1.1/1.2 feature structures).
//
// KILN_VULKAN_VALIDATION=1 enables VK_LAYER_KHRONOS_validation when it is installed, with a
// VK_EXT_debug_utils messenger that lives as long as the instance (and the same create info
// chained into vkCreateInstance, which covers creating and destroying the instance itself):
// every warning or error it reports is printed to stderr and counted (validationMessageCount).
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/vulkan/vulkan.h"

namespace kiln::hal::vulkan {

namespace {

std::atomic<uint64_t> gValidationMessages{0};

VKAPI_ATTR VkBool32 VKAPI_CALL onMessage(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                         VkDebugUtilsMessageTypeFlagsEXT type,
                                         const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
  if (severity < VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) return VK_FALSE;
  gValidationMessages.fetch_add(1);
  const char* kind = (type & VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT)    ? "validation"
                     : (type & VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT) ? "performance"
                                                                                : "loader";
  std::fprintf(stderr, "kiln: vulkan %s %s: %s\n", kind,
               severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error" : "warning",
               data && data->pMessage ? data->pMessage : "(no message)");
  return VK_FALSE;
}

bool envIs(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}

const Loc& where() {
  static const Loc loc = Loc::named("vulkan");
  return loc;
}

} // namespace

uint64_t validationMessageCount() { return gValidationMessages.load(); }

std::string resultName(VkResult r) {
  switch (r) {
  case VK_SUCCESS: return "VK_SUCCESS";
  case VK_TIMEOUT: return "VK_TIMEOUT";
  case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
  case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
  case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
  case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
  case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
  case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
  case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
  case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
  case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
  case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
  case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
  case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
  case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
  default: return "VkResult " + std::to_string(static_cast<int>(r));
  }
}

Result<std::shared_ptr<Instance>> createInstance() {
  const char* path = std::getenv("KILN_VULKAN_LOADER");
  if (!path || !*path) path = "libvulkan.so.1";
  // Never closed: drivers and layers keep state for the whole process.
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    return error(where(), std::string("the Vulkan loader could not be opened (") +
                              (why ? why : path) +
                              "); install libvulkan1 and a driver (mesa-vulkan-drivers has "
                              "lavapipe), or set KILN_VULKAN_LOADER to the loader's path");
  }
  std::shared_ptr<Instance> inst(new Instance());
  Api& api = inst->api_;
  api.vkGetInstanceProcAddr =
      reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
  if (!api.vkGetInstanceProcAddr)
    return error(where(), std::string(path) + " has no vkGetInstanceProcAddr; it is not a Vulkan "
                                              "loader");
#define KILN_VK_LOAD_GLOBAL(name)                                                                  \
  api.name = reinterpret_cast<PFN_##name>(api.vkGetInstanceProcAddr(VK_NULL_HANDLE, #name));
  KILN_VK_GLOBAL_FNS(KILN_VK_LOAD_GLOBAL)
#undef KILN_VK_LOAD_GLOBAL
  if (!api.vkCreateInstance || !api.vkEnumerateInstanceVersion ||
      !api.vkEnumerateInstanceLayerProperties || !api.vkEnumerateInstanceExtensionProperties)
    return error(where(), "the Vulkan loader is older than Vulkan 1.1; kiln needs Vulkan 1.2");
  uint32_t version = 0;
  api.vkEnumerateInstanceVersion(&version);
  if (version < VK_API_VERSION_1_2)
    return error(where(), "the Vulkan loader offers Vulkan " +
                              std::to_string(VK_API_VERSION_MAJOR(version)) + "." +
                              std::to_string(VK_API_VERSION_MINOR(version)) +
                              "; kiln needs Vulkan 1.2");

  std::vector<const char*> layers, extensions;
  bool wantValidation = envIs("KILN_VULKAN_VALIDATION", "1");
  if (wantValidation) {
    uint32_t n = 0;
    api.vkEnumerateInstanceLayerProperties(&n, nullptr);
    std::vector<VkLayerProperties> have(n);
    api.vkEnumerateInstanceLayerProperties(&n, have.data());
    for (const VkLayerProperties& l : have)
      if (std::strcmp(l.layerName, "VK_LAYER_KHRONOS_validation") == 0) inst->validation_ = true;
    if (inst->validation_) {
      layers.push_back("VK_LAYER_KHRONOS_validation");
      extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    } else {
      std::fprintf(stderr, "kiln: KILN_VULKAN_VALIDATION=1 but VK_LAYER_KHRONOS_validation is not "
                           "installed (Debian package vulkan-validationlayers); running without "
                           "it\n");
    }
  }
  VkDebugUtilsMessengerCreateInfoEXT messenger{};
  messenger.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
  messenger.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                              VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  messenger.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  messenger.pfnUserCallback = onMessage;

  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "kiln";
  app.pEngineName = "kiln";
  app.apiVersion = version < VK_API_VERSION_1_3 ? version : VK_API_VERSION_1_3;
  VkInstanceCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  ci.pNext = inst->validation_ ? &messenger : nullptr;
  ci.pApplicationInfo = &app;
  ci.enabledLayerCount = static_cast<uint32_t>(layers.size());
  ci.ppEnabledLayerNames = layers.data();
  ci.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  ci.ppEnabledExtensionNames = extensions.data();
  // Messages while an instance fails to be created (the loader finding no driver) explain
  // that failure, which is reported as an error: they are printed but not counted.
  uint64_t messagesBefore = gValidationMessages.load();
  VkResult r = api.vkCreateInstance(&ci, nullptr, &inst->instance_);
  if (r != VK_SUCCESS) gValidationMessages.store(messagesBefore);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
    return error(where(), "no Vulkan driver supports Vulkan 1.2 (VK_ERROR_INCOMPATIBLE_DRIVER); "
                          "install mesa-vulkan-drivers for lavapipe, or point VK_DRIVER_FILES at "
                          "a driver's ICD file");
  if (r != VK_SUCCESS) return error(where(), "vkCreateInstance failed: " + resultName(r));
  watchProcessExit();

  VkInstance vi = inst->instance_;
#define KILN_VK_LOAD(name)                                                                         \
  api.name = reinterpret_cast<PFN_##name>(api.vkGetInstanceProcAddr(vi, #name));                   \
  if (!api.name) return error(where(), "the Vulkan loader lacks " #name);
  KILN_VK_INSTANCE_FNS(KILN_VK_LOAD)
  KILN_VK_DEVICE_FNS(KILN_VK_LOAD)
#undef KILN_VK_LOAD
  if (inst->validation_) {
    api.vkCreateDebugUtilsMessengerEXT = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        api.vkGetInstanceProcAddr(vi, "vkCreateDebugUtilsMessengerEXT"));
    api.vkDestroyDebugUtilsMessengerEXT = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        api.vkGetInstanceProcAddr(vi, "vkDestroyDebugUtilsMessengerEXT"));
    if (!api.vkCreateDebugUtilsMessengerEXT || !api.vkDestroyDebugUtilsMessengerEXT ||
        api.vkCreateDebugUtilsMessengerEXT(vi, &messenger, nullptr, &inst->messenger_) !=
            VK_SUCCESS)
      return error(where(), "the validation layer is enabled but its debug messenger could not "
                            "be created");
  }

  uint32_t n = 0;
  r = api.vkEnumeratePhysicalDevices(vi, &n, nullptr);
  std::vector<VkPhysicalDevice> all(n);
  if (r == VK_SUCCESS || r == VK_INCOMPLETE) r = api.vkEnumeratePhysicalDevices(vi, &n, all.data());
  if (r != VK_SUCCESS && r != VK_INCOMPLETE)
    return error(where(), "vkEnumeratePhysicalDevices failed: " + resultName(r));
  all.resize(n);
  for (VkPhysicalDevice pd : all) {
    uint32_t families = 0;
    api.vkGetPhysicalDeviceQueueFamilyProperties(pd, &families, nullptr);
    std::vector<VkQueueFamilyProperties> fam(families);
    api.vkGetPhysicalDeviceQueueFamilyProperties(pd, &families, fam.data());
    bool compute = false;
    for (const VkQueueFamilyProperties& f : fam)
      compute = compute || (f.queueFlags & VK_QUEUE_COMPUTE_BIT);
    if (compute) inst->devices_.push_back(pd);
  }
  if (inst->devices_.empty())
    return error(where(), "the Vulkan drivers offer no device with a compute queue; install "
                          "mesa-vulkan-drivers for lavapipe, or point VK_DRIVER_FILES at a "
                          "driver's ICD file");
  return inst;
}

namespace {
std::atomic<bool> gExiting{false};
void markExiting() { gExiting.store(true); }
} // namespace

void watchProcessExit() { std::atexit(markExiting); }
bool processExiting() { return gExiting.load(); }

Result<std::shared_ptr<Instance>> Instance::get() {
  static std::mutex mu;
  static std::shared_ptr<Instance> instance;
  static Diags failure;
  static bool tried = false;
  std::lock_guard<std::mutex> lock(mu);
  if (!tried) {
    tried = true;
    Result<std::shared_ptr<Instance>> r = createInstance();
    if (r.ok())
      instance = r.take();
    else
      failure = r.takeDiags();
  }
  if (instance) return instance;
  return failure;
}

Instance::~Instance() {
  if (!instance_ || !api_.vkDestroyInstance || processExiting()) return;
  if (messenger_) api_.vkDestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
  api_.vkDestroyInstance(instance_, nullptr);
}

} // namespace kiln::hal::vulkan
