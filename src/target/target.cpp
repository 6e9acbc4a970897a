// Target tables (see target.h).
//
// The numbers are what the devices report: Vulkan's maxComputeSharedMemorySize (lavapipe
// 32 KiB, NVIDIA 48 KiB, the spec's guaranteed minimum 16 KiB for "generic"), AMD's LDS
// of 64 KiB per workgroup, wave64 on CDNA (gfx90a, gfx942) and wave32/64 on RDNA3.
#include "target/target.h"

#include <algorithm>

namespace kiln {

namespace {

const std::vector<ElemType> kAllElems = {
    ElemType::F64, ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::I1,
    ElemType::I8,  ElemType::I16, ElemType::I32, ElemType::I64,  ElemType::U8,
    ElemType::U16, ElemType::U32, ElemType::U64};

TargetDesc make(std::string name, uint64_t shared, int64_t inv, int64_t x, int64_t y, int64_t z,
                std::vector<int64_t> subgroups, int64_t vecBits) {
  TargetDesc t;
  t.name = std::move(name);
  t.sharedMemoryBytes = shared;
  t.maxWorkgroupInvocations = inv;
  t.maxWorkgroupSize[0] = x, t.maxWorkgroupSize[1] = y, t.maxWorkgroupSize[2] = z;
  t.maxWorkgroupCount[0] = t.maxWorkgroupCount[1] = t.maxWorkgroupCount[2] = 65535;
  t.subgroupSizes = std::move(subgroups);
  t.preferredVectorBits = vecBits;
  t.elemTypes = kAllElems;
  return t;
}

const std::vector<TargetDesc>& table() {
  static const std::vector<TargetDesc> t = [] {
    std::vector<TargetDesc> v;
    // cpu: the host (256-bit defaults until the runtime fills it from the host CPU);
    // cpu:x86-64-vN: the x86-64 micro-architecture levels (v2 SSE4.2, v3 AVX2+FMA, v4
    // AVX-512). One workgroup runs on one CPU thread, so only its shared memory (a stack
    // array) and the grid limit matter; the strategy comes from the vector and cache sizes.
    auto cpuTarget = [](std::string name, int64_t bits, int64_t regs, bool fma) {
      TargetDesc c = make(std::move(name), 64 * 1024, 1024, 1024, 1024, 64, {8}, bits);
      c.maxWorkgroupCount[0] = c.maxWorkgroupCount[1] = c.maxWorkgroupCount[2] = INT32_MAX;
      c.cpu = true;
      c.vectorRegisters = regs;
      c.hasFma = fma;
      c.l1Bytes = 32 * 1024;
      c.l2Bytes = bits >= 512 ? 2 * 1024 * 1024 : 1024 * 1024;
      c.wideAccumulation = false;
      c.fusion.epilogueOverConsumer = true;
      c.fusion.elementwiseIntoGemmRows = false;
      c.fusion.windowIntoGemmColumns = false;
      c.fusion.patchesIntoGemm = true;
      c.fusion.padIntoConcat = true;
      c.fusion.concatIntoGemmColumns = true;
      c.fusion.concatIntoPool = true;
      return c;
    };
    v.push_back(cpuTarget("cpu", 256, 16, true));
    v.push_back(cpuTarget("cpu:x86-64-v2", 128, 16, false));
    v.push_back(cpuTarget("cpu:x86-64-v3", 256, 16, true));
    v.push_back(cpuTarget("cpu:x86-64-v4", 512, 32, true));
    // lavapipe (Mesa 22.3, 256-bit llvmpipe): subgroups of 8 only, 128 MiB per binding;
    // checked against the live device by the vulkan driver's tests.
    // Vulkan devices accumulate f32 sums in f32 (f64 is slow or missing on GPUs).
    TargetDesc lavapipe = make("vulkan:lavapipe", 32 * 1024, 1024, 1024, 1024, 1024, {8}, 256);
    lavapipe.wideAccumulation = false;
    lavapipe.maxStorageBufferRange = uint64_t(128) << 20;
    v.push_back(lavapipe);
    TargetDesc nvidia = make("vulkan:nvidia-sm90", 48 * 1024, 1024, 1024, 1024, 64, {32}, 128);
    nvidia.maxStorageBufferRange = 0xffffffffu; // what current NVIDIA drivers report
    nvidia.wideAccumulation = false;
    v.push_back(nvidia);
    // The spec's guaranteed minimums (maxStorageBufferRange 2^27).
    TargetDesc generic = make("vulkan:generic", 16 * 1024, 128, 128, 128, 64, {32}, 128);
    generic.maxStorageBufferRange = uint64_t(1) << 27;
    generic.wideAccumulation = false;
    generic.elemTypes = {ElemType::F32, ElemType::F16, ElemType::I1,  ElemType::I8,
                         ElemType::I16, ElemType::I32, ElemType::I64, ElemType::U8,
                         ElemType::U16, ElemType::U32, ElemType::U64};
    v.push_back(generic);
    // AMD GPUs accumulate f32 sums in f32, as the other GPU targets do: f64 accumulators
    // double the registers of a matmul's register tile and spill it.
    auto amdTarget = [](std::string name, std::vector<int64_t> waves) {
      TargetDesc a =
          make(std::move(name), 64 * 1024, 1024, 1024, 1024, 1024, std::move(waves), 128);
      a.wideAccumulation = false;
      a.unrolledArraysInRegisters = true;
      return a;
    };
    v.push_back(amdTarget("amdgpu:gfx90a", {64}));
    v.push_back(amdTarget("amdgpu:gfx942", {64}));
    v.push_back(amdTarget("amdgpu:gfx1100", {32, 64}));
    // NVIDIA through NVPTX and the CUDA driver: the opt-in shared memory per block (sm_80
    // 163 KiB, sm_90 227 KiB; above 48 KiB the driver sets the launch attribute), warps of 32,
    // 2^31 - 1 workgroups along x and 65535 along y and z.
    auto cudaTarget = [](std::string name, uint64_t shared) {
      TargetDesc c = make(std::move(name), shared, 1024, 1024, 1024, 64, {32}, 128);
      c.maxWorkgroupCount[0] = INT32_MAX;
      c.wideAccumulation = false;
      c.unrolledArraysInRegisters = true;
      return c;
    };
    v.push_back(cudaTarget("cuda:sm_80", 163 * 1024));
    v.push_back(cudaTarget("cuda:sm_90", 227 * 1024));
    return v;
  }();
  return t;
}

} // namespace

bool TargetDesc::supports(ElemType e) const {
  return std::find(elemTypes.begin(), elemTypes.end(), e) != elemTypes.end();
}

const std::vector<std::string>& targetNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const TargetDesc& t : table()) v.push_back(t.name);
    return v;
  }();
  return names;
}

Result<TargetDesc> lookupTarget(const std::string& name) {
  for (const TargetDesc& t : table())
    if (t.name == name) return t;
  std::string known;
  for (const std::string& n : targetNames()) known += (known.empty() ? "" : ", ") + n;
  return error(Loc::named("target"), "unknown target '" + name + "' (known: " + known + ")");
}

TargetDesc withDeviceLimits(TargetDesc base, const TargetDesc& device) {
  if (device.sharedMemoryBytes) base.sharedMemoryBytes = device.sharedMemoryBytes;
  if (device.maxWorkgroupInvocations) base.maxWorkgroupInvocations = device.maxWorkgroupInvocations;
  for (int i = 0; i < 3; ++i) {
    if (device.maxWorkgroupSize[i]) base.maxWorkgroupSize[i] = device.maxWorkgroupSize[i];
    if (device.maxWorkgroupCount[i]) base.maxWorkgroupCount[i] = device.maxWorkgroupCount[i];
  }
  if (!device.subgroupSizes.empty()) base.subgroupSizes = device.subgroupSizes;
  if (device.maxStorageBufferRange) base.maxStorageBufferRange = device.maxStorageBufferRange;
  if (device.preferredVectorBits) base.preferredVectorBits = device.preferredVectorBits;
  if (!device.elemTypes.empty()) base.elemTypes = device.elemTypes;
  return base;
}

} // namespace kiln
