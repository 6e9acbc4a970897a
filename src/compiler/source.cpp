// loadSourceModule: the one place a model file becomes a verified tensor-level Module.
#include "compiler/compiler.h"
#include "frontends/onnx/import.h"
#include "ir/text/parser.h"
#include "ir/verify/verifier.h"

namespace kiln {

Result<std::unique_ptr<Module>> loadSourceModule(const std::string& path) {
  // An ONNX model becomes a tensor-level Module like `.kir`; its weights stay in memory.
  if (path.ends_with(".onnx")) {
    KILN_TRY(onnx::Imported imported, onnx::importFile(path));
    KILN_CHECK(verifyModule(*imported.module));
    for (auto& [name, t] : imported.weights) imported.module->setWeightData(name, std::move(t));
    return std::move(imported.module);
  }
  if (path.ends_with(".kmod"))
    return error(Loc::named(path), "this is a compiled module (.kmod); it cannot be compiled "
                                   "again (run it with kiln run, inspect it with kiln dump)");
  KILN_TRY(std::unique_ptr<Module> m, parseModuleFile(path));
  KILN_CHECK(verifyModule(*m));
  return m;
}

Result<std::unique_ptr<Module>> loadSourceText(std::string_view text, const std::string& name) {
  KILN_TRY(std::unique_ptr<Module> m, parseModule(text, name));
  KILN_CHECK(verifyModule(*m));
  return m;
}

} // namespace kiln
