// A fake libcuda.so.1 for the cuda driver's unit tests (no NVIDIA GPU here): the driver API
// entry points the driver uses, over host memory, recording every call and checking what it
// receives the way the CUDA driver would refuse it: a current context for every call that
// needs one, device pointers inside live allocations, PTX that is NUL-terminated text with a
// `.entry` per kernel and a `.target` the device can run, JIT options whose error log the
// driver reads, launches whose `extra` block is BUFFER_POINTER/SIZE/END with the kernel's
// parameter bytes (8 per `.param`), and dynamic shared memory above 48 KiB only after
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES. Kernels do not run; a launch can store a
// status (fake_state.h).
#include <cstdio>
#include <set>
#include <vector>

#include "fake_state.h"

namespace {

using fake_gpu::state;

constexpr int kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2, kNoDevice = 100,
              kInvalidDevice = 101, kInvalidContext = 201, kInvalidPtx = 218, kInvalidHandle = 400,
              kNotFound = 500, kLaunchFailed = 719;
constexpr int kDefaultShared = 48 * 1024;

struct Function;
struct Module {
  std::vector<Function*> functions;         // handed out by *GetFunction, deleted with the module
  std::map<std::string, size_t> paramBytes; // by .entry
};
struct Function {
  std::string entry;
  size_t paramBytes;
  int maxDynamicShared = kDefaultShared;
};

int contexts[8]; // primary contexts: &contexts[device]
std::set<void*> streams, modules, functions, events;
thread_local void* current = nullptr;

int devices() { return int(state().number("devices", 1)); }
// "9.0" -> 90
int capability() {
  std::string a = state().setting("arch", "9.0");
  return std::atoi(a.c_str()) * 10 + std::atoi(a.c_str() + a.find('.') + 1);
}
int optIn() { return int(state().number("shared", 232448)); }
std::string str(unsigned long long v) { return std::to_string(v); }

} // namespace

FAKE_GPU_CONTROL

#define EXPORT extern "C" __attribute__((visibility("default")))
#define NEEDS_CONTEXT                                                                              \
  if (!current) return kInvalidContext

EXPORT int cuInit(unsigned flags) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().call("cuInit", str(flags));
  if (devices() == 0) return kNoDevice;
  return flags == 0 ? kSuccess : kInvalidValue;
}

EXPORT int cuDriverGetVersion(int* v) {
  *v = 12040;
  return kSuccess;
}

EXPORT int cuDeviceGetCount(int* n) {
  *n = devices();
  return kSuccess;
}

EXPORT int cuDeviceGet(int* device, int ordinal) {
  if (ordinal < 0 || ordinal >= devices()) return kInvalidDevice;
  *device = ordinal;
  return kSuccess;
}

EXPORT int cuDeviceGetName(char* name, int len, int device) {
  if (device < 0 || device >= devices()) return kInvalidDevice;
  std::snprintf(name, size_t(len), "Fake NVIDIA GPU %d", device);
  return kSuccess;
}

EXPORT int cuDeviceTotalMem_v2(size_t* bytes, int device) {
  if (device < 0 || device >= devices()) return kInvalidDevice;
  *bytes = size_t(80) << 30;
  return kSuccess;
}

EXPORT int cuDeviceGetAttribute(int* v, int attr, int device) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (device < 0 || device >= devices()) return kInvalidDevice;
  switch (attr) {
  case 1:
  case 2:
  case 3: *v = 1024; return kSuccess;       // threads per block, block x, y
  case 4: *v = 64; return kSuccess;         // block z
  case 5: *v = 2147483647; return kSuccess; // grid x
  case 6:
  case 7: *v = 65535; return kSuccess;          // grid y, z
  case 8: *v = kDefaultShared; return kSuccess; // shared memory per block
  case 10: *v = 32; return kSuccess;            // warp size
  case 75: *v = capability() / 10; return kSuccess;
  case 76: *v = capability() % 10; return kSuccess;
  case 97: *v = optIn(); return kSuccess; // shared memory per block, opt-in
  default: return kInvalidValue;
  }
}

EXPORT int cuDevicePrimaryCtxRetain(void** ctx, int device) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().call("cuDevicePrimaryCtxRetain", str(unsigned(device)))) return kOutOfMemory;
  if (device < 0 || device >= devices() || device >= 8) return kInvalidDevice;
  *ctx = &contexts[device];
  contexts[device]++;
  return kSuccess;
}

EXPORT int cuDevicePrimaryCtxRelease_v2(int device) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().call("cuDevicePrimaryCtxRelease_v2", str(unsigned(device)));
  if (device < 0 || device >= 8 || contexts[device] <= 0) return kInvalidContext;
  contexts[device]--;
  return kSuccess;
}

EXPORT int cuCtxSetCurrent(void* ctx) {
  if (ctx && (ctx < &contexts[0] || ctx >= &contexts[8])) return kInvalidContext;
  current = ctx;
  return kSuccess;
}

EXPORT int cuMemAlloc_v2(unsigned long long* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().call("cuMemAlloc_v2", str(bytes))) return kOutOfMemory;
  NEEDS_CONTEXT;
  if (bytes == 0) return kInvalidValue; // as the real driver: no empty allocations
  *p = reinterpret_cast<uintptr_t>(state().allocate(bytes));
  return kSuccess;
}

EXPORT int cuMemFree_v2(unsigned long long p) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().call("cuMemFree_v2", "");
  NEEDS_CONTEXT;
  return state().release(reinterpret_cast<void*>(p)) ? kSuccess : kInvalidValue;
}

EXPORT int cuMemcpyHtoD_v2(unsigned long long dst, const void* src, size_t bytes) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().call("cuMemcpyHtoD_v2", str(bytes))) return kInvalidValue;
  NEEDS_CONTEXT;
  if (!state().inside(dst, bytes)) return kInvalidValue;
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return kSuccess;
}

EXPORT int cuMemcpyDtoH_v2(void* dst, unsigned long long src, size_t bytes) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().call("cuMemcpyDtoH_v2", str(bytes))) return kInvalidValue;
  NEEDS_CONTEXT;
  if (!state().inside(src, bytes)) return kInvalidValue;
  std::memcpy(dst, reinterpret_cast<void*>(src), bytes);
  return kSuccess;
}

EXPORT int cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, size_t bytes,
                                void* stream) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().call("cuMemcpyDtoDAsync_v2", str(bytes))) return kInvalidValue;
  NEEDS_CONTEXT;
  if (!streams.count(stream)) return kInvalidHandle;
  if (!state().inside(dst, bytes) || !state().inside(src, bytes)) return kInvalidValue;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), bytes);
  return kSuccess;
}

EXPORT int cuMemsetD8Async(unsigned long long dst, unsigned char value, size_t bytes,
                           void* stream) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().call("cuMemsetD8Async", str(value) + ", " + str(bytes))) return kInvalidValue;
  NEEDS_CONTEXT;
  if (!streams.count(stream)) return kInvalidHandle;
  if (!state().inside(dst, bytes)) return kInvalidValue;
  std::memset(reinterpret_cast<void*>(dst), value, bytes);
  return kSuccess;
}

EXPORT int cuStreamCreate(void** stream, unsigned flags) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().call("cuStreamCreate", str(flags))) return kOutOfMemory;
  NEEDS_CONTEXT;
  *stream = new char;
  streams.insert(*stream);
  return kSuccess;
}

EXPORT int cuStreamDestroy_v2(void* stream) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().call("cuStreamDestroy_v2", "");
  NEEDS_CONTEXT;
  if (!streams.erase(stream)) return kInvalidHandle;
  delete static_cast<char*>(stream);
  return kSuccess;
}

EXPORT int cuStreamSynchronize(void* stream) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().call("cuStreamSynchronize", "")) return kLaunchFailed;
  NEEDS_CONTEXT;
  return streams.count(stream) ? kSuccess : kInvalidHandle;
}

namespace {

int jitFails(void** values, int* options, unsigned n, const std::string& log) {
  char* buffer = nullptr;
  size_t size = 0;
  int sizeIndex = -1;
  for (unsigned i = 0; i < n; ++i) {
    if (options[i] == 5) buffer = static_cast<char*>(values[i]);
    if (options[i] == 6) size = reinterpret_cast<uintptr_t>(values[i]), sizeIndex = int(i);
  }
  if (buffer && size) {
    size_t written = log.size() < size - 1 ? log.size() : size - 1;
    std::memcpy(buffer, log.data(), written);
    buffer[written] = 0;
    values[sizeIndex] = reinterpret_cast<void*>(uintptr_t(written));
  }
  return kInvalidPtx;
}

} // namespace

EXPORT int cuModuleLoadDataEx(void** module, const void* image, unsigned n, int* options,
                              void** values) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().call("cuModuleLoadDataEx", str(n) + " options");
  NEEDS_CONTEXT;
  const char* ptx = static_cast<const char*>(image);
  if (strnlen(ptx, 1 << 24) == 1 << 24) return kInvalidValue; // not NUL-terminated text
  std::string text = ptx;
  if (state().settings.count("jit_log"))
    return jitFails(values, options, n, state().settings["jit_log"]);
  size_t target = text.find(".target sm_");
  if (target == std::string::npos || std::atoi(text.c_str() + target + 11) > capability())
    return jitFails(values, options, n,
                    "ptxas fatal   : SM version specified by .target is higher than default SM "
                    "version assumed");
  auto* m = new Module;
  for (size_t at = text.find(".entry "); at != std::string::npos;
       at = text.find(".entry ", at + 1)) {
    size_t nameStart = at + 7, open = text.find('(', nameStart), close = text.find(')', nameStart);
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    std::string name = text.substr(nameStart, open - nameStart);
    while (!name.empty() && name.back() == ' ') name.pop_back();
    size_t params = 0;
    for (size_t p = text.find(".param", open); p != std::string::npos && p < close;
         p = text.find(".param", p + 1))
      ++params;
    m->paramBytes[name] = 8 * params;
  }
  if (m->paramBytes.empty()) {
    delete m;
    return jitFails(values, options, n, "ptxas fatal   : no .entry in the PTX");
  }
  modules.insert(m);
  *module = m;
  return kSuccess;
}

EXPORT int cuModuleUnload(void* module) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().call("cuModuleUnload", "");
  NEEDS_CONTEXT;
  if (!modules.erase(module)) return kInvalidHandle;
  for (Function* f : static_cast<Module*>(module)->functions) {
    functions.erase(f);
    delete f;
  }
  delete static_cast<Module*>(module);
  return kSuccess;
}

EXPORT int cuModuleGetFunction(void** fn, void* module, const char* name) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().call("cuModuleGetFunction", name);
  NEEDS_CONTEXT;
  if (!modules.count(module)) return kInvalidHandle;
  auto* m = static_cast<Module*>(module);
  auto it = m->paramBytes.find(name);
  if (it == m->paramBytes.end()) return kNotFound;
  auto* f = new Function{name, it->second};
  functions.insert(f);
  m->functions.push_back(f);
  *fn = f;
  return kSuccess;
}

EXPORT int cuFuncSetAttribute(void* fn, int attr, int value) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().call("cuFuncSetAttribute", str(unsigned(attr)) + ", " + str(unsigned(value)));
  NEEDS_CONTEXT;
  if (!functions.count(fn)) return kInvalidHandle;
  if (attr != 8 || value < 0 || value > optIn()) return kInvalidValue;
  static_cast<Function*>(fn)->maxDynamicShared = value;
  return kSuccess;
}

EXPORT int cuLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned shared, void* stream, void** params, void** extra) {
  std::lock_guard<std::mutex> lock(state().mu);
  NEEDS_CONTEXT;
  if (!functions.count(fn) || !streams.count(stream)) return kInvalidHandle;
  auto* f = static_cast<Function*>(fn);
  size_t size =
      extra && extra[2] == reinterpret_cast<void*>(2) ? *static_cast<size_t*>(extra[3]) : 0;
  bool fail =
      state().call("cuLaunchKernel", f->entry + " grid " + str(gx) + "," + str(gy) + "," + str(gz) +
                                         " block " + str(bx) + "," + str(by) + "," + str(bz) +
                                         " shared " + str(shared) + " kernarg " + str(size));
  if (fail) return kLaunchFailed;
  if (params || !extra || extra[0] != reinterpret_cast<void*>(1) ||
      extra[2] != reinterpret_cast<void*>(2) || extra[4] != nullptr || size != f->paramBytes)
    return kInvalidValue;
  if (!gx || !gy || !gz || gy > 65535 || gz > 65535 || bz > 64 || uint64_t(bx) * by * bz > 1024 ||
      int(shared) > f->maxDynamicShared)
    return kInvalidValue;
  state().launched(extra[1], size);
  return kSuccess;
}

EXPORT int cuEventCreate(void** event, unsigned) {
  std::lock_guard<std::mutex> lock(state().mu);
  NEEDS_CONTEXT;
  *event = new uint64_t(0);
  events.insert(*event);
  return kSuccess;
}

EXPORT int cuEventRecord(void* event, void* stream) {
  std::lock_guard<std::mutex> lock(state().mu);
  NEEDS_CONTEXT;
  if (!events.count(event) || !streams.count(stream)) return kInvalidHandle;
  *static_cast<uint64_t*>(event) = ++state().eventClock;
  return kSuccess;
}

// One "millisecond" per event recorded in between.
EXPORT int cuEventElapsedTime(float* ms, void* start, void* stop) {
  std::lock_guard<std::mutex> lock(state().mu);
  NEEDS_CONTEXT;
  if (!events.count(start) || !events.count(stop)) return kInvalidHandle;
  *ms = float(*static_cast<uint64_t*>(stop) - *static_cast<uint64_t*>(start));
  return kSuccess;
}

EXPORT int cuEventDestroy_v2(void* event) {
  std::lock_guard<std::mutex> lock(state().mu);
  NEEDS_CONTEXT;
  if (!events.erase(event)) return kInvalidHandle;
  delete static_cast<uint64_t*>(event);
  return kSuccess;
}

EXPORT int cuGetErrorName(int e, const char** name) {
  switch (e) {
  case kSuccess: *name = "CUDA_SUCCESS"; break;
  case kInvalidValue: *name = "CUDA_ERROR_INVALID_VALUE"; break;
  case kOutOfMemory: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
  case kNoDevice: *name = "CUDA_ERROR_NO_DEVICE"; break;
  case kInvalidDevice: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
  case kInvalidContext: *name = "CUDA_ERROR_INVALID_CONTEXT"; break;
  case kInvalidPtx: *name = "CUDA_ERROR_INVALID_PTX"; break;
  case kInvalidHandle: *name = "CUDA_ERROR_INVALID_HANDLE"; break;
  case kNotFound: *name = "CUDA_ERROR_NOT_FOUND"; break;
  case kLaunchFailed: *name = "CUDA_ERROR_LAUNCH_FAILED"; break;
  default: *name = nullptr; return kInvalidValue;
  }
  return kSuccess;
}

EXPORT int cuGetErrorString(int e, const char** text) {
  switch (e) {
  case kOutOfMemory: *text = "out of memory"; break;
  case kInvalidPtx: *text = "a PTX JIT compilation failed"; break;
  case kLaunchFailed: *text = "unspecified launch failure"; break;
  default: *text = "fake error"; break;
  }
  return kSuccess;
}
