// --donate: donations named on the command line (or in CompileOptions::donate) applied to a
// module's functions, as if its text said `%ARG: ... donate RESULT` (analysis/donation.h).
//
// A spec is `[@FUNC:]ARG[:RESULT]`: FUNC defaults to @main, else the module's only function;
// ARG is an argument's name (`cache` or `%cache`) or index; RESULT, a result index, defaults
// to the one result of the argument's type that no other argument is donated to.
#pragma once

#include <string>
#include <vector>

#include "ir/core/ir.h"

namespace kiln {

Status applyDonations(Module& m, const std::vector<std::string>& specs);

} // namespace kiln
