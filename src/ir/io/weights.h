// WeightStore: resolves a module's weight declarations to tensors, by mmap of their
// safetensors files, once per file, cached for the store's lifetime.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "ir/core/ir.h"
#include "ir/io/safetensors.h"

namespace kiln {

class WeightStore {
public:
  explicit WeightStore(const Module& m) : module_(m) {}
  // The weight's data; an error (at the declaration's location) when the file is missing
  // or unreadable, the tensor is absent, or its dtype/shape differ from the declaration.
  Result<HostTensor> get(const std::string& name);

  // Piece `decl.shard` of `whole` (a copy); an error names `path` when it does not split.
  static Result<HostTensor> shardOf(const WeightDecl& decl, const HostTensor& whole,
                                    const std::string& path);

private:
  const Module& module_;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, HostTensor> cache_;
};

} // namespace kiln
