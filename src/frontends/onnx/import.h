// The ONNX importer's public interface: an ONNX model (as exported by torch.onnx.export)
// becomes a kiln Module with one function @main plus the tensors of its weights.
//
// Every failure on user input is a diagnostic `model.onnx: node 'NAME' (OpType): error: ...`
// (or `model.onnx: error: ...` outside any node); nothing here aborts on a bad file.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ir/core/diag.h"
#include "ir/core/host_tensor.h"
#include "ir/core/ir.h"

namespace kiln::onnx {

struct ImportOptions {
  // File the weight declarations point at (written by `kiln import --weights`, or provided
  // in memory by `kiln run model.onnx`). Relative to the .kir file.
  std::string weightsFile = "weights.safetensors";
  // Initializers with at most this many elements become inline constants; larger ones
  // become weights.
  int64_t inlineLimit = 64;
  // Graph inputs whose values are given here become constants instead of arguments (the
  // conformance runner uses it for inputs that determine shapes).
  std::map<std::string, HostTensor> constantInputs;
  // Range of the symbols made from ONNX dim_param names: [1, symbolMax] unless
  // symbolRanges names the symbol (by its kiln name); a named symbol the model does not
  // have is an error.
  int64_t symbolMax = 65536;
  std::map<std::string, std::pair<int64_t, int64_t>> symbolRanges;
};

struct Imported {
  std::unique_ptr<Module> module;
  // Weight name -> data, for every weight the module declares.
  std::map<std::string, HostTensor> weights;
  // ONNX names of @main's arguments and results, in order.
  std::vector<std::string> inputNames;
  std::vector<std::string> outputNames;
};

// Reads and imports `path`; external data files resolve against its folder.
Result<Imported> importFile(const std::string& path, const ImportOptions& options = {});
// Imports serialized ModelProto bytes; `name` prefixes diagnostics, `baseDir` is where
// external data files are looked up (empty: external data is an error).
Result<Imported> importBytes(std::string_view bytes, const std::string& name,
                             const std::string& baseDir, const ImportOptions& options = {});

// Op types (default domain) the importer converts, sorted.
std::vector<std::string> supportedOps();

} // namespace kiln::onnx
