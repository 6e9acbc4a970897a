// Value bounds: ranges and divisibility of every index-computing value.
//
// One analysis serves every pass that asks "is this index in range?" or "does this extent
// divide by the tile?": `pad` (extents vs tiles), `lower` (which accesses need guards) and
// the tests. Over symbolic dims it uses the symbols' declared ranges and divisors
// (`symbol seq in [1, 4096] divisible_by 8`); in kernel IR it propagates through iconst,
// symbol, workgroup_id, local_id, for, iadd, isub, imul, ifloordiv, iceildiv, imod, imin,
// imax, sselect and icast; at tensor level `dim` gets its operand dim's bounds. Unknown
// means the full int64 range with divisor 1 — never a failure: a caller that cannot prove
// a bound emits guarded code instead.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "ir/core/ir.h"

namespace kiln {

struct Range {
  int64_t lo = INT64_MIN;
  int64_t hi = INT64_MAX;
  int64_t divisor = 1; // every value is a multiple of it

  bool known() const { return lo != INT64_MIN && hi != INT64_MAX; }
  bool operator==(const Range&) const = default;
};

// Bounds of a dim (static, symbolic, or unknown `?`).
Range dimBounds(const Dim& d, const SymbolTable& syms);
// True when every value of the dim is a multiple of `tile`.
bool dimDivisibleBy(const Dim& d, int64_t tile, const SymbolTable& syms);

// Bounds of the index values of one function (a kernel, or the `dim` ops of a tensor one).
class ValueBounds {
public:
  // Workgroup ids lie below the kernel_config's grid where its bounds are known, and below
  // `maxGrid` (the target's largest workgroup count) when it is given (0: unknown).
  ValueBounds(const Func& f, const SymbolTable& syms, int64_t maxGrid = 0);
  Range of(const Value* v) const;
  // True when the i1 value `cond` (an icmp) holds for every thread.
  bool provablyTrue(const Value* cond) const;

private:
  std::unordered_map<const Value*, Range> ranges_;
};

} // namespace kiln
