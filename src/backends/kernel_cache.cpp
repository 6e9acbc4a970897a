// KernelCache (kernel_cache.h): checksummed entry files, atomic stores, LRU pruning.
#include "backends/kernel_cache.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

namespace kiln {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[] = "KILNKC01";
constexpr size_t kHeaderBytes = 8 + 16 + 8 + 8;
constexpr const char* kSuffix = ".kko";

void putU64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t getU64(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

} // namespace

std::string defaultKernelCacheDir() {
  if (const char* dir = std::getenv("KILN_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg == '/')
    return std::string(xdg) + "/kiln";
  if (const char* home = std::getenv("HOME"); home && *home == '/')
    return std::string(home) + "/.cache/kiln";
  return "";
}

const std::string& kernelCacheBuildId() {
  static const std::string id = [] {
    std::string s = "kiln-kernel-cache-1";
    Dl_info info{};
    struct stat st {};
    if (dladdr(reinterpret_cast<const void*>(&kernelCacheBuildId), &info) && info.dli_fname &&
        stat(info.dli_fname, &st) == 0)
      s += std::string(" ") + info.dli_fname + " " + std::to_string(st.st_size) + " " +
           std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    return s;
  }();
  return id;
}

std::string KernelKey::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(high),
                static_cast<unsigned long long>(low));
  return buf;
}

KernelKey kernelKey(const std::vector<std::string_view>& parts) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  for (std::string_view p : parts) {
    std::string len;
    putU64(len, p.size());
    XXH3_128bits_update(st, len.data(), len.size());
    XXH3_128bits_update(st, p.data(), p.size());
  }
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  return {h.high64, h.low64};
}

std::string KernelCache::pathOf(const KernelKey& key) const {
  return opts_.dir + "/" + key.hex() + kSuffix;
}

std::optional<std::string> KernelCache::load(const KernelKey& key) {
  if (!enabled()) return std::nullopt;
  std::string path = pathOf(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string file = ss.str();
  std::string keyBytes;
  putU64(keyBytes, key.high);
  putU64(keyBytes, key.low);
  if (file.size() < kHeaderBytes || std::memcmp(file.data(), kMagic, 8) != 0 ||
      file.compare(8, 16, keyBytes) != 0 || getU64(file, 24) != file.size() - kHeaderBytes ||
      XXH3_64bits(file.data() + kHeaderBytes, file.size() - kHeaderBytes) != getU64(file, 32)) {
    ++corrupt_;
    return std::nullopt;
  }
  // A hit is a use: pruning removes the least recently used entries first.
  std::error_code ec;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);
  return file.substr(kHeaderBytes);
}

void KernelCache::store(const KernelKey& key, const std::string& data) {
  if (!enabled()) return;
  std::error_code ec;
  fs::create_directories(opts_.dir, ec);
  std::string file(kMagic, 8);
  putU64(file, key.high);
  putU64(file, key.low);
  putU64(file, data.size());
  putU64(file, XXH3_64bits(data.data(), data.size()));
  file += data;
  // A name no other writer (thread or process) uses at the same time.
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   std::hash<std::thread::id>{}(std::this_thread::get_id()));
  std::string tmp = opts_.dir + "/.tmp-" + std::to_string(getpid()) + "-" + std::to_string(rng());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return;
    out.write(file.data(), static_cast<std::streamsize>(file.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), pathOf(key).c_str()) != 0) std::remove(tmp.c_str());
}

void KernelCache::prune() {
  if (!enabled()) return;
  struct Entry {
    fs::path path;
    uint64_t bytes;
    fs::file_time_type time;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(opts_.dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() != kSuffix) continue;
    std::error_code e1, e2;
    uint64_t bytes = it->file_size(e1);
    fs::file_time_type time = it->last_write_time(e2);
    if (e1 || e2) continue;
    entries.push_back({it->path(), bytes, time});
    total += bytes;
  }
  if (total <= opts_.maxBytes) return;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.time < b.time; });
  for (const Entry& e : entries) {
    if (total <= opts_.maxBytes) break;
    std::error_code rm;
    if (fs::remove(e.path, rm)) total -= e.bytes;
  }
}

} // namespace kiln
