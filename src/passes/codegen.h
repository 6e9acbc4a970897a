// What the codegen passes (fuse, collapse-dims, pad, tile, lower) share: the options they are
// created with, which ops `lower` turns into kernel IR, the shape of a dispatch's work (its
// kind and iteration space), and the one shared-memory footprint function used by `tile` to
// choose tiles and by `lower`'s final resource check. Tile plans and the lowering strategies
// that own them: lower/plan.h, lower/strategy.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/core/ir.h"
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

// The kind of work a kernel does (lower/strategy.h picks the strategy that lowers it).
enum class Strategy {
  Host,      // not lowered: some op is not supported
  Pointwise, // computed one output element at a time (reductions loop per element)
  Matmul,    // a matmul anchor with a pointwise epilogue (tiled over the matmul's output)
  Attention, // an attention anchor whose result is the kernel's one output
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
  // Row reductions (every reduction reduce_* or softmax over trailing axes): how many
  // leading output dims index a row, so that each reduction is one value per row (-1 when
  // the kernel is not of that form), and the reductions' accumulator types.
  int64_t rowDims = -1;
  std::vector<ElemType> rowAccElems;
};
KernelShape analyzeKernel(const Func& k);
// True when every op of `ops` (in program order) that depends on `anchor`'s result is
// elementwise over exactly `out` and reads those dependencies at `out`'s shape, so the
// anchor's value at an output position is all they need: a Matmul kernel's epilogue.
// analyzeKernel asks it of a kernel, fuse of a group before a matmul joins it.
bool epilogueIsPointwise(const std::vector<const Op*>& ops, const Op* anchor, const Shape& out);
// Fills `s.rowDims` and `s.rowAccElems` of a pointwise kernel (analyzeKernel calls it; it is
// defined with the strategy that uses it, lower/reduction_gpu.cpp).
void analyzeRowReductions(const Func& k, KernelShape& s);

// A buffer a kernel places in shared memory.
struct SharedBuffer {
  ElemType elem;
  std::vector<int64_t> dims;
};
// THE footprint function: bytes of shared memory per workgroup, in 64-bit arithmetic
// (saturating at UINT64_MAX, so no overflow can make a huge kernel look small).
uint64_t sharedFootprint(const std::vector<SharedBuffer>& buffers);
// Why a plan's shared buffers exceed the target's shared memory (`tile` names the plan in
// the message), or nullopt when they fit.
std::optional<std::string> sharedMemoryProblem(const std::string& tile,
                                               const std::vector<SharedBuffer>& buffers,
                                               const TargetDesc& t);
// The shared buffers a lowered kernel allocates (the final check's input).
std::vector<SharedBuffer> sharedBuffersOf(const Func& loweredKernel);

// The final resource check (run by `lower` on every kernel it emits): shared memory by
// sharedFootprint and workgroup size against the target; an error names the kernel, the
// bytes and the limit.
Status checkKernelResources(const Func& loweredKernel, const TargetDesc& t);

// `--emit=kernels`: one line per kernel with its workgroup size, tile, whether it is
// guarded, and its shared-memory bytes against the target's limit.
std::string kernelReport(const Module& m, const TargetDesc& t);

} // namespace kiln
