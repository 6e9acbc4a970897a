// The sim backend: the codegen pipeline (fuse, collapse-dims, tile, pad, lower) for any
// codegen target of target.h's table, the kernels shipped as kiln IR text (kernel IR where
// lowered) that the sim driver simulates thread by thread. It proves `lower` right for a
// target without that target's hardware. Default target: the table's "cpu" row.
#pragma once

#include "backends/backend.h"

namespace kiln {

const TargetBackend* simBackend();

} // namespace kiln
