// The Driver of one vendor's GPUs (hip, cuda): enumeration, the reason there are no devices,
// and opening a device as a GpuDevice, over the few calls each vendor's driver implements.
#pragma once

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/gpu/device.h"

namespace kiln::hal::gpu {

class GpuDriver : public Driver {
public:
  // Devices `name[N]` that run executables of `target` (and `ref`).
  GpuDriver(std::string name, std::string target)
      : name_(std::move(name)), target_(std::move(target)) {}
  const std::string& name() const override { return name_; }
  std::string target() const override { return target_; }
  bool loads(const std::string& target) const override {
    return target == target_ || target == "ref";
  }
  std::vector<DeviceInfo> enumerate() override;
  std::string unavailableReason() override;
  Result<std::shared_ptr<Device>> open(int64_t ordinal) override;

protected:
  // The vendor library, opened and initialized, or why it cannot be used.
  virtual Status library() = 0;
  // The devices it offers (0 when it finds none); called only when library() is ok.
  virtual int deviceCount() = 0;
  // Why it offers none: "the HIP runtime (PATH) finds no AMD GPU".
  virtual std::string noDevices() = 0;
  virtual Result<GpuDeviceInfo> describe(int ordinal) = 0;
  // The calls into the library for device `ordinal` (`info` from describe), its stream made.
  virtual Result<std::unique_ptr<GpuApi>> connect(int ordinal, const GpuDeviceInfo& info) = 0;

private:
  std::string name_, target_;
};

// "196592 MiB", "64 KiB" (or "1000 bytes"), for descriptions.
std::string mebibytes(uint64_t bytes);
std::string kibibytes(uint64_t bytes);

// The library `open` makes of the path in environment variable `env`, made once per path and
// kept (with its failure) for the process: tests point the variable at fakes and at nothing
// in turn.
template <typename Library>
Result<std::shared_ptr<const Library>>
oncePerPath(const char* env, Result<std::shared_ptr<const Library>> (*open)()) {
  static std::mutex mu;
  static std::map<std::string, Result<std::shared_ptr<const Library>>> opened;
  const char* path = std::getenv(env);
  std::string key = path ? path : "";
  std::lock_guard<std::mutex> lock(mu);
  auto it = opened.find(key);
  if (it == opened.end()) it = opened.emplace(key, open()).first;
  return it->second;
}

} // namespace kiln::hal::gpu
