// The cuda driver: cuda[N] is the CUDA driver's device N, used through its primary context;
// CudaApi is the shared GPU device's calls into the driver API on that device's stream.
#include <cstring>

#include "runtime/cuda/cuda.h"
#include "runtime/gpu/driver.h"

namespace kiln::hal::cuda {

namespace {

Result<gpu::GpuDeviceInfo> query(const CudaLibrary& cu, int ordinal, CUdevice* device) {
  Loc loc = Loc::named("cuda[" + std::to_string(ordinal) + "]");
  auto failed = [&](const char* call, CUresult e) {
    return error(loc, std::string(call) + " failed: " + cu.errorText(e));
  };
  if (CUresult e = cu.cuDeviceGet(device, ordinal); e != CUDA_SUCCESS)
    return failed("cuDeviceGet", e);
  gpu::GpuDeviceInfo d;
  char name[256] = {};
  if (CUresult e = cu.cuDeviceGetName(name, sizeof name - 1, *device); e != CUDA_SUCCESS)
    return failed("cuDeviceGetName", e);
  d.name = name;
  size_t memory = 0;
  if (CUresult e = cu.cuDeviceTotalMem_v2(&memory, *device); e != CUDA_SUCCESS)
    return failed("cuDeviceTotalMem_v2", e);
  d.memoryBytes = memory;
  const CuAttribute attrs[] = {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
                               CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
                               CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
                               CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
                               CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                               CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,
                               CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                               CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
                               CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                               CU_DEVICE_ATTRIBUTE_WARP_SIZE,
                               CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                               CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR};
  constexpr size_t n = sizeof attrs / sizeof attrs[0];
  int v[n] = {};
  for (size_t i = 0; i < n; ++i) {
    if (CUresult e = cu.cuDeviceGetAttribute(&v[i], attrs[i], *device); e != CUDA_SUCCESS)
      return failed("cuDeviceGetAttribute", e);
    if (v[i] < 0) v[i] = 0;
  }
  gpu::GpuLimits& l = d.limits;
  l.maxBlock = {uint32_t(v[0]), uint32_t(v[1]), uint32_t(v[2])};
  l.maxGrid = {uint32_t(v[3]), uint32_t(v[4]), uint32_t(v[5])};
  l.maxThreadsPerBlock = uint32_t(v[6]);
  uint32_t shared = uint32_t(v[7]), optIn = uint32_t(v[8]);
  // Kernels above the default opt in at load (CudaApi::function).
  l.sharedBytes = optIn > shared ? optIn : shared;
  l.subgroupSizes = {uint32_t(v[9])};
  d.arch = "sm_" + std::to_string(v[10]) + std::to_string(v[11]);
  d.description = d.name + ", " + d.arch + " (compute capability " + std::to_string(v[10]) + "." +
                  std::to_string(v[11]) + "), " + gpu::mebibytes(d.memoryBytes) + " memory, warp " +
                  std::to_string(v[9]) + ", shared memory " + gpu::kibibytes(shared) +
                  (optIn > shared ? " (" + gpu::kibibytes(optIn) + " opt-in)" : std::string()) +
                  ", workgroup " + std::to_string(l.maxThreadsPerBlock) + " threads";
  if (cu.version)
    d.description += ", CUDA driver " + std::to_string(cu.version / 1000) + "." +
                     std::to_string(cu.version % 1000 / 10);
  return d;
}

// GpuApi over the CUDA driver API: every call runs in the device's primary context, on its
// stream.
class CudaApi : public gpu::GpuApi {
public:
  CudaApi(std::shared_ptr<const CudaLibrary> cu, CUdevice device, std::string name)
      : cu_(std::move(cu)), device_(device), name_(std::move(name)) {}
  ~CudaApi() override {
    if (!context_) return;
    if (stream_ && cu_->cuCtxSetCurrent(context_) == CUDA_SUCCESS) cu_->cuStreamDestroy_v2(stream_);
    cu_->cuDevicePrimaryCtxRelease_v2(device_);
  }

  Status init() {
    KILN_CHECK(
        check("cuDevicePrimaryCtxRetain", cu_->cuDevicePrimaryCtxRetain(&context_, device_)));
    KILN_CHECK(bind());
    return check("cuStreamCreate", cu_->cuStreamCreate(&stream_, 0));
  }

  Status bind() override { return check("cuCtxSetCurrent", cu_->cuCtxSetCurrent(context_)); }

  Result<uint64_t> allocate(uint64_t bytes) override {
    CUdeviceptr p = 0;
    KILN_CHECK(
        check("cuMemAlloc of " + std::to_string(bytes) + " bytes", cu_->cuMemAlloc_v2(&p, bytes)));
    return uint64_t(p);
  }
  void release(uint64_t address) override { cu_->cuMemFree_v2(address); }

  Status upload(uint64_t dst, const void* src, uint64_t bytes) override {
    return check("cuMemcpyHtoD", cu_->cuMemcpyHtoD_v2(dst, src, bytes));
  }
  Status download(void* dst, uint64_t src, uint64_t bytes) override {
    return check("cuMemcpyDtoH", cu_->cuMemcpyDtoH_v2(dst, src, bytes));
  }
  Status copy(uint64_t dst, uint64_t src, uint64_t bytes) override {
    return check("cuMemcpyDtoDAsync", cu_->cuMemcpyDtoDAsync_v2(dst, src, bytes, stream_));
  }
  Status fill(uint64_t dst, uint8_t pattern, uint64_t bytes) override {
    return check("cuMemsetD8Async", cu_->cuMemsetD8Async(dst, pattern, bytes, stream_));
  }

  Status launch(void* function, const std::string& kernel, const Workgroups& grid,
                const std::array<uint32_t, 3>& block, uint32_t dynamicSharedBytes,
                std::vector<uint64_t>& kernargs) override {
    size_t size = kernargs.size() * sizeof(uint64_t);
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, kernargs.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                     &size, CU_LAUNCH_PARAM_END};
    return check("cuLaunchKernel of kernel @" + kernel,
                 cu_->cuLaunchKernel(static_cast<CUfunction>(function), unsigned(grid[0]),
                                     unsigned(grid[1]), unsigned(grid[2]), block[0], block[1],
                                     block[2], dynamicSharedBytes, stream_, nullptr, extra));
  }

  Status finish() override {
    return check("cuStreamSynchronize (a kernel or copy on the stream failed)",
                 cu_->cuStreamSynchronize(stream_));
  }

  Result<void*> loadModule(const kiln::gpu::GpuImage& image) override {
    // The JIT reads the PTX up to its NUL (c_str); its error log becomes the error.
    std::vector<char> log(16 * 1024, '\0');
    int options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void* values[] = {log.data(), reinterpret_cast<void*>(uintptr_t(log.size() - 1))};
    CUmodule module = nullptr;
    CUresult e = cu_->cuModuleLoadDataEx(&module, image.code.c_str(), 2, options, values);
    if (e == CUDA_SUCCESS) return static_cast<void*>(module);
    std::string text(log.data(), strnlen(log.data(), log.size()));
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return error(loc(), name_ + ": the CUDA JIT could not load the " + image.arch + " PTX (" +
                            cu_->errorText(e) + ")" + (text.empty() ? "" : ": " + text));
  }
  void unloadModule(void* module) override { cu_->cuModuleUnload(static_cast<CUmodule>(module)); }
  Result<void*> function(void* module, const kiln::gpu::GpuKernelInfo& k) override {
    CUfunction fn = nullptr;
    KILN_CHECK(
        check("cuModuleGetFunction of '" + k.entry + "' (kernel @" + k.name + ")",
              cu_->cuModuleGetFunction(&fn, static_cast<CUmodule>(module), k.entry.c_str())));
    // Above 48 KiB in all, the kernel must opt in to its dynamic part (the device's opt-in
    // maximum was checked at load).
    if (uint64_t(k.staticSharedBytes) + k.dynamicSharedBytes > kDefaultSharedBytes)
      KILN_CHECK(check("cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, " +
                           std::to_string(k.dynamicSharedBytes) + ") for kernel @" + k.name,
                       cu_->cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                               int(k.dynamicSharedBytes))));
    return static_cast<void*>(fn);
  }

  Result<void*> recordEvent() override {
    CUevent e = nullptr;
    KILN_CHECK(check("cuEventCreate", cu_->cuEventCreate(&e, 0)));
    if (Status s = check("cuEventRecord", cu_->cuEventRecord(e, stream_)); !s.ok()) {
      cu_->cuEventDestroy_v2(e);
      return s.takeDiags();
    }
    return static_cast<void*>(e);
  }
  Result<double> elapsed(void* start, void* stop) override {
    float ms = 0;
    KILN_CHECK(check("cuEventElapsedTime", cu_->cuEventElapsedTime(&ms, static_cast<CUevent>(start),
                                                                   static_cast<CUevent>(stop))));
    return double(ms) / 1000.0;
  }
  void destroyEvent(void* event) override { cu_->cuEventDestroy_v2(static_cast<CUevent>(event)); }

private:
  Loc loc() const { return Loc::named(name_.substr(0, name_.find(' '))); }
  Status check(const std::string& what, CUresult e) const {
    if (e == CUDA_SUCCESS) return ok();
    return error(loc(), name_ + ": " + what + " failed: " + cu_->errorText(e));
  }

  std::shared_ptr<const CudaLibrary> cu_;
  CUdevice device_;
  std::string name_; // "cuda[0] (NVIDIA H100 80GB HBM3)"
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
};

class CudaDriver : public gpu::GpuDriver {
public:
  CudaDriver() : GpuDriver("cuda", "cuda") {}

protected:
  Status library() override {
    KILN_CHECK(CudaLibrary::get());
    return ok();
  }
  int deviceCount() override {
    int n = 0;
    return !cu()->noDevice && cu()->cuDeviceGetCount(&n) == CUDA_SUCCESS && n > 0 ? n : 0;
  }
  std::string noDevices() override {
    return "the CUDA driver (" + cu()->path + ") finds no NVIDIA GPU";
  }
  Result<gpu::GpuDeviceInfo> describe(int ordinal) override {
    CUdevice dev = 0;
    return query(*cu(), ordinal, &dev);
  }
  Result<std::unique_ptr<gpu::GpuApi>> connect(int ordinal,
                                               const gpu::GpuDeviceInfo& info) override {
    CUdevice dev = 0;
    if (CUresult e = cu()->cuDeviceGet(&dev, ordinal); e != CUDA_SUCCESS)
      return error(Loc::named("cuda[" + std::to_string(ordinal) + "]"),
                   "cuDeviceGet failed: " + cu()->errorText(e));
    auto api = std::make_unique<CudaApi>(
        cu(), dev, "cuda[" + std::to_string(ordinal) + "] (" + info.name + ")");
    KILN_CHECK(api->init());
    return std::unique_ptr<gpu::GpuApi>(std::move(api));
  }

private:
  // The library, once library() said it can be used.
  static std::shared_ptr<const CudaLibrary> cu() { return *CudaLibrary::get(); }
};

} // namespace

Driver* cudaDriver() {
  static CudaDriver driver;
  return &driver;
}

} // namespace kiln::hal::cuda
