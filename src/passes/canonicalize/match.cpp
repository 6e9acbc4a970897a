// Matchers shared by the canonicalization patterns.
#include "passes/canonicalize/patterns.h"

namespace kiln::canon {

const HostTensor* constantOf(const Value* v) {
  if (!v || !v->def() || v->def()->kind() != OpKind::Constant) return nullptr;
  return v->def()->attrs().getDense("value");
}

bool allElements(const Value* v, const std::function<bool(double)>& pred) {
  const HostTensor* t = constantOf(v);
  if (!t) return false;
  for (int64_t i = 0, n = t->numElements(); i < n; ++i)
    if (!pred(t->getF(i))) return false;
  return true;
}

bool replaceWithValue(Op& root, Rewriter& rw, Value* v) {
  if (root.numResults() != 1 || !v || v->type() != root.result()->type()) return false;
  rw.replaceOp(&root, {v});
  return true;
}

} // namespace kiln::canon
