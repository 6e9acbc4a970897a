// Cost model: bytes per value and FLOPs per op (see cost.h).
#include "analysis/cost.h"

#include <algorithm>
#include <limits>

namespace kiln {

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max() / 4;

int64_t mulSat(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r) || r > kMax) return kMax;
  return r;
}

int64_t addSat(int64_t a, int64_t b) { return a > kMax - b ? kMax : a + b; }

int64_t dimSize(const Dim& d, const SymbolTable& syms) {
  if (d.isUnknown()) return 1;
  if (d.isStatic()) return d.value();
  return bounds(d.expr(), syms).hi;
}

int64_t operandElements(const Op& op, size_t i, const SymbolTable& syms) {
  return i < op.numOperands() ? valueElements(*op.operand(i), syms) : 0;
}

} // namespace

int64_t valueElements(const Value& v, const SymbolTable& syms) {
  int64_t n = 1;
  for (const Dim& d : v.type().shape()) n = mulSat(n, std::max<int64_t>(dimSize(d, syms), 0));
  return n;
}

int64_t valueBytes(const Value& v, const SymbolTable& syms) {
  return mulSat(valueElements(v, syms), elemTypeBytes(v.type().elem()));
}

OpCost opCost(const Op& op, const SymbolTable& syms) {
  OpCost c;
  for (const Value* v : op.operands()) c.bytes = addSat(c.bytes, valueBytes(*v, syms));
  int64_t out = 0;
  for (size_t i = 0; i < op.numResults(); ++i) {
    c.bytes = addSat(c.bytes, valueBytes(*op.result(i), syms));
    out = addSat(out, valueElements(*op.result(i), syms));
  }
  switch (op.kind()) {
  case OpKind::Matmul: {
    // Each output element is a dot product over the shared dim K.
    const Type& a = op.operand(0)->type();
    int64_t k = a.rank() ? dimSize(a.dim(a.rank() - 1), syms) : 1;
    c.flops = mulSat(mulSat(out, k), 2);
    break;
  }
  case OpKind::Conv: {
    // Each output element reads C/group x kernel inputs: the weight's elements per filter.
    const Type& w = op.operand(1)->type();
    int64_t perFilter = 1;
    for (int64_t i = 1; i < w.rank(); ++i) perFilter = mulSat(perFilter, dimSize(w.dim(i), syms));
    c.flops = mulSat(mulSat(out, perFilter), 2);
    break;
  }
  case OpKind::Attention: {
    // Per query row and key: a dot product over D, the softmax update, an axpy over Dv.
    const Type &q = op.operand(0)->type(), &k = op.operand(1)->type();
    int64_t rows =
        operandElements(op, 0, syms) / std::max<int64_t>(1, dimSize(q.dim(q.rank() - 1), syms));
    int64_t keys = dimSize(k.dim(k.rank() - 2), syms);
    int64_t perKey = addSat(mulSat(dimSize(q.dim(q.rank() - 1), syms), 2),
                            addSat(mulSat(out / std::max<int64_t>(1, rows), 2), 5));
    c.flops = mulSat(mulSat(rows, keys), perKey);
    break;
  }
  case OpKind::Softmax:
  case OpKind::LogSoftmax: c.flops = mulSat(operandElements(op, 0, syms), 5); break;
  case OpKind::MaxPool:
  case OpKind::AvgPool: {
    int64_t window = 1;
    for (int64_t k : op.attrs().getInts("kernel")) window = mulSat(window, k);
    c.flops = mulSat(out, window);
    break;
  }
  default:
    if (op.has(kElementwise))
      c.flops = out;
    else if (op.has(kReduction) || op.kind() == OpKind::Cumsum)
      c.flops = operandElements(op, 0, syms);
    // Data movement and sources compute nothing; their bytes are their cost.
    break;
  }
  return c;
}

int64_t balanceCost(const OpCost& c) { return addSat(c.flops, c.bytes); }

} // namespace kiln
