// tile: chooses each dispatch's workgroup shape and tiles from the target description.
//
// Requires:    fuse (dispatches); collapse-dims before it, if run.
// Guarantees:  every dispatch whose kernel `lower` handles carries `tile` and `workgroup`
//              attributes that fit the target: workgroup size and invocations, and shared
//              memory by the one footprint function (codegen.h) — tiles shrink until the
//              kernel fits, so no kernel over a limit is ever emitted. A manual config
//              (--tile-config) is used as given, or refused with the reason it cannot be
//              compiled (an error, never a crash).
//              On cpu targets (TargetDesc::cpu) every plan has workgroup [1, 1, 1]:
//              matmuls tile [MC, NC, KC, MR, NR] from the caches and vector registers,
//              pointwise kernels tile [rows, columns] of about 4096 elements.
// Invalidates: nothing.
//
//   %0 = dispatch %a, %b {kernel = "k"}    =>    %0 = dispatch %a, %b {kernel = "k",
//                                                  tile = [64, 64, 16], workgroup = [16, 16, 1]}
#include <algorithm>

#include "passes/codegen.h"
#include "passes/passes.h"

namespace kiln {

namespace {

int64_t pow2AtLeast(int64_t x) {
  int64_t p = 1;
  while (p < x && p < (int64_t(1) << 30)) p *= 2;
  return p;
}

// The largest value an extent takes under the symbols' ranges.
int64_t upper(const Dim& d, const SymbolTable& syms) {
  if (d.isStatic()) return d.value();
  return std::max<int64_t>(1, bounds(d.expr(), syms).hi);
}

// The cpu register block: NR two vectors of accumulators wide (f32; f64 and i64 for f64
// and integer matmuls), MR rows so that MR x NR / lanes accumulators plus the B row and a
// broadcast A fit the SIMD registers.
std::vector<int64_t> cpuMicro(const TargetDesc& t, ElemType result) {
  bool wide = result == ElemType::F64 || !isFloat(result);
  int64_t lanes = std::max<int64_t>(1, t.preferredVectorBits / (wide ? 64 : 32));
  int64_t nr = 2 * lanes;
  int64_t mr = std::clamp<int64_t>((t.vectorRegisters - 4) / 2, 1, 8);
  return {mr, nr};
}

// The cpu plans: matmul blocks MC x NC x KC from the caches (the KC x NR slice of B stays
// in L1 across the MR-row micro-tiles, the MC x KC block of A in L2), never beyond the
// extents; pointwise chunks of about 4096 elements along the contiguous innermost dim.
TilePlan cpuPlan(const KernelShape& s, const TargetDesc& t, const SymbolTable& syms) {
  TilePlan p;
  p.workgroup = {1, 1, 1};
  size_t r = s.outShape.size();
  auto ub = [&](const Dim& d) { return std::min<int64_t>(upper(d, syms), 1 << 30); };
  if (s.strategy == Strategy::Matmul) {
    std::vector<int64_t> micro = cpuMicro(t, s.anchor->result(0)->type().elem());
    int64_t mr = micro[0], nr = micro[1];
    auto roundUp = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
    int64_t bBytes = std::max<int64_t>(4, elemTypeBytes(s.bElem));
    int64_t aBytes = std::max<int64_t>(4, elemTypeBytes(s.aElem));
    int64_t kc = std::max<int64_t>(16, static_cast<int64_t>(t.l1Bytes / 2) / (nr * bBytes));
    const Type& a = s.anchor->operand(0)->type();
    kc = std::min(kc, ub(a.dim(a.rank() - 1)));
    int64_t mc = std::max<int64_t>(mr, static_cast<int64_t>(t.l2Bytes / 2) / (kc * aBytes));
    mc = std::min<int64_t>(mc / mr * mr, 12 * mr);
    mc = std::min(mc, roundUp(ub(s.outShape[r - 2]), mr));
    int64_t nc = std::min<int64_t>(8 * nr, roundUp(ub(s.outShape[r - 1]), nr));
    p.tile = {std::max(mc, mr), std::max(nc, nr), std::max<int64_t>(kc, 1), mr, nr};
    return p;
  }
  int64_t cols = r ? ub(s.outShape[r - 1]) : 1;
  // A kernel with reductions or softmax takes whole rows, so a row's reduction along the
  // innermost dim is computed once per row (lower hoists it out of the column loop).
  // About 4096 elements of work per workgroup: a row costs its columns plus the reduced
  // extent (row reductions are computed once per row).
  int64_t c = std::max<int64_t>(1, s.reduces ? cols : std::min<int64_t>(cols, 4096));
  int64_t rowWork = c + (s.reduces ? s.reduceExtent : 0);
  p.tile = {std::max<int64_t>(1, 4096 / rowWork), c};
  return p;
}

Result<TilePlan> fromOverride(const KernelShape& s, const TileOverride& o, const TargetDesc& t,
                              const SymbolTable& syms, const std::string& kernel) {
  TilePlan p;
  if (t.cpu && !o.subgroups &&
      (o.workgroup.empty() || o.workgroup == std::vector<int64_t>{1, 1, 1})) {
    // A cpu plan with the given tile ([MC, NC, KC], [MC, NC, KC, MR, NR] or [rows, columns]).
    p = cpuPlan(s, t, syms);
    if (s.strategy == Strategy::Matmul && o.tile.size() == 3)
      p.tile = {o.tile[0], o.tile[1], o.tile[2], p.tile[3], p.tile[4]};
    else if (!o.tile.empty())
      p.tile = o.tile;
    if (std::optional<std::string> why = planProblem(s, p, t))
      return error(Loc::named("--tile-config"),
                   "kernel '" + kernel + "': configuration refused for " + t.name + ": " + *why);
    return p;
  }
  int64_t threads = 0;
  if (o.subgroups) {
    int64_t sg = t.subgroupSizes.empty() ? 1 : t.subgroupSizes[0];
    threads = o.subgroups * sg;
  }
  if (!o.workgroup.empty()) {
    p.workgroup = o.workgroup;
    if (threads && o.workgroup[0] * o.workgroup[1] * o.workgroup[2] != threads)
      return error(Loc::named("--tile-config"),
                   "kernel '" + kernel + "': workgroup and subgroups disagree on the thread count");
  } else if (threads) {
    if (s.strategy == Strategy::Matmul) {
      int64_t wx = std::min<int64_t>(threads, 16);
      while (threads % wx) --wx;
      p.workgroup = {wx, threads / wx, 1};
    } else {
      p.workgroup = {threads, 1, 1};
    }
  } else {
    p.workgroup = s.strategy == Strategy::Matmul ? std::vector<int64_t>{8, 8, 1}
                                                 : std::vector<int64_t>{64, 1, 1};
  }
  if (!o.tile.empty()) {
    p.tile = o.tile;
  } else if (s.strategy == Strategy::Matmul) {
    p.tile = {std::max<int64_t>(p.workgroup[1], 32), std::max<int64_t>(p.workgroup[0], 32), 8};
  } else {
    p.tile = {p.workgroup[0] * p.workgroup[1] * p.workgroup[2]};
  }
  if (std::optional<std::string> why = planProblem(s, p, t))
    return error(Loc::named("--tile-config"),
                 "kernel '" + kernel + "': configuration refused for " + t.name + ": " + *why);
  return p;
}

Result<TilePlan> choose(const KernelShape& s, const TargetDesc& t, const SymbolTable& syms,
                        const std::string& kernel) {
  if (t.cpu) {
    TilePlan p = cpuPlan(s, t, syms);
    if (std::optional<std::string> why = planProblem(s, p, t))
      return error(Loc::named(kernel), "kernel @" + kernel + " cannot fit " + t.name + ": " + *why);
    return p;
  }
  int64_t sg = t.subgroupSizes.empty() ? 1 : t.subgroupSizes[0];
  TilePlan p;
  if (s.strategy == Strategy::Pointwise) {
    int64_t threads = std::min<int64_t>({256, t.maxWorkgroupInvocations, t.maxWorkgroupSize[0]});
    if (threads >= sg) threads -= threads % sg;
    p.workgroup = {threads, 1, 1};
    p.tile = {threads};
  } else {
    size_t r = s.outShape.size();
    int64_t wx = 16, wy = 16;
    while (wx * wy > t.maxWorkgroupInvocations) (wy > 1 ? wy : wx) /= 2;
    // Start big (128 x 128 x 32) but never beyond the extents' upper bounds.
    int64_t tm = std::max(wy, std::min<int64_t>(128, pow2AtLeast(upper(s.outShape[r - 2], syms))));
    int64_t tn = std::max(wx, std::min<int64_t>(128, pow2AtLeast(upper(s.outShape[r - 1], syms))));
    const Type& a = s.anchor->operand(0)->type();
    int64_t tk = std::min<int64_t>(32, pow2AtLeast(upper(a.dim(a.rank() - 1), syms)));
    p.tile = {tm, tn, tk};
    p.workgroup = {wx, wy, 1};
    // Shrink until the plan fits: TK first, then the larger of TM and TN, then threads.
    while (planProblem(s, p, t)) {
      if (p.tile[2] > 4 && p.tile[2] >= std::max(p.tile[0], p.tile[1]) / 8) {
        p.tile[2] /= 2;
      } else if (std::max(p.tile[0], p.tile[1]) > std::max(p.workgroup[0], p.workgroup[1])) {
        size_t i = p.tile[0] >= p.tile[1] ? 0 : 1;
        if (p.tile[i] / 2 >= p.workgroup[i == 0 ? 1 : 0])
          p.tile[i] /= 2;
        else
          p.tile[1 - i] /= 2;
      } else if (p.workgroup[0] * p.workgroup[1] > 1) {
        size_t i = p.workgroup[0] >= p.workgroup[1] ? 0 : 1;
        p.workgroup[i] /= 2;
      } else if (p.tile[2] > 1) {
        p.tile[2] /= 2;
      } else if (p.tile[0] > 1 || p.tile[1] > 1) {
        p.tile[0] = std::max<int64_t>(1, p.tile[0] / 2);
        p.tile[1] = std::max<int64_t>(1, p.tile[1] / 2);
      } else {
        break;
      }
    }
  }
  if (std::optional<std::string> why = planProblem(s, p, t))
    return error(Loc::named(kernel), "kernel @" + kernel + " cannot fit " + t.name + ": " + *why);
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
        const TileOverride* o = findTileOverride(opts_.overrides, k->name());
        Result<TilePlan> p = o ? fromOverride(s, *o, opts_.target, m.symbols(), k->name())
                               : choose(s, opts_.target, m.symbols(), k->name());
        if (!p.ok()) return p.takeDiags();
        recordPlan(*op, *p);
      }
    return ok();
  }

private:
  CodegenOptions opts_;
};

} // namespace

// The tile a fresh `tile` run would choose (used by collapse-dims to compare footprints).
Result<TilePlan> chooseTilePlan(const KernelShape& s, const TargetDesc& t, const SymbolTable& syms,
                                const std::string& kernel) {
  return choose(s, t, syms, kernel);
}

std::unique_ptr<Pass> createTilePass(const CodegenOptions& opts) {
  return std::make_unique<TilePass>(opts);
}

} // namespace kiln
