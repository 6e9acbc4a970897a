// kernelGrid: a lowered kernel's grid as symbolic expressions, read from its uniform
// prologue (the index arithmetic before `kernel_config` over constants and symbols), so the
// runtime evaluates three expressions per launch instead of running kernel IR.
//
//   %0 = symbol {name = "n"} : index
//   %1 = iconst {value = 64} : index                 =>   ["n ceildiv 64", "1", "1"]
//   %2 = iceildiv %0, %1 : index
//   %3 = iconst {value = 1} : index
//   kernel_config %2, %3, %3 {workgroup = [64, 1, 1]}
#pragma once

#include <array>
#include <string>
#include <vector>

#include "ir/core/ir.h"
#include "ir/core/symexpr.h"

namespace kiln {

// Fails, located at the op, when a grid operand is not computed by iconst / symbol / iadd /
// isub / imul / ifloordiv / iceildiv / imod / imin / imax, or the kernel has no kernel_config.
Result<std::array<SymExpr, 3>> kernelGrid(const Func& kernel);

// The text form each launch records (`workgroups`).
std::vector<std::string> kernelGridStrings(const std::array<SymExpr, 3>& grid);

} // namespace kiln
