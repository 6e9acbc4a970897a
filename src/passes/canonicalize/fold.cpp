// Constant folding: an op whose operands are all `constant` ops becomes a constant,
// computed by the reference interpreter's evalOp, so folding means exactly what running
// means.
//
// Not folded: results over kMaxFoldElements elements or with non-static shapes; ops with
// side effects; sources without operands (iota, range, weight: folding them only grows
// the IR; weights are never inlined); ops evalOp refuses (an index out of range stays an
// error at run time, where the user sees it with real inputs).
#include "ir/interp/interp.h"
#include "passes/canonicalize/patterns.h"
#include "passes/passes.h"

namespace kiln::canon {

namespace {

bool fold(Op& op, Rewriter& rw) {
  if (op.numOperands() == 0 || op.numResults() == 0 || op.has(kSideEffects)) return false;
  std::vector<HostTensor> operands;
  for (Value* v : op.operands()) {
    const HostTensor* t = constantOf(v);
    if (!t) return false;
    operands.push_back(*t);
  }
  for (size_t i = 0; i < op.numResults(); ++i) {
    std::optional<int64_t> n = op.result(i)->type().numElements();
    if (!n || *n > kMaxFoldElements) return false;
  }
  Result<std::vector<HostTensor>> values = evalOp(op, operands, SymbolBinding{}, nullptr);
  if (!values.ok() || values->size() != op.numResults()) return false;
  for (size_t i = 0; i < op.numResults(); ++i) {
    const Type& t = op.result(i)->type();
    if ((*values)[i].elem() != t.elem() || (*values)[i].shape() != t.staticShape()) return false;
  }
  std::vector<Value*> folded;
  for (size_t i = 0; i < op.numResults(); ++i) {
    Attrs attrs;
    attrs.set("value", (*values)[i]);
    folded.push_back(
        rw.createUnchecked(OpKind::Constant, {}, attrs, {op.result(i)->type()})->result());
  }
  rw.replaceOp(&op, folded);
  return true;
}

} // namespace

void addFoldPatterns(PatternSet& set) {
  // op(c1, ..., cn) -> constant evalOp(op, c1, ..., cn)
  for (const OpInfo& info : allOps())
    if (info.maxOperands != 0 && !info.has(kSideEffects))
      set.add("fold-constants", info.kind, fold);
}

} // namespace kiln::canon
