// Scalar arithmetic for LLVM emission: kiln element types as LLVM values, conversions with
// `cast` semantics, and every `compute` function with the reference interpreter's
// semantics (src/ir/interp/elementwise.cpp). Internal to src/backends/llvm.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <vector>

#include "ir/core/diag.h"
#include "ir/core/elem_type.h"
#include "ir/core/ir.h"

namespace kiln::llvmgen {

// The type a scalar of `e` has in emitted code (f16 and bf16 are floats at their precision).
llvm::Type* scalarType(llvm::LLVMContext& c, ElemType e);
// The type an element of `e` has in memory (i1 is a byte, bf16 an i16).
llvm::Type* storageType(llvm::LLVMContext& c, ElemType e);
// Memory representation <-> scalar representation.
llvm::Value* fromStorage(llvm::IRBuilder<>& b, ElemType e, llvm::Value* v);
llvm::Value* toStorage(llvm::IRBuilder<>& b, ElemType e, llvm::Value* v);
// A constant of `e` from a double, rounded like the interpreter's setF (sconst, `other`).
llvm::Value* scalarConstant(llvm::IRBuilder<>& b, ElemType e, double v);
// `cast` semantics between scalar representations.
llvm::Value* convert(llvm::IRBuilder<>& b, ElemType from, ElemType to, llvm::Value* v);
// One `compute` op: `args` are its operands' scalar values.
Result<llvm::Value*> emitCompute(llvm::IRBuilder<>& b, llvm::Module& m, const Op& op,
                                 const std::vector<llvm::Value*>& args);

} // namespace kiln::llvmgen
