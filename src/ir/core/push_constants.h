// The push constants of a kernel: the symbol values a launch hands it, in the order the
// kernel's executable expects them. The compiler records them on each `launch` (`push`); the
// cpu ABI reads them as KilnCpuArgs::symbols; the ref and sim drivers bind them back to names.
#pragma once

#include <string>
#include <vector>

#include "ir/core/ir.h"

namespace kiln {

// The symbols `kernel` reads: first those its `symbol` ops name, in op order (the cpu ABI's
// order), then the others its argument, op and result types use, in order of first use;
// not the data-dependent symbols that an op of the kernel binds (kDataShaped: the launch does
// not know them yet, the kernel produces them).
std::vector<std::string> pushConstantSymbols(const Func& kernel);

} // namespace kiln
