// lower: tensor-level kernels -> kernel IR, plus the final resource check.
//
// Requires:    fuse (dispatches with tensor-level kernels); tile and pad are optional (their
//              decisions are read from the dispatch: tile, workgroup, guarded).
// Guarantees:  every kernel whose ops `lower` supports (codegen.h) is kernel IR: global
//              buffer arguments (inputs, then outputs), a uniform prologue, kernel_config,
//              one thread's program; no kernel exceeds the target's shared memory or
//              workgroup limits (a violation is an error naming the kernel, the bytes and
//              the limit); unsupported kernels stay tensor-level and run on the host side.
// Invalidates: the kernels' tensor-level bodies.
//
//   func @k(%a: tensor<{n}xf32>) -> (tensor<{n}xf32>)    func @k(%a: buffer<{n}xf32>, %o:
//   buffer<{n}xf32>)
//     %0 = exp %a                                  =>    ... %i = (wg * 64 + lid); %m = icmp lt %i,
//     n return %0                                          %v = masked_load %a, %m, %i; exp;
//     masked_store
//
// This file is the dispatcher: the registry of lowering strategies (lower/strategy.h), one
// table in priority order, asked per kernel; the plan on the dispatch (decoded by
// lower/plan.cpp) names the strategy that emits it, through the kernel builder
// (lower/kernel_builder.h). Each strategy is a file under lower/: pointwise (gpu, one
// thread per element), rows (cpu rows x columns, row reductions hoisted), scatter (a
// scatter_nd over a donated argument), matmul-gpu (shared-memory tiles), matmul-cpu
// (a register-blocked micro-kernel) and reduction-gpu (a row's threads reduce it together
// through subgroups and shared memory).
#include <algorithm>
#include <map>
#include <set>

#include "passes/codegen.h"
#include "passes/lower/kernel_builder.h"
#include "passes/lower/strategy.h"
#include "passes/passes.h"

namespace kiln {

// The registry: the first strategy whose `match` holds lowers the kernel (tile plans with
// it); a kernel no strategy matches stays on the host side.
const std::vector<LowerStrategy>& lowerStrategies() {
  static const std::vector<LowerStrategy> table = {
      // name, match, search space, whether tile records the plan on the dispatch
      {"scatter-in-place", matchScatter, scatterPlans, false},
      {"attention", matchAttention, attentionPlans, true},
      {"matmul-cpu", matchCpuMatmul, cpuMatmulPlans, true},
      {"matmul-gpu", matchGpuMatmul, gpuMatmulPlans, true},
      {"rows", matchRows, rowsPlans, true},
      {"reduction-gpu", matchGpuReduce, gpuReducePlans, true},
      {"pointwise", matchPointwise, pointwisePlans, true},
  };
  return table;
}

const LowerStrategy* matchStrategy(const KernelRef& k, const TargetDesc& t) {
  for (const LowerStrategy& s : lowerStrategies())
    if (s.match(k, t)) return &s;
  return nullptr;
}

std::optional<std::string> planProblem(const KernelShape& s, const Plan& p, const TargetDesc& t,
                                       bool checkSharedMemory) {
  if (std::optional<std::string> why = workgroupProblem(workgroupOf(p), t)) return why;
  return std::visit([&](const auto& q) { return strategyProblem(s, q, t, checkSharedMemory); }, p);
}

Status emitPlan(KernelBuilder& b, const Plan& p) {
  return std::visit([&](const auto& q) { return emitStrategy(b, q); }, p);
}

int64_t gridCap(const TargetDesc& t) { return std::min<int64_t>(t.maxWorkgroupCount[0], 65535); }

int64_t upperBound(const Dim& d, const SymbolTable& syms) {
  if (d.isStatic()) return d.value();
  return std::max<int64_t>(1, bounds(d.expr(), syms).hi);
}

namespace {

Status checkElemTypes(const Func& k, const TargetDesc& t) {
  for (const auto& op : k.ops())
    for (size_t r = 0; r < op->numResults(); ++r)
      if (!t.supports(op->result(r)->type().elem()))
        return error(op->loc(), "kernel @" + k.name() + " uses element type " +
                                    std::string(elemTypeName(op->result(r)->type().elem())) +
                                    ", which target " + t.name + " does not support");
  return ok();
}

// The final resource check on a lowered kernel, with the same footprint function as `tile`.
Status checkResources(const Func& k, const TargetDesc& t) {
  uint64_t bytes = sharedFootprint(sharedBuffersOf(k));
  if (bytes > t.sharedMemoryBytes)
    return error(k.loc(), "kernel @" + k.name() + " needs " + std::to_string(bytes) +
                              " bytes of shared memory, more than the " +
                              std::to_string(t.sharedMemoryBytes) + "-byte limit of " + t.name);
  for (const auto& op : k.ops())
    if (op->kind() == OpKind::KernelConfig) {
      std::vector<int64_t> w = op->attrs().getInts("workgroup");
      int64_t threads = w.size() == 3 ? w[0] * w[1] * w[2] : 0;
      if (threads > t.maxWorkgroupInvocations || threads < 1)
        return error(k.loc(), "kernel @" + k.name() + " has " + std::to_string(threads) +
                                  " threads per workgroup, more than the " +
                                  std::to_string(t.maxWorkgroupInvocations) + " of " + t.name);
    }
  return ok();
}

class LowerPass : public Pass {
public:
  explicit LowerPass(CodegenOptions opts) : opts_(std::move(opts)) {}

  Status run(Module& m) override {
    const TargetDesc& target = opts_.target;
    std::vector<std::pair<Op*, Func*>> work;
    for (const auto& f : m.funcs())
      for (const auto& op : f->ops())
        if (op->kind() == OpKind::Dispatch && opts_.covers(*op))
          if (Func* k = dispatchKernel(m, *op)) work.emplace_back(op.get(), k);
    std::set<const Func*> done;
    std::map<std::string, std::string> strategyOf; // kernel name -> the strategy that lowered it
    for (auto [d, k] : work) {
      if (!done.insert(k).second || isLoweredKernel(*k)) continue;
      KernelShape s = analyzeKernel(*k);
      const LowerStrategy* strategy = matchStrategy({*d, *k, s}, target);
      if (!strategy) continue;
      KILN_CHECK(checkElemTypes(*k, target));
      Plan p;
      if (!strategy->recorded) {
        p = strategy->searchSpace(s, target, m.symbols()).front();
      } else if (std::optional<std::string> why =
                     planFromAttrs(s, planAttrsOf(*d, s), target, &p, false)) {
        return error(d->loc(), "kernel @" + k->name() + ": " + *why);
      }
      bool guarded = d->attrs().getInt("guarded", 1) != 0;
      KernelBuilder b(*k, s, workgroupOf(p), guarded, target);
      KILN_CHECK(emitPlan(b, p));
      std::unique_ptr<Func> lowered = b.finish();
      KILN_CHECK(checkResources(*lowered, target));
      recordPlan(*d, p);
      strategyOf[k->name()] = strategy->name;
      m.replaceFunc(k, std::move(lowered));
    }
    // Every dispatch of a lowered kernel names its strategy; schedule carries it to the
    // launch, where `kiln bench --profile` shows it.
    for (auto [d, k] : work)
      if (auto it = strategyOf.find(d->attrs().getStr("kernel")); it != strategyOf.end())
        d->attrs().set("strategy", it->second);
    return ok();
  }

private:
  CodegenOptions opts_;
};

} // namespace

Status checkKernelResources(const Func& k, const TargetDesc& t) { return checkResources(k, t); }

std::unique_ptr<Pass> createLowerPass(const CodegenOptions& opts) {
  return std::make_unique<LowerPass>(opts);
}

} // namespace kiln
