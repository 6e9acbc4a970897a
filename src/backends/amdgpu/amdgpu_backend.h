// The amdgpu backend: lowered kernels for AMD GPUs (targets amdgpu:gfx90a, amdgpu:gfx942,
// amdgpu:gfx1100) through LLVM's AMDGPU target, linked by lld into one HSA code object
// (code object v5) per executable; run by the hip driver (src/runtime/hip).
#pragma once

#include "backends/backend.h"

namespace kiln::amdgpu {

const TargetBackend* amdgpuBackend();

} // namespace kiln::amdgpu
