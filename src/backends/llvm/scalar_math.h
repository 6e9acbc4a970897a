// libm functions as inline LLVM IR: straight-line f64 (and for a few, f32) code (selects, no
// branches, no calls), so that the loop vectorizer widens loops that use them. Internal to
// src/backends/llvm; the accuracy of each function against libm is in docs/cpu.md and
// tests/unit/test_cpu_backend.cpp.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <string_view>
#include <vector>

namespace kiln::llvmgen {

// An internal, always-inlined f64 function of `m` computing the libm function `name` ("exp",
// "log", "tanh", "pow", ...), created on first use; nullptr when there is no inline form.
llvm::Function* inlineMathFunction(llvm::Module& m, std::string_view name);

// The same in f32 (`kiln_NAME_f32`) for "exp", "log", "tanh", "erf", "sigmoid", "silu",
// "gelu" (erf form) and "gelu_tanh": a few ulp from libm's value rounded to f32 instead of
// exactly it, at twice the vector width; nullptr for any other name.
llvm::Function* inlineMathFunctionF32(llvm::Module& m, std::string_view name);

} // namespace kiln::llvmgen
