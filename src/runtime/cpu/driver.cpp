// CpuDriver: one device, cpu[0], the host's cores.
#include "runtime/cpu/cpu.h"

namespace kiln::hal::cpu {

namespace {

class CpuDriver : public Driver {
public:
  const std::string& name() const override { return name_; }
  std::string target() const override { return "cpu"; }
  bool loads(const std::string& target) const override {
    return target == "cpu" || target == "ref";
  }
  std::vector<DeviceInfo> enumerate() override {
    return {{DeviceId{"cpu", 0}, kiln::cpu::hostCpuModel() + ", " +
                                     std::to_string(cpuThreadCount()) + " threads, host memory"}};
  }
  Result<std::shared_ptr<Device>> open(int64_t ordinal) override {
    if (ordinal != 0)
      return error(Loc{}, "device cpu[" + std::to_string(ordinal) + "] does not exist");
    return std::shared_ptr<Device>(std::make_shared<CpuDevice>(ordinal));
  }

private:
  std::string name_ = "cpu";
};

} // namespace

Driver* cpuDriver() {
  static CpuDriver driver;
  return &driver;
}

} // namespace kiln::hal::cpu
