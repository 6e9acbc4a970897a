// The hip driver: hip[N] is HIP's device N; HipApi is the shared GPU device's calls into HIP
// on that device's stream.
#include <cstring>

#include "runtime/gpu/driver.h"
#include "runtime/hip/hip.h"

namespace kiln::hal::hip {

namespace {

// "gfx90a" from "gfx90a:sramecc+:xnack-": payload images are named by the processor only.
std::string processorOf(const std::string& gcnArchName) {
  return gcnArchName.substr(0, gcnArchName.find(':'));
}

Result<gpu::GpuDeviceInfo> query(const HipLibrary& hip, int ordinal) {
  Loc loc = Loc::named("hip[" + std::to_string(ordinal) + "]");
  auto failed = [&](const char* call, hipError_t e) {
    return error(loc, std::string(call) + " failed: " + hip.errorText(e));
  };
  gpu::GpuDeviceInfo d;
  char name[256] = {};
  if (hipError_t e = hip.hipDeviceGetName(name, sizeof name - 1, ordinal); e != hipSuccess)
    return failed("hipDeviceGetName", e);
  d.name = name;
  size_t memory = 0;
  if (hipError_t e = hip.hipDeviceTotalMem(&memory, ordinal); e != hipSuccess)
    return failed("hipDeviceTotalMem", e);
  d.memoryBytes = memory;
  std::vector<char> props(kHipDevicePropBytes, 0);
  if (hipError_t e = hip.hipGetDevicePropertiesR0600(props.data(), ordinal); e != hipSuccess)
    return failed("hipGetDevicePropertiesR0600", e);
  const char* arch = props.data() + offsetof(HipDevicePropHead, gcnArchName);
  std::string full(arch, strnlen(arch, sizeof(HipDevicePropHead::gcnArchName)));
  d.arch = processorOf(full);
  if (d.arch.size() < 4 || d.arch.compare(0, 3, "gfx") != 0)
    return error(loc, "hipGetDevicePropertiesR0600 gave the architecture name '" + full +
                          "', not gfxNNN; this HIP runtime's device properties are not laid out "
                          "as ROCm 6's");
  int v[9] = {};
  const HipAttribute attrs[9] = {hipDeviceAttributeMaxBlockDimX,
                                 hipDeviceAttributeMaxBlockDimY,
                                 hipDeviceAttributeMaxBlockDimZ,
                                 hipDeviceAttributeMaxGridDimX,
                                 hipDeviceAttributeMaxGridDimY,
                                 hipDeviceAttributeMaxGridDimZ,
                                 hipDeviceAttributeMaxThreadsPerBlock,
                                 hipDeviceAttributeMaxSharedMemoryPerBlock,
                                 hipDeviceAttributeWarpSize};
  for (int i = 0; i < 9; ++i) {
    if (hipError_t e = hip.hipDeviceGetAttribute(&v[i], attrs[i], ordinal); e != hipSuccess)
      return failed("hipDeviceGetAttribute", e);
    if (v[i] < 0) v[i] = 0;
  }
  gpu::GpuLimits& l = d.limits;
  l.maxBlock = {uint32_t(v[0]), uint32_t(v[1]), uint32_t(v[2])};
  l.maxGrid = {uint32_t(v[3]), uint32_t(v[4]), uint32_t(v[5])};
  l.maxThreadsPerBlock = uint32_t(v[6]);
  l.sharedBytes = uint32_t(v[7]);
  // GCN and CDNA (gfx9) run wave64 only; RDNA runs wave32 and, when the code object asks for
  // it, wave64 (the code object decides, not the warpSize HIP reports).
  if (d.arch.compare(0, 4, "gfx9") == 0)
    l.subgroupSizes = {64};
  else
    l.subgroupSizes = {32, 64};
  d.description = d.name + ", " + full + ", " + gpu::mebibytes(d.memoryBytes) + " memory, wave " +
                  std::to_string(v[8]) + ", shared memory " + gpu::kibibytes(l.sharedBytes) +
                  ", workgroup " + std::to_string(l.maxThreadsPerBlock) + " threads";
  if (hip.version)
    d.description += ", HIP " + std::to_string(hip.version / 10000000) + "." +
                     std::to_string(hip.version / 100000 % 100);
  return d;
}

// GpuApi over HIP: every call runs on device `ordinal_`'s stream.
class HipApi : public gpu::GpuApi {
public:
  HipApi(std::shared_ptr<const HipLibrary> hip, int ordinal, std::string name)
      : hip_(std::move(hip)), ordinal_(ordinal), name_(std::move(name)) {}
  ~HipApi() override {
    if (stream_ && hip_->hipSetDevice(ordinal_) == hipSuccess) hip_->hipStreamDestroy(stream_);
  }

  Status init() {
    KILN_CHECK(bind());
    return check("hipStreamCreate", hip_->hipStreamCreate(&stream_));
  }

  Status bind() override { return check("hipSetDevice", hip_->hipSetDevice(ordinal_)); }

  Result<uint64_t> allocate(uint64_t bytes) override {
    void* p = nullptr;
    KILN_CHECK(
        check("hipMalloc of " + std::to_string(bytes) + " bytes", hip_->hipMalloc(&p, bytes)));
    return reinterpret_cast<uint64_t>(p);
  }
  void release(uint64_t address) override { hip_->hipFree(ptr(address)); }

  Status upload(uint64_t dst, const void* src, uint64_t bytes) override {
    return check("hipMemcpy to the device",
                 hip_->hipMemcpy(ptr(dst), src, bytes, hipMemcpyHostToDevice));
  }
  Status download(void* dst, uint64_t src, uint64_t bytes) override {
    return check("hipMemcpy to the host",
                 hip_->hipMemcpy(dst, ptr(src), bytes, hipMemcpyDeviceToHost));
  }
  Status copy(uint64_t dst, uint64_t src, uint64_t bytes) override {
    return check("hipMemcpyAsync",
                 hip_->hipMemcpyAsync(ptr(dst), ptr(src), bytes, hipMemcpyDeviceToDevice, stream_));
  }
  Status fill(uint64_t dst, uint8_t pattern, uint64_t bytes) override {
    return check("hipMemsetAsync", hip_->hipMemsetAsync(ptr(dst), pattern, bytes, stream_));
  }

  Status launch(void* function, const std::string& kernel, const Workgroups& grid,
                const std::array<uint32_t, 3>& block, uint32_t dynamicSharedBytes,
                std::vector<uint64_t>& kernargs) override {
    size_t size = kernargs.size() * sizeof(uint64_t);
    void* extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, kernargs.data(), HIP_LAUNCH_PARAM_BUFFER_SIZE,
                     &size, HIP_LAUNCH_PARAM_END};
    return check("hipModuleLaunchKernel of kernel @" + kernel,
                 hip_->hipModuleLaunchKernel(static_cast<hipFunction_t>(function),
                                             unsigned(grid[0]), unsigned(grid[1]),
                                             unsigned(grid[2]), block[0], block[1], block[2],
                                             dynamicSharedBytes, stream_, nullptr, extra));
  }

  Status finish() override {
    return check("hipStreamSynchronize (a kernel or copy on the stream failed)",
                 hip_->hipStreamSynchronize(stream_));
  }

  Result<void*> loadModule(const kiln::gpu::GpuImage& image) override {
    // hipModuleLoadData takes no length: what it reads must be an AMDGPU ELF.
    const std::string& code = image.code;
    constexpr uint16_t kEmAmdgpu = 224;
    if (code.size() < 64 ||
        std::memcmp(code.data(),
                    "\x7f"
                    "ELF",
                    4) != 0 ||
        (uint8_t(code[18]) | uint16_t(uint8_t(code[19])) << 8) != kEmAmdgpu)
      return error(Loc::named(name_),
                   "the " + image.arch + " image is not an AMDGPU code object (ELF, EM_AMDGPU)");
    hipModule_t module = nullptr;
    KILN_CHECK(check("hipModuleLoadData of the " + image.arch + " code object",
                     hip_->hipModuleLoadData(&module, code.data())));
    return static_cast<void*>(module);
  }
  void unloadModule(void* module) override {
    hip_->hipModuleUnload(static_cast<hipModule_t>(module));
  }
  Result<void*> function(void* module, const kiln::gpu::GpuKernelInfo& k) override {
    hipFunction_t fn = nullptr;
    KILN_CHECK(
        check("hipModuleGetFunction of '" + k.entry + "' (kernel @" + k.name + ")",
              hip_->hipModuleGetFunction(&fn, static_cast<hipModule_t>(module), k.entry.c_str())));
    return static_cast<void*>(fn);
  }

  Result<void*> recordEvent() override {
    hipEvent_t e = nullptr;
    KILN_CHECK(check("hipEventCreate", hip_->hipEventCreate(&e)));
    if (Status s = check("hipEventRecord", hip_->hipEventRecord(e, stream_)); !s.ok()) {
      hip_->hipEventDestroy(e);
      return s.takeDiags();
    }
    return static_cast<void*>(e);
  }
  Result<double> elapsed(void* start, void* stop) override {
    float ms = 0;
    KILN_CHECK(
        check("hipEventElapsedTime", hip_->hipEventElapsedTime(&ms, static_cast<hipEvent_t>(start),
                                                               static_cast<hipEvent_t>(stop))));
    return double(ms) / 1000.0;
  }
  void destroyEvent(void* event) override { hip_->hipEventDestroy(static_cast<hipEvent_t>(event)); }

private:
  static void* ptr(uint64_t address) { return reinterpret_cast<void*>(address); }
  Status check(const std::string& what, hipError_t e) const {
    if (e == hipSuccess) return ok();
    return error(Loc::named(name_.substr(0, name_.find(' '))),
                 name_ + ": " + what + " failed: " + hip_->errorText(e));
  }

  std::shared_ptr<const HipLibrary> hip_;
  int ordinal_;
  std::string name_; // "hip[0] (AMD Instinct MI300X)"
  hipStream_t stream_ = nullptr;
};

class HipDriver : public gpu::GpuDriver {
public:
  HipDriver() : GpuDriver("hip", "amdgpu") {}

protected:
  Status library() override {
    KILN_CHECK(HipLibrary::get());
    return ok();
  }
  int deviceCount() override {
    int n = 0;
    return hip()->hipGetDeviceCount(&n) == hipSuccess && n > 0 ? n : 0;
  }
  std::string noDevices() override {
    return "the HIP runtime (" + hip()->path + ") finds no AMD GPU";
  }
  Result<gpu::GpuDeviceInfo> describe(int ordinal) override { return query(*hip(), ordinal); }
  Result<std::unique_ptr<gpu::GpuApi>> connect(int ordinal,
                                               const gpu::GpuDeviceInfo& info) override {
    auto api = std::make_unique<HipApi>(hip(), ordinal,
                                        "hip[" + std::to_string(ordinal) + "] (" + info.name + ")");
    KILN_CHECK(api->init());
    return std::unique_ptr<gpu::GpuApi>(std::move(api));
  }

private:
  // The library, once library() said it can be used.
  static std::shared_ptr<const HipLibrary> hip() { return *HipLibrary::get(); }
};

} // namespace

Driver* hipDriver() {
  static HipDriver driver;
  return &driver;
}

} // namespace kiln::hal::hip
