// Verifier: checks a module's invariants; see verifier.cpp's header for the list.
#pragma once

#include "ir/ir.h"

namespace kiln {

Status verifyModule(const Module& m);
Status verifyFunc(const Func& f);

} // namespace kiln
