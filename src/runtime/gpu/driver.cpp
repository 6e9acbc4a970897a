// GpuDriver: what the hip and cuda drivers do alike around their vendor calls.
#include "runtime/gpu/driver.h"

namespace kiln::hal::gpu {

std::string mebibytes(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

std::string kibibytes(uint64_t bytes) {
  return bytes % 1024 ? std::to_string(bytes) + " bytes" : std::to_string(bytes >> 10) + " KiB";
}

std::vector<DeviceInfo> GpuDriver::enumerate() {
  if (!library().ok()) return {};
  std::vector<DeviceInfo> out;
  for (int i = 0, n = deviceCount(); i < n; ++i) {
    Result<GpuDeviceInfo> d = describe(i);
    out.push_back(
        {DeviceId{name_, i}, d.ok() ? d->description : "unusable: " + d.diags().list[0].message});
  }
  return out;
}

std::string GpuDriver::unavailableReason() {
  Status lib = library();
  if (!lib.ok()) return lib.diags().list.empty() ? "unknown" : lib.diags().list[0].message;
  return deviceCount() == 0 ? noDevices() : "";
}

Result<std::shared_ptr<Device>> GpuDriver::open(int64_t ordinal) {
  KILN_CHECK(library());
  if (ordinal < 0 || ordinal >= deviceCount())
    return error(Loc{}, "device " + name_ + "[" + std::to_string(ordinal) + "] does not exist");
  int n = static_cast<int>(ordinal);
  KILN_TRY(GpuDeviceInfo info, describe(n));
  KILN_TRY(std::unique_ptr<GpuApi> api, connect(n, info));
  return std::shared_ptr<Device>(std::make_shared<GpuDevice>(DeviceId{name_, ordinal}, target_,
                                                             std::move(info), std::move(api)));
}

} // namespace kiln::hal::gpu
