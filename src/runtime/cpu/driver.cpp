// CpuDriver: cpu[0..N-1] share the host's cores (N from KILN_CPU_DEVICES, default 1): each
// device runs its kernels on its own pool of (threads / N) threads, at least one, and with
// N > 1 on a queue thread of its own, so that the devices of one process run at once and
// tensor-parallel work over two cpu devices compares with one device of two threads.
#include <algorithm>
#include <cstdlib>

#include "runtime/cpu/cpu.h"

namespace kiln::hal::cpu {

namespace {

int64_t cpuDeviceCount() {
  const char* env = std::getenv("KILN_CPU_DEVICES");
  if (!env || !*env) return 1;
  char* end = nullptr;
  long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1 || n > 64) return 1;
  return n;
}

int threadsPerDevice() {
  return std::max(1, cpuThreadCount() / static_cast<int>(cpuDeviceCount()));
}

class CpuDriver : public Driver {
public:
  const std::string& name() const override { return name_; }
  std::string target() const override { return "cpu"; }
  bool loads(const std::string& target) const override {
    return target == "cpu" || target == "ref";
  }
  std::vector<DeviceInfo> enumerate() override {
    std::vector<DeviceInfo> out;
    for (int64_t i = 0; i < cpuDeviceCount(); ++i)
      out.push_back({DeviceId{"cpu", i}, kiln::cpu::hostCpuModel() + ", " +
                                             std::to_string(threadsPerDevice()) +
                                             " threads, host memory"});
    return out;
  }
  Result<std::shared_ptr<Device>> open(int64_t ordinal) override {
    if (ordinal < 0 || ordinal >= cpuDeviceCount())
      return error(Loc{}, "device cpu[" + std::to_string(ordinal) +
                              "] does not exist (KILN_CPU_DEVICES=N makes N cpu devices)");
    // Several devices run at once, each on its own queue thread with its share of the cores.
    bool several = cpuDeviceCount() > 1;
    int threads = several ? threadsPerDevice() : 0; // 0: the pool's default
    return std::shared_ptr<Device>(std::make_shared<CpuDevice>(ordinal, threads, several));
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
