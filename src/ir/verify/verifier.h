// Verifier: checks a module's invariants; see verifier.cpp's header for the list.
#pragma once

#include "ir/core/ir.h"

namespace kiln {

Status verifyModule(const Module& m);
Status verifyFunc(const Func& f);
// The invariants that hold after affinity (P1-P3 in verifier.cpp).
Status verifyPlacement(const Module& m);
// Where a value lives: its op's device, or its argument's; result i of a collective lives on
// the collective's devices[i].
std::optional<DeviceTarget> deviceOf(const Value* v);
// devices[i] of a collective (all_reduce, all_gather, reduce_scatter), or nullopt.
std::optional<DeviceTarget> collectiveDevice(const Op& op, size_t i);

} // namespace kiln
