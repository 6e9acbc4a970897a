// Strategy `rows` (cpu targets): each workgroup (one cpu thread) loops over a block of
// rows and a chunk of contiguous columns of the innermost output dim, with exact loop
// bounds (no masks); a row reduction (reduction.cpp) is computed once per row, before
// the column loop.
//
// Matches:  a pointwise kernel (codegen.h: Strategy::Pointwise) on a cpu target.
// Plan:     RowsPlan{rows, cols}: tile [rows, cols], workgroup [1, 1, 1]; the search space
//           is one plan of about 4096 elements of work (whole rows when the kernel reduces).
// Emits:    workgroup (x, y) takes columns [x*C, min(x*C + C, L)) of rows
//           [y*R, min(y*R + R, rows)); a concat along an outer dim (im2col's patches) picks
//           its operand once per row, by an `if` around copies of the column loop
//           (KernelBuilder::versionByConcat).
//
//   %0 = softmax %x {axis = -1}        =>   for row in [y*R, ..): max, sum (once per row)
//     : tensor<64x128xf32>                    for col in [x*C, ..): exp(x - max) / sum; store
#include <algorithm>

#include "passes/lower/kernel_builder.h"
#include "passes/lower/strategy.h"

namespace kiln {

bool matchRows(const KernelRef& k, const TargetDesc& t) {
  return k.shape.strategy == Strategy::Pointwise && t.cpu;
}

std::vector<Plan> rowsPlans(const KernelShape& s, const TargetDesc&, const SymbolTable& syms) {
  size_t r = s.outShape.size();
  int64_t cols = r ? std::min<int64_t>(upperBound(s.outShape[r - 1], syms), 1 << 30) : 1;
  // A kernel with reductions or softmax takes whole rows, so a row's reduction along the
  // innermost dim is computed once per row (hoisted out of the column loop).
  // About 4096 elements of work per workgroup: a row costs its columns plus the reduced
  // extent (row reductions are computed once per row).
  int64_t c = std::max<int64_t>(1, s.reduces ? cols : std::min<int64_t>(cols, 4096));
  int64_t rowWork = c + (s.reduces ? s.reduceExtent : 0);
  return {RowsPlan{std::max<int64_t>(1, 4096 / rowWork), c}};
}

std::optional<std::string> strategyProblem(const KernelShape&, const RowsPlan& p, const TargetDesc&,
                                           bool) {
  if (p.rows < 1 || p.cols < 1)
    return "a cpu pointwise kernel takes tile [rows, columns] with workgroup [1, 1, 1], got "
           "tile " +
           listStr({p.rows, p.cols}) + " and workgroup [1, 1, 1]";
  return std::nullopt;
}

Status emitStrategy(KernelBuilder& b, const RowsPlan& p) {
  const Shape& s = b.shape().outShape;
  int64_t R = p.rows, C = p.cols;
  Shape outer = s.empty() ? Shape{} : Shape(s.begin(), s.end() - 1);
  Value* rows = b.product(outer, 0, outer.size());
  Value* L = s.empty() ? b.cst(1) : b.dim(s.back());
  b.setGrid(0, b.idx(OpKind::ICeilDiv, L, b.cst(C), b.prologue()));
  b.setGrid(1, b.idx(OpKind::ICeilDiv, rows, b.cst(R), b.prologue()));
  Value* wx = b.mk(b.body(), OpKind::WorkgroupId, {}, Type::index(), b.axisAttr(0));
  Value* wy = b.mk(b.body(), OpKind::WorkgroupId, {}, Type::index(), b.axisAttr(1));
  Value* r0 = b.idx(OpKind::IMul, wy, b.cst(R));
  Value* c0 = b.idx(OpKind::IMul, wx, b.cst(C));
  Value* rEnd = b.idx(OpKind::IMin, b.idx(OpKind::IAdd, r0, b.cst(R)), rows);
  Value* cEnd = b.idx(OpKind::IMin, b.idx(OpKind::IAdd, c0, b.cst(C)), L);
  b.markInvariant(c0);
  b.markInvariant(cEnd);
  Value* row = b.beginFor(r0, rEnd, b.cst(1));
  std::vector<Value*> ix = outer.empty() ? std::vector<Value*>{} : b.delinearize(row, outer);
  for (Value* v : ix) b.markInvariant(v);
  KILN_CHECK(b.versionByConcat([&]() -> Result<Op*> {
    Value* c = b.beginFor(c0, cEnd, b.cst(1));
    Op* loop = c->blockArgOf()->parentOp();
    b.setColumnLoop(loop);
    std::vector<Value*> at = ix;
    if (!s.empty()) at.push_back(c);
    Status st = b.storeOutputs(at);
    b.endFor();
    b.setColumnLoop(nullptr);
    if (!st.ok()) return st.takeDiags();
    return loop;
  }));
  b.endFor();
  return ok();
}

} // namespace kiln
