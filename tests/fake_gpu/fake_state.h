// What the fake libamdhip64.so and libcuda.so.1 share: the call log, the settings a test
// changes, device memory (host memory whose addresses are the "device pointers", every range
// checked against its allocation), and the last launch's kernarg block. Each fake library has
// its own copy of this state; a test reaches it through the exported fake_gpu_* functions
// (dlsym on the library the driver opened).
//
// Settings (fake_gpu_set), all cleared by fake_gpu_reset:
//   devices N        how many devices there are (default 1)
//   arch A           hip: the gcnArchName (default "gfx942:sramecc+:xnack-");
//                    cuda: the compute capability "M.m" (default "9.0")
//   fail "CALL N"    the Nth call of CALL from now on fails (out of memory for allocations)
//   jit_log TEXT     cuda: the JIT refuses the PTX and writes TEXT to the error log
//   status N         the next launch stores N into the status word (the block's last word)
//   shared N         the device's shared memory per workgroup (hip default 65536; cuda: the
//                    opt-in maximum, default 232448)
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace fake_gpu {

struct State {
  std::mutex mu;
  std::string log;
  std::map<std::string, std::string> settings;
  std::map<std::string, int> failCountdown;
  std::map<uintptr_t, size_t> allocations;
  std::vector<uint64_t> kernargs;
  uint64_t eventClock = 0;

  std::string setting(const std::string& key, const std::string& fallback) {
    auto it = settings.find(key);
    return it == settings.end() ? fallback : it->second;
  }
  long number(const std::string& key, long fallback) {
    auto it = settings.find(key);
    return it == settings.end() ? fallback : std::strtol(it->second.c_str(), nullptr, 10);
  }
  // Logs the call; true when this call is the one a test asked to fail.
  bool call(const std::string& name, const std::string& args) {
    log += name + "(" + args + ")\n";
    auto it = failCountdown.find(name);
    if (it == failCountdown.end()) return false;
    if (--it->second > 0) return false;
    failCountdown.erase(it);
    log += "  -> failed on request\n";
    return true;
  }
  // Whether [p, p + bytes) lies inside one allocation.
  bool inside(uintptr_t p, size_t bytes) {
    auto it = allocations.upper_bound(p);
    if (it == allocations.begin()) return false;
    --it;
    return p >= it->first && p - it->first <= it->second && bytes <= it->second - (p - it->first);
  }
  void* allocate(size_t bytes) {
    void* p = std::calloc(bytes ? bytes : 1, 1);
    if (p) allocations[reinterpret_cast<uintptr_t>(p)] = bytes;
    return p;
  }
  bool release(void* p) {
    auto it = allocations.find(reinterpret_cast<uintptr_t>(p));
    if (it == allocations.end()) return false;
    allocations.erase(it);
    std::free(p);
    return true;
  }
  void reset() {
    log.clear();
    settings.clear();
    failCountdown.clear();
    kernargs.clear();
  }
  // The launch's kernarg block of `size` bytes; stores the requested status.
  void launched(const void* block, size_t size) {
    kernargs.assign(static_cast<const uint64_t*>(block),
                    static_cast<const uint64_t*>(block) + size / 8);
    long status = number("status", 0);
    if (status && !kernargs.empty() && inside(uintptr_t(kernargs.back()), 4)) {
      int32_t s = int32_t(status);
      std::memcpy(reinterpret_cast<void*>(kernargs.back()), &s, 4);
      settings.erase("status");
    }
  }
};

inline State& state() {
  static State s;
  return s;
}

// "NAME N" -> the Nth call of NAME fails.
inline void setFail(const std::string& value) {
  size_t space = value.find(' ');
  state().failCountdown[value.substr(0, space)] =
      space == std::string::npos ? 1 : std::atoi(value.c_str() + space + 1);
}

inline std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

} // namespace fake_gpu

#define FAKE_GPU_CONTROL                                                                           \
  extern "C" __attribute__((visibility("default"))) void fake_gpu_reset() {                        \
    std::lock_guard<std::mutex> lock(fake_gpu::state().mu);                                        \
    fake_gpu::state().reset();                                                                     \
  }                                                                                                \
  extern "C" __attribute__((visibility("default"))) void fake_gpu_set(const char* key,             \
                                                                      const char* value) {         \
    std::lock_guard<std::mutex> lock(fake_gpu::state().mu);                                        \
    if (std::string(key) == "fail")                                                                \
      fake_gpu::setFail(value);                                                                    \
    else                                                                                           \
      fake_gpu::state().settings[key] = value;                                                     \
  }                                                                                                \
  /* The calls so far, one line each: "hipMalloc(1024)". */                                        \
  extern "C" __attribute__((visibility("default"))) size_t fake_gpu_log(char* out, size_t cap) {   \
    std::lock_guard<std::mutex> lock(fake_gpu::state().mu);                                        \
    const std::string& l = fake_gpu::state().log;                                                  \
    if (out && cap) {                                                                              \
      size_t n = l.size() < cap - 1 ? l.size() : cap - 1;                                          \
      std::memcpy(out, l.data(), n);                                                               \
      out[n] = 0;                                                                                  \
    }                                                                                              \
    return l.size();                                                                               \
  }                                                                                                \
  /* The last launch's kernarg block, as 8-byte words. */                                          \
  extern "C" __attribute__((visibility("default"))) size_t fake_gpu_kernargs(uint64_t* out,        \
                                                                             size_t cap) {         \
    std::lock_guard<std::mutex> lock(fake_gpu::state().mu);                                        \
    const std::vector<uint64_t>& k = fake_gpu::state().kernargs;                                   \
    for (size_t i = 0; i < k.size() && i < cap; ++i) out[i] = k[i];                                \
    return k.size();                                                                               \
  }
