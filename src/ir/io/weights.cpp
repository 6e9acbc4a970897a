// WeightStore: maps a module's weight declarations to tensors in their safetensors files.
#include "ir/io/weights.h"

#include <cstring>
#include <filesystem>

namespace kiln {

// Piece `shard.index` of the file's tensor `whole`, a copy: only it stays in memory.
Result<HostTensor> WeightStore::shardOf(const WeightDecl& decl, const HostTensor& whole,
                                        const std::string& path) {
  const WeightShard& s = *decl.shard;
  std::vector<int64_t> shape = whole.shape();
  if (s.axis < 0 || s.axis >= whole.rank() || s.count < 1 ||
      shape[static_cast<size_t>(s.axis)] % s.count != 0)
    return error(decl.loc, "weight @" + decl.name + ": tensor '" + decl.tensor + "' in '" + path +
                               "' is " + Type::tensor(whole.elem(), shape).str() +
                               ", which does not split into " + std::to_string(s.count) +
                               " pieces along dim " + std::to_string(s.axis));
  const int64_t dim = shape[static_cast<size_t>(s.axis)], part = dim / s.count;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < whole.rank(); ++d)
    if (d != s.axis) (d < s.axis ? outer : inner) *= shape[static_cast<size_t>(d)];
  shape[static_cast<size_t>(s.axis)] = part;
  HostTensor t = HostTensor::uninitialized(whole.elem(), shape);
  const size_t bytes = static_cast<size_t>(elemTypeBytes(whole.elem()));
  const size_t row = static_cast<size_t>(part * inner) * bytes;
  for (int64_t o = 0; o < outer; ++o)
    if (row)
      std::memcpy(t.mutableData() + static_cast<size_t>(o) * row,
                  whole.data() + (static_cast<size_t>(o * dim + s.index * part * inner)) * bytes,
                  row);
  return t;
}

Result<HostTensor> WeightStore::get(const std::string& name) {
  if (auto it = cache_.find(name); it != cache_.end()) return it->second;
  const WeightDecl* decl = module_.lookupWeight(name);
  if (!decl) return error(Loc{}, "no weight named @" + name + " is declared in the module");
  if (const HostTensor* t = module_.weightData(name)) {
    if (!decl->type.isStatic() || Type::tensor(t->elem(), t->shape()) != decl->type)
      return error(decl->loc, "weight @" + name + ": the data held in memory is " +
                                  Type::tensor(t->elem(), t->shape()).str() +
                                  " but the declaration says " + decl->type.str());
    return *t;
  }

  std::filesystem::path file(decl->file);
  if (file.is_relative() && !module_.baseDir().empty())
    file = std::filesystem::path(module_.baseDir()) / file;
  std::string path = file.lexically_normal().string();

  auto fit = files_.find(path);
  if (fit == files_.end()) {
    auto opened = SafetensorsFile::open(path);
    if (!opened.ok()) {
      Diag d = error(decl->loc, "cannot load weight @" + name + " from '" + path + "'");
      for (const Diag& cause : opened.diags().list)
        d.notes.push_back(note(cause.loc, cause.message));
      return d;
    }
    fit = files_.emplace(path, opened.take()).first;
  }
  const SafetensorsFile& st = *fit->second;
  if (!st.has(decl->tensor))
    return error(decl->loc,
                 "weight @" + name + ": file '" + path + "' has no tensor '" + decl->tensor + "'");
  KILN_TRY(HostTensor t, st.tensor(decl->tensor));
  if (decl->shard) {
    KILN_TRY(t, shardOf(*decl, t, path));
  }

  Type actual = Type::tensor(t.elem(), t.shape());
  if (!decl->type.isStatic() || actual != decl->type)
    return error(decl->loc, "weight @" + name + ": tensor '" + decl->tensor + "' in '" + path +
                                "' is " + actual.str() + " but the declaration says " +
                                decl->type.str());
  cache_.emplace(name, t);
  return t;
}

} // namespace kiln
