// The cuda backend: lowered kernels for NVIDIA GPUs (targets cuda:sm_80, cuda:sm_90) through
// LLVM's NVPTX target, as one PTX module per executable that the cuda driver
// (src/runtime/cuda) JIT-compiles when it loads the module.
#pragma once

#include "backends/backend.h"

namespace kiln::nvptx {

const TargetBackend* cudaBackend();

} // namespace kiln::nvptx
