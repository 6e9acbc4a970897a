// Target descriptions: the limits code generation must respect on each device kind.
//
// Compiling ahead of time uses the tables in target.cpp; when a device is present its own
// limits replace the table (the runtime fills a TargetDesc from VkPhysicalDeviceLimits or
// hipDeviceProp and calls withDeviceLimits). Codegen passes take the target as an option
// (passes/codegen.h: CodegenOptions); each target backend (backends/backend.h) says which
// target its devices compile for.
//
// This folder sits below the passes and the backends: it depends on the IR's element types
// and diagnostics only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/core/diag.h"
#include "ir/core/elem_type.h"

namespace kiln {

// Per-target switches for the fusion rules of `fuse` (each rule is one switch).
struct FusionRules {
  bool elementwiseIntoConsumer = true; // producer chains join the dispatch that reads them
  bool elementwiseIntoProducer = true; // epilogues join the anchor that feeds them
  bool viewsIntoLoads = true;          // slice/transpose/broadcast/reshape/gather fold into loads
  // Transcendental ops (exp, silu, tanh, ...) join a contraction's operands, where they are
  // recomputed for every tile that loads the operand. Off on every target today: a cpu
  // matmul loads each A element once per NR columns, a gpu matmul once per workgroup column
  // (a decode step's down projection, M = 1: 64 workgroups x 32 columns recomputed its A's
  // silu 2,048 times per element); such a chain is computed once, in its own dispatch.
  bool transcendentalIntoContraction = false;
  // An elementwise op that can be a matmul's epilogue (it reads the matmul's result, directly
  // or through such ops, over the same shape) stays with the matmul instead of joining a
  // consumer dispatch anchored by an op that only moves or windows data (pad, concat, pool)
  // or by another matmul, which the matmul cannot join, nor one that reads it through 4 or
  // more slices (a depthwise conv's taps of pad-gemm's padded map). On CPUs the GEMM
  // strategy applies the epilogue to its block while it is in cache: a conv's bias and
  // activation then cost no recompute in the next conv's pad or taps, in a pool's every
  // window, or in the next 1x1 conv's packing of its B panel once per block of rows
  // (EfficientNet-B0's residual adds).
  bool epilogueOverConsumer = false;
  // An elementwise op that computes a matmul's A (its rows) joins the matmul when the
  // matmul has more than a register block of rows (8). Off on CPUs: the GEMM strategy
  // loads each A element once per NR-column strip, so a fused prologue (a layer norm's
  // normalization, a GELU's x * (1 + erf(x / sqrt 2)) / 2) was recomputed N / NR times per
  // element (72 times for ViT-B/16's QKV projection); it is computed once instead, in its
  // own dispatch or as the epilogue of the matmul before it. A decode step's few rows keep
  // their prologue (each A element is loaded once per column block there).
  bool elementwiseIntoGemmRows = true;
  // An elementwise op that computes a matmul's B (its columns) from a window over one
  // input (4 or more slices of one value among the ops it would bring: a depthwise conv's
  // taps, conv-depthwise) joins the matmul. Off on CPUs: the GEMM strategy computes B in
  // its packing loop along the flattened output pixels, so every tap's index is split back
  // into row and column per element (scalar code, gathers), where the depthwise conv's own
  // `rows` kernel reads each tap as contiguous vectors (MobileNetV3-Small on one thread:
  // a 3x3 depthwise conv with the 24-channel projection after it 137-152 us in one kernel,
  // 96-101 us as two).
  bool windowIntoGemmColumns = true;
  // The concat of conv-gemm's im2col patches joins the GEMM that reads them when the cpu
  // GEMM can read the patches from the conv's input in place (convPatches, strategy.h: a
  // stride-1 conv's padded input or a stride-2 conv's phases, with long enough output
  // rows): the patches are then never materialized. On for CPU targets (the only ones
  // conv-gemm runs for).
  bool patchesIntoGemm = false;
  // A constant pad joins the concat that reads it (every user in the concat's kernel)
  // when the concat has no more elements than the pad: the concat's loads read the
  // unpadded input, masked at the border. The stride-2 convs' phases (conv-gemm,
  // conv-depthwise: a concat of four strided views of the padded input) are then one pass
  // over the input instead of two; im2col patches (each element once per tap) keep their
  // pad kernel. On for CPU targets.
  bool padIntoConcat = false;
  // A concat along the axis that becomes a matmul's K joins the matmul that reads it as B
  // (through reshapes; every user in the matmul's kernel): the GEMM reads each K range
  // from its own operand (SqueezeNet's fire modules: the expand convs' two outputs, read
  // by the next squeeze conv), so the concat is never materialized. On for CPU targets.
  bool concatIntoGemmColumns = false;
  // A concat along a non-window axis (batch or channels) joins the max or average pool that
  // reads it (its only user): each output's window lies in one operand, which the `rows`
  // kernel picks per row (KernelBuilder::versionByConcat), so the concat is never
  // materialized (SqueezeNet's fire modules before a max pool). On for CPU targets.
  bool concatIntoPool = false;
};

struct TargetDesc {
  std::string name;               // "vulkan:nvidia-sm90"
  uint64_t sharedMemoryBytes = 0; // per workgroup
  int64_t maxWorkgroupInvocations = 0;
  int64_t maxWorkgroupSize[3] = {0, 0, 0};
  int64_t maxWorkgroupCount[3] = {0, 0, 0};
  std::vector<int64_t> subgroupSizes; // supported; the first is preferred
  // Bytes one buffer binding may address (Vulkan's maxStorageBufferRange); 0: no limit. A
  // tensor above it must be split or refused, never bound whole.
  uint64_t maxStorageBufferRange = 0;
  int64_t preferredVectorBits = 128;
  std::vector<ElemType> elemTypes; // element types kernels may use
  FusionRules fusion;              // which fusion rules `fuse` applies on this target

  // CPU code generation (`tile` / `lower` strategy). A cpu target runs one workgroup per
  // CPU thread: kernels get workgroups of one thread that loop over a block of the output
  // (register-blocked matmuls, contiguous row loops) instead of GPU-style thread grids.
  bool cpu = false;
  int64_t vectorRegisters = 16; // architectural SIMD registers (ymm0-15; zmm0-31 on v4)
  bool hasFma = false;
  uint64_t l1Bytes = 32 * 1024; // data cache per core
  uint64_t l2Bytes = 1024 * 1024;
  // Matmul accumulators of f32/f16/bf16 operands are f64 (the reference interpreter's wide
  // accumulation) when true, f32 when false (cpu targets); f64 and integers are unchanged.
  bool wideAccumulation = true;
  // kiln's own backend unrolls a loop the lowering marks (for's unroll=1) and keeps the
  // private arrays it then indexes by constants in registers (the LLVM GPU backends), so
  // lowerings that want registers this way ask this first. Not on Vulkan targets: NVIDIA's
  // driver (580, H200) ran the gpu attention kernel that relies on it 2.7x slower than the
  // one with private arrays (a TinyLlama prefill of 2048 tokens 57 against 21 ms), whether
  // the driver unrolled the loops (the Unroll control) or kiln's emitter did; the driver
  // shows no machine code, so why is not known.
  bool unrolledArraysInRegisters = false;

  bool supports(ElemType e) const;
};

// The names accepted by --target=, in table order.
const std::vector<std::string>& targetNames();
// The table entry for a name; an error listing the known names otherwise.
Result<TargetDesc> lookupTarget(const std::string& name);
// `base` with a present device's limits (nonzero fields of `device`) replacing the table's.
TargetDesc withDeviceLimits(TargetDesc base, const TargetDesc& device);

} // namespace kiln
