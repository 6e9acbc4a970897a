// Device targets: the known kinds and the KIND[ORDINAL] spelling.
#include "ir/core/device.h"

#include <charconv>

namespace kiln {

const std::vector<std::string_view>& deviceKinds() {
  static const std::vector<std::string_view> kinds = {"ref", "sim", "cpu", "vulkan", "hip", "cuda"};
  return kinds;
}

Result<DeviceTarget> parseDeviceTarget(std::string_view text, const Loc& where) {
  std::string_view kind = text.substr(0, text.find('['));
  std::string known;
  bool isKnown = false;
  for (std::string_view k : deviceKinds()) {
    known += (known.empty() ? "" : ", ") + std::string(k);
    isKnown = isKnown || k == kind;
  }
  if (!isKnown)
    return error(where, "unknown device kind '" + std::string(kind) + "' in '" + std::string(text) +
                            "' (kinds: " + known + "; write KIND[ORDINAL])");
  DeviceTarget t{std::string(kind), 0};
  if (kind.size() == text.size()) return t;
  std::string_view rest = text.substr(kind.size());
  std::string_view digits = rest.substr(1, rest.size() >= 2 ? rest.size() - 2 : 0);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), t.ordinal);
  if (rest.size() < 3 || rest.back() != ']' || ec != std::errc() ||
      end != digits.data() + digits.size() || t.ordinal < 0 || t.ordinal > 65535)
    return error(where, "bad device '" + std::string(text) +
                            "': expected KIND[ORDINAL] with an ordinal in [0, 65535], like " +
                            std::string(kind) + "[0]");
  return t;
}

} // namespace kiln
