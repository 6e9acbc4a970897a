// KernelCache: compiled kernel code on disk, so that compiling a model again, or another
// model with the same kernels, reuses it (kiln compile; --no-cache bypasses it).
//
// A key is a 128-bit xxhash (XXH3) of everything that decides the code: the kernel's IR text,
// the target machine, the options that change code generation and this build of kiln
// (kernelCacheBuildId). An entry is one file `<dir>/<32 hex digits>.kko`:
//   "KILNKC01" · key (16 bytes) · data size (u64 LE) · XXH3-64 of data (u64 LE) · data
// written to a temporary file in the same directory and renamed over the entry, so readers
// see a whole entry or none. An entry whose header, size or checksum does not match is
// ignored (a miss) and rewritten by the compile that misses. Reading an entry refreshes its
// modification time; prune() removes the least recently used entries beyond the size bound.
//
// Every failure of the cache (an unwritable directory, a full disk) makes it a miss: the
// compile goes on without it. Thread-safe: workers look up and store concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct KernelCacheOptions {
  std::string dir;                       // empty: no cache
  uint64_t maxBytes = uint64_t{1} << 30; // prune() keeps the entries under this
};

// The directory `kiln compile` uses: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else
// $HOME/.cache/kiln ("" when none of them is set).
std::string defaultKernelCacheDir();

// This build of kiln: the cache format and the identity (path, size, modification time) of
// the binary holding the compiler, so a rebuilt compiler never reads an older one's code.
// Backends add their own tools' versions (the cpu backend: LLVM's) to their keys.
const std::string& kernelCacheBuildId();

struct KernelKey {
  uint64_t high = 0, low = 0;
  std::string hex() const;
};

// The key of `parts` (each one length-prefixed, so no two lists share a key by concatenation).
KernelKey kernelKey(const std::vector<std::string_view>& parts);

class KernelCache {
public:
  explicit KernelCache(KernelCacheOptions opts) : opts_(std::move(opts)) {}

  bool enabled() const { return !opts_.dir.empty(); }
  // The entry's data, when present and intact.
  std::optional<std::string> load(const KernelKey& key);
  // Stores `data` under `key` (atomically replacing any entry).
  void store(const KernelKey& key, const std::string& data);
  // Removes the least recently used entries until the rest fit in maxBytes.
  void prune();

  // Entries that were present but damaged (wrong header, size or checksum).
  uint64_t corrupt() const { return corrupt_; }

private:
  std::string pathOf(const KernelKey& key) const;
  KernelCacheOptions opts_;
  std::atomic<uint64_t> corrupt_{0};
};

} // namespace kiln
