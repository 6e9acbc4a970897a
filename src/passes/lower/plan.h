// Typed tile plans: one struct per lowering strategy, so a plan's meaning is its type, not
// the length of a vector. The dispatch keeps today's encoding (`tile` and `workgroup`
// attributes); attrsOf and planFromAttrs (strategy.h) convert between the two, and the
// IR text is unchanged:
//   PointwisePlan{64}                 tile = [64],                workgroup = [64, 1, 1]
//   RowsPlan{16, 256}                 tile = [16, 256],           workgroup = [1, 1, 1]
//   GpuMatmulPlan{64, 64, 16, 16, 16} tile = [64, 64, 16],        workgroup = [16, 16, 1]
//   CpuMatmulPlan{48, 64, 256, 6, 16} tile = [48, 64, 256, 6, 16], workgroup = [1, 1, 1]
//   CpuDotPlan{128, 8, 1, 0}          tile = [128, 8, 1, 0],      workgroup = [1, 1, 1]
//   ScatterPlan{64}                   tile = [],                  workgroup = [64, 1, 1]
//   GpuReducePlan{2, 32, 8}           tile = [2, 32, 8],          workgroup = [32, 2, 1]
//   AttentionPlan{8, 1}               tile = [8],                 workgroup = [1, 1, 1]
//   AttentionPlan{1, 256, 32}         tile = [1, 32],             workgroup = [256, 1, 1]
//   AttentionPlan{1, 64, 0, 32}       tile = [1, 0, 32],          workgroup = [64, 1, 1]
//   AttentionPlan{1, 1, 0, 0, 8}      tile = [1, 8],              workgroup = [1, 1, 1] (cpu)
//   CpuAttentionPlan{64, 4, 64}       tile = [64, 4, 64],         workgroup = [1, 1, 1]
//   GpuGemvPlan{1, 32, 8}             tile = [1, 8],              workgroup = [32, 8, 1]
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kiln {

// One thread per output element, `threads` threads per workgroup.
struct PointwisePlan {
  int64_t threads = 64;
};
// cpu: each workgroup (one thread) loops over `rows` rows x `cols` contiguous elements of
// the innermost output dim.
struct RowsPlan {
  int64_t rows = 1, cols = 1;
};
// gpu matmul: a TM x TN output tile per workgroup of wx x wy threads (each computes
// (TM/wy) x (TN/wx) outputs), K in steps of TK staged through shared memory.
struct GpuMatmulPlan {
  int64_t tm = 32, tn = 32, tk = 8;
  int64_t wx = 8, wy = 8;
};
// cpu matmul: each workgroup (one thread) computes an MC x NC block of C, K in steps of
// KC, by an MR x NR register-blocked micro-kernel.
struct CpuMatmulPlan {
  int64_t mc = 1, nc = 1, kc = 1, mr = 1, nr = 1;
};
// cpu matmul with a short side (at most 4 rows and B stored [N, K], or at most 4 columns):
// each workgroup (one thread) computes `chunk` elements of the long side against all
// `shortLen` of the short one, `unroll` long-side elements at a time, each output a dot
// product along K (contiguous in both operands); `pack` = 1 packs the short side first.
struct CpuDotPlan {
  int64_t chunk = 64, unroll = 4, shortLen = 1, pack = 0;
};
// scatter_nd in place: `threads` threads per workgroup walk the update slice.
struct ScatterPlan {
  int64_t threads = 64;
};

// gpu row reductions: `rows` rows per workgroup, `threads` threads per row (whole
// subgroups of `subgroup` threads, at most subgroup^2) reduce a row together through
// subgroup arithmetic and shared memory.
struct GpuReducePlan {
  int64_t rows = 1, threads = 64, subgroup = 8;
};

// attention: each thread owns `rows` query rows of one (batch, head), `threads` threads per
// workgroup; or, with `subgroup` > 0 (gpu, few queries: a decode step), the workgroup owns
// one query row and splits its keys: each subgroup of `subgroup` threads takes every
// (threads / subgroup)-th key, its lanes split the head dims; or, with `keys` > 0 (gpu),
// the workgroup stages `keys` keys and values at a time in shared memory and its threads
// read them from there; with `heads` > 1 (cpu), a thread owns `rows` query rows of each of
// `heads` consecutive query heads that read the same kv head, which it then reads once.
struct AttentionPlan {
  int64_t rows = 1, threads = 64, subgroup = 0, keys = 0, heads = 1;
};
// cpu attention: each workgroup (one thread) owns `block` query rows of one (batch, head)
// and streams the keys in tiles of `keys`; each tile's scores are a `rows` x `keys`
// register block (vectors along the keys), its values are accumulated into `rows` x Dv.
struct CpuAttentionPlan {
  int64_t block = 64, rows = 4, keys = 64;
};

// gpu matmul with few rows (M <= rows, a decode step's projections): each workgroup
// computes `cols` output columns for all rows; its threads are cols x slices, each slice
// takes every slices-th k, and the slices' partial sums meet in shared memory.
struct GpuGemvPlan {
  int64_t rows = 1, cols = 32, slices = 8;
};

using Plan = std::variant<PointwisePlan, RowsPlan, GpuMatmulPlan, CpuMatmulPlan, ScatterPlan,
                          GpuReducePlan, AttentionPlan, GpuGemvPlan, CpuDotPlan, CpuAttentionPlan>;

// A plan as the dispatch records it.
struct PlanAttrs {
  std::vector<int64_t> tile;
  std::vector<int64_t> workgroup{64, 1, 1};
};

PlanAttrs attrsOf(const Plan& p);
std::vector<int64_t> workgroupOf(const Plan& p);

// "[1, 2, 3]", as plans are printed in diagnostics.
std::string listStr(const std::vector<int64_t>& v);

} // namespace kiln
