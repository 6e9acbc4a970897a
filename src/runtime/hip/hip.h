// The `hip` driver: every AMD GPU the HIP runtime offers is hip[N], running the HSA code
// objects of `amdgpu` executables (gpu/payload.h) and the tensor-level kernels of `ref`
// executables on the interpreter. The device itself is the shared GPU device
// (gpu/device.h); this driver supplies its calls into HIP.
//
//   loader.cpp   opens libamdhip64.so with dlopen (KILN_HIP_LIBRARY overrides the path; kiln
//                never links ROCm), resolves the entry points below, runs hipInit
//   driver.cpp   enumerates and describes devices (name, memory, gcnArchName, limits from
//                hipDeviceGetAttribute), opens them with one stream each, and implements
//                GpuApi: hipMalloc/hipMemcpy/hipMemsetAsync, hipModuleLoadData, and
//                hipModuleLaunchKernel with the packed kernarg block through `extra`
//
// The HIP types and values kiln needs are declared here, as ROCm 6's hip_runtime_api.h
// defines them; no ROCm header is needed to build.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "runtime/hal.h"

namespace kiln::hal::hip {

Driver* hipDriver();

using hipError_t = int;
constexpr hipError_t hipSuccess = 0;
constexpr hipError_t hipErrorNoDevice = 100;
using hipStream_t = struct ihipStream_t*;
using hipModule_t = struct ihipModule_t*;
using hipFunction_t = struct ihipModuleSymbol_t*;
using hipEvent_t = struct ihipEvent_t*;

// hipDeviceAttribute_t (ROCm 6 numbering).
enum HipAttribute : int {
  hipDeviceAttributeMaxBlockDimX = 26,
  hipDeviceAttributeMaxBlockDimY = 27,
  hipDeviceAttributeMaxBlockDimZ = 28,
  hipDeviceAttributeMaxGridDimX = 29,
  hipDeviceAttributeMaxGridDimY = 30,
  hipDeviceAttributeMaxGridDimZ = 31,
  hipDeviceAttributeMaxThreadsPerBlock = 56,
  hipDeviceAttributeMaxSharedMemoryPerBlock = 74,
  hipDeviceAttributeWarpSize = 87,
};

enum HipMemcpyKind : int {
  hipMemcpyHostToDevice = 1,
  hipMemcpyDeviceToHost = 2,
  hipMemcpyDeviceToDevice = 3
};

// hipModuleLaunchKernel's `extra` keys.
inline void* const HIP_LAUNCH_PARAM_BUFFER_POINTER = reinterpret_cast<void*>(0x01);
inline void* const HIP_LAUNCH_PARAM_BUFFER_SIZE = reinterpret_cast<void*>(0x02);
inline void* const HIP_LAUNCH_PARAM_END = reinterpret_cast<void*>(0x03);

// hipDeviceProp_tR0600 up to gcnArchName, the one field kiln reads from it (nothing else
// gives the arch name); runs of int fields are merged into arrays. The whole struct is about
// 1.5 KiB; kiln passes a larger buffer.
struct HipDevicePropHead {
  char name[256];
  unsigned char uuid[16];
  char luid[8];
  unsigned luidDeviceNodeMask;
  size_t totalGlobalMem, sharedMemPerBlock;
  int regsPerBlock, warpSize;
  size_t memPitch;
  int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], clockRate;
  size_t totalConstMem;
  int major, minor;
  size_t textureAlignment, texturePitchAlignment;
  int deviceOverlapToMaxSurfaceCubemapLayered[46];
  size_t surfaceAlignment;
  int concurrentKernelsToLocalL1CacheSupported[16];
  size_t sharedMemPerMultiprocessor;
  int regsPerMultiprocessorToCooperativeMultiDeviceLaunch[12];
  size_t sharedMemPerBlockOptin;
  int pageableMemoryAccessUsesHostPageTablesToAccessPolicyMaxWindowSize[4];
  size_t reservedSharedMemPerBlock;
  int hostRegisterSupportedToUnifiedFunctionPointers[13];
  int reserved[63];
  int hipReserved[32];
  char gcnArchName[256];
};
static_assert(offsetof(HipDevicePropHead, gcnArchName) == 1160,
              "gcnArchName is at byte 1160 of hipDeviceProp_tR0600");
constexpr size_t kHipDevicePropBytes = 4096; // more than ROCm 6's whole struct

// name, return type, parameters.
#define KILN_HIP_FNS(X)                                                                            \
  X(hipInit, hipError_t, (unsigned))                                                               \
  X(hipGetDeviceCount, hipError_t, (int*))                                                         \
  X(hipDeviceGetName, hipError_t, (char*, int, int))                                               \
  X(hipDeviceTotalMem, hipError_t, (size_t*, int))                                                 \
  X(hipDeviceGetAttribute, hipError_t, (int*, int, int))                                           \
  X(hipGetDevicePropertiesR0600, hipError_t, (void*, int))                                         \
  X(hipRuntimeGetVersion, hipError_t, (int*))                                                      \
  X(hipSetDevice, hipError_t, (int))                                                               \
  X(hipMalloc, hipError_t, (void**, size_t))                                                       \
  X(hipFree, hipError_t, (void*))                                                                  \
  X(hipMemcpy, hipError_t, (void*, const void*, size_t, int))                                      \
  X(hipMemcpyAsync, hipError_t, (void*, const void*, size_t, int, hipStream_t))                    \
  X(hipMemsetAsync, hipError_t, (void*, int, size_t, hipStream_t))                                 \
  X(hipStreamCreate, hipError_t, (hipStream_t*))                                                   \
  X(hipStreamDestroy, hipError_t, (hipStream_t))                                                   \
  X(hipStreamSynchronize, hipError_t, (hipStream_t))                                               \
  X(hipModuleLoadData, hipError_t, (hipModule_t*, const void*))                                    \
  X(hipModuleUnload, hipError_t, (hipModule_t))                                                    \
  X(hipModuleGetFunction, hipError_t, (hipFunction_t*, hipModule_t, const char*))                  \
  X(hipModuleLaunchKernel, hipError_t,                                                             \
    (hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,          \
     hipStream_t, void**, void**))                                                                 \
  X(hipEventCreate, hipError_t, (hipEvent_t*))                                                     \
  X(hipEventRecord, hipError_t, (hipEvent_t, hipStream_t))                                         \
  X(hipEventElapsedTime, hipError_t, (float*, hipEvent_t, hipEvent_t))                             \
  X(hipEventDestroy, hipError_t, (hipEvent_t))                                                     \
  X(hipGetErrorName, const char*, (hipError_t))                                                    \
  X(hipGetErrorString, const char*, (hipError_t))

#define KILN_HIP_DECLARE(name, ret, params) ret(*name) params = nullptr;

// The HIP runtime, opened once per library path and never closed.
struct HipLibrary {
  KILN_HIP_FNS(KILN_HIP_DECLARE)
  std::string path;
  int version = 0; // hipRuntimeGetVersion

  // The library KILN_HIP_LIBRARY names (else libamdhip64.so), opened and initialized; a
  // library that cannot be used is an error that stays the same for the process.
  static Result<std::shared_ptr<const HipLibrary>> get();
  // "hipErrorOutOfMemory (out of memory)".
  std::string errorText(hipError_t e) const;
};

} // namespace kiln::hal::hip
