// What makes two lowered kernels compile to the same code, for the backends that compile each
// distinct kernel once (cpu, amdgpu, cuda) and for their kernel caches' keys.
#pragma once

#include <set>
#include <string>

#include "ir/core/ir.h"

namespace kiln {

// Kernels some launch binds one buffer to twice (an input written in place: donation); their
// buffers may alias.
std::set<std::string> aliasingKernels(const Module& m);

// The kernel's code identity: whether its buffers may alias, the symbols' ranges it may read
// and its IR text with its own name replaced, so that two kernels that differ only in name
// have the same identity.
std::string kernelIdentity(const Module& m, const Func& k, bool aliasing);

} // namespace kiln
