// The driver registry: every driver built into this binary, and the devices opened so far.
//
// Adding a driver (cpu, vulkan, hip, sim) is one factory row in drivers.cpp; a driver whose
// system library is missing enumerates no devices rather than failing. Devices are opened
// once per process and shared, so repeated loads see one memory pool per device.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/hal.h"

namespace kiln::hal {

// Every driver, in a fixed order (ref first).
const std::vector<Driver*>& drivers();
Driver* lookupDriver(const std::string& kind);
// Comma-separated driver names, for error messages ("ref").
std::string driverNames();
// The device `id`, opened on first use; an unknown kind or a missing ordinal is an error
// located at `where` that lists what exists.
Result<std::shared_ptr<Device>> openDevice(const DeviceId& id, const Loc& where);
// Warnings and errors the Vulkan validation layer reported in this process
// (KILN_VULKAN_VALIDATION=1); 0 in a build without the vulkan driver.
uint64_t vulkanValidationMessages();

} // namespace kiln::hal
