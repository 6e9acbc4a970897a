// The kernarg block of one launch, packed as payload.h's kernel ABI lays it out: the hip and
// cuda drivers both hand it to the launch call whole (HIP_LAUNCH_PARAM_BUFFER_POINTER,
// CU_LAUNCH_PARAM_BUFFER_POINTER), so this is the one place that knows the layout.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/core/diag.h"
#include "runtime/gpu/payload.h"

namespace kiln::gpu {

// One buffer argument of a launch: its device address and the extents of the tensor it holds.
struct KernargBuffer {
  uint64_t address = 0;
  std::vector<int64_t> extents;
};

// The kernarg block of kernel `k`, as little-endian 8-byte words (kernargBytes / 8 of them):
// the buffers' addresses, every buffer's extents, the push constants, the status word's
// address. A launch that does not match the kernel (buffer count, a buffer's rank, the number
// of push constants) is an error located at `loc`.
Result<std::vector<uint64_t>> packKernargs(const GpuKernelInfo& k,
                                           const std::vector<KernargBuffer>& buffers,
                                           const std::vector<int64_t>& pushConstants,
                                           uint64_t statusAddress, const Loc& loc);

} // namespace kiln::gpu
