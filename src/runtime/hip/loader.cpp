// HipLibrary::get: dlopen of the HIP runtime, its entry points, hipInit.
#include <dlfcn.h>

#include "runtime/gpu/driver.h"
#include "runtime/hip/hip.h"

namespace kiln::hal::hip {

namespace {

Result<std::shared_ptr<const HipLibrary>> open() {
  KILN_TRY(void* lib, gpu::openLibrary("KILN_HIP_LIBRARY", "libamdhip64.so",
                                       "install ROCm 6 or newer (its HIP runtime)"));
  auto hip = std::make_shared<HipLibrary>();
  Dl_info info{};
  hip->path = dladdr(dlsym(lib, "hipInit"), &info) && info.dli_fname ? info.dli_fname : "";
#define KILN_HIP_LOAD(name, ret, params)                                                           \
  hip->name = reinterpret_cast<ret(*) params>(dlsym(lib, #name));                                  \
  if (!hip->name)                                                                                  \
    return error(Loc::named("hip"),                                                                \
                 "the HIP runtime " + hip->path + " lacks " #name "; kiln needs ROCm 6 or newer");
  KILN_HIP_FNS(KILN_HIP_LOAD)
#undef KILN_HIP_LOAD
  if (hipError_t e = hip->hipInit(0); e != hipSuccess && e != hipErrorNoDevice)
    return error(Loc::named("hip"), "hipInit failed: " + hip->errorText(e));
  if (hip->hipRuntimeGetVersion(&hip->version) != hipSuccess) hip->version = 0;
  return std::shared_ptr<const HipLibrary>(std::move(hip));
}

} // namespace

Result<std::shared_ptr<const HipLibrary>> HipLibrary::get() {
  return gpu::oncePerPath<HipLibrary>("KILN_HIP_LIBRARY", open);
}

std::string HipLibrary::errorText(hipError_t e) const {
  const char* name = hipGetErrorName ? hipGetErrorName(e) : nullptr;
  const char* text = hipGetErrorString ? hipGetErrorString(e) : nullptr;
  std::string s = name ? name : "hipError_t " + std::to_string(e);
  if (text && *text) s += std::string(" (") + text + ")";
  return s;
}

} // namespace kiln::hal::hip
