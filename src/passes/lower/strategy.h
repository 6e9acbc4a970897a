// Lowering strategies: the ways `lower` turns a tensor-level kernel into kernel IR, one
// file each (pointwise.cpp, rows.cpp, scatter.cpp, matmul_gpu.cpp, matmul_cpu.cpp,
// reduction_gpu.cpp), all
// emitting through the kernel builder (kernel_builder.h). Each strategy has
//   match        whether it lowers a kernel on a target (the registry in lower.cpp asks
//                the strategies in priority order; the first that matches wins),
//   search space its candidate plans for the target, best first (tile takes the first
//                legal one); the first is the strategy's default plan (a manual cpu
//                config starts from it; a dispatch with no recorded plan decodes as its
//                kind's gpu default, PointwisePlan{} or GpuMatmulPlan{}),
//   legality     planProblem on its plan type (never an assert: a reason, or nullopt),
//   emit         the kernel IR for its plan type.
// A plan recorded on a dispatch (by tile, or by hand) names its strategy through its
// type, and `lower` emits with that strategy.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "passes/codegen.h"
#include "passes/lower/plan.h"

namespace kiln {

class KernelBuilder;

// What a strategy matches: a dispatch, its tensor-level kernel and the kernel's shape.
struct KernelRef {
  const Op& dispatch;
  const Func& kernel;
  const KernelShape& shape;
};

struct LowerStrategy {
  const char* name;
  bool (*match)(const KernelRef& k, const TargetDesc& t);
  std::vector<Plan> (*searchSpace)(const KernelShape& s, const TargetDesc& t,
                                   const SymbolTable& syms);
  // True when tile records the plan on the dispatch; false when the plan is fixed by the
  // target (the search space's one plan), which `lower` takes itself.
  bool recorded;
};

// The registry (lower.cpp), in priority order.
const std::vector<LowerStrategy>& lowerStrategies();
// The first strategy that matches the kernel, or null (the kernel stays on the host side).
const LowerStrategy* matchStrategy(const KernelRef& k, const TargetDesc& t);

// Why a plan cannot be compiled for the target, or nullopt when it can: the workgroup
// against the target's limits, then the plan's strategy's own rules.
// `checkSharedMemory` = false leaves the shared-memory limit to the final resource check
// (lower does, so a forced manual plan reaches it).
std::optional<std::string> planProblem(const KernelShape& s, const Plan& p, const TargetDesc& t,
                                       bool checkSharedMemory = true);
// Kernel IR for the plan, by the plan's strategy.
Status emitPlan(KernelBuilder& b, const Plan& p);

// ---- plans on dispatches (plan.cpp) -------------------------------------------------------

// The plan attributes on a dispatch: its `tile` and `workgroup`, each defaulting to the
// kernel kind's gpu default plan (PointwisePlan{}, GpuMatmulPlan{}) when absent.
PlanAttrs planAttrsOf(const Op& dispatch, const KernelShape& s);
void recordPlan(Op& dispatch, const Plan& p);
// Decodes plan attributes into `out` (the tile's length tells a cpu plan from a gpu one),
// or says why they cannot be compiled for the target: workgroupProblem, the encoding,
// then planProblem.
std::optional<std::string> planFromAttrs(const KernelShape& s, const PlanAttrs& a,
                                         const TargetDesc& t, Plan* out,
                                         bool checkSharedMemory = true);
// Why plan attributes cannot be compiled for the target (planFromAttrs without the plan).
std::optional<std::string> planProblem(const KernelShape& s, const PlanAttrs& a,
                                       const TargetDesc& t, bool checkSharedMemory = true);
// A workgroup against the target's limits (3 entries, each axis, the invocations).
std::optional<std::string> workgroupProblem(const std::vector<int64_t>& workgroup,
                                            const TargetDesc& t);
// The shared buffers a plan needs (what `lower` allocates for it).
std::vector<SharedBuffer> sharedBuffersFor(const KernelShape& s, const Plan& p);

// The plan `tile` chooses with `strategy` for a kernel without a manual config (collapse-dims
// uses it to compare footprints before and after a merge); defined in tile.cpp.
Result<Plan> chooseTilePlan(const LowerStrategy& strategy, const KernelShape& s,
                            const TargetDesc& t, const SymbolTable& syms,
                            const std::string& kernel);

// ---- the strategies' entry points (one file each) ----------------------------------------

// pointwise.cpp: gpu, one thread per output element.
bool matchPointwise(const KernelRef& k, const TargetDesc& t);
std::vector<Plan> pointwisePlans(const KernelShape& s, const TargetDesc& t,
                                 const SymbolTable& syms);
std::optional<std::string> strategyProblem(const KernelShape& s, const PointwisePlan& p,
                                           const TargetDesc& t, bool checkSharedMemory);
Status emitStrategy(KernelBuilder& b, const PointwisePlan& p);

// rows.cpp: cpu, rows x contiguous columns per workgroup.
bool matchRows(const KernelRef& k, const TargetDesc& t);
std::vector<Plan> rowsPlans(const KernelShape& s, const TargetDesc& t, const SymbolTable& syms);
std::optional<std::string> strategyProblem(const KernelShape& s, const RowsPlan& p,
                                           const TargetDesc& t, bool checkSharedMemory);
Status emitStrategy(KernelBuilder& b, const RowsPlan& p);

// scatter.cpp: a scatter_nd writing a donated argument in place.
bool matchScatter(const KernelRef& k, const TargetDesc& t);
std::vector<Plan> scatterPlans(const KernelShape& s, const TargetDesc& t, const SymbolTable& syms);
std::optional<std::string> strategyProblem(const KernelShape& s, const ScatterPlan& p,
                                           const TargetDesc& t, bool checkSharedMemory);
Status emitStrategy(KernelBuilder& b, const ScatterPlan& p);

// matmul_gpu.cpp: workgroup tiles, operand tiles staged in shared memory.
bool matchGpuMatmul(const KernelRef& k, const TargetDesc& t);
std::vector<Plan> gpuMatmulPlans(const KernelShape& s, const TargetDesc& t,
                                 const SymbolTable& syms);
std::optional<std::string> strategyProblem(const KernelShape& s, const GpuMatmulPlan& p,
                                           const TargetDesc& t, bool checkSharedMemory);
Status emitStrategy(KernelBuilder& b, const GpuMatmulPlan& p);
// The shared buffers the plan needs: the A and B tiles.
std::vector<SharedBuffer> gpuMatmulSharedBuffers(const KernelShape& s, const GpuMatmulPlan& p);

// matmul_gemv.cpp: gpu matmuls with few rows (part of matmul-gpu's search space).
std::optional<std::string> strategyProblem(const KernelShape& s, const GpuGemvPlan& p,
                                           const TargetDesc& t, bool checkSharedMemory);
Status emitStrategy(KernelBuilder& b, const GpuGemvPlan& p);
// The shared buffer the plan needs: the slices' partial sums.
std::vector<SharedBuffer> gpuGemvSharedBuffers(const KernelShape& s, const GpuGemvPlan& p);
// Plans for a matmul whose rows are at most `rows`, best first.
std::vector<Plan> gpuGemvPlans(int64_t rows, const TargetDesc& t);

// matmul_cpu.cpp: cache blocks and a register-blocked micro-kernel.
// The micro-kernel's MR x NR register block for a matmul with this result type.
std::pair<int64_t, int64_t> cpuMicroTile(const TargetDesc& t, ElemType result);
// The blocked plan's K step (KC) for a depth of `depth` over B elements of type b in
// NR-column strips: a KC x NR slice of B in half of L1, or the whole depth when it is at
// most half a step more.
int64_t cpuMatmulKStep(const TargetDesc& t, int64_t nr, ElemType b, int64_t depth);
// P when B is reshape(transpose(P, [1, 0, 2])) to [K, N] of P [N / nr, K, nr], or its
// first N columns when P's last strip is padded, the form pack-weights gives a weight
// (NR-column strips, each contiguous along k); else null.
const Value* prepackedB(const Value* b, int64_t nr);
// P when A is reshape(transpose(P, [0, 2, 1])) to [M, K] of P [M / mr, K, mr], or its
// first M rows when P's last panel is padded, the form pack-weights gives a weight read as
// A (MR-row panels, each contiguous along k: A[m, k] = P[m / mr, k, m mod mr]); else null.
const Value* prepackedA(const Value* a, int64_t mr);
bool matchCpuMatmul(const KernelRef& k, const TargetDesc& t);
// An MR x NR micro-kernel's private accumulators `reg` for rows [rb, rb + mr) and columns
// [cb0, cb0 + nr) of the block accumulator `cb`: 0 in the first K step (k0 = 0), cb's
// values in the later ones (a loop taken once or not); and back into cb after the step.
void cpuMicroAccumulatorsIn(KernelBuilder& kb, Value* reg, Value* cb, Value* rb, Value* cb0,
                            int64_t mr, int64_t nr, Value* k0, ElemType acc);
void cpuMicroAccumulatorsOut(KernelBuilder& kb, Value* reg, Value* cb, Value* rb, Value* cb0,
                             int64_t mr, int64_t nr);
std::vector<Plan> cpuMatmulPlans(const KernelShape& s, const TargetDesc& t,
                                 const SymbolTable& syms);
std::optional<std::string> strategyProblem(const KernelShape& s, const CpuMatmulPlan& p,
                                           const TargetDesc& t, bool checkSharedMemory);
Status emitStrategy(KernelBuilder& b, const CpuMatmulPlan& p);
// True when dim `axis` of `v` is the innermost dim of the value it is read from, through
// transposes and one-operand elementwise ops (casts): `v` is contiguous along it.
bool innermostWhereLoaded(const Value* v, int64_t axis);
// True when B's K dim is innermost where B is read from (a `[N, K]` weight under
// `transpose`): B is contiguous along k, not n.
bool transposedB(const Value* b);
// The concat that B is, itself or through one reshape, along B's K axis (its dims up to the
// axis are B's first dims, so B's row index k is the concat's index along its axis), or
// null: fuse's concatIntoGemmColumns puts it in the GEMM, which reads it per operand.
const Op* concatAlongK(const Value* b);
// True when the batch dims fold into M: B has no batch dim above 1 (a weight shared by
// every batch entry: x[b, m, k] * w[k, n]), so the batch entries are more rows of one
// product. A `197 x 1 x 768` activation (a sequence-first `Linear`) is then one 197-row
// GEMM that packs B once per block, instead of 197 one-row products streaming all of B.
bool foldsBatch(const KernelShape& s);
// True when an element of `a` costs more than a load: some op of the kernel on its def
// chain is not a view (a LayerNorm or GELU prologue of the matmul).
bool computedOperand(const Value* a);

// matmul_cpu_conv.cpp: a convolution's GEMM reading its input in place.
// B = conv-gemm's patches of X, [1, C, H, W] (a stride-1 conv's padded input) or
// [1, C, P, H, W] (a stride-2 conv's padded input split into P = 4 phases): tap t is the
// unit-stride window of plane window[t].plane (0 for a rank-4 X) from row dy and column
// dx, B[c * T + t, oy * OW + ox] = X[0, c, (plane,) dy + oy, dx + ox].
struct ConvPatches {
  struct Tap {
    int64_t plane = 0, dy = 0, dx = 0;
  };
  const Value* x = nullptr;
  int64_t channels = 0, taps = 0, oh = 0, ow = 0, rows = 0, width = 0;
  std::vector<Tap> window;
};
// B's patches when B is reshape(concat{axis 2}(slice(X) per tap, each maybe reshaped to
// [1, C, 1, OH, OW])) as conv-gemm builds it, every slice a unit-step OH x OW window of
// one X (of one plane of X), and wideRowsPay(OW, X's row width); else none.
std::optional<ConvPatches> convPatches(const Value* b);
// The patches of the matmul kernel `mm`'s B when the patches plan reads them in place:
// convPatches over an argument of the kernel (X is not computed in it).
std::optional<ConvPatches> patchesInPlace(const Op& mm);
// True when output rows of `ow` columns computed on rows `width` wide (the padded input's,
// or its phases') drop few enough columns to beat materialized patches.
bool wideRowsPay(int64_t ow, int64_t width);
// The columns the patches plan computes: every position of the rows up to the last
// output's, (OH - 1) * width + OW.
int64_t convWideColumns(const ConvPatches& p);
// The blocked plan over the wide columns, with B's rows read from X (an argument of the
// kernel).
Status emitConvStrategy(KernelBuilder& b, const CpuMatmulPlan& p, const ConvPatches& cp);

// matmul_cpu_dot.cpp: cpu matmuls with a short side (part of matmul-cpu's search space).
// The dot plan when the kernel has one (at most 4 rows and B stored [N, K], or at most 4
// columns; static), else none.
std::vector<Plan> cpuDotPlans(const KernelShape& s, const TargetDesc& t, const SymbolTable& syms);
std::optional<std::string> strategyProblem(const KernelShape& s, const CpuDotPlan& p,
                                           const TargetDesc& t, bool checkSharedMemory);
Status emitStrategy(KernelBuilder& b, const CpuDotPlan& p);

// reduction_gpu.cpp: gpu row reductions, each row reduced by its threads together
// (subgroup arithmetic, partials in shared memory); analyzeRowReductions (codegen.h) too.
bool matchGpuReduce(const KernelRef& k, const TargetDesc& t);
std::vector<Plan> gpuReducePlans(const KernelShape& s, const TargetDesc& t,
                                 const SymbolTable& syms);
std::optional<std::string> strategyProblem(const KernelShape& s, const GpuReducePlan& p,
                                           const TargetDesc& t, bool checkSharedMemory);
Status emitStrategy(KernelBuilder& b, const GpuReducePlan& p);
// The shared buffers the plan needs: each row's partials per accumulator type.
std::vector<SharedBuffer> gpuReduceSharedBuffers(const KernelShape& s, const GpuReducePlan& p);
// True when the plan's workgroups cover the rows exactly (pad records it; lower then emits
// no row guard).
bool gpuReduceExact(const KernelShape& s, const GpuReducePlan& p, const SymbolTable& syms,
                    const TargetDesc& t);

// attention.cpp: an attention op as an online-softmax kernel (every target).
bool matchAttention(const KernelRef& k, const TargetDesc& t);
std::vector<Plan> attentionPlans(const KernelShape& s, const TargetDesc& t,
                                 const SymbolTable& syms);
std::optional<std::string> strategyProblem(const KernelShape& s, const AttentionPlan& p,
                                           const TargetDesc& t, bool checkSharedMemory);
Status emitStrategy(KernelBuilder& b, const AttentionPlan& p);
// The shared buffers the plan needs: none, the split-key plan's per-subgroup partials, or
// the staged plan's key and value tiles (and its q rows when they leave registers).
std::vector<SharedBuffer> attentionSharedBuffers(const KernelShape& s, const AttentionPlan& p);
// Whether a staged plan keeps its threads' q rows in shared memory: on every target when
// q and output rows together outgrow kAttentionRegisterRows but the output rows alone fit.
bool attentionQInShared(const KernelShape& s, const AttentionPlan& p);
// On targets that keep unrolled private arrays in registers (the LLVM GPU backends) a
// thread's q rows and output rows (f32) live in registers when they total at most this
// many values: their loops over the head dims are then unrolled completely.
constexpr int64_t kAttentionRegisterRows = 128;
// Keys per step of a kernel whose rows are registers (gpu) or whose rows are vectors (cpu's
// rows plan): their scores come first (a private row of this many), then one rescale of
// the running sum and output rows.
constexpr int64_t kAttentionKeyTile = 8;
// attention_staged.cpp: the staged kernel (AttentionPlan with keys > 0).
Status emitStagedAttention(KernelBuilder& b, const AttentionPlan& p);
// attention_split.cpp: the split-key kernel (AttentionPlan with a subgroup).
Status emitSplitKeyAttention(KernelBuilder& b, const AttentionPlan& p);
// The query rows of an attention kernel's workgroups: `rows` per thread, `threads` per
// workgroup, workgroups over query blocks x (batch x heads), folded under the grid cap.
struct AttentionRows {
  std::vector<Value*> hix;  // the batch indices, then the query head
  std::vector<Value*> kvIx; // the batch indices, then the kv head
  Value* Sq = nullptr;
  Value* Sk = nullptr;
  Value* off = nullptr; // Sk - Sq: with causal = 1, query i sees keys j <= i + off
  Value* i0 = nullptr;  // this thread's rows [i0, iEnd) (empty past the grid's end)
  Value* iEnd = nullptr;
  Value* b0 = nullptr; // the workgroup's rows [b0, bEnd) (empty past the grid's end)
  Value* bEnd = nullptr;
  Value* lid = nullptr; // the thread's index in the workgroup
};
// With perHead > 1, each workgroup takes perHead consecutive query heads (of one kv head):
// hix names the first.
AttentionRows attentionRows(KernelBuilder& b, int64_t rows, int64_t threads, int64_t perHead = 1);
// The end of the keys that rows [i0, iEnd) see: all of them, or with `causal` up to the last
// row's limit (iEnd + off); 0 for a thread past the grid's end.
Value* attentionKeyEnd(KernelBuilder& b, const AttentionRows& rows, bool causal);
// The same for the workgroup's rows [b0, bEnd): the same value in every thread of it.
Value* attentionBlockKeyEnd(KernelBuilder& b, const AttentionRows& rows, bool causal);
// The online softmax's weight e^(x - max) in f32, or 0 where x is -inf (never
// exp(-inf - -inf)); `negInf` and `zero` are the f32 constants.
Value* attentionWeight(KernelBuilder& b, Value* x, Value* max, Value* negInf, Value* zero);
// The per-tile steps of the kernels whose threads own private rows (attention.cpp,
// attention_staged.cpp): a tile of `keys` keys from j0, each thread's R rows. Private
// buffers: scores and weights [keys, R], running max, sum and rescale factor [R].
struct AttentionTile {
  Value *scores = nullptr, *weights = nullptr, *max = nullptr, *sum = nullptr, *alpha = nullptr;
  int64_t rows = 1, keys = 1;
  bool unroll = false; // mark the loops over the tile's keys unroll=1
  Value *j0 = nullptr, *kEnd = nullptr, *lastKey = nullptr; // this thread's keys [0, kEnd)
  std::function<Value*(Value*)> rowOf;                      // private row r -> its query row
  std::function<Value*(Value*)> loadRow;            // the same, clamped to the last query row
  std::function<std::vector<Value*>(Value*)> hixOf; // r -> its batch indices and query head
  Value *negInf = nullptr, *zero = nullptr;         // f32 constants
};
// Scales the tile's scores, adds the mask (if any), and hides keys past a row's causal limit
// or past kEnd (-inf).
Status attentionMaskTile(KernelBuilder& b, const AttentionRows& rows, const AttentionTile& t);
// Per row: the new running max over the tile, the rescale factor e^(m - m'), each key's
// weight e^(s - m') and the running sum l e^(m - m') + the weights in key order.
void attentionSoftmaxTile(KernelBuilder& b, const AttentionTile& t);
// Value dim e of every row's output (acc transposed [Dv, R]): acc *= the rescale factor;
// acc += key k's weight * v.
void attentionRescaleRows(KernelBuilder& b, const AttentionTile& t, Value* acc, Value* e);
void attentionAccumulateRows(KernelBuilder& b, const AttentionTile& t, Value* acc, Value* e,
                             Value* k, Value* v);
// out = acc / l for the thread's rows below rows.iEnd (acc transposed [Dv, R]); the loop
// over the value dims unroll=1 with `unroll`.
void attentionStoreRows(KernelBuilder& b, const AttentionRows& rows, const AttentionTile& t,
                        Value* acc, int64_t dv, bool unroll);
// attention_cpu.cpp: the cpu plan (query blocks, key tiles, register blocks), or the
// rows plan (AttentionPlan{queries, 1, 0, 0, heads}: the queries of `heads` query heads of
// one kv head per thread) for at most a register block's rows of queries.
std::vector<Plan> cpuAttentionPlans(const KernelShape& s, const TargetDesc& t,
                                    const SymbolTable& syms);
std::optional<std::string> strategyProblem(const KernelShape& s, const CpuAttentionPlan& p,
                                           const TargetDesc& t, bool checkSharedMemory);
Status emitStrategy(KernelBuilder& b, const CpuAttentionPlan& p);

// The grid's row of workgroups is at most this long; more groups take a second grid axis.
int64_t gridCap(const TargetDesc& t);

// The largest value an extent takes under the symbols' ranges (at least 1).
int64_t upperBound(const Dim& d, const SymbolTable& syms);

} // namespace kiln
