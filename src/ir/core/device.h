// Device targets: `kind[ordinal]` (ref[0], cpu[0], vulkan[1], hip[7]), the declarations a
// module carries (`device @d1 = ref[1]`, or unnamed `device ref[0]`), and the resolution of
// every device reference in a module against the declared set.
//
// The declared set is the module's `device` lines plus the `--device=` flags. A reference
// to a target outside it (an op's `on hip[7]`, a pinned argument or result) is an error
// that names the op and the device and prints the exact flag to add; `--devices=auto`
// declares every referenced target instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/core/diag.h"

namespace kiln {

class Module;

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

// What the command line says about devices.
struct DeviceFlags {
  std::vector<std::string> devices; // --device=KIND[ORDINAL], in order
  bool autoDeclare = false;         // --devices=auto
};

// Adds the flags' targets to the module's declarations (a target already declared is kept
// once), declares every referenced target when `autoDeclare`, then checks that every
// reference resolves. Errors name the op (printed as a note) and the device, and end with
// "add --device=KIND[N]".
Status resolveDevices(Module& m, const DeviceFlags& flags);

} // namespace kiln
