// The payload of a vulkan executable (target "vulkan", section `exec.vulkan` of a .kmod): what
// the SPIR-V backend writes and the vulkan driver loads. It holds, per kernel, the SPIR-V
// module and everything the driver must know to build its pipeline and to refuse it on a
// device that cannot run it, without looking into compiler IR.
//
// A backend fills a VulkanPayload and calls serializeVulkanPayload; parseVulkanPayload is
// strict: a malformed container, an inconsistent field or a SPIR-V module whose header,
// instruction stream, capabilities, extensions, entry point or LocalSize disagree with the
// kernel's fields is an error, never a crash. The device-dependent checks (limits, features)
// happen when a device loads the payload (vulkan/executable.cpp).
//
// This file does not include Vulkan headers: the compiler links it whether or not the build
// has the Vulkan driver.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/core/diag.h"

namespace kiln::vulkan {

// One push constant: the value of a symbol (the launch's `push` list gives the order), as a
// 32- or 64-bit signed integer. The layout packs them in order, each at an offset aligned to
// its size: {i32 n, i64 m, i32 k} is at offsets 0, 8, 16 (20 bytes in all).
enum class PushType : uint8_t { I32 = 1, I64 = 2 };

struct VulkanPushConstant {
  std::string symbol; // the symbol whose value it is, for messages ("seq")
  PushType type = PushType::I32;
};

// Binding i of descriptor set 0: a storage buffer (inputs, then outputs, as the launch's
// operands). `written` says whether the kernel stores to it (the driver orders a later reader
// after it); `maxBytes` is the most bytes the kernel may address through it when the compiler
// knows a bound (symbol ranges), else 0; a bound above the device's maxStorageBufferRange is
// refused at load, an actual buffer above it at dispatch.
struct VulkanBindingInfo {
  bool written = false;
  uint64_t maxBytes = 0;
};

struct VulkanKernelInfo {
  std::string name;            // the kernel function (what `launch` names)
  std::string entryPoint;      // its OpEntryPoint GLCompute name in `spirv`
  std::vector<uint32_t> spirv; // the SPIR-V module, one entry point
  std::vector<VulkanBindingInfo> bindings;
  std::vector<VulkanPushConstant> push;              // in the launch's `push` order
  std::array<uint32_t, 3> workgroupSize = {1, 1, 1}; // equal to the module's LocalSize
  uint32_t sharedMemoryBytes = 0;                    // Workgroup storage the kernel declares in all
  uint32_t requiredSubgroupSize = 0; // 0: any; else the pipeline requires exactly this size
  bool fullSubgroups = false;        // every subgroup is full (computeFullSubgroups)
  // Every OpCapability and OpExtension of `spirv` (SPIR-V enum values and names, such as
  // 11 = Int64 and "SPV_KHR_16bit_storage"); the parser checks that the module declares no
  // other, and the loader that the device offers each.
  std::vector<uint32_t> capabilities;
  std::vector<std::string> extensions;
};

struct VulkanPayload {
  std::vector<VulkanKernelInfo> kernels; // kernel N of the executable is kernels[N]
};

// Bytes of the push-constant block of `push` (with the layout above) and each value's offset.
uint32_t pushConstantBytes(const std::vector<VulkanPushConstant>& push,
                           std::vector<uint32_t>* offsets = nullptr);

// A SPIR-V capability's name ("Int64"), or its number when this table does not know it.
std::string capabilityName(uint32_t capability);

std::string serializeVulkanPayload(const VulkanPayload& p);
Result<VulkanPayload> parseVulkanPayload(const std::string& bytes);

// What a structural scan of a SPIR-V module finds (no validation of types or semantics).
struct SpirvModuleInfo {
  uint32_t version = 0; // 0x00010300 for SPIR-V 1.3
  std::vector<uint32_t> capabilities;
  std::vector<std::string> extensions;
  std::vector<std::string> computeEntryPoints;
  // LocalSize of the entry point `entry` when scanned for one, else zeros.
  std::array<uint32_t, 3> localSize = {0, 0, 0};
};
// Checks the header and that every instruction's word count stays inside the module.
Result<SpirvModuleInfo> scanSpirv(const std::vector<uint32_t>& words, const std::string& entry);

} // namespace kiln::vulkan
