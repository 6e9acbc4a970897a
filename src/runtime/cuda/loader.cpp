// CudaLibrary::get: dlopen of the CUDA driver, its entry points, cuInit.
#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>

#include "runtime/cuda/cuda.h"
#include "runtime/gpu/device.h"

namespace kiln::hal::cuda {

namespace {

Result<std::shared_ptr<const CudaLibrary>> open() {
  KILN_TRY(void* lib, gpu::openLibrary("KILN_CUDA_LIBRARY", "libcuda.so.1",
                                       "install the NVIDIA driver (its libcuda.so.1)"));
  auto cu = std::make_shared<CudaLibrary>();
  Dl_info info{};
  cu->path = dladdr(dlsym(lib, "cuInit"), &info) && info.dli_fname ? info.dli_fname : "";
#define KILN_CUDA_LOAD(name, ret, params)                                                          \
  cu->name = reinterpret_cast<ret(*) params>(dlsym(lib, #name));                                   \
  if (!cu->name)                                                                                   \
    return error(Loc::named("cuda"),                                                               \
                 "the CUDA driver " + cu->path + " lacks " #name "; kiln needs CUDA 12 or newer");
  KILN_CUDA_FNS(KILN_CUDA_LOAD)
#undef KILN_CUDA_LOAD
  CUresult e = cu->cuInit(0);
  if (e == CUDA_ERROR_NO_DEVICE)
    cu->noDevice = true;
  else if (e != CUDA_SUCCESS)
    return error(Loc::named("cuda"), "cuInit failed: " + cu->errorText(e));
  if (cu->cuDriverGetVersion(&cu->version) != CUDA_SUCCESS) cu->version = 0;
  return std::shared_ptr<const CudaLibrary>(std::move(cu));
}

} // namespace

Result<std::shared_ptr<const CudaLibrary>> CudaLibrary::get() {
  // One attempt per path: tests point KILN_CUDA_LIBRARY at fakes and at nothing in turn.
  static std::mutex mu;
  static std::map<std::string, Result<std::shared_ptr<const CudaLibrary>>> opened;
  const char* env = std::getenv("KILN_CUDA_LIBRARY");
  std::string key = env ? env : "";
  std::lock_guard<std::mutex> lock(mu);
  auto it = opened.find(key);
  if (it == opened.end()) it = opened.emplace(key, open()).first;
  return it->second;
}

std::string CudaLibrary::errorText(CUresult e) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName && cuGetErrorName(e, &name) != CUDA_SUCCESS) name = nullptr;
  if (cuGetErrorString && cuGetErrorString(e, &text) != CUDA_SUCCESS) text = nullptr;
  std::string s = name ? name : "CUresult " + std::to_string(e);
  if (text && *text) s += std::string(" (") + text + ")";
  return s;
}

} // namespace kiln::hal::cuda
