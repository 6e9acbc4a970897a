// safetensors files: read by mmap (header parsed with nlohmann::json), and written.
//
// Format: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data. Every offset and size is checked against the file before use.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/core/diag.h"
#include "ir/core/host_tensor.h"

namespace kiln {

class SafetensorsFile {
public:
  static Result<std::shared_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;
  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  // A view into the mapping (keeps the file mapped while the tensor lives).
  Result<HostTensor> tensor(const std::string& name) const;

  struct Entry {
    ElemType elem;
    std::vector<int64_t> shape;
    size_t begin, end;
  };

private:
  std::string path_;
  std::shared_ptr<const void> mapping_;
  const uint8_t* data_ = nullptr; // first byte after the header
  std::map<std::string, Entry> entries_;
};

Status writeSafetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors);

} // namespace kiln
