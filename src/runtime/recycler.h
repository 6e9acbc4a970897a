// Recycler: freed device memory kept for reuse, by size. A module's call allocates the same
// sizes as the call before it, and fresh memory is dear on every driver: a page fault per page
// on the host, vkAllocateMemory on Vulkan (tens to hundreds of microseconds on NVIDIA's
// driver), cuMemFree on CUDA (which waits for the whole device). The drivers keep what a
// buffer held when it is destroyed, up to a byte budget, and hand it out again for the next
// allocation of the same rounded size: the newest first on the host (the most likely to be in
// the caches), the oldest first on a queue (the least likely to be in use still). Memory in a
// recycler is not counted in a device's memoryStats.
//
// The host also takes a larger allocation than asked for (takeFitting, at most twice the
// size), the newest that fits: a module's chain of kernels then writes each result into
// memory the kernel before it just freed, which is still in the caches. With exact sizes
// only, every differently sized tensor had memory of its own, which the rest of the call
// evicted (docs/runtime.md: MobileNetV3-Small 5-12% faster per call with takeFitting).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

namespace kiln::hal {

template <typename Memory> class Recycler {
public:
  enum class Order { NewestFirst, OldestFirst };
  Recycler(uint64_t maxBytes, Order order) : maxBytes_(maxBytes), order_(order) {}

  // A kept allocation of `size` bytes, if there is one.
  std::optional<Memory> take(uint64_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = bySize_.find(size);
    if (it == bySize_.end() || it->second.empty()) return std::nullopt;
    return takeFrom(it, order_ == Order::NewestFirst);
  }

  // The most recently kept allocation of `lo` to `hi` bytes, if there is one.
  std::optional<Memory> takeFitting(uint64_t lo, uint64_t hi) {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = bySize_.end();
    for (auto it = bySize_.lower_bound(lo); it != bySize_.end() && it->first <= hi; ++it)
      if (best == bySize_.end() || it->second.back().seq > best->second.back().seq) best = it;
    if (best == bySize_.end()) return std::nullopt;
    return takeFrom(best, true);
  }

  // Keeps `m` (of `size` bytes); hands it back when that would pass the budget, for the
  // caller to free.
  std::optional<Memory> keep(uint64_t size, Memory m) {
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes_ + size > maxBytes_) return std::optional<Memory>(std::move(m));
    bySize_[size].push_back(Kept{++seq_, std::move(m)});
    bytes_ += size;
    return std::nullopt;
  }

  // Everything kept, for the caller to free: when the device is destroyed, or before an
  // allocation that ran out of memory is tried again.
  std::vector<Memory> drain() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Memory> out;
    for (auto& [size, list] : bySize_)
      for (Kept& k : list) out.push_back(std::move(k.memory));
    bySize_.clear();
    bytes_ = 0;
    return out;
  }

private:
  struct Kept {
    uint64_t seq; // when it was kept: larger is newer
    Memory memory;
  };
  using Lists = std::map<uint64_t, std::deque<Kept>>;

  // Removes one allocation from the (non-empty) list at `it`, the newest or the oldest.
  Memory takeFrom(typename Lists::iterator it, bool newest) {
    std::deque<Kept>& list = it->second;
    Memory m = std::move(newest ? list.back().memory : list.front().memory);
    if (newest)
      list.pop_back();
    else
      list.pop_front();
    bytes_ -= it->first;
    if (list.empty()) bySize_.erase(it);
    return m;
  }

  mutable std::mutex mu_;
  Lists bySize_;
  uint64_t seq_ = 0;
  uint64_t bytes_ = 0;
  uint64_t maxBytes_;
  Order order_;
};

} // namespace kiln::hal
