// `kiln devices`: every device each built-in driver sees.
#include <iostream>

#include "cli.h"

namespace kiln::cli {

const char* const kDevicesHelp = R"(usage: kiln devices

Lists the devices every available driver sees, one per line: KIND[N], the executable
target, a description and the memory limit; a driver whose system library or driver is
missing prints why it has no devices. `vulkan` devices: every device with a compute queue
that the Vulkan loader offers (name, driver, memory, subgroup size, shared-memory and
workgroup limits). `hip` and `cuda` devices: every AMD GPU the HIP runtime offers
(libamdhip64.so, or the library KILN_HIP_LIBRARY names) and every NVIDIA GPU the CUDA driver
offers (libcuda.so.1, or KILN_CUDA_LIBRARY), with name, architecture (gcnArchName, sm_XY),
memory and limits. `ref` devices: ref[0]..ref[7], or set
KILN_REF_DEVICES=N (1 to 64) for ref[0]..ref[N-1].
)";

int runDevices(const std::vector<std::string>& args) {
  auto parsed = parseArgs(args, {}, "devices");
  if (!parsed.ok()) return fail(parsed.diags());
  if (parsed->help) {
    std::cout << kDevicesHelp;
    return 0;
  }
  if (!parsed->positional.empty()) return fail(error(Loc{}, "kiln devices takes no arguments"));
  for (hal::Driver* d : hal::drivers()) {
    std::vector<hal::DeviceInfo> devices = d->enumerate();
    if (devices.empty()) {
      std::string why = d->unavailableReason();
      if (!why.empty()) std::cout << d->name() << ": no devices: " << why << "\n";
    }
    for (const hal::DeviceInfo& info : devices) {
      auto dev = hal::openDevice(info.id, Loc::named(info.id.str()));
      std::cout << info.id.str() << "  target " << d->target() << "  " << info.description;
      if (dev.ok()) std::cout << "  max buffer " << (*dev)->limits().maxBufferBytes << " bytes";
      std::cout << "\n";
    }
  }
  return 0;
}

} // namespace kiln::cli
