// A fake libamdhip64.so for the hip driver's unit tests (no AMD GPU here): the entry points the
// driver uses, over host memory, recording every call and checking what it receives the way
// the HIP runtime would refuse it: device pointers inside live allocations, code objects that
// are AMDGPU ELF files for the device's processor, launches whose `extra` block is
// BUFFER_POINTER/SIZE/END with the kernel's kernarg size, grids and workgroups within limits.
// Kernels do not run; a launch can store a status (fake_state.h).
//
// A fake code object is a 64-byte ELF header (EM_AMDGPU, e_flags holding the processor's
// EF_AMDGPU_MACH) followed by one line per kernel: "kiln-fake-kernel ENTRY KERNARG_BYTES".
#include <cstdio>
#include <set>
#include <vector>

#include "fake_state.h"

namespace {

using fake_gpu::state;

constexpr int kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2, kInvalidDevice = 101,
              kInvalidImage = 200, kNoBinaryForGpu = 209, kInvalidHandle = 400, kNotFound = 500;

struct Function;
struct Module {
  std::vector<Function*> functions;           // handed out by *GetFunction, deleted with the module
  std::map<std::string, size_t> kernargBytes; // by entry
};
struct Function {
  std::string entry;
  size_t kernargBytes;
};

std::set<void*> streams, modules, functions, events;
thread_local int current = -1;

int devices() { return int(state().number("devices", 1)); }
std::string arch() { return state().setting("arch", "gfx942:sramecc+:xnack-"); }

// EF_AMDGPU_MACH of the processors the tests use.
int machOf(const std::string& processor) {
  if (processor == "gfx90a") return 0x03f;
  if (processor == "gfx942") return 0x04c;
  if (processor == "gfx1100") return 0x041;
  return -1;
}

std::string str(unsigned long long v) { return std::to_string(v); }

} // namespace

FAKE_GPU_CONTROL

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT int hipInit(unsigned flags) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().call("hipInit", str(flags))) return kInvalidValue;
  return flags == 0 ? kSuccess : kInvalidValue;
}

EXPORT int hipRuntimeGetVersion(int* v) {
  *v = 60200000 + 42; // 6.2
  return kSuccess;
}

EXPORT int hipGetDeviceCount(int* n) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().call("hipGetDeviceCount", "");
  *n = devices();
  return *n > 0 ? kSuccess : 100; // hipErrorNoDevice
}

EXPORT int hipDeviceGetName(char* name, int len, int device) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (device < 0 || device >= devices()) return kInvalidDevice;
  std::snprintf(name, size_t(len), "Fake AMD GPU %d", device);
  return kSuccess;
}

EXPORT int hipDeviceTotalMem(size_t* bytes, int device) {
  if (device < 0 || device >= devices()) return kInvalidDevice;
  *bytes = size_t(64) << 30;
  return kSuccess;
}

EXPORT int hipDeviceGetAttribute(int* v, int attr, int device) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (device < 0 || device >= devices()) return kInvalidDevice;
  bool rdna = arch().compare(0, 4, "gfx1") == 0;
  switch (attr) {
  case 26:
  case 27:
  case 28: *v = 1024; return kSuccess;       // MaxBlockDimX..Z
  case 29: *v = 2147483647; return kSuccess; // MaxGridDimX
  case 30:
  case 31: *v = 65536; return kSuccess;                                // MaxGridDimY, Z
  case 56: *v = 1024; return kSuccess;                                 // MaxThreadsPerBlock
  case 74: *v = int(state().number("shared", 65536)); return kSuccess; // MaxSharedMemoryPerBlock
  case 87: *v = rdna ? 32 : 64; return kSuccess;                       // WarpSize
  default: return kInvalidValue;
  }
}

// hipDeviceProp_tR0600: name at byte 0, gcnArchName at byte 1160, 1472 bytes in all.
EXPORT int hipGetDevicePropertiesR0600(void* props, int device) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().call("hipGetDevicePropertiesR0600", str(unsigned(device)));
  if (device < 0 || device >= devices()) return kInvalidDevice;
  char* p = static_cast<char*>(props);
  std::memset(p, 0, 1472);
  std::snprintf(p, 256, "Fake AMD GPU %d", device);
  std::snprintf(p + 1160, 256, "%s", arch().c_str());
  return kSuccess;
}

EXPORT int hipSetDevice(int device) {
  if (device < 0 || device >= devices()) return kInvalidDevice;
  current = device;
  return kSuccess;
}

EXPORT int hipMalloc(void** p, size_t bytes) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().call("hipMalloc", str(bytes)) || current < 0) return kOutOfMemory;
  *p = bytes ? state().allocate(bytes) : nullptr;
  return kSuccess;
}

EXPORT int hipFree(void* p) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().call("hipFree", "");
  return !p || state().release(p) ? kSuccess : kInvalidValue;
}

namespace {

int copy(const char* name, void* dst, const void* src, size_t bytes, int kind) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().call(name, str(bytes) + ", kind " + str(unsigned(kind)))) return kInvalidValue;
  bool dstDevice = kind == 1 || kind == 3, srcDevice = kind == 2 || kind == 3;
  if (kind < 1 || kind > 3 || (dstDevice && !state().inside(uintptr_t(dst), bytes)) ||
      (srcDevice && !state().inside(uintptr_t(src), bytes)))
    return kInvalidValue;
  std::memmove(dst, src, bytes);
  return kSuccess;
}

} // namespace

EXPORT int hipMemcpy(void* dst, const void* src, size_t bytes, int kind) {
  return copy("hipMemcpy", dst, src, bytes, kind);
}

EXPORT int hipMemcpyAsync(void* dst, const void* src, size_t bytes, int kind, void* stream) {
  if (!streams.count(stream)) return kInvalidHandle;
  return copy("hipMemcpyAsync", dst, src, bytes, kind);
}

EXPORT int hipMemsetAsync(void* dst, int value, size_t bytes, void* stream) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().call("hipMemsetAsync", str(unsigned(value)) + ", " + str(bytes)))
    return kInvalidValue;
  if (!streams.count(stream)) return kInvalidHandle;
  if (!state().inside(uintptr_t(dst), bytes)) return kInvalidValue;
  std::memset(dst, value, bytes);
  return kSuccess;
}

EXPORT int hipStreamCreate(void** stream) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().call("hipStreamCreate", "")) return kOutOfMemory;
  *stream = new char;
  streams.insert(*stream);
  return kSuccess;
}

EXPORT int hipStreamDestroy(void* stream) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().call("hipStreamDestroy", "");
  if (!streams.erase(stream)) return kInvalidHandle;
  delete static_cast<char*>(stream);
  return kSuccess;
}

EXPORT int hipStreamSynchronize(void* stream) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (state().call("hipStreamSynchronize", "")) return 719; // hipErrorLaunchFailure
  return streams.count(stream) ? kSuccess : kInvalidHandle;
}

namespace {

template <typename T> T field(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The NAME.kd symbols of an ELF64 code object's symbol tables, with the kernarg size their
// kernel descriptor gives (the image is trusted: hipModuleLoadData gets no length either).
void readKernelDescriptors(const unsigned char* e, std::map<std::string, size_t>& out) {
  uint64_t shoff = field<uint64_t>(e + 0x28);
  uint16_t shentsize = field<uint16_t>(e + 0x3a), shnum = field<uint16_t>(e + 0x3c);
  auto section = [&](size_t i) { return e + shoff + i * shentsize; };
  for (size_t i = 0; i < shnum; ++i) {
    const unsigned char* sh = section(i);
    uint32_t type = field<uint32_t>(sh + 4);
    if (type != 2 && type != 11) continue; // SHT_SYMTAB, SHT_DYNSYM
    const unsigned char* strtab = e + field<uint64_t>(section(field<uint32_t>(sh + 40)) + 24);
    uint64_t off = field<uint64_t>(sh + 24), size = field<uint64_t>(sh + 32);
    for (uint64_t at = 0; at + 24 <= size; at += 24) {
      const unsigned char* sym = e + off + at;
      std::string name = reinterpret_cast<const char*>(strtab + field<uint32_t>(sym));
      uint16_t shndx = field<uint16_t>(sym + 6);
      if (name.size() < 4 || name.compare(name.size() - 3, 3, ".kd") != 0 || shndx == 0 ||
          shndx >= shnum)
        continue;
      const unsigned char* home = section(shndx);
      uint64_t file =
          field<uint64_t>(home + 24) + (field<uint64_t>(sym + 8) - field<uint64_t>(home + 16));
      out[name.substr(0, name.size() - 3)] = field<uint32_t>(e + file + 8);
    }
  }
}

} // namespace

EXPORT int hipModuleLoadData(void** module, const void* image) {
  std::lock_guard<std::mutex> lock(state().mu);
  const unsigned char* e = static_cast<const unsigned char*>(image);
  if (state().call("hipModuleLoadData", "")) return kInvalidImage;
  if (std::memcmp(e,
                  "\x7f"
                  "ELF",
                  4) != 0 ||
      (e[18] | e[19] << 8) != 224)
    return kInvalidImage;
  std::string processor = arch().substr(0, arch().find(':'));
  uint32_t flags;
  std::memcpy(&flags, e + 48, 4); // e_flags of an ELF64 header
  if (int(flags & 0xff) != machOf(processor)) return kNoBinaryForGpu;
  auto* m = new Module;
  const char* text = reinterpret_cast<const char*>(e + 64);
  char entry[256];
  size_t bytes = 0;
  for (const char* line = std::strstr(text, "kiln-fake-kernel "); line;
       line = std::strstr(line + 1, "kiln-fake-kernel "))
    if (std::sscanf(line, "kiln-fake-kernel %255s %zu", entry, &bytes) == 2)
      m->kernargBytes[entry] = bytes;
  // A real code object (the amdgpu backend's): its kernels are the symbols NAME.kd, kernel
  // descriptors whose kernarg_size (bytes 8..11) the launch must match.
  if (m->kernargBytes.empty()) readKernelDescriptors(e, m->kernargBytes);
  modules.insert(m);
  *module = m;
  state().log += "  -> " + std::to_string(m->kernargBytes.size()) + " kernels\n";
  return kSuccess;
}

EXPORT int hipModuleUnload(void* module) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().call("hipModuleUnload", "");
  if (!modules.erase(module)) return kInvalidHandle;
  for (Function* f : static_cast<Module*>(module)->functions) {
    functions.erase(f);
    delete f;
  }
  delete static_cast<Module*>(module);
  return kSuccess;
}

EXPORT int hipModuleGetFunction(void** fn, void* module, const char* name) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().call("hipModuleGetFunction", name);
  if (!modules.count(module)) return kInvalidHandle;
  auto* m = static_cast<Module*>(module);
  auto it = m->kernargBytes.find(name);
  if (it == m->kernargBytes.end()) return kNotFound;
  auto* f = new Function{name, it->second};
  functions.insert(f);
  m->functions.push_back(f);
  *fn = f;
  return kSuccess;
}

EXPORT int hipModuleLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned shared, void* stream,
                                 void** params, void** extra) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (!functions.count(fn) || !streams.count(stream)) return kInvalidHandle;
  auto* f = static_cast<Function*>(fn);
  size_t size =
      extra && extra[2] == reinterpret_cast<void*>(2) ? *static_cast<size_t*>(extra[3]) : 0;
  bool fail = state().call("hipModuleLaunchKernel", f->entry + " grid " + str(gx) + "," + str(gy) +
                                                        "," + str(gz) + " block " + str(bx) + "," +
                                                        str(by) + "," + str(bz) + " shared " +
                                                        str(shared) + " kernarg " + str(size));
  if (fail) return 719;
  if (params || !extra || extra[0] != reinterpret_cast<void*>(1) ||
      extra[2] != reinterpret_cast<void*>(2) || extra[4] != reinterpret_cast<void*>(3) ||
      size != f->kernargBytes || size % 8 != 0)
    return kInvalidValue;
  if (!gx || !gy || !gz || gy > 65536 || gz > 65536 || uint64_t(bx) * by * bz > 1024 ||
      shared > unsigned(state().number("shared", 65536)))
    return kInvalidValue;
  state().launched(extra[1], size);
  return kSuccess;
}

EXPORT int hipEventCreate(void** event) {
  std::lock_guard<std::mutex> lock(state().mu);
  *event = new uint64_t(0);
  events.insert(*event);
  return kSuccess;
}

EXPORT int hipEventRecord(void* event, void* stream) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (!events.count(event) || !streams.count(stream)) return kInvalidHandle;
  *static_cast<uint64_t*>(event) = ++state().eventClock;
  return kSuccess;
}

// One "millisecond" per event recorded in between.
EXPORT int hipEventElapsedTime(float* ms, void* start, void* stop) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (!events.count(start) || !events.count(stop)) return kInvalidHandle;
  *ms = float(*static_cast<uint64_t*>(stop) - *static_cast<uint64_t*>(start));
  return kSuccess;
}

EXPORT int hipEventDestroy(void* event) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (!events.erase(event)) return kInvalidHandle;
  delete static_cast<uint64_t*>(event);
  return kSuccess;
}

EXPORT const char* hipGetErrorName(int e) {
  switch (e) {
  case kSuccess: return "hipSuccess";
  case kInvalidValue: return "hipErrorInvalidValue";
  case kOutOfMemory: return "hipErrorOutOfMemory";
  case kInvalidDevice: return "hipErrorInvalidDevice";
  case kInvalidImage: return "hipErrorInvalidImage";
  case kNoBinaryForGpu: return "hipErrorNoBinaryForGpu";
  case kInvalidHandle: return "hipErrorInvalidHandle";
  case kNotFound: return "hipErrorNotFound";
  case 719: return "hipErrorLaunchFailure";
  default: return "hipErrorUnknown";
  }
}

EXPORT const char* hipGetErrorString(int e) {
  switch (e) {
  case kOutOfMemory: return "out of memory";
  case kInvalidImage: return "device kernel image is invalid";
  case kNoBinaryForGpu: return "no kernel image is available for execution on the device";
  case 719: return "unspecified launch failure";
  default: return "fake error";
  }
}
