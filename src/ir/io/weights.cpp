// WeightStore: maps a module's weight declarations to tensors in their safetensors files.
#include "ir/io/weights.h"

#include <filesystem>

namespace kiln {

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

  Type actual = Type::tensor(t.elem(), t.shape());
  if (!decl->type.isStatic() || actual != decl->type)
    return error(decl->loc, "weight @" + name + ": tensor '" + decl->tensor + "' in '" + path +
                                "' is " + actual.str() + " but the declaration says " +
                                decl->type.str());
  cache_.emplace(name, t);
  return t;
}

} // namespace kiln
