// Strategy `pointwise` (gpu targets): one thread per element of the output shape; a
// reduction or softmax in the kernel loops inside its thread.
//
// Matches:  a pointwise kernel (codegen.h: Strategy::Pointwise) on a gpu target.
// Plan:     PointwisePlan{threads}: tile [threads], workgroup [threads, 1, 1]; the search
//           space is one plan, 256 threads rounded down to the subgroup size and capped by
//           the target's limits.
// Emits:    a 2-d grid of workgroups covering the flat output (at most 65535 along x), each
//           thread's element delinearized, masked unless the extent is provably exact.
//
//   %0 = exp %a : tensor<{n}xf32>   =>   %e = (wg.y * gx + wg.x) * 256 + lid.x
//                                        %m = icmp lt %e, n; masked_load; exp; masked_store
#include <algorithm>

#include "passes/lower/kernel_builder.h"
#include "passes/lower/strategy.h"

namespace kiln {

bool matchPointwise(const KernelRef& k, const TargetDesc& t) {
  return k.shape.strategy == Strategy::Pointwise && !t.cpu;
}

std::vector<Plan> pointwisePlans(const KernelShape&, const TargetDesc& t, const SymbolTable&) {
  int64_t sg = t.subgroupSizes.empty() ? 1 : t.subgroupSizes[0];
  int64_t threads = std::min<int64_t>({256, t.maxWorkgroupInvocations, t.maxWorkgroupSize[0]});
  if (threads >= sg) threads -= threads % sg;
  return {PointwisePlan{threads}};
}

std::optional<std::string> strategyProblem(const KernelShape&, const PointwisePlan&,
                                           const TargetDesc&, bool) {
  return std::nullopt; // the workgroup [threads, 1, 1] is all there is to check
}

Status emitStrategy(KernelBuilder& b, const PointwisePlan& p) {
  const Shape& s = b.shape().outShape;
  int64_t wg = p.threads;
  Value* total = b.product(s, 0, s.size());
  Value* groups = b.idx(OpKind::ICeilDiv, total, b.cst(wg), b.prologue());
  int64_t cap = gridCap(b.target());
  Value* gx = b.idx(OpKind::IMax, b.idx(OpKind::IMin, groups, b.cst(cap), b.prologue()), b.cst(1),
                    b.prologue());
  Value* gy = b.idx(OpKind::ICeilDiv, groups, gx, b.prologue());
  b.setGrid(0, gx);
  b.setGrid(1, gy);
  SymExpr totalExpr = SymExpr::constant(1);
  for (const Dim& d : s) totalExpr = totalExpr * d.expr();
  SymBounds tb = bounds(totalExpr, b.symbols());
  bool exact = provablyDivisible(totalExpr, wg, b.symbols()) && tb.hi / wg <= cap;
  Value* wx = b.mk(b.body(), OpKind::WorkgroupId, {}, Type::index(), b.axisAttr(0));
  Value* wy = b.mk(b.body(), OpKind::WorkgroupId, {}, Type::index(), b.axisAttr(1));
  Value* lid = b.mk(b.body(), OpKind::LocalId, {}, Type::index(), b.axisAttr(0));
  Value* e = b.idx(
      OpKind::IAdd,
      b.idx(OpKind::IMul, b.idx(OpKind::IAdd, b.idx(OpKind::IMul, wy, gx), wx), b.cst(wg)), lid);
  if (b.guarded() || !exact) b.setMask(b.cmp("lt", e, total));
  return b.storeOutputs(b.delinearize(e, s));
}

} // namespace kiln
