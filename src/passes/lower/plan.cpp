// Tile plans (plan.h): their encoding as a dispatch's `tile` and `workgroup` attributes,
// both ways, and the decoding's refusals (a malformed plan is a reason, never a crash).
#include "passes/lower/plan.h"

#include "passes/lower/strategy.h"

namespace kiln {

namespace {

template <class... F> struct Overloaded : F... { using F::operator()...; };
template <class... F> Overloaded(F...) -> Overloaded<F...>;

} // namespace

std::string listStr(const std::vector<int64_t>& v) {
  std::string r = "[";
  for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
  return r + "]";
}

PlanAttrs attrsOf(const Plan& p) {
  return std::visit(Overloaded{
                        [](const PointwisePlan& q) {
                          return PlanAttrs{{q.threads}, {q.threads, 1, 1}};
                        },
                        [](const RowsPlan& q) {
                          return PlanAttrs{{q.rows, q.cols}, {1, 1, 1}};
                        },
                        [](const GpuMatmulPlan& q) {
                          return PlanAttrs{{q.tm, q.tn, q.tk}, {q.wx, q.wy, 1}};
                        },
                        [](const CpuMatmulPlan& q) {
                          return PlanAttrs{{q.mc, q.nc, q.kc, q.mr, q.nr}, {1, 1, 1}};
                        },
                        [](const CpuDotPlan& q) {
                          return PlanAttrs{{q.chunk, q.unroll, q.shortLen, q.pack}, {1, 1, 1}};
                        },
                        [](const ScatterPlan& q) {
                          return PlanAttrs{{}, {q.threads, 1, 1}};
                        },
                        [](const GpuReducePlan& q) {
                          return PlanAttrs{{q.rows, q.threads, q.subgroup}, {q.threads, q.rows, 1}};
                        },
                        [](const GpuGemvPlan& q) {
                          return PlanAttrs{{q.rows, q.slices}, {q.cols, q.slices, 1}};
                        },
                        [](const CpuAttentionPlan& q) {
                          return PlanAttrs{{q.block, q.rows, q.keys}, {1, 1, 1}};
                        },
                        [](const AttentionPlan& q) {
                          if (q.subgroup > 0)
                            return PlanAttrs{{q.rows, q.subgroup}, {q.threads, 1, 1}};
                          if (q.keys > 0) return PlanAttrs{{q.rows, 0, q.keys}, {q.threads, 1, 1}};
                          if (q.heads > 1) return PlanAttrs{{q.rows, q.heads}, {q.threads, 1, 1}};
                          return PlanAttrs{{q.rows}, {q.threads, 1, 1}};
                        },
                    },
                    p);
}

std::vector<int64_t> workgroupOf(const Plan& p) { return attrsOf(p).workgroup; }

PlanAttrs planAttrsOf(const Op& d, const KernelShape& s) {
  PlanAttrs a = s.strategy == Strategy::Matmul      ? attrsOf(GpuMatmulPlan{})
                : s.strategy == Strategy::Attention ? attrsOf(AttentionPlan{})
                                                    : attrsOf(PointwisePlan{});
  if (d.attrs().has("tile")) a.tile = d.attrs().getInts("tile");
  if (d.attrs().has("workgroup")) a.workgroup = d.attrs().getInts("workgroup");
  return a;
}

void recordPlan(Op& d, const Plan& p) {
  PlanAttrs a = attrsOf(p);
  d.attrs().set("tile", a.tile);
  d.attrs().set("workgroup", a.workgroup);
}

std::optional<std::string> workgroupProblem(const std::vector<int64_t>& wg, const TargetDesc& t) {
  if (wg.size() != 3) return "workgroup " + listStr(wg) + " needs 3 entries";
  int64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    int64_t w = wg[static_cast<size_t>(i)];
    if (w < 1 || w > t.maxWorkgroupSize[i])
      return "workgroup " + listStr(wg) + " exceeds " + t.name + "'s maximum size " +
             std::to_string(t.maxWorkgroupSize[i]) + " along axis " + std::to_string(i);
    threads *= w;
  }
  if (threads > t.maxWorkgroupInvocations)
    return "workgroup " + listStr(wg) + " has " + std::to_string(threads) + " threads; " + t.name +
           " allows " + std::to_string(t.maxWorkgroupInvocations);
  return std::nullopt;
}

std::optional<std::string> planFromAttrs(const KernelShape& s, const PlanAttrs& a,
                                         const TargetDesc& t, Plan* out, bool checkSharedMemory) {
  const std::vector<int64_t>& tile = a.tile;
  const std::vector<int64_t>& wg = a.workgroup;
  if (std::optional<std::string> why = workgroupProblem(wg, t)) return why;
  int64_t threads = wg[0] * wg[1] * wg[2];
  Plan p;
  if (s.strategy == Strategy::Attention && tile.size() == 3 && tile[1] == 0) {
    // gpu: K/V tiles staged in shared memory, tile [rows, 0, keys].
    if (wg[1] != 1 || wg[2] != 1)
      return "an attention kernel with staged keys (tile " + listStr(tile) +
             ") takes workgroup [threads, 1, 1], got " + listStr(wg);
    p = AttentionPlan{tile[0], wg[0], 0, tile[2]};
  } else if (s.strategy == Strategy::Attention && tile.size() == 3) {
    if (threads != 1)
      return "a cpu attention kernel (tile " + listStr(tile) + ") takes workgroup [1, 1, 1]";
    p = CpuAttentionPlan{tile[0], tile[1], tile[2]};
  } else if (s.strategy == Strategy::Attention) {
    if (tile.empty() || tile.size() > 2 || wg[1] != 1 || wg[2] != 1)
      return "an attention kernel takes tile [rows], [1, subgroup] or [rows, 0, keys] with "
             "workgroup [threads, 1, 1] (on cpu [rows], [rows, heads] or [block, rows, keys] with "
             "workgroup [1, 1, 1]), got tile " +
             listStr(tile) + " and workgroup " + listStr(wg);
    if (tile.size() == 2 && tile[1] < 1)
      return "an attention kernel's tile [1, subgroup] needs a subgroup of at least 1 thread, "
             "got " +
             listStr(tile);
    if (tile.size() == 2 && t.cpu) // cpu: [rows, heads]; gpu: [1, subgroup]
      p = AttentionPlan{tile[0], wg[0], 0, 0, tile[1]};
    else
      p = AttentionPlan{tile[0], wg[0], tile.size() == 2 ? tile[1] : 0};
  } else if (s.strategy == Strategy::Pointwise && tile.size() == 2) {
    if (threads != 1)
      return "a cpu pointwise kernel takes tile [rows, columns] with workgroup [1, 1, 1], got "
             "tile " +
             listStr(tile) + " and workgroup " + listStr(wg);
    p = RowsPlan{tile[0], tile[1]};
  } else if (s.strategy == Strategy::Pointwise && tile.size() == 3) {
    if (wg[0] != tile[1] || wg[1] != tile[0] || wg[2] != 1)
      return "a gpu row reduction takes tile [rows, threads, subgroup] with workgroup [threads, "
             "rows, 1], got tile " +
             listStr(tile) + " and workgroup " + listStr(wg);
    p = GpuReducePlan{tile[0], tile[1], tile[2]};
  } else if (s.strategy == Strategy::Pointwise) {
    if (tile.size() != 1 || tile[0] != threads || wg[1] != 1 || wg[2] != 1)
      return "a pointwise kernel takes tile [threads] with workgroup [threads, 1, 1], got tile " +
             listStr(tile) + " and workgroup " + listStr(wg);
    p = PointwisePlan{threads};
  } else if (s.strategy == Strategy::Matmul && tile.size() == 5) {
    if (threads != 1)
      return "a cpu matmul kernel (tile " + listStr(tile) + ") takes workgroup [1, 1, 1]";
    p = CpuMatmulPlan{tile[0], tile[1], tile[2], tile[3], tile[4]};
  } else if (s.strategy == Strategy::Matmul && tile.size() == 4) {
    if (threads != 1)
      return "a cpu matmul kernel with a short side (tile " + listStr(tile) +
             ") takes workgroup [1, 1, 1]";
    p = CpuDotPlan{tile[0], tile[1], tile[2], tile[3]};
  } else if (s.strategy == Strategy::Matmul && tile.size() == 2) {
    if (wg[1] != tile[1] || wg[2] != 1)
      return "a gpu matmul with few rows takes tile [rows, slices] with workgroup [columns, "
             "slices, 1], got tile " +
             listStr(tile) + " and workgroup " + listStr(wg);
    p = GpuGemvPlan{tile[0], wg[0], tile[1]};
  } else if (s.strategy == Strategy::Matmul) {
    if (tile.size() != 3)
      return "a matmul kernel takes tile [TM, TN, TK] (or [MC, NC, KC, MR, NR] or [chunk, unroll, "
             "short, pack] with workgroup [1, 1, 1]), got " +
             listStr(tile);
    if (wg[2] != 1) return "a matmul kernel's workgroup is [x, y, 1]";
    p = GpuMatmulPlan{tile[0], tile[1], tile[2], wg[0], wg[1]};
  } else {
    return std::string("the kernel is not lowered, so it takes no tile plan");
  }
  if (std::optional<std::string> why = planProblem(s, p, t, checkSharedMemory)) return why;
  *out = p;
  return std::nullopt;
}

std::optional<std::string> planProblem(const KernelShape& s, const PlanAttrs& a,
                                       const TargetDesc& t, bool checkSharedMemory) {
  Plan p;
  return planFromAttrs(s, a, t, &p, checkSharedMemory);
}

std::vector<SharedBuffer> sharedBuffersFor(const KernelShape& s, const Plan& p) {
  if (const auto* r = std::get_if<GpuReducePlan>(&p)) return gpuReduceSharedBuffers(s, *r);
  if (const auto* a = std::get_if<AttentionPlan>(&p)) return attentionSharedBuffers(s, *a);
  if (const auto* g = std::get_if<GpuGemvPlan>(&p)) return gpuGemvSharedBuffers(s, *g);
  const auto* q = std::get_if<GpuMatmulPlan>(&p);
  if (s.strategy != Strategy::Matmul || !q) return {};
  return gpuMatmulSharedBuffers(s, *q);
}

} // namespace kiln
