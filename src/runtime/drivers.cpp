// The driver table and the process-wide cache of opened devices.
#include "runtime/drivers.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "runtime/cpu/cpu.h"
#include "runtime/cuda/cuda.h"
#include "runtime/hip/hip.h"
#include "runtime/ref/ref.h"
#ifdef KILN_HAVE_VULKAN
#include "runtime/vulkan/vulkan.h"
#endif

namespace kiln::hal {

const std::vector<Driver*>& drivers() {
  // One row per driver; hip and cuda need no headers (they dlopen their libraries), so every
  // build has them.
  // clang-format off
  static const std::vector<Driver*> all = {
      ref::refDriver(),
      ref::simDriver(),
      cpu::cpuDriver(),
#ifdef KILN_HAVE_VULKAN
      vulkan::vulkanDriver(),
#endif
      hip::hipDriver(),
      cuda::cudaDriver(),
  };
  // clang-format on
  return all;
}

Driver* lookupDriver(const std::string& kind) {
  for (Driver* d : drivers())
    if (d->name() == kind) return d;
  return nullptr;
}

std::string driverNames() {
  std::string s;
  for (Driver* d : drivers()) s += (s.empty() ? "" : ", ") + d->name();
  return s;
}

uint64_t vulkanValidationMessages() {
#ifdef KILN_HAVE_VULKAN
  return vulkan::validationMessageCount();
#else
  return 0;
#endif
}

Result<DeviceId> parseDeviceId(const std::string& text, const Loc& where) {
  DeviceId id{text, 0};
  if (size_t open = text.find('['); open != std::string::npos) {
    id.kind = text.substr(0, open);
    std::string num = text.substr(open + 1);
    if (num.size() < 2 || num.back() != ']' ||
        num.find_first_not_of("0123456789") != num.size() - 1 || num.size() > 10)
      return error(where, "bad device '" + text + "': expected KIND or KIND[N], such as ref[0]");
    id.ordinal = std::stoll(num.substr(0, num.size() - 1));
  }
  if (id.kind.empty())
    return error(where, "bad device '" + text + "': expected KIND or KIND[N], such as ref[0]");
  return id;
}

namespace {

std::mutex& openedMutex() {
  static std::mutex mu;
  return mu;
}

std::map<std::string, std::shared_ptr<Device>>& openedDevices() {
  static std::map<std::string, std::shared_ptr<Device>> opened;
  return opened;
}

// Releases the cached devices at exit while the libraries that opening them loaded (a
// Vulkan driver and its layers, whose own globals die at exit) are still whole: the
// handler is registered after each open, so it runs before their destructors.
void closeOpenedDevices() {
  std::map<std::string, std::shared_ptr<Device>> closing;
  {
    std::lock_guard<std::mutex> lock(openedMutex());
    closing.swap(openedDevices());
  }
}

} // namespace

Result<std::shared_ptr<Device>> openDevice(const DeviceId& id, const Loc& where) {
  std::lock_guard<std::mutex> lock(openedMutex());
  auto& opened = openedDevices();
  if (auto it = opened.find(id.str()); it != opened.end()) return it->second;
  Driver* driver = lookupDriver(id.kind);
  if (!driver)
    return error(where, "unknown device kind '" + id.kind + "' (available: " + driverNames() + ")");
  std::vector<DeviceInfo> devices = driver->enumerate();
  bool exists = false;
  for (const DeviceInfo& d : devices) exists = exists || d.id == id;
  if (!exists) {
    if (devices.empty()) {
      std::string why = driver->unavailableReason();
      return error(where,
                   "no " + id.kind + " devices are available" + (why.empty() ? "" : ": " + why));
    }
    std::string have = devices.size() == 1
                           ? devices[0].id.str()
                           : devices.front().id.str() + ".." + devices.back().id.str();
    return error(where, "device " + id.str() + " does not exist; this build has " + have);
  }
  KILN_TRY(std::shared_ptr<Device> dev, driver->open(id.ordinal));
  opened[id.str()] = dev;
  std::atexit(closeOpenedDevices);
  return dev;
}

} // namespace kiln::hal
