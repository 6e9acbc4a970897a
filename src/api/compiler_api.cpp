// include/kiln/compiler.h: compile from a file or from memory.
#include "kiln/compiler.h"
#include "runtime/module_format.h"

namespace kiln {

Result<Program> compileFile(const std::string& path, const CompileOptions& opts) {
  KILN_TRY(std::unique_ptr<Module> m, loadSourceModule(path));
  return compileProgram(std::move(m), opts);
}

Result<Program> compileText(std::string_view kirText, const std::string& name,
                            const CompileOptions& opts) {
  KILN_TRY(std::unique_ptr<Module> m, loadSourceText(kirText, name));
  return compileProgram(std::move(m), opts);
}

Result<std::string> compileFileToBytes(const std::string& path, const CompileOptions& opts) {
  KILN_TRY(Program p, compileFile(path, opts));
  return serializeProgram(p);
}

Result<std::string> compileTextToBytes(std::string_view kirText, const std::string& name,
                                       const CompileOptions& opts) {
  KILN_TRY(Program p, compileText(kirText, name, opts));
  return serializeProgram(p);
}

} // namespace kiln
