// loadSourceModule: the one place a model file becomes a verified tensor-level Module.
#include "compiler/compiler.h"
#include "ir/parser.h"
#include "ir/verifier.h"

namespace kiln {

Result<std::unique_ptr<Module>> loadSourceModule(const std::string& path) {
  // The ONNX importer plugs in here: `.onnx` becomes a tensor-level Module like `.kir`.
  if (path.ends_with(".onnx"))
    return error(Loc::named(path), "ONNX input is not supported yet in this build");
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
