// .npy files and inline tensor literals, for kiln's inputs and outputs.
//
// .npy: versions 1.0-3.0, C order only, dtypes <f8 <f4 <f2 |b1 |i1 <i2 <i4 <i8 |u1, and
// bf16 as '<u2' with an extra header key 'kiln_dtype': 'bf16' ('|V2' with it reads too);
// anything else is an error.
// Literals: "2x3xf32=1 2 3 4 5 6", "f32=7" (0-d), "4xi64=0" (one value fills all).
#pragma once

#include <string>
#include <string_view>

#include "ir/core/diag.h"
#include "ir/core/host_tensor.h"

namespace kiln {

Result<HostTensor> readNpy(const std::string& path);
Result<HostTensor> parseNpy(std::string_view bytes, const std::string& name);
Status writeNpy(const std::string& path, const HostTensor& t);
std::string serializeNpy(const HostTensor& t);

Result<HostTensor> parseTensorLiteral(std::string_view text, const Loc& loc);
// "tensor<2x3xf32> [[1, 2, 3], [4, 5, 6]]", eliding the middle of long dims.
std::string formatTensor(const HostTensor& t, int64_t maxElementsPerDim = 8);

} // namespace kiln
