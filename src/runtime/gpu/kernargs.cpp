// packKernargs: the kernel ABI's kernarg block (payload.h), word by word.
#include "runtime/gpu/kernargs.h"

#include <bit>
#include <string>

namespace kiln::gpu {

namespace {

// The hosts kiln runs on and the GPUs it launches on are little-endian; the words are stored
// as the device reads them either way.
uint64_t littleEndian(uint64_t v) {
  if constexpr (std::endian::native == std::endian::little) return v;
  return __builtin_bswap64(v);
}

} // namespace

Result<std::vector<uint64_t>> packKernargs(const GpuKernelInfo& k,
                                           const std::vector<KernargBuffer>& buffers,
                                           const std::vector<int64_t>& pushConstants,
                                           uint64_t statusAddress, const Loc& loc) {
  std::string name = "kernel @" + k.name;
  if (buffers.size() != k.args.size())
    return error(loc, name + " takes " + std::to_string(k.args.size()) + " buffers, got " +
                          std::to_string(buffers.size()));
  if (pushConstants.size() != k.symbols.size())
    return error(loc, name + " reads " + std::to_string(k.symbols.size()) +
                          " push constants, the dispatch has " +
                          std::to_string(pushConstants.size()));
  for (size_t i = 0; i < buffers.size(); ++i)
    if (static_cast<int64_t>(buffers[i].extents.size()) != k.args[i].rank)
      return error(loc, name + ": buffer " + std::to_string(i) + " holds a tensor of rank " +
                            std::to_string(buffers[i].extents.size()) + "; the kernel takes rank " +
                            std::to_string(k.args[i].rank));
  std::vector<uint64_t> words;
  words.reserve(k.kernargBytes / 8);
  for (const KernargBuffer& b : buffers) words.push_back(littleEndian(b.address));
  for (const KernargBuffer& b : buffers)
    for (int64_t e : b.extents) words.push_back(littleEndian(static_cast<uint64_t>(e)));
  for (int64_t v : pushConstants) words.push_back(littleEndian(static_cast<uint64_t>(v)));
  words.push_back(littleEndian(statusAddress));
  if (words.size() * 8 != k.kernargBytes)
    return error(loc, name + " declares " + std::to_string(k.kernargBytes) +
                          " kernarg bytes; its launch packs " + std::to_string(words.size() * 8));
  return words;
}

} // namespace kiln::gpu
