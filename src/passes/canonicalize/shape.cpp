// Canonicalization patterns rooted at data-movement ops: transpose, reshape, broadcast,
// concat, slice. Each removes an op that moves nothing or merges two moves into one.
#include <limits>

#include "passes/canonicalize/patterns.h"

namespace kiln::canon {

namespace {

// A permutation of 0..rank-1, or false.
bool isPermutation(const std::vector<int64_t>& perm, int64_t rank) {
  if (static_cast<int64_t>(perm.size()) != rank) return false;
  std::vector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[static_cast<size_t>(p)]) return false;
    seen[static_cast<size_t>(p)] = true;
  }
  return true;
}

bool isIdentityPerm(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// Python slicing bound: negative adds the dim, then clamps to [0, dim].
int64_t normalizeBound(int64_t b, int64_t dim) {
  if (b < 0) b = b < -dim ? 0 : b + dim;
  return b > dim ? dim : b;
}

// True when slicing `axis` of `t` from `start` to `end` by `step` keeps every element.
bool keepsWholeAxis(const Type& t, int64_t axis, int64_t start, int64_t end, int64_t step,
                    const SymbolTable& syms) {
  if (step != 1) return false; // step -1 reverses with an unchanged shape
  const Dim& d = t.dim(axis);
  if (d.isUnknown()) return false;
  if (d.isStatic()) {
    int64_t n = d.value();
    return normalizeBound(start, n) == 0 && normalizeBound(end, n) == n;
  }
  // A symbolic dim: the end clamps to it when it is at least the dim's largest value.
  return start == 0 && end >= bounds(d.expr(), syms).hi;
}

} // namespace

void addShapePatterns(PatternSet& set) {
  // transpose(x, [0, 1, ..., n-1]) -> x
  set.add("transpose-identity", OpKind::Transpose, [](Op& op, Rewriter& rw) {
    return isIdentityPerm(op.attrs().getInts("perm")) && replaceWithValue(op, rw, op.operand(0));
  });
  // transpose(transpose(x, p), q) -> transpose(x, [p[q[0]], p[q[1]], ...])
  set.add("transpose-transpose", OpKind::Transpose, [](Op& op, Rewriter& rw) {
    Op* inner = op.operand(0)->def();
    if (!inner || inner->kind() != OpKind::Transpose || inner->numOperands() != 1) return false;
    Value* x = inner->operand(0);
    std::vector<int64_t> p = inner->attrs().getInts("perm");
    std::vector<int64_t> q = op.attrs().getInts("perm");
    if (!isPermutation(p, x->type().rank()) || !isPermutation(q, x->type().rank())) return false;
    std::vector<int64_t> composed;
    for (int64_t i : q) composed.push_back(p[static_cast<size_t>(i)]);
    if (isIdentityPerm(composed)) return replaceWithValue(op, rw, x);
    Attrs attrs;
    attrs.set("perm", composed);
    Op* merged = rw.createUnchecked(OpKind::Transpose, {x}, attrs, {op.result()->type()});
    rw.replaceOp(&op, {merged->result()});
    return true;
  });
  // reshape(x) to the type of x -> x
  set.add("reshape-same-type", OpKind::Reshape,
          [](Op& op, Rewriter& rw) { return replaceWithValue(op, rw, op.operand(0)); });
  // reshape(reshape(x)) -> reshape(x)
  set.add("reshape-reshape", OpKind::Reshape, [](Op& op, Rewriter& rw) {
    Op* inner = op.operand(0)->def();
    if (!inner || inner->kind() != OpKind::Reshape || inner->numOperands() != 1) return false;
    Value* x = inner->operand(0);
    if (replaceWithValue(op, rw, x)) return true;
    Op* merged = rw.createUnchecked(OpKind::Reshape, {x}, {}, {op.result()->type()});
    rw.replaceOp(&op, {merged->result()});
    return true;
  });
  // broadcast(x) to the type of x -> x
  set.add("broadcast-same-type", OpKind::Broadcast,
          [](Op& op, Rewriter& rw) { return replaceWithValue(op, rw, op.operand(0)); });
  // concat(x) -> x
  set.add("concat-single", OpKind::Concat, [](Op& op, Rewriter& rw) {
    return op.numOperands() == 1 && replaceWithValue(op, rw, op.operand(0));
  });
  // slice(x) keeping every element -> x
  set.add("slice-whole", OpKind::Slice, [](Op& op, Rewriter& rw) {
    const Type& t = op.operand(0)->type();
    std::vector<int64_t> starts = op.attrs().getInts("starts");
    std::vector<int64_t> ends = op.attrs().getInts("ends");
    std::vector<int64_t> axes = op.attrs().getInts("axes");
    std::vector<int64_t> steps = op.attrs().getInts("steps");
    if (starts.size() != axes.size() || ends.size() != axes.size() || steps.size() != axes.size())
      return false;
    for (size_t k = 0; k < axes.size(); ++k) {
      int64_t axis = axes[k] < 0 ? axes[k] + t.rank() : axes[k];
      if (axis < 0 || axis >= t.rank()) return false;
      if (!keepsWholeAxis(t, axis, starts[k], ends[k], steps[k], rw.symbols())) return false;
    }
    return replaceWithValue(op, rw, op.operand(0));
  });
}

} // namespace kiln::canon
