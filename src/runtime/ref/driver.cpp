// RefDriver: enumerates ref[0..N-1] (N from KILN_REF_DEVICES, default 8) and opens them.
#include <cstdlib>
#include <string>

#include "runtime/ref/ref.h"

namespace kiln::hal::ref {

namespace {

int64_t refDeviceCount() {
  const char* env = std::getenv("KILN_REF_DEVICES");
  constexpr int64_t kDefault = 8;
  if (!env || !*env) return kDefault;
  char* end = nullptr;
  long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1 || n > 64) return kDefault;
  return n;
}

class RefDriver : public Driver {
public:
  const std::string& name() const override { return name_; }
  std::string target() const override { return "ref"; }
  std::vector<DeviceInfo> enumerate() override {
    std::vector<DeviceInfo> out;
    for (int64_t i = 0; i < refDeviceCount(); ++i)
      out.push_back({DeviceId{"ref", i}, "reference interpreter, host memory"});
    return out;
  }
  Result<std::shared_ptr<Device>> open(int64_t ordinal) override {
    if (ordinal < 0 || ordinal >= refDeviceCount())
      return error(Loc{}, "device ref[" + std::to_string(ordinal) + "] does not exist");
    return std::shared_ptr<Device>(std::make_shared<RefDevice>("ref", ordinal));
  }

private:
  std::string name_ = "ref";
};

} // namespace

Driver* refDriver() {
  static RefDriver driver;
  return &driver;
}

namespace {

// One sim device: it exists to prove lowering, not to share work.
class SimDriver : public Driver {
public:
  const std::string& name() const override { return name_; }
  std::string target() const override { return "sim"; }
  std::vector<DeviceInfo> enumerate() override {
    return {{DeviceId{"sim", 0}, "kernel-IR simulator, host memory"}};
  }
  Result<std::shared_ptr<Device>> open(int64_t ordinal) override {
    if (ordinal != 0)
      return error(Loc{}, "device sim[" + std::to_string(ordinal) + "] does not exist");
    return std::shared_ptr<Device>(std::make_shared<RefDevice>("sim", ordinal));
  }

private:
  std::string name_ = "sim";
};

} // namespace

Driver* simDriver() {
  static SimDriver driver;
  return &driver;
}

} // namespace kiln::hal::ref
