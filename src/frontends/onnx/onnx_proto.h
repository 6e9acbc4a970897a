// The generated ONNX protobuf classes from Debian's libonnx-dev, under one short name.
#pragma once

#include <onnx/onnx_pb.h>

namespace kiln::onnx {
namespace pb = ::onnx;
}
