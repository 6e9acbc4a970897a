// include/kiln/compiler.h: compile from a file or from memory.
#include "compiler/memory.h"
#include "frontends/onnx/import.h"
#include "ir/verify/verifier.h"
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

Result<Program> compileOnnx(std::string_view bytes, const std::string& name,
                            const CompileOptions& opts, const OnnxOptions& onnx) {
  onnx::ImportOptions importOpts;
  importOpts.symbolRanges = onnx.symbolRanges;
  KILN_TRY(onnx::Imported imported, onnx::importBytes(bytes, name, onnx.baseDir, importOpts));
  KILN_CHECK(verifyModule(*imported.module));
  for (auto& [w, t] : imported.weights) imported.module->setWeightData(w, std::move(t));
  return compileProgram(std::move(imported.module), opts);
}

Result<FunctionStats> memoryAt(const Program& program, const std::string& function,
                               const SymbolBinding& values) {
  const Func* f = program.entry(function);
  if (!f) return error(Loc::named(function), "no function @" + function + " in the module");
  // The analysis takes every symbol at its upper bound: pin the given ones to one value.
  SymbolTable syms;
  for (const auto& [name, info] : program.host->symbols().all()) {
    SymbolInfo pinned = info;
    if (auto it = values.find(name); it != values.end()) {
      if (it->second < info.lo || it->second > info.hi)
        return error(Loc::named(name), "symbol '" + name + "' = " + std::to_string(it->second) +
                                           " is outside its range [" + std::to_string(info.lo) +
                                           ", " + std::to_string(info.hi) + "]");
      pinned.lo = pinned.hi = it->second;
      pinned.divisor = 1;
    }
    KILN_CHECK(syms.declare(pinned));
  }
  for (const auto& [name, v] : values)
    if (!program.host->symbols().lookup(name))
      return error(Loc::named(name), "the module declares no symbol '" + name + "'");
  return analyzeMemory(*f, syms);
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
