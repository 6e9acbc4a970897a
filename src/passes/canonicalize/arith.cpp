// Canonicalization patterns rooted at arithmetic ops: add, sub, mul, div, neg, max, min,
// pow, cast, and the operand order of commutative ops.
//
// Every identity here is exact under IEEE 754, including signed zeros and NaN: `x + 0.0`
// is not `x` (it turns -0.0 into +0.0), so only `x + (-0.0)` is folded for floats.
#include <cmath>

#include "passes/canonicalize/patterns.h"

namespace kiln::canon {

namespace {

bool isNegZero(double v) { return v == 0 && std::signbit(v); }
bool isPosZero(double v) { return v == 0 && !std::signbit(v); }
bool isOne(double v) { return v == 1; }

bool resultIsFloat(const Op& op) {
  return op.numResults() == 1 && isFloat(op.result()->type().elem());
}

} // namespace

void addArithPatterns(PatternSet& set) {
  // c op x -> x op c  (commutative op, c constant, x not: constants go to the right)
  for (const OpInfo& info : allOps()) {
    if (!info.has(kCommutative) || info.maxOperands != 2) continue;
    set.add("commute-constant-right", info.kind, [](Op& op, Rewriter& rw) {
      if (op.numOperands() != 2 || !constantOf(op.operand(0)) || constantOf(op.operand(1)))
        return false;
      Value* lhs = op.operand(0);
      rw.setOperand(&op, 0, op.operand(1));
      rw.setOperand(&op, 1, lhs);
      return true;
    });
  }

  // x + (-0.0) -> x  (floats)
  set.add("add-neg-zero", OpKind::Add, [](Op& op, Rewriter& rw) {
    return resultIsFloat(op) && allElements(op.operand(1), isNegZero) &&
           replaceWithValue(op, rw, op.operand(0));
  });
  // x + 0 -> x  (integers)
  set.add("add-int-zero", OpKind::Add, [](Op& op, Rewriter& rw) {
    return !resultIsFloat(op) && allElements(op.operand(1), isPosZero) &&
           replaceWithValue(op, rw, op.operand(0));
  });
  // x - 0 -> x  (+0.0 for floats: -0.0 - +0.0 is -0.0)
  set.add("sub-zero", OpKind::Sub, [](Op& op, Rewriter& rw) {
    return allElements(op.operand(1), isPosZero) && replaceWithValue(op, rw, op.operand(0));
  });
  // x * 1 -> x
  set.add("mul-one", OpKind::Mul, [](Op& op, Rewriter& rw) {
    return allElements(op.operand(1), isOne) && replaceWithValue(op, rw, op.operand(0));
  });
  // x / 1 -> x
  set.add("div-one", OpKind::Div, [](Op& op, Rewriter& rw) {
    return allElements(op.operand(1), isOne) && replaceWithValue(op, rw, op.operand(0));
  });
  // -(-x) -> x  (exact for floats; for integers -(-INT_MIN) wraps back to INT_MIN)
  set.add("neg-neg", OpKind::Neg, [](Op& op, Rewriter& rw) {
    Op* inner = op.operand(0)->def();
    return inner && inner->kind() == OpKind::Neg && inner->numOperands() == 1 &&
           replaceWithValue(op, rw, inner->operand(0));
  });
  // max(x, x) -> x
  set.add("max-self", OpKind::Max, [](Op& op, Rewriter& rw) {
    return op.operand(0) == op.operand(1) && replaceWithValue(op, rw, op.operand(0));
  });
  // min(x, x) -> x
  set.add("min-self", OpKind::Min, [](Op& op, Rewriter& rw) {
    return op.operand(0) == op.operand(1) && replaceWithValue(op, rw, op.operand(0));
  });
  // pow(x, 2) -> x * x  (floats; the square is exact in the wider type pow is computed in,
  // so one rounding of either gives the same value, NaN, infinities and -0.0 included; a
  // layer norm's variance then costs a multiply instead of an exp and a log per element)
  set.add("pow-two", OpKind::Pow, [](Op& op, Rewriter& rw) {
    if (!resultIsFloat(op) || op.operand(0)->type() != op.result()->type() ||
        !allElements(op.operand(1), [](double v) { return v == 2; }))
      return false;
    Value* x = op.operand(0);
    Op* square = rw.createUnchecked(OpKind::Mul, {x, x}, {}, {op.result()->type()});
    rw.replaceOp(&op, {square->result()});
    return true;
  });
  // cast(x) to the type of x -> x
  set.add("cast-same-type", OpKind::Cast,
          [](Op& op, Rewriter& rw) { return replaceWithValue(op, rw, op.operand(0)); });
}

} // namespace kiln::canon
