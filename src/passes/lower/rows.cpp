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
#include <set>

#include "passes/lower/kernel_builder.h"
#include "passes/lower/strategy.h"

namespace kiln {

namespace {

// The value a kernel's transcendental epilogue is computed from, when that epilogue runs in
// a column loop of its own: every transcendental op of the kernel reads it, it has the
// output's shape or rows of more columns whose first ones the outputs are (a prefix slice
// returned, conv-depthwise's wide stride-2 rows), everything computed from it is
// elementwise over its shape (the epilogue), and the kernel loads along its columns with a
// step of 2 or more (a stride-2 depthwise conv's taps). So the output at any index reads x
// at that same index only. Null otherwise, and in kernels with a concat (versionByConcat's
// copies of the column loop).
//
// LLVM vectorizes a column loop of stride-2 loads 8 lanes wide (two loads and two shuffles
// per tap) and leaves a scalar remainder, and the epilogue's sigmoid then ran at that width:
// EfficientNet-B0's 96-channel 3x3 stride-2 conv on 112x112 with its SiLU took 0.29 ms,
// 0.07 with a ReLU (a SiLU kernel alone over its 301,056 elements: 0.043 ms).
const Value* stridedEpilogueInput(const Func& src, const Shape& out) {
  const Value* x = nullptr;
  bool strided = false;
  for (const auto& op : src.ops()) {
    if (op->kind() == OpKind::Concat) return nullptr;
    if (op->kind() == OpKind::Slice) {
      std::vector<int64_t> axes = op->attrs().getInts("axes"), steps = op->attrs().getInts("steps");
      int64_t rank = op->operand(0)->type().rank();
      for (size_t i = 0; i < axes.size() && i < steps.size(); ++i)
        if ((axes[i] < 0 ? axes[i] + rank : axes[i]) == rank - 1 && steps[i] >= 2) strided = true;
    }
    if (op->has(kElementwise) && isTranscendental(op->kind())) {
      if (op->numOperands() != 1 || (x && op->operand(0) != x)) return nullptr;
      x = op->operand(0);
    }
  }
  if (!x || !strided || !x->def() || !x->def()->has(kElementwise) || out.empty()) return nullptr;
  // x is the output's shape, or wider rows of which the outputs are the first columns (a
  // conv computed on rows of OW' >= OW columns): an element of x at the output's index.
  const Shape& xs = x->type().shape();
  size_t r = out.size();
  if (xs.size() != r || !xs[r - 1].isStatic() || !out[r - 1].isStatic() ||
      xs[r - 1].value() < out[r - 1].value())
    return nullptr;
  for (size_t i = 0; i + 1 < r; ++i)
    if (!(xs[i] == out[i])) return nullptr;
  auto prefix = [&](const Op& op) {
    return op.kind() == OpKind::Slice &&
           op.attrs().getInts("axes") == std::vector<int64_t>{static_cast<int64_t>(r) - 1} &&
           op.attrs().getInts("starts") == std::vector<int64_t>{0} &&
           op.attrs().getInts("steps") == std::vector<int64_t>{1} &&
           op.result(0)->type().shape() == out;
  };
  std::vector<const Value*> stack{x};
  std::set<const Value*> seen;
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    if (!seen.insert(v).second) continue;
    for (const Use& u : v->uses()) {
      const Op* user = u.user;
      if (user->kind() == OpKind::Return) continue;
      bool elementwise = user->has(kElementwise) && user->numResults() == 1 &&
                         user->result(0)->type().shape() == xs;
      if (prefix(*user)) { // the outputs' columns of a wide row: returned, nothing else
        for (const Use& w : user->result(0)->uses())
          if (w.user->kind() != OpKind::Return) return nullptr;
        continue;
      }
      if (!elementwise) return nullptr;
      stack.push_back(user->result(0));
    }
  }
  return x;
}

} // namespace

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
  // A transcendental epilogue over strided loads (stridedEpilogueInput): the first column
  // loop computes its input into a private row, the second the epilogue from that row,
  // unit stride.
  const Value* x = s.empty() ? nullptr : stridedEpilogueInput(b.source(), s);
  Value* xrow = nullptr;
  if (x) {
    Attrs uninit;
    uninit.set("uninit", int64_t(1));
    xrow = b.mk(b.body(), OpKind::Alloc, {},
                Type::buffer(x->type().elem(), Shape{Dim(C)}, MemSpace::Private), uninit);
  }
  Value* row = b.beginFor(r0, rEnd, b.cst(1));
  std::vector<Value*> ix = outer.empty() ? std::vector<Value*>{} : b.delinearize(row, outer);
  for (Value* v : ix) b.markInvariant(v);
  KILN_CHECK(b.versionByConcat([&]() -> Result<Op*> {
    if (xrow) {
      Value* c = b.beginFor(c0, cEnd, b.cst(1));
      b.setColumnLoop(c->blockArgOf()->parentOp());
      std::vector<Value*> at = ix;
      at.push_back(c);
      Result<Value*> xv = b.emitAt(x, at);
      if (!xv.ok()) return xv.takeDiags();
      b.st(*xv, xrow, {b.idx(OpKind::ISub, c, c0)});
      b.endFor();
      b.setColumnLoop(nullptr);
    }
    Value* c = b.beginFor(c0, cEnd, b.cst(1));
    if (xrow) b.substitute(x, b.ld(xrow, {b.idx(OpKind::ISub, c, c0)}));
    Op* loop = c->blockArgOf()->parentOp();
    b.setColumnLoop(loop);
    std::vector<Value*> at = ix;
    if (!s.empty()) at.push_back(c);
    Status st = b.storeOutputs(at);
    if (xrow) b.unsubstitute(x);
    b.endFor();
    b.setColumnLoop(nullptr);
    if (!st.ok()) return st.takeDiags();
    return loop;
  }));
  b.endFor();
  return ok();
}

} // namespace kiln
