// mapFile: a read-only memory map of a whole regular file (safetensors weights, .kmod
// modules), kept alive by whoever holds its `mapping`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ir/core/diag.h"

namespace kiln {

struct MappedFile {
  std::shared_ptr<const void> mapping; // unmaps when the last holder lets go
  const uint8_t* data = nullptr;       // null for an empty file
  uint64_t size = 0;
};

// An error located at `path` when it cannot be opened, is not a regular file, or cannot be
// mapped. An empty file is not an error (size 0): callers check the size they need.
Result<MappedFile> mapFile(const std::string& path);

} // namespace kiln
