// Device targets: `kind[ordinal]` (ref[0], cpu[0], vulkan[1], hip[7]) and the declarations a
// module carries (`device @d1 = ref[1]`, or unnamed `device ref[0]`). Resolving a module's
// device references against its declarations is placement's job (passes/placement.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/core/diag.h"

namespace kiln {

struct DeviceTarget {
  std::string kind; // ref, cpu, vulkan, hip
  int64_t ordinal = 0;

  std::string str() const { return kind + "[" + std::to_string(ordinal) + "]"; }
  bool operator==(const DeviceTarget&) const = default;
  auto operator<=>(const DeviceTarget&) const = default;
};

// The device kinds kiln knows, in the order `kiln devices` lists them.
const std::vector<std::string_view>& deviceKinds();

// Parses "ref[2]" (and "ref", meaning ref[0]); an unknown kind or a bad ordinal is an
// error at `where` that lists the known kinds.
Result<DeviceTarget> parseDeviceTarget(std::string_view text, const Loc& where);

// A module-level declaration; `name` is empty for `device ref[0]`.
struct DeviceDecl {
  std::string name;
  DeviceTarget target;
  Loc loc;
};

// Largest declared set the affinity lattice represents (one bit per device).
inline constexpr size_t kMaxDevices = 64;

} // namespace kiln
