// The tile-config reader (see tile_config.h).
#include "target/tile_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kiln {

const TileOverride* findTileOverride(const TileOverrides& overrides, const std::string& kernel) {
  auto it = overrides.find(kernel);
  if (it == overrides.end()) it = overrides.find("*");
  return it == overrides.end() ? nullptr : &it->second;
}

Result<std::map<std::string, TileOverride>> parseTileConfig(const std::string& text,
                                                            const std::string& file) {
  Loc loc = Loc::named(file);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return error(loc, "tile config is not valid JSON");
  if (!j.is_object() || !j.contains("kernels") || !j["kernels"].is_object())
    return error(loc, "tile config needs an object {\"kernels\": {NAME: {...}}}");
  std::map<std::string, TileOverride> out;
  auto ints = [&](const nlohmann::json& v, const std::string& what,
                  const std::string& k) -> Result<std::vector<int64_t>> {
    if (!v.is_array()) return error(loc, "kernel '" + k + "': " + what + " must be a list");
    std::vector<int64_t> r;
    for (const auto& e : v) {
      if (!e.is_number_integer())
        return error(loc, "kernel '" + k + "': " + what + " entries must be integers");
      int64_t x = e.get<int64_t>();
      if (x < 1 || x > (int64_t(1) << 20))
        return error(loc, "kernel '" + k + "': " + what + " entry " + std::to_string(x) +
                              " is out of range [1, 1048576]");
      r.push_back(x);
    }
    return r;
  };
  for (const auto& [name, cfg] : j["kernels"].items()) {
    if (!cfg.is_object()) return error(loc, "kernel '" + name + "': expected an object");
    TileOverride o;
    for (const auto& [key, v] : cfg.items()) {
      if (key == "tile") {
        KILN_TRY(o.tile, ints(v, "tile", name));
      } else if (key == "workgroup") {
        KILN_TRY(o.workgroup, ints(v, "workgroup", name));
        if (o.workgroup.size() != 3)
          return error(loc, "kernel '" + name + "': workgroup must have 3 entries");
      } else if (key == "subgroups") {
        if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 1024)
          return error(loc, "kernel '" + name + "': subgroups must be an integer in [1, 1024]");
        o.subgroups = v.get<int64_t>();
      } else if (key == "collapse") {
        if (!v.is_boolean()) return error(loc, "kernel '" + name + "': collapse must be a bool");
        o.collapse = v.get<bool>();
      } else {
        return error(loc, "kernel '" + name + "': unknown key '" + key +
                              "' (known: tile, workgroup, subgroups, collapse)");
      }
    }
    out.emplace(name, std::move(o));
  }
  return out;
}

Result<std::map<std::string, TileOverride>> readTileConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return error(Loc::named(path), "cannot read tile config file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parseTileConfig(ss.str(), path);
}

} // namespace kiln
