// kiln's compiler embedding API (C++): a model from a file or from memory to a module,
// as a Program in memory (run it with RuntimeModule::fromProgram) or as .kmod bytes.
//
//   auto bytes = kiln::compileFileToBytes("model.kir", {});   // Result<std::string>
//   auto m = kiln::RuntimeModule::fromBytes(bytes.take());
#pragma once

#include <string>
#include <string_view>

#include "compiler/compiler.h"
#include "ir/diag.h"
#include "runtime/program.h"

namespace kiln {

Result<Program> compileFile(const std::string& path, const CompileOptions& opts = {});
Result<Program> compileText(std::string_view kirText, const std::string& name,
                            const CompileOptions& opts = {});
// The same, serialized as a .kmod file's bytes.
Result<std::string> compileFileToBytes(const std::string& path, const CompileOptions& opts = {});
Result<std::string> compileTextToBytes(std::string_view kirText, const std::string& name,
                                       const CompileOptions& opts = {});

} // namespace kiln
