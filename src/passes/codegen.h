// What the codegen passes (fuse, collapse-dims, pad, tile, lower) share: the options they are
// created with, which ops `lower` turns into kernel IR, the shape of a dispatch's work (its
// strategy and iteration space), tile plans, and the one shared-memory footprint function used by
// `tile` to choose tiles and by `lower`'s final resource check.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "passes/pass.h"
#include "target/target.h"
#include "target/tile_config.h"

namespace kiln {

// What every codegen pass is created with. A target backend (backends/backend.h) builds its
// pipeline with its target and its devices; pipeline text gives `target=NAME` (a row of
// target.h's table, default "cpu") and `tile-config=FILE`.
struct CodegenOptions {
  TargetDesc target;
  TileOverrides overrides;
  // The devices whose ops (fuse) and dispatches (the others) the pass handles: a module
  // placed on devices of several targets runs one pipeline per target. Empty: every op.
  std::vector<DeviceTarget> devices;

  bool covers(const Op& op) const;
};
// The keys codegenOptionsFrom reads, and the options they give.
const std::vector<std::string>& codegenOptionKeys();
Result<CodegenOptions> codegenOptionsFrom(const PassOptions& text);

// True when `lower` emits kernel IR for the op (other ops stay single-op dispatches whose
// tensor-level kernel the host side interprets).
bool lowerSupports(const Op& op);

// The kernel a dispatch calls, or null.
Func* dispatchKernel(const Module& m, const Op& dispatch);
// A kernel already lowered to kernel IR (its arguments are buffers).
bool isLoweredKernel(const Func& k);

// How a dispatch is lowered.
enum class Strategy {
  Host,      // not lowered: some op is not supported
  Pointwise, // one thread per element of the output shape (reductions loop per thread)
  Matmul,    // workgroup tiles of a matmul's output, operand tiles staged in shared memory
};

// The work of a tensor-level kernel: its strategy, the anchor op (a matmul for Matmul), and
// for Matmul the extents [batch..., M, N, K] and operand element types.
struct KernelShape {
  Strategy strategy = Strategy::Host;
  const Op* anchor = nullptr;
  Shape outShape; // iteration space of the outputs
  ElemType aElem = ElemType::F32, bElem = ElemType::F32;
  bool reduces = false;     // some op reduces (reductions, softmax, cumsum)
  int64_t reduceExtent = 1; // the longest reduced extent (static dims; 1024 for a symbol)
};
KernelShape analyzeKernel(const Func& k);

// A tile plan: Pointwise uses workgroup[0] threads, one element each; Matmul uses tile
// [TM, TN, TK] with workgroup [x, y, 1] threads (each computes (TM/y) x (TN/x) outputs).
// CPU plans (cpu targets, workgroup [1, 1, 1], one CPU thread per workgroup):
//   Pointwise tile [R, C]: each workgroup loops over R rows x C contiguous elements of the
//   innermost output dim; Matmul tile [MC, NC, KC, MR, NR]: each workgroup computes an
//   MC x NC block of C, K in steps of KC, by an MR x NR register-blocked micro-kernel
//   (private accumulators with static loop bounds).
struct TilePlan {
  std::vector<int64_t> tile;
  std::vector<int64_t> workgroup{64, 1, 1};

  bool cpuMatmul() const { return tile.size() == 5; } // [MC, NC, KC, MR, NR]
  bool cpuRows() const { return tile.size() == 2; }   // pointwise [R, C]
};

// A buffer a kernel places in shared memory.
struct SharedBuffer {
  ElemType elem;
  std::vector<int64_t> dims;
};
// The shared buffers a plan needs (what `lower` allocates for it).
std::vector<SharedBuffer> sharedBuffersFor(const KernelShape& s, const TilePlan& p);
// THE footprint function: bytes of shared memory per workgroup, in 64-bit arithmetic
// (saturating at UINT64_MAX, so no overflow can make a huge kernel look small).
uint64_t sharedFootprint(const std::vector<SharedBuffer>& buffers);
// The shared buffers a lowered kernel allocates (the final check's input).
std::vector<SharedBuffer> sharedBuffersOf(const Func& loweredKernel);

// The plan recorded on a dispatch by `tile` (or the default when absent).
TilePlan planOf(const Op& dispatch, const KernelShape& s);
void recordPlan(Op& dispatch, const TilePlan& p);

// Why a plan cannot be compiled for the target, or nullopt when it can.
// `checkSharedMemory` = false leaves the shared-memory limit to the final resource check
// (lower does, so a forced manual plan reaches it).
std::optional<std::string> planProblem(const KernelShape& s, const TilePlan& p, const TargetDesc& t,
                                       bool checkSharedMemory = true);

// The plan `tile` chooses for a kernel without a manual config (collapse-dims uses it to
// compare footprints before and after a merge).
Result<TilePlan> chooseTilePlan(const KernelShape& s, const TargetDesc& t, const SymbolTable& syms,
                                const std::string& kernel);

// The final resource check (run by `lower` on every kernel it emits): shared memory by
// sharedFootprint and workgroup size against the target; an error names the kernel, the
// bytes and the limit.
Status checkKernelResources(const Func& loweredKernel, const TargetDesc& t);

// `--emit=kernels`: one line per kernel with its workgroup size, tile, whether it is
// guarded, and its shared-memory bytes against the target's limit.
std::string kernelReport(const Module& m, const TargetDesc& t);

} // namespace kiln
