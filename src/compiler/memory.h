// Memory of a host schedule: the largest live set of buffers against the sum of every
// buffer, symbolically and in bytes at the symbols' upper bounds (what `kiln compile
// --emit=schedule` and `kiln dump` report).
#pragma once

#include "ir/core/ir.h"
#include "runtime/program.h"

namespace kiln {

// Walks `host` in order: alloc_buffer / transfer_to / load_weight add a buffer, free removes it.
// Fails only when a dim cannot be bounded (a symbol without a declared range).
Result<FunctionStats> analyzeMemory(const Func& host, const SymbolTable& syms);

} // namespace kiln
