// What placement decided, for people: `--report=placement` (text) and
// `--emit=placement-dot` (Graphviz, ops coloured by device). Both need a placed module
// (after affinity; verifyPlacement holds).
#pragma once

#include <string>

#include "ir/core/ir.h"

namespace kiln {

// Per function and device: ops, FLOPs, parameter bytes (weights and constants), peak
// memory (the most bytes live at once on the device, in program order, with parameters
// and arguments resident from the start and results until the end); then every transfer
// (value, bytes, from -> to) and every parameter with the devices that hold it.
Result<std::string> placementReport(const Module& m);

// One digraph per function: a node per argument and op, filled with its device's colour,
// an edge per use, transfers drawn as dashed edges between devices.
Result<std::string> placementDot(const Module& m);

} // namespace kiln
