// ONNX element types and TensorProto data (inline or in external data files) as kiln
// element types and HostTensors.
#pragma once

#include <optional>
#include <string>

#include "frontends/onnx/onnx_proto.h"
#include "ir/core/diag.h"
#include "ir/core/host_tensor.h"

namespace kiln::onnx {

// The kiln element type of an ONNX TensorProto::DataType, or nullopt when kiln has none.
std::optional<ElemType> elemTypeOf(int32_t onnxType);
std::string onnxTypeName(int32_t onnxType);
// The ONNX TensorProto::DataType of a kiln element type.
int32_t onnxTypeOf(ElemType t);

// The tensor's data; external data resolves against `baseDir`. Errors at `loc`.
Result<HostTensor> tensorFromProto(const pb::TensorProto& t, const std::string& baseDir,
                                   const Loc& loc);
// The same, but raw_data moves out of `t` into the tensor (a view that owns the string)
// instead of being copied: for a model the importer owns, so its weights are held once.
Result<HostTensor> takeTensorFromProto(pb::TensorProto& t, const std::string& baseDir,
                                       const Loc& loc);

} // namespace kiln::onnx
