// Manual tile configurations (--tile-config=FILE, the autotuner's hook): per kernel name, or
// "*" for every kernel, the tile, workgroup and subgroups `tile` must use and whether
// `collapse-dims` may touch the kernel. Absent fields are chosen by `tile`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/core/diag.h"

namespace kiln {

struct TileOverride {
  std::vector<int64_t> tile;      // matmul: [TM, TN, TK]; pointwise: [elements per workgroup]
  std::vector<int64_t> workgroup; // threads [x, y, z]
  int64_t subgroups = 0;          // subgroups per workgroup (threads = subgroups * size)
  bool collapse = true;           // false disables collapse-dims for the kernel
};

using TileOverrides = std::map<std::string, TileOverride>;

// The override for `kernel`: its own entry, else the "*" entry, else null.
const TileOverride* findTileOverride(const TileOverrides& overrides, const std::string& kernel);

// Parses a tile-config JSON file: {"kernels": {"NAME" | "*": {"tile": [..], "workgroup":
// [..], "subgroups": N, "collapse": bool}}}. Malformed files are errors, never crashes.
Result<std::map<std::string, TileOverride>> parseTileConfig(const std::string& text,
                                                            const std::string& file);
Result<std::map<std::string, TileOverride>> readTileConfig(const std::string& path);

} // namespace kiln
