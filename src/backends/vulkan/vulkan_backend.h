// The vulkan target backend: lowered kernels to SPIR-V (backends/spirv/), one validated
// module per kernel, in an `exec.vulkan` payload (runtime/vulkan/payload.h) that the vulkan
// driver loads. Kernels `lower` leaves tensor-level go to the ref executable, which vulkan
// devices run on the host.
//
// `--target=vulkan:lavapipe|vulkan:nvidia-sm90|vulkan:generic` compiles for that table row
// (target/target.cpp). Without --target, a device present on this machine compiles for its
// own limits (the row its name matches, withDeviceLimits from the live device); a device
// that cannot be opened (cross-compiling) compiles for vulkan:generic, the limits every
// Vulkan 1.2 device has.
#pragma once

#include "backends/backend.h"
#include "target/target.h"

namespace kiln::spirv {

const TargetBackend* vulkanBackend();

// The codegen target for `devices` (vulkan[N]): `name` when given, else the live device's.
Result<TargetDesc> vulkanCodegenTarget(const std::string& name,
                                       const std::vector<DeviceTarget>& devices);

} // namespace kiln::spirv
