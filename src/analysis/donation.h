// Donation: which op writes a donated argument's result over the argument, in place.
//
// `%cache: tensor<4x128x64xf32> donate 1` gives argument %cache's storage to result 1. That
// is only sound when result 1 is computed by one op R (the writer) that
//   - reads %cache at exactly the indices it writes: an elementwise op whose operand k is
//     %cache with the result's type (no broadcast), a scatter_nd whose data operand is %cache,
//     or a dispatch that `fuse` formed from such an op (its `in_place` attribute);
//   - is the last reader of %cache: every other op that reads it comes before R, and the
//     function does not return %cache itself at another index.
// Result 1 may also be %cache itself (returned unchanged). Anything else is an error that
// says which rule fails, so a donation is never silently a copy.
//
// fuse keeps each writer alone in its dispatch (nothing else in that kernel reads the
// argument) and records `in_place = [k, 0]` on it; schedule binds the writer's output to the
// argument's upload (`transfer_to {donated = 1}`), and the executor binds the caller's
// memory there when the device can (docs/donation.md).
#pragma once

#include <vector>

#include "ir/core/ir.h"

namespace kiln {

struct Donation {
  size_t arg = 0;       // the donated argument
  size_t result = 0;    // the result it is donated to
  Op* writer = nullptr; // null when the result is the argument itself
  size_t operand = 0;   // the writer's operand that is the argument (or a transfer of it)
  size_t output = 0;    // the writer's result that is returned
};

// The donations of `f`, each with its writer, or an error naming the donation and the rule
// it breaks. Looks through a `transfer` of the argument (placement's copy to the writer's
// device) when the transfer's only reader is the writer.
Result<std::vector<Donation>> analyzeDonations(Func& f);

// True when `op` writes result 0 over operand `k` without reading it elsewhere (the rule
// above, without the ordering part).
bool writesInPlace(const Op& op, size_t k);

} // namespace kiln
