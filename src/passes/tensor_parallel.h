// Tensor parallelism (`--partition=tensor:T`, or `pipeline:P,tensor:T`): every op of a placed
// module runs on a group of T devices, each holding a shard (or a replica) of its values, with
// collectives where shards must meet.
//
// Requires:    a placed module (affinity has run: every op, argument and result has a device).
//              The declared devices form groups of T in declaration order (devices 0..T-1,
//              T..2T-1, ...); an op on device j belongs to group j / T, so a pipeline whose stage
//              s is pinned to device s * T (partitionPipeline's `stride`) puts stage s on group s.
// Guarantees:  every op is replaced by T copies, one per device of its group, or by
//              collectives; `verifyPlacement` holds (operand i of a collective on its
//              devices[i]); the function computes what it did, up to float reduction order.
//
// Each value gets a *sharding*: replicated (every device holds all of it), split along a dim
// (device i holds piece i of T), or partial (every device holds a summand; an all_reduce
// completes it). Shardings start at matmuls whose right operand is a weight: one whose left
// operand is replicated may split the weight by output columns (Megatron's Q/K/V, gate and up
// projections), and a split left operand contracted with a weight splits the weight by rows
// (the o and down projections) into partial sums, which one `all_reduce` completes. Rules
// carry splits through elementwise ops (broadcast operands are sliced locally), transposes,
// reshapes that keep the split dim outermost in its group (hidden -> heads x head_dim),
// broadcasts, slices and reductions over other dims, concat, batched matmuls and attention
// (by heads: query and K/V heads split alike). Any other use of a split value gathers it
// (`all_gather`). The choice of column splits is iterated: a column split whose split value
// must be gathered before it reaches a row split (or a function result) is withdrawn, and the
// analysis runs again; each round withdraws at least one, so it ends after at most as many
// rounds as there are such matmuls. Norms, embeddings, residual adds stay replicated.
//
// Weights are split at compile time: a shard of weight @w is a new declaration
// `@"w.dim1.part0of2" ... shard 0 of 2 along 1`, so each device loads only its piece (an
// imported model's weights held in memory are sliced in memory).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/core/ir.h"

namespace kiln {

struct TensorParallelStats {
  int64_t rounds = 0;         // analysis rounds until no column split had to be withdrawn
  int64_t columnSplits = 0;   // matmuls whose weight is split by output columns
  int64_t rowSplits = 0;      // matmuls whose weight is split by rows (partial sums)
  int64_t collectives = 0;    // all_reduce, all_gather and reduce_scatter ops inserted
  int64_t shardedWeights = 0; // weight declarations split
};

// Shards every function of `m` over groups of `tensor` devices (see above). Fails when the
// module declares fewer than `tensor` devices, or a number that `tensor` does not divide.
//
// `shardSpecs` pin shardings ("PATTERN=SHARDING", --shard): every op the glob PATTERN
// matches (as --place matches: op name, result value name, ONNX node name, weight name)
// gives its results SHARDING, `replicated` or `split:D` (D may count from the end), converted
// from what the rules give when they differ; a pinned column split is never withdrawn, and a
// weight pinned `replicated` is never cut by the matmuls that read it (their input is
// gathered instead).
// Errors name the value: a pattern that matches nothing, a value pinned to two shardings
// (both named, with the specs that set them), a split of a dim that does not divide by T.
Result<TensorParallelStats> partitionTensor(Module& m, int tensor,
                                            const std::vector<std::string>& shardSpecs = {});

} // namespace kiln
