// Dynamic shapes at import time: the symbolic elements of the small integer tensors that
// PyTorch's exporter computes from shapes (Shape -> Gather -> Unsqueeze -> Concat ->
// Reshape/Expand/Slice/ConstantOfShape/Range), so that the shapes they describe become
// kiln dims over symbols instead of run-time data.
#pragma once

#include <optional>
#include <vector>

#include "frontends/onnx/context.h"

namespace kiln::onnx {

// Elementwise integer arithmetic (add sub mul div mod max min) on two symbolic vectors
// with length-1 broadcasting; nullopt when either side is unknown.
std::optional<std::vector<SymExpr>> symBinary(OpKind k, const Val& a, const Val& b);
// A comparison whose every element the symbols' ranges decide, as an i1 tensor.
std::optional<HostTensor> symCompare(OpKind k, const Val& a, const Val& b, const SymbolTable& syms);
// Where(cond, a, b) with known cond and symbolic a, b.
std::optional<std::vector<SymExpr>> symSelect(const Val& cond, const Val& a, const Val& b);

// The dims of a Reshape target (ONNX 0 copies the input dim unless allowzero, -1 is
// inferred from the element count).
Result<Shape> reshapeDims(const Ctx& c, const Type& in, const std::vector<SymExpr>& target,
                          bool allowZero);
// An i64 vector value holding `dims`: a constant when they are static, else a run-time
// computation from `dim` ops, carrying the symbolic elements.
Result<Val> shapeValue(Ctx& c, const Val& x, int64_t start, int64_t end);
// A symbolic value simplified under the symbols' ranges.
SymExpr simplify(const Ctx& c, const SymExpr& e);

} // namespace kiln::onnx
