// The ref backend: kernels stay tensor-level and ship as kiln IR text, which the ref driver's
// reference interpreter runs. No codegen pipeline, no codegen target.
#pragma once

#include "backends/backend.h"

namespace kiln {

const TargetBackend* refBackend();

} // namespace kiln
