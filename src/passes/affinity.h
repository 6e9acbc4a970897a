// Affinity: which device every value lives on, and the IR changes that make it so
// (clones of cheap ops per consuming device, one `transfer` per cross-device edge).
// affinity.cpp's header explains the analysis, why it terminates, and its bound.
#pragma once

#include <cstddef>

#include "ir/core/ir.h"

namespace kiln {

struct AffinityOptions {
  // When false, a value consumed on another device than its own is an error (a pipeline
  // that must not move data) instead of a transfer.
  bool allowTransfers = true;
};

struct AffinityStats {
  size_t updates = 0;          // lattice updates (at most values x devices)
  size_t clones = 0;           // cheap ops cloned for another consuming device
  size_t transfers = 0;        // transfer ops created
  size_t mergedTransfers = 0;  // duplicate transfers (same value, same device) merged
  size_t removedTransfers = 0; // transfers to the device the value already lives on
};

// Recomputed on each device that uses it rather than transferred, when its operands are
// too: an op with the kCheapToClone trait (constants, weights, iota, range), a view (kView),
// or an elementwise op without side effects that no pin places (`lt`, `select`, `cast`,
// `cos` over positions: masks, rotary tables and fills that depend only on shapes and
// constants).
bool recomputable(const Op& op);

// Cheap to clone: a recomputable op whose operands are all cheap to clone themselves (a
// slice of a constant is, and so is a mask compared from two iotas; a slice of an argument
// is not).
bool isCheapToClone(const Op& op);

// Places every op, argument and result of every function on one of the module's declared
// devices (the first declared is the default), keeping pins. Conflicts are errors that
// name the value, its pin, and each consumer with its device.
Result<AffinityStats> runAffinity(Module& m, const AffinityOptions& opts = {});

} // namespace kiln
