// pad: pads each dispatch's iteration space to tile multiples, with guards only where the
// value bounds cannot prove the padding empty.
//
// Requires:    tile (dispatches carry tile and workgroup).
// Guarantees:  every tiled dispatch carries `guarded`: 0 when value bounds prove every
//              tiled extent a multiple of its tile (static sizes, or symbols declared
//              `divisible_by` the tile), so the padded space is the real one and `lower`
//              emits plain loads and stores; 1 otherwise — the grid still covers the
//              extent rounded up to whole tiles, shared tiles are zero-filled past the end,
//              and every access of a partial tile is masked. A dim without any bound
//              (no range, no divisor) simply gets guarded code: pad never fails a compile.
// Invalidates: nothing.
//
//   symbol n in [1, 4096]                               symbol n in [1, 4096] divisible_by 64
//   %0 = dispatch ... {tile = [64], ...}  => guarded = 1 %0 = dispatch ... {tile = [64]} => guarded
//   = 0
#include "analysis/value_bounds.h"
#include "passes/codegen.h"
#include "passes/lower/strategy.h"
#include "passes/passes.h"

namespace kiln {

namespace {

bool exact(const KernelShape& s, const RowsPlan& p, const SymbolTable& syms, const TargetDesc&) {
  // cpu rows: rows in blocks of p.rows, the innermost dim in chunks of p.cols.
  if (s.outShape.empty()) return p.rows == 1 && p.cols == 1;
  SymExpr rows = SymExpr::constant(1);
  for (size_t i = 0; i + 1 < s.outShape.size(); ++i) {
    if (s.outShape[i].isUnknown()) return false;
    rows = rows * s.outShape[i].expr();
  }
  return dimDivisibleBy(Dim(rows), p.rows, syms) && dimDivisibleBy(s.outShape.back(), p.cols, syms);
}

bool exact(const KernelShape& s, const PointwisePlan& p, const SymbolTable& syms,
           const TargetDesc& t) {
  SymExpr total = SymExpr::constant(1);
  for (const Dim& d : s.outShape) {
    if (d.isUnknown()) return false;
    total = total * d.expr();
  }
  Dim td(total);
  Range r = dimBounds(td, syms);
  // The grid must also cover the extent in one row of at most maxWorkgroupCount groups.
  return dimDivisibleBy(td, p.threads, syms) && r.known() && r.hi / p.threads <= gridCap(t);
}

// A matmul's M, N and K against its tiles (the workgroup's, or the cpu block's).
bool matmulExact(const KernelShape& s, int64_t tm, int64_t tn, int64_t tk,
                 const SymbolTable& syms) {
  size_t r = s.outShape.size();
  const Type& a = s.anchor->operand(0)->type();
  return dimDivisibleBy(s.outShape[r - 2], tm, syms) &&
         dimDivisibleBy(s.outShape[r - 1], tn, syms) &&
         dimDivisibleBy(a.dim(a.rank() - 1), tk, syms);
}

bool exact(const KernelShape& s, const GpuMatmulPlan& p, const SymbolTable& syms,
           const TargetDesc&) {
  return matmulExact(s, p.tm, p.tn, p.tk, syms);
}

bool exact(const KernelShape& s, const CpuMatmulPlan& p, const SymbolTable& syms,
           const TargetDesc&) {
  return matmulExact(s, p.mc, p.nc, p.kc, syms);
}

bool exact(const KernelShape&, const CpuDotPlan&, const SymbolTable&, const TargetDesc&) {
  return true; // its loops run over exact bounds (the last chunk's indices clamped)
}

bool exact(const KernelShape& s, const GpuReducePlan& p, const SymbolTable& syms,
           const TargetDesc& t) {
  return gpuReduceExact(s, p, syms, t);
}
bool exact(const KernelShape&, const ScatterPlan&, const SymbolTable&, const TargetDesc&) {
  return false; // never recorded by tile
}
bool exact(const KernelShape&, const GpuGemvPlan&, const SymbolTable&, const TargetDesc&) {
  return false; // its columns and rows are always masked
}
bool exact(const KernelShape&, const AttentionPlan&, const SymbolTable&, const TargetDesc&) {
  return true; // its loops run over exact bounds; nothing is masked
}
bool exact(const KernelShape&, const CpuAttentionPlan&, const SymbolTable&, const TargetDesc&) {
  return true; // the last tile's keys are clamped and hidden, its rows never stored
}

bool exact(const KernelShape& s, const PlanAttrs& a, const SymbolTable& syms, const TargetDesc& t) {
  Plan p;
  if (planFromAttrs(s, a, t, &p)) return false;
  return std::visit([&](const auto& q) { return exact(s, q, syms, t); }, p);
}

class PadPass : public Pass {
public:
  explicit PadPass(CodegenOptions opts) : opts_(std::move(opts)) {}

  Status run(Module& m) override {
    for (const auto& f : m.funcs())
      for (const auto& op : f->ops()) {
        if (op->kind() != OpKind::Dispatch || !op->attrs().has("tile") || !opts_.covers(*op))
          continue;
        Func* k = dispatchKernel(m, *op);
        if (!k || isLoweredKernel(*k)) continue;
        KernelShape s = analyzeKernel(*k);
        if (s.strategy == Strategy::Host) continue;
        PlanAttrs p = planAttrsOf(*op, s);
        if (planProblem(s, p, opts_.target)) continue; // lower reports it
        op->attrs().set("guarded", int64_t(exact(s, p, m.symbols(), opts_.target) ? 0 : 1));
      }
    return ok();
  }

private:
  CodegenOptions opts_;
};

} // namespace

std::unique_ptr<Pass> createPadPass(const CodegenOptions& opts) {
  return std::make_unique<PadPass>(opts);
}

} // namespace kiln
