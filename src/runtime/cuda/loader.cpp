// CudaLibrary::get: dlopen of the CUDA driver, its entry points, cuInit.
#include <dlfcn.h>

#include "runtime/cuda/cuda.h"
#include "runtime/gpu/driver.h"

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
  return gpu::oncePerPath<CudaLibrary>("KILN_CUDA_LIBRARY", open);
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
