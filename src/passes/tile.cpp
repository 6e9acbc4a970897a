// tile: chooses each dispatch's workgroup shape and tiles from the target description.
//
// Requires:    fuse (dispatches); collapse-dims before it, if run.
// Guarantees:  every dispatch whose kernel `lower` handles carries `tile` and `workgroup`
//              attributes that fit the target: workgroup size and invocations, and shared
//              memory by the one footprint function (codegen.h) — tiles shrink until the
//              kernel fits, so no kernel over a limit is ever emitted. A manual config
//              (--tile-config) is used as given, or refused with the reason it cannot be
//              compiled (an error, never a crash).
//              The plan comes from the lowering strategy that matches the kernel
//              (lower/strategy.h): the first legal plan of its search space. On cpu
//              targets (TargetDesc::cpu) every plan has workgroup [1, 1, 1]: matmuls tile
//              [MC, NC, KC, MR, NR] from the caches and vector registers, pointwise kernels
//              tile [rows, columns] of about 4096 elements.
// Invalidates: nothing.
//
//   %0 = dispatch %a, %b {kernel = "k"}    =>    %0 = dispatch %a, %b {kernel = "k",
//                                                  tile = [64, 64, 16], workgroup = [16, 16, 1]}
#include <algorithm>

#include "passes/codegen.h"
#include "passes/lower/strategy.h"
#include "passes/passes.h"

namespace kiln {

namespace {

// A manual config as plan attributes, decoded like a recorded plan (so a config that
// cannot be compiled is refused with the same reasons).
Result<Plan> fromOverride(const LowerStrategy& strategy, const KernelShape& s,
                          const TileOverride& o, const TargetDesc& t, const SymbolTable& syms,
                          const std::string& kernel) {
  PlanAttrs a;
  if (t.cpu && !o.subgroups &&
      (o.workgroup.empty() || o.workgroup == std::vector<int64_t>{1, 1, 1})) {
    // A cpu plan with the given tile ([MC, NC, KC], [MC, NC, KC, MR, NR] or [rows, columns]).
    // [MC, NC, KC] and [MC, NC, KC, MR, NR] start from the blocked matmul plan, which
    // follows the dot plan in the search space when the kernel has a short side.
    std::vector<Plan> space = strategy.searchSpace(s, t, syms);
    a = attrsOf(space.front());
    if (s.strategy == Strategy::Matmul && (o.tile.size() == 3 || o.tile.size() == 5))
      for (const Plan& p : space)
        if (std::holds_alternative<CpuMatmulPlan>(p)) {
          a = attrsOf(p);
          break;
        }
    if (s.strategy == Strategy::Matmul && o.tile.size() == 3 && a.tile.size() == 5)
      a.tile = {o.tile[0], o.tile[1], o.tile[2], a.tile[3], a.tile[4]};
    else if (!o.tile.empty())
      a.tile = o.tile;
  } else {
    int64_t threads = 0;
    if (o.subgroups) {
      int64_t sg = t.subgroupSizes.empty() ? 1 : t.subgroupSizes[0];
      threads = o.subgroups * sg;
    }
    PlanAttrs gpuDefault =
        s.strategy == Strategy::Matmul ? attrsOf(GpuMatmulPlan{}) : attrsOf(PointwisePlan{});
    if (!o.workgroup.empty()) {
      a.workgroup = o.workgroup;
      if (threads && o.workgroup[0] * o.workgroup[1] * o.workgroup[2] != threads)
        return error(Loc::named("--tile-config"),
                     "kernel '" + kernel +
                         "': workgroup and subgroups disagree on the thread count");
    } else if (threads) {
      if (s.strategy == Strategy::Matmul) {
        int64_t wx = std::min<int64_t>(threads, 16);
        while (threads % wx) --wx;
        a.workgroup = {wx, threads / wx, 1};
      } else {
        a.workgroup = {threads, 1, 1};
      }
    } else {
      a.workgroup = gpuDefault.workgroup;
    }
    if (!o.tile.empty()) {
      a.tile = o.tile;
    } else if (s.strategy == Strategy::Matmul) {
      a.tile = {std::max<int64_t>(a.workgroup[1], 32), std::max<int64_t>(a.workgroup[0], 32), 8};
    } else {
      a.tile = {a.workgroup[0] * a.workgroup[1] * a.workgroup[2]};
    }
  }
  Plan p;
  if (std::optional<std::string> why = planFromAttrs(s, a, t, &p))
    return error(Loc::named("--tile-config"),
                 "kernel '" + kernel + "': configuration refused for " + t.name + ": " + *why);
  return p;
}

class TilePass : public Pass {
public:
  explicit TilePass(CodegenOptions opts) : opts_(std::move(opts)) {}

  Status run(Module& m) override {
    for (const auto& f : m.funcs())
      for (const auto& op : f->ops()) {
        if (op->kind() != OpKind::Dispatch || !opts_.covers(*op)) continue;
        Func* k = dispatchKernel(m, *op);
        if (!k || isLoweredKernel(*k)) continue;
        KernelShape s = analyzeKernel(*k);
        if (s.strategy == Strategy::Host) continue;
        const LowerStrategy* strategy = matchStrategy({*op, *k, s}, opts_.target);
        if (!strategy || !strategy->recorded) continue;
        const TileOverride* o = findTileOverride(opts_.overrides, k->name());
        Result<Plan> p = o ? fromOverride(*strategy, s, *o, opts_.target, m.symbols(), k->name())
                           : chooseTilePlan(*strategy, s, opts_.target, m.symbols(), k->name());
        if (!p.ok()) return p.takeDiags();
        recordPlan(*op, *p);
      }
    return ok();
  }

private:
  CodegenOptions opts_;
};

} // namespace

// The first legal plan of the strategy's search space.
Result<Plan> chooseTilePlan(const LowerStrategy& strategy, const KernelShape& s,
                            const TargetDesc& t, const SymbolTable& syms,
                            const std::string& kernel) {
  std::optional<std::string> why;
  for (const Plan& p : strategy.searchSpace(s, t, syms)) {
    why = planProblem(s, p, t);
    if (!why) return p;
  }
  return error(Loc::named(kernel), "kernel @" + kernel + " cannot fit " + t.name + ": " + *why);
}

std::unique_ptr<Pass> createTilePass(const CodegenOptions& opts) {
  return std::make_unique<TilePass>(opts);
}

} // namespace kiln
