// libm functions as inline LLVM IR: straight-line f64 code (selects, no branches, no calls), so
// that the loop vectorizer widens loops that use them. Internal to src/backends/llvm; the
// accuracy of each function against libm is in docs/cpu.md and tests/unit/test_cpu_backend.cpp.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <string_view>
#include <vector>

namespace kiln::llvmgen {

// An internal, always-inlined f64 function of `m` computing the libm function `name` ("exp",
// "log", "tanh", "pow", ...), created on first use; nullptr when there is no inline form.
llvm::Function* inlineMathFunction(llvm::Module& m, std::string_view name);

} // namespace kiln::llvmgen
