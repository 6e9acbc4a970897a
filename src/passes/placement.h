// Device declarations, user placement (`PATTERN=DEVICE` specs) and pipeline partitioning
// (`pipeline:N`): they declare devices and pin ops to them; affinity does the rest.
//
// Errors name the API's concepts, never a command-line flag: a location `device=SPEC`,
// `place=SPEC` or `partition=SPEC` is the option that holds the spec, "declare device
// KIND[N]" is the fix (PlacementOptions::devices, or a `device` line in the module), and
// `autoDeclare` is DeviceOptions::autoDeclare. The CLI (tools/common.cpp) prints the flags.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/core/ir.h"

namespace kiln {

// The devices a module runs on besides its own `device` lines.
struct DeviceOptions {
  std::vector<std::string> devices; // KIND[ORDINAL], in order (the CLI's --device)
  bool autoDeclare = false;         // declare every device the program uses (--devices=auto)
};

// Adds the options' devices to the module's declarations (a target already declared is kept
// once), declares every referenced target when `autoDeclare`, then checks that every
// device reference (an op's `on hip[7]`, a pinned argument or result) resolves. An error
// names the op (printed as a note) and the device, and ends with "declare device KIND[N]".
Status resolveDevices(Module& m, const DeviceOptions& opts);

// Glob match with `*` (any run) and `?` (any one character).
bool globMatch(std::string_view pattern, std::string_view text);

// Whether `pattern` (a glob) matches the op's name, one of its result value names, its named
// location (an ONNX node name) or, for `weight`, the weight's name.
bool opMatches(const Op& op, std::string_view pattern);

// Pins every op matched by each "PATTERN=DEVICE" spec. PATTERN is a glob over the op's
// name (`matmul`), its result value names, its named location (an ONNX node name) and,
// for `weight`, the weight's name. DEVICE is `kind[n]` or `@name`, and must be declared.
// Errors: a malformed spec, a pattern that matches nothing, and an op pinned to two
// devices (by two specs, or by the IR and a spec), which names the op and both pins.
Status applyPlacement(Module& m, const std::vector<std::string>& specs);

// A parsed `--partition`: pipeline stages, tensor-parallel group size, or both.
struct PartitionSpec {
  std::optional<int> stages; // pipeline:P
  int tensor = 1;            // tensor:T (1: no tensor parallelism)
};

// Parses "pipeline:P", "tensor:T" or both, comma-separated ("pipeline:2,tensor:2"); P and T
// from 1 to the device limit, P * T too.
Result<PartitionSpec> parsePartitionSpec(const std::string& spec);

// Splits each function's ops that are neither cheap to clone nor pinned into `stages`
// contiguous runs of program order with about equal cost (cost.h), and pins run i to the
// i-th declared device. Program order is topological, so data only flows to later stages.
// Each cut lies within a quarter stage of its balanced point, where the fewest bytes
// cross (between two transformer blocks only the hidden state does).
// Cheap ops (weights, constants) stay unpinned: affinity puts each one on the device(s)
// that use it. Stage i goes to declared device i * `stride` (tensor parallelism: the first
// device of group i). Fails when fewer than `stages` * `stride` devices are declared.
Status partitionPipeline(Module& m, int stages, int stride = 1);

// Everything that places a module (kiln opt, kiln compile, kiln run, the API).
struct PlacementOptions {
  DeviceOptions devices;          // --device (repeatable), --devices=auto
  std::vector<std::string> place; // --place=PATTERN=DEVICE
  std::optional<int> stages;      // --partition=pipeline:N
  int tensor = 1;                 // --partition=tensor:T (passes/tensor_parallel.h)
  std::vector<std::string> shard; // --shard=PATTERN=SHARDING (with tensor > 1)
  bool allowTransfers = true;     // false: --no-transfers
  bool affinity = false;          // run affinity at the end
};

// The one order every tool places a module in: resolveDevices, applyPlacement,
// partitionPipeline, then `passes` (the caller's pipeline, may be empty), then affinity
// (when `opts.affinity`), then partitionTensor (when `opts.tensor` > 1), and the verifier.
Status placeModule(Module& m, const PlacementOptions& opts,
                   const std::function<Status(Module&)>& passes = {});

} // namespace kiln
