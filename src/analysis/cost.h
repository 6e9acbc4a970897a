// The cost model that placement decisions and reports share: bytes per value and FLOPs
// per op. One place, so that partition balancing and `--report=placement` agree.
//
// Symbolic dims count at the top of their declared range (a conservative size for
// peak-memory estimates); `?` dims count as 1. Sums saturate instead of overflowing.
#pragma once

#include <cstdint>

#include "ir/core/ir.h"

namespace kiln {

int64_t valueElements(const Value& v, const SymbolTable& syms);
int64_t valueBytes(const Value& v, const SymbolTable& syms);

struct OpCost {
  int64_t flops = 0; // arithmetic operations (a multiply-add counts 2)
  int64_t bytes = 0; // bytes read (operands) plus bytes written (results)
};

OpCost opCost(const Op& op, const SymbolTable& syms);

// The single number partitioning balances: FLOPs plus bytes moved (a device that does one
// FLOP per byte of memory traffic is neither compute- nor memory-bound).
int64_t balanceCost(const OpCost& c);

} // namespace kiln
