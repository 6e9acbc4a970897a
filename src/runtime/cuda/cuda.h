// The `cuda` driver: every NVIDIA GPU the CUDA driver offers is cuda[N], running the PTX of
// `cuda` executables (gpu/payload.h), JIT-compiled at load, and the tensor-level kernels of
// `ref` executables on the interpreter. The device itself is the shared GPU device
// (gpu/device.h); this driver supplies its calls into the CUDA driver API.
//
//   loader.cpp   opens libcuda.so.1 with dlopen (KILN_CUDA_LIBRARY overrides the path; kiln
//                never links the CUDA toolkit), resolves the entry points below under the
//                names the library exports (the _v2 ones where they exist), runs cuInit
//   driver.cpp   enumerates and describes devices (name, memory, compute capability sm_XY,
//                limits), opens each on its primary context with one stream, and implements
//                GpuApi: cuMemAlloc/cuMemcpy/cuMemsetD8Async, cuModuleLoadDataEx with the
//                JIT's error log, the opt-in to more than 48 KiB of dynamic shared memory, and
//                cuLaunchKernel with the packed kernarg block through `extra`
//
// The CUDA types and values kiln needs are declared here, as cuda.h defines them; no CUDA
// header is needed to build.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/hal.h"

namespace kiln::hal::cuda {

Driver* cudaDriver();

using CUresult = int;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;

// CUdevice_attribute.
enum CuAttribute : int {
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2,
  CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y = 3,
  CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z = 4,
  CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5,
  CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6,
  CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};

// CUjit_option and CUfunction_attribute values kiln uses.
constexpr int CU_JIT_ERROR_LOG_BUFFER = 5;
constexpr int CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
// Shared memory (static + dynamic) a kernel gets without opting in.
constexpr uint32_t kDefaultSharedBytes = 48 * 1024;

// cuLaunchKernel's `extra` keys.
inline void* const CU_LAUNCH_PARAM_END = reinterpret_cast<void*>(0x00);
inline void* const CU_LAUNCH_PARAM_BUFFER_POINTER = reinterpret_cast<void*>(0x01);
inline void* const CU_LAUNCH_PARAM_BUFFER_SIZE = reinterpret_cast<void*>(0x02);

// name, return type, parameters.
#define KILN_CUDA_FNS(X)                                                                           \
  X(cuInit, CUresult, (unsigned))                                                                  \
  X(cuDriverGetVersion, CUresult, (int*))                                                          \
  X(cuDeviceGetCount, CUresult, (int*))                                                            \
  X(cuDeviceGet, CUresult, (CUdevice*, int))                                                       \
  X(cuDeviceGetName, CUresult, (char*, int, CUdevice))                                             \
  X(cuDeviceTotalMem_v2, CUresult, (size_t*, CUdevice))                                            \
  X(cuDeviceGetAttribute, CUresult, (int*, int, CUdevice))                                         \
  X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext*, CUdevice))                                    \
  X(cuDevicePrimaryCtxRelease_v2, CUresult, (CUdevice))                                            \
  X(cuCtxSetCurrent, CUresult, (CUcontext))                                                        \
  X(cuMemAlloc_v2, CUresult, (CUdeviceptr*, size_t))                                               \
  X(cuMemFree_v2, CUresult, (CUdeviceptr))                                                         \
  X(cuMemcpyHtoD_v2, CUresult, (CUdeviceptr, const void*, size_t))                                 \
  X(cuMemcpyDtoH_v2, CUresult, (void*, CUdeviceptr, size_t))                                       \
  X(cuMemcpyDtoDAsync_v2, CUresult, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                  \
  X(cuMemsetD8Async, CUresult, (CUdeviceptr, unsigned char, size_t, CUstream))                     \
  X(cuStreamCreate, CUresult, (CUstream*, unsigned))                                               \
  X(cuStreamDestroy_v2, CUresult, (CUstream))                                                      \
  X(cuStreamSynchronize, CUresult, (CUstream))                                                     \
  X(cuModuleLoadDataEx, CUresult, (CUmodule*, const void*, unsigned, int*, void**))                \
  X(cuModuleUnload, CUresult, (CUmodule))                                                          \
  X(cuModuleGetFunction, CUresult, (CUfunction*, CUmodule, const char*))                           \
  X(cuFuncSetAttribute, CUresult, (CUfunction, int, int))                                          \
  X(cuLaunchKernel, CUresult,                                                                      \
    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,   \
     void**, void**))                                                                              \
  X(cuEventCreate, CUresult, (CUevent*, unsigned))                                                 \
  X(cuEventRecord, CUresult, (CUevent, CUstream))                                                  \
  X(cuEventElapsedTime, CUresult, (float*, CUevent, CUevent))                                      \
  X(cuEventDestroy_v2, CUresult, (CUevent))                                                        \
  X(cuGetErrorName, CUresult, (CUresult, const char**))                                            \
  X(cuGetErrorString, CUresult, (CUresult, const char**))

#define KILN_CUDA_DECLARE(name, ret, params) ret(*name) params = nullptr;

// The CUDA driver library, opened once per library path and never closed.
struct CudaLibrary {
  KILN_CUDA_FNS(KILN_CUDA_DECLARE)
  std::string path;
  int version = 0;       // cuDriverGetVersion: 12040 is CUDA 12.4
  bool noDevice = false; // cuInit said CUDA_ERROR_NO_DEVICE

  // The library KILN_CUDA_LIBRARY names (else libcuda.so.1), opened and initialized; a
  // library that cannot be used is an error that stays the same for the process.
  static Result<std::shared_ptr<const CudaLibrary>> get();
  // "CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
  std::string errorText(CUresult e) const;
};

} // namespace kiln::hal::cuda
