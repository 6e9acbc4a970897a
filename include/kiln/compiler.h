// kiln's compiler embedding API (C++): a model from a file or from memory to a module,
// as a Program in memory (run it with RuntimeModule::fromProgram) or as .kmod bytes.
//
//   auto bytes = kiln::compileFileToBytes("model.kir", {});   // Result<std::string>
//   auto m = kiln::RuntimeModule::fromBytes(bytes.take());
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "compiler/compiler.h"
#include "ir/core/diag.h"
#include "runtime/program.h"

namespace kiln {

Result<Program> compileFile(const std::string& path, const CompileOptions& opts = {});
Result<Program> compileText(std::string_view kirText, const std::string& name,
                            const CompileOptions& opts = {});
// A serialized ONNX ModelProto (what onnx.ModelProto.SerializeToString gives). `name` prefixes
// its errors; external data files resolve against `onnx.baseDir` (empty: external data is an
// error); `onnx.symbolRanges` gives symbols made from dim_param names ranges other than
// [1, 65536] (by kiln name, `{"seq": {1, 2048}}`).
struct OnnxOptions {
  std::string baseDir;
  std::map<std::string, std::pair<int64_t, int64_t>> symbolRanges;
};
Result<Program> compileOnnx(std::string_view bytes, const std::string& name,
                            const CompileOptions& opts = {}, const OnnxOptions& onnx = {});
// Peak memory of entry `function`'s schedule (FunctionStats) with the symbols in `values` at
// those values and the others at their upper bounds. A value outside its symbol's range, or
// a symbol the program does not declare, is an error.
Result<FunctionStats> memoryAt(const Program& program, const std::string& function,
                               const SymbolBinding& values);
// The same, serialized as a .kmod file's bytes.
Result<std::string> compileFileToBytes(const std::string& path, const CompileOptions& opts = {});
Result<std::string> compileTextToBytes(std::string_view kirText, const std::string& name,
                                       const CompileOptions& opts = {});

} // namespace kiln
