// Canonicalization patterns rooted at boolean ops: and, or, not, select.
#include "passes/canonicalize/patterns.h"

namespace kiln::canon {

namespace {

bool isTrue(double v) { return v != 0; }
bool isFalse(double v) { return v == 0; }

} // namespace

void addLogicPatterns(PatternSet& set) {
  // x and true -> x
  set.add("and-true", OpKind::And, [](Op& op, Rewriter& rw) {
    return allElements(op.operand(1), isTrue) && replaceWithValue(op, rw, op.operand(0));
  });
  // x and x -> x
  set.add("and-self", OpKind::And, [](Op& op, Rewriter& rw) {
    return op.operand(0) == op.operand(1) && replaceWithValue(op, rw, op.operand(0));
  });
  // x or false -> x
  set.add("or-false", OpKind::Or, [](Op& op, Rewriter& rw) {
    return allElements(op.operand(1), isFalse) && replaceWithValue(op, rw, op.operand(0));
  });
  // x or x -> x
  set.add("or-self", OpKind::Or, [](Op& op, Rewriter& rw) {
    return op.operand(0) == op.operand(1) && replaceWithValue(op, rw, op.operand(0));
  });
  // not(not(x)) -> x
  set.add("not-not", OpKind::Not, [](Op& op, Rewriter& rw) {
    Op* inner = op.operand(0)->def();
    return inner && inner->kind() == OpKind::Not && inner->numOperands() == 1 &&
           replaceWithValue(op, rw, inner->operand(0));
  });
  // select(true, a, b) -> a  (when a alone already has the result type)
  set.add("select-true", OpKind::Select, [](Op& op, Rewriter& rw) {
    return allElements(op.operand(0), isTrue) && replaceWithValue(op, rw, op.operand(1));
  });
  // select(false, a, b) -> b  (when b alone already has the result type)
  set.add("select-false", OpKind::Select, [](Op& op, Rewriter& rw) {
    return allElements(op.operand(0), isFalse) && replaceWithValue(op, rw, op.operand(2));
  });
}

} // namespace kiln::canon
