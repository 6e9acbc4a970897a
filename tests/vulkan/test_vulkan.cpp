// Tests of the vulkan driver on a live device (lavapipe in CI), through the HAL, with the
// Khronos validation layer on: any message it reports fails the run (checked after every
// Vulkan object is gone, at exit). The kernels are hand-written SPIR-V (kernels/*.spvasm,
// assembled and validated at build time) wrapped in exec.vulkan payloads.
//
// Exit code 77 (meson: SKIP) with the reason when the build has no vulkan driver, when no
// Vulkan device is present, or when spirv-as was missing at build time.
//
// Environment, set here unless already set: VK_DRIVER_FILES = lavapipe's ICD (when neither it
// nor VK_ICD_FILENAMES is set and lavapipe is installed), KILN_VULKAN_VALIDATION=1 (the test
// fails when the layer is missing, unless the caller set KILN_VULKAN_VALIDATION=0), and
// XDG_CACHE_HOME = a fresh temporary folder (the pipeline cache tests look into it).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "ir/text/parser.h"
#include "runtime/drivers.h"
#include "runtime/executor.h"
#include "runtime/vulkan/payload.h"
#include "target/target.h"
#ifdef KILN_HAVE_VULKAN
#include "runtime/vulkan/pipeline_cache.h"
#include "runtime/vulkan/vulkan.h"
#endif

using namespace kiln;
using namespace kiln::vulkan;

#ifdef KILN_HAVE_VULKAN
namespace {

using hal::vulkan::VulkanDevice;

std::vector<uint32_t> spirvFile(const std::string& name) {
  std::ifstream in(std::string(KILN_VULKAN_KERNEL_DIR) + "/" + name + ".spv", std::ios::binary);
  REQUIRE_MESSAGE(in, "missing kernel " << name);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  std::vector<uint32_t> words(bytes.size() / 4);
  std::memcpy(words.data(), bytes.data(), words.size() * 4);
  return words;
}

VulkanKernelInfo addKernel() {
  VulkanKernelInfo k;
  k.name = "add";
  k.entryPoint = "main";
  k.spirv = spirvFile("add");
  k.bindings = {{false, 0}, {false, 0}, {true, 0}};
  k.push = {{"n", PushType::I32}};
  k.workgroupSize = {64, 1, 1};
  k.capabilities = {1};
  return k;
}

VulkanKernelInfo reverseKernel() {
  VulkanKernelInfo k;
  k.name = "reverse";
  k.entryPoint = "main";
  k.spirv = spirvFile("reverse_shared");
  k.bindings = {{false, 0}, {true, 0}};
  k.push = {{"n", PushType::I32}, {"bias", PushType::I64}};
  k.workgroupSize = {64, 1, 1};
  k.sharedMemoryBytes = 256;
  k.capabilities = {1, 11};
  return k;
}

VulkanKernelInfo subgroupKernel() {
  VulkanKernelInfo k;
  k.name = "subgroup_sum";
  k.entryPoint = "main";
  k.spirv = spirvFile("subgroup_sum");
  k.bindings = {{false, 0}, {true, 0}};
  k.workgroupSize = {64, 1, 1};
  k.requiredSubgroupSize = 8;
  k.fullSubgroups = true;
  k.capabilities = {1, 61, 63};
  return k;
}

std::string payloadOf(std::vector<VulkanKernelInfo> kernels) {
  VulkanPayload p;
  p.kernels = std::move(kernels);
  return serializeVulkanPayload(p);
}

std::shared_ptr<hal::Device> device0() {
  auto d = hal::openDevice(hal::DeviceId{"vulkan", 0}, Loc::named("test"));
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.diags().str()));
  return *d;
}

// A device of its own (not the process-wide vulkan[0]), created with the environment as it
// is now: for the staging and descriptor-pool paths and for simulated device loss.
std::shared_ptr<VulkanDevice> freshDevice() {
  auto inst = hal::vulkan::Instance::get();
  REQUIRE(inst.ok());
  auto d = VulkanDevice::create(*inst, 0);
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.diags().str()));
  return *d;
}

std::unique_ptr<hal::Executable> load(hal::Device& dev, const std::string& payload) {
  auto exe = dev.loadExecutable("vulkan", payload);
  REQUIRE_MESSAGE(exe.ok(), (exe.ok() ? "" : exe.diags().str()));
  return exe.take();
}

std::string loadError(hal::Device& dev, const std::string& payload) {
  auto exe = dev.loadExecutable("vulkan", payload);
  REQUIRE_FALSE(exe.ok());
  return exe.diags().str();
}

std::unique_ptr<hal::Buffer> upload(hal::Device& dev, const std::vector<float>& v) {
  auto b = dev.allocate(v.size() * 4);
  REQUIRE_MESSAGE(b.ok(), (b.ok() ? "" : b.diags().str()));
  REQUIRE((*b)->write(0, v.data(), v.size() * 4).ok());
  return b.take();
}

std::vector<float> download(const hal::Buffer& b, size_t n) {
  std::vector<float> v(n);
  Status s = b.read(0, v.data(), n * 4);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.diags().str()));
  return v;
}

hal::Binding bind(hal::Buffer& b, int64_t n) { return {&b, ElemType::F32, {n}}; }

Status run(hal::Device& dev, hal::CommandBuffer& cb) {
  auto sem = dev.createSemaphore(0);
  KILN_CHECK(dev.submit(cb, nullptr, 0, *sem, 1));
  return sem->wait(1);
}

std::string statusError(const Status& s) {
  REQUIRE_FALSE(s.ok());
  return s.diags().str();
}

bool has(const std::string& text, const std::string& part) {
  bool found = text.find(part) != std::string::npos;
  if (!found) MESSAGE("'" << part << "' not in: " << text);
  return found;
}

// Tensor-level kernels for the interpreter, as a `ref` executable holds them: kernel 0 is
// c = a * b, kernel 1 is c = a + b with an i32 result (whose type no output buffer below has).
const char* kRefKernels = R"(symbol n in [1, 4096]
func @mul(%a: tensor<{n}xf32>, %b: tensor<{n}xf32>) -> (tensor<{n}xf32>) {
  %0 = mul %a, %b : tensor<{n}xf32>
  return %0
}
func @to_i32(%a: tensor<{n}xf32>) -> (tensor<{n}xi32>) {
  %0 = cast %a {to = i32} : tensor<{n}xi32>
  return %0
}
)";

std::unique_ptr<hal::Executable> loadRef(hal::Device& dev) {
  auto exe = dev.loadExecutable("ref", kRefKernels);
  REQUIRE_MESSAGE(exe.ok(), (exe.ok() ? "" : exe.diags().str()));
  return exe.take();
}

// The add kernel over n elements on `dev`: c = a + b, checked.
void checkAdd(hal::Device& dev, int64_t n) {
  auto exe = load(dev, payloadOf({addKernel()}));
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) a[i] = float(i), b[i] = float(2 * i + 1);
  auto ba = upload(dev, a), bb = upload(dev, b);
  auto bc = upload(dev, std::vector<float>(n, -1.0f));
  auto cb = dev.createCommandBuffer();
  cb->dispatch(*exe, 0, {(n + 63) / 64, 1, 1}, {n}, {bind(*ba, n), bind(*bb, n), bind(*bc, n)});
  Status s = run(dev, *cb);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.diags().str()));
  std::vector<float> c = download(*bc, n);
  for (int64_t i = 0; i < n; ++i) REQUIRE(c[i] == float(3 * i + 1));
}

} // namespace

TEST_CASE("vulkan: vulkan[0] is listed with its limits, and the lavapipe target row matches") {
  hal::Driver* d = hal::lookupDriver("vulkan");
  REQUIRE(d);
  CHECK(d->target() == "vulkan");
  auto devices = d->enumerate();
  REQUIRE_FALSE(devices.empty());
  CHECK(devices[0].id.str() == "vulkan[0]");
  CHECK(has(devices[0].description, "subgroup "));
  CHECK(has(devices[0].description, "shared memory "));
  CHECK(has(devices[0].description, "workgroup "));
  auto dev = std::dynamic_pointer_cast<VulkanDevice>(device0());
  REQUIRE(dev);
  const auto& props = dev->props();
  if (std::string(props.props.deviceName).find("llvmpipe") != std::string::npos) {
    auto row = lookupTarget("vulkan:lavapipe");
    REQUIRE(row.ok());
    CHECK(row->subgroupSizes == std::vector<int64_t>{int64_t(props.vk11.subgroupSize)});
    CHECK(row->sharedMemoryBytes == props.props.limits.maxComputeSharedMemorySize);
    CHECK(row->maxWorkgroupInvocations == props.props.limits.maxComputeWorkGroupInvocations);
    CHECK(row->maxStorageBufferRange == props.props.limits.maxStorageBufferRange);
    for (int i = 0; i < 3; ++i) {
      CHECK(row->maxWorkgroupSize[i] == props.props.limits.maxComputeWorkGroupSize[i]);
      CHECK(row->maxWorkgroupCount[i] == props.props.limits.maxComputeWorkGroupCount[i]);
    }
  }
  CHECK(dev->limits().memoryBytes > 0);
}

TEST_CASE("vulkan: elementwise add with a push-constant length and a guard") {
  auto dev = device0();
  checkAdd(*dev, 1000);
  checkAdd(*dev, 64);
  checkAdd(*dev, 1);
}

TEST_CASE("vulkan: shared memory, a barrier and an i64 push constant") {
  auto dev = device0();
  auto exe = load(*dev, payloadOf({reverseKernel()}));
  const int64_t n = 256;
  std::vector<float> in(n);
  for (int64_t i = 0; i < n; ++i) in[i] = float(i);
  auto bi = upload(*dev, in);
  auto bo = upload(*dev, std::vector<float>(n, 0));
  auto cb = dev->createCommandBuffer();
  cb->dispatch(*exe, 0, {n / 64, 1, 1}, {n, -3}, {bind(*bi, n), bind(*bo, n)});
  REQUIRE(run(*dev, *cb).ok());
  std::vector<float> out = download(*bo, n);
  for (int64_t i = 0; i < n; ++i) REQUIRE(out[i] == float((i / 64) * 64 + 63 - i % 64 - 3));
}

TEST_CASE("vulkan: a subgroup reduction with a required subgroup size") {
  auto dev = std::dynamic_pointer_cast<VulkanDevice>(device0());
  const auto& sc = dev->props().subgroupControl;
  if (!dev->props().subgroupControlFeatures.subgroupSizeControl || sc.minSubgroupSize > 8 ||
      sc.maxSubgroupSize < 8) {
    MESSAGE("skipped: this device cannot run subgroups of 8");
    return;
  }
  auto exe = load(*dev, payloadOf({subgroupKernel()}));
  const int64_t n = 512;
  std::vector<float> in(n);
  for (int64_t i = 0; i < n; ++i) in[i] = float(i % 13);
  auto bi = upload(*dev, in);
  auto bo = upload(*dev, std::vector<float>(n / 8, 0));
  auto cb = dev->createCommandBuffer();
  cb->dispatch(*exe, 0, {n / 64, 1, 1}, {}, {bind(*bi, n), bind(*bo, n / 8)});
  REQUIRE(run(*dev, *cb).ok());
  std::vector<float> out = download(*bo, n / 8);
  for (int64_t g = 0; g < n / 8; ++g) {
    float want = 0;
    for (int64_t i = 0; i < 8; ++i) want += in[g * 8 + i];
    REQUIRE(out[g] == want);
  }
}

TEST_CASE("vulkan: dependent dispatches, copies and fills in one submission") {
  auto dev = device0();
  auto exe = load(*dev, payloadOf({addKernel(), reverseKernel()}));
  const int64_t n = 128;
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) a[i] = float(i), b[i] = 1.0f;
  auto ba = upload(*dev, a), bb = upload(*dev, b);
  auto bc = upload(*dev, std::vector<float>(n, 0)), bd = upload(*dev, std::vector<float>(n, 0));
  auto be = upload(*dev, std::vector<float>(n, 0)), bf = upload(*dev, std::vector<float>(n, 7));
  auto cb = dev->createCommandBuffer();
  cb->dispatch(*exe, 0, {2, 1, 1}, {n}, {bind(*ba, n), bind(*bb, n), bind(*bc, n)}); // c = a + 1
  cb->dispatch(*exe, 0, {2, 1, 1}, {n}, {bind(*bc, n), bind(*bc, n), bind(*bd, n)}); // d = 2c
  cb->copy(*bd, 0, *be, 0, n * 4);                                                   // e = d
  cb->dispatch(*exe, 1, {2, 1, 1}, {n, 0}, {bind(*be, n), bind(*bc, n)}); // c = reverse(e)
  cb->fill(*bf, 0, n * 4, 0);                                             // f = 0
  cb->dispatch(*exe, 0, {2, 1, 1}, {n}, {bind(*bf, n), bind(*bc, n), bind(*bf, n)}); // f += c
  REQUIRE(cb->numCommands() == 6);
  Status s = run(*dev, *cb);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.diags().str()));
  std::vector<float> d = download(*bd, n), f = download(*bf, n);
  for (int64_t i = 0; i < n; ++i) {
    REQUIRE(d[i] == 2 * (float(i) + 1));
    int64_t r = (i / 64) * 64 + 63 - i % 64;
    REQUIRE(f[i] == 2 * (float(r) + 1));
  }
}

TEST_CASE("vulkan: staging buffers and descriptor pools (no host mapping, no push descriptors)") {
  setenv("KILN_VULKAN_STAGING", "1", 1);
  setenv("KILN_VULKAN_PUSH_DESCRIPTORS", "0", 1);
  auto dev = freshDevice();
  unsetenv("KILN_VULKAN_STAGING");
  unsetenv("KILN_VULKAN_PUSH_DESCRIPTORS");
  CHECK(dev->staging());
  CHECK_FALSE(dev->pushDescriptors());
  auto buf = dev->allocate(16);
  REQUIRE(buf.ok());
  CHECK((*buf)->map() == nullptr);
  checkAdd(*dev, 300);
  // Partial host reads and writes through staging.
  float v[2] = {5, 6}, w[2] = {};
  REQUIRE((*buf)->write(4, v, 8).ok());
  REQUIRE((*buf)->read(4, w, 8).ok());
  CHECK(w[0] == 5);
  CHECK(w[1] == 6);
  CHECK_FALSE((*buf)->write(12, v, 8).ok());
  // The device's staging buffer grows for a 3 MiB transfer and serves the small ones after it.
  std::vector<float> big(3 << 18), back(big.size());
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i);
  auto large = dev->allocate(big.size() * sizeof(float));
  REQUIRE(large.ok());
  REQUIRE((*large)->write(0, big.data(), big.size() * sizeof(float)).ok());
  REQUIRE((*large)->read(0, back.data(), back.size() * sizeof(float)).ok());
  CHECK(back == big);
  REQUIRE((*buf)->read(4, w, 8).ok());
  CHECK(w[1] == 6);
}

TEST_CASE("vulkan: a destroyed buffer's memory serves the next allocation of its size") {
  auto dev = freshDevice();
  VkBuffer first = VK_NULL_HANDLE;
  {
    auto a = dev->allocate(1000);
    REQUIRE(a.ok());
    first = static_cast<hal::vulkan::VulkanBuffer&>(**a).handle();
  }
  CHECK(dev->memoryStats().bytesInUse == 0);
  auto b = dev->allocate(1000), c = dev->allocate(1000);
  REQUIRE((b.ok() && c.ok()));
  CHECK(static_cast<hal::vulkan::VulkanBuffer&>(**b).handle() == first);
  CHECK(static_cast<hal::vulkan::VulkanBuffer&>(**c).handle() != first);
  CHECK(dev->memoryStats().bytesInUse == 2000);
  checkAdd(*dev, 250); // buffers of 1000 bytes again, some of them reused
}

TEST_CASE("vulkan: loading refuses kernels beyond the device's limits, naming them") {
  auto dev = std::dynamic_pointer_cast<VulkanDevice>(device0());
  const VkPhysicalDeviceLimits& l = dev->props().props.limits;
  VulkanKernelInfo k = reverseKernel();
  k.sharedMemoryBytes = 48 * 1024;
  if (l.maxComputeSharedMemorySize < 48 * 1024) {
    std::string e = loadError(*dev, payloadOf({k}));
    CHECK(has(e, "kernel 'reverse' cannot run on vulkan[0]"));
    CHECK(has(e, "49152 bytes of shared memory"));
    CHECK(has(e, "maxComputeSharedMemorySize"));
  }
  k = addKernel();
  k.bindings[1].maxBytes = uint64_t(l.maxStorageBufferRange) + 4;
  CHECK(has(loadError(*dev, payloadOf({k})), "maxStorageBufferRange"));
  k = subgroupKernel();
  k.requiredSubgroupSize = 128; // beyond every device's maxSubgroupSize
  CHECK(has(loadError(*dev, payloadOf({k})), "subgroup size 128"));
  k = addKernel();
  k.capabilities.push_back(5357); // CooperativeMatrixNV
  CHECK(has(loadError(*dev, payloadOf({k})), "capability CooperativeMatrixNV"));
  k = addKernel();
  k.push.assign(40, {"s", PushType::I64}); // 320 bytes
  CHECK(has(loadError(*dev, payloadOf({k})), "maxPushConstantsSize"));
  k = addKernel();
  k.extensions.push_back("SPV_EXT_unknown_thing");
  CHECK(has(loadError(*dev, payloadOf({k})), "SPV_EXT_unknown_thing"));
  // A workgroup above the device's invocations: the LocalSize words are patched to match.
  k = addKernel();
  for (size_t i = 5; i + 5 < k.spirv.size(); i += k.spirv[i] >> 16)
    if ((k.spirv[i] & 0xffff) == 16 && k.spirv[i + 2] == 17) k.spirv[i + 4] = 64;
  k.workgroupSize = {64, 64, 1};
  std::string e = loadError(*dev, payloadOf({k}));
  CHECK(has(e, "4096 invocations per workgroup"));
  CHECK(has(dev->loadExecutable("cpu", "x").diags().str(), "vulkan devices load target"));
  CHECK(has(dev->loadExecutable("vulkan", "garbage").diags().str(), "KILNSPV1"));
}

TEST_CASE("vulkan: dispatch errors are reported at submission, naming the device") {
  auto dev = device0();
  auto exe = load(*dev, payloadOf({addKernel()}));
  auto a = upload(*dev, std::vector<float>(64, 1));
  {
    auto cb = dev->createCommandBuffer();
    cb->dispatch(*exe, 0, {1, 1, 1}, {int64_t(1) << 40},
                 {bind(*a, 64), bind(*a, 64), bind(*a, 64)});
    CHECK(has(statusError(run(*dev, *cb)), "does not fit the kernel's 32 bits"));
  }
  {
    auto cb = dev->createCommandBuffer();
    cb->dispatch(*exe, 0, {1, 1, 1}, {64}, {bind(*a, 64)});
    CHECK(has(statusError(run(*dev, *cb)), "takes 3 buffers, got 1"));
  }
  {
    auto cb = dev->createCommandBuffer();
    cb->dispatch(*exe, 0, {1, 1, 1}, {64}, {bind(*a, 64), bind(*a, 64), bind(*a, 128)});
    CHECK(has(statusError(run(*dev, *cb)), "needs 512 bytes but has 256"));
  }
  {
    auto ref = hal::openDevice(hal::DeviceId{"ref", 0}, Loc{});
    REQUIRE(ref.ok());
    auto r = (*ref)->allocate(256);
    REQUIRE(r.ok());
    auto cb = dev->createCommandBuffer();
    cb->dispatch(*exe, 0, {1, 1, 1}, {64}, {bind(*a, 64), bind(**r, 64), bind(*a, 64)});
    CHECK(has(statusError(run(*dev, *cb)), "is a buffer of ref[0]; it must be transferred"));
  }
  {
    auto cb = dev->createCommandBuffer();
    cb->dispatch(*exe, 0, {1u << 31, 1, 1}, {64}, {bind(*a, 64), bind(*a, 64), bind(*a, 64)});
    CHECK(has(statusError(run(*dev, *cb)), "maxComputeWorkGroupCount"));
  }
  // The failed submissions left nothing behind: the device still runs work.
  checkAdd(*dev, 100);
}

TEST_CASE("vulkan: out of memory and a lost device are errors naming the device") {
  auto dev = device0();
  auto huge = dev->allocate(uint64_t(1) << 44);
  REQUIRE_FALSE(huge.ok());
  CHECK(has(huge.diags().str(), "vulkan[0]"));
  auto lost = freshDevice();
  auto buf = lost->allocate(64);
  REQUIRE(buf.ok());
  auto sem = lost->createSemaphore(0);
  lost->simulateDeviceLost();
  CHECK(has(lost->allocate(64).diags().str(), "was lost"));
  auto cb = lost->createCommandBuffer();
  CHECK(has(statusError(lost->submit(*cb, nullptr, 0, *sem, 1)), "VK_ERROR_DEVICE_LOST"));
  CHECK(has(statusError(sem->wait(1)), "was lost"));
  CHECK(has(statusError((*buf)->read(0, nullptr, 4)), "was lost"));
}

TEST_CASE("vulkan: timeline semaphores") {
  auto dev = device0();
  auto sem = dev->createSemaphore(3);
  CHECK(sem->value() == 3);
  sem->signal(7);
  CHECK(sem->value() == 7);
  sem->signal(5); // never lowers
  CHECK(sem->value() == 7);
  CHECK(sem->wait(7).ok());
  // A submission that waits on a semaphore signaled later by the host.
  auto gate = dev->createSemaphore(0);
  auto done = dev->createSemaphore(0);
  auto exe = load(*dev, payloadOf({addKernel()}));
  auto a = upload(*dev, std::vector<float>(64, 2));
  auto c = upload(*dev, std::vector<float>(64, 0));
  auto cb = dev->createCommandBuffer();
  cb->dispatch(*exe, 0, {1, 1, 1}, {64}, {bind(*a, 64), bind(*a, 64), bind(*c, 64)});
  REQUIRE(dev->submit(*cb, gate.get(), 1, *done, 1).ok());
  gate->signal(1);
  REQUIRE(done->wait(1).ok());
  CHECK(download(*c, 64)[63] == 4);
  sem->fail(Diags{{error(Loc::named("x"), "boom")}});
  CHECK(has(statusError(sem->wait(100)), "boom"));
}

TEST_CASE("vulkan: the pipeline cache is written, and a corrupt cache file is ignored and "
          "rewritten") {
  auto dev = std::dynamic_pointer_cast<VulkanDevice>(device0());
  std::string payload = payloadOf({addKernel(), reverseKernel()});
  std::string dir = hal::vulkan::PipelineCache::directory();
  REQUIRE_FALSE(dir.empty());
  std::filesystem::remove_all(dir);
  load(*dev, payload);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  REQUIRE(files.size() == 1);
  CHECK(files[0].filename().string().rfind("vulkan-", 0) == 0);
  auto contents = [&] {
    std::ifstream in(files[0], std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  std::string good = contents();
  CHECK(good.rfind("KILNVKPC", 0) == 0);
  // Loading again reads it (and leaves it as it is).
  load(*dev, payload);
  CHECK(contents() == good);
  for (std::string bad : {std::string("garbage"), good.substr(0, good.size() - 1),
                          good.substr(0, 24) + std::string(good.size() - 24, '\x5a')}) {
    std::ofstream(files[0], std::ios::binary | std::ios::trunc) << bad;
    load(*dev, payload); // through the corrupt file
    CHECK(contents() == good);
  }
  // Another module gets its own file.
  load(*dev, payloadOf({addKernel()}));
  size_t count = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) count += e.is_regular_file();
  CHECK(count == 2);
}

// Vulkan dispatches, copies and fills with ref dispatches between them on `dev`, checked:
// the ref kernels read what the device wrote before them and the device reads what they
// wrote. Returns the vkQueueSubmit calls the submission took.
uint64_t checkMixed(hal::Device& dev) {
  auto* vk = dynamic_cast<VulkanDevice*>(&dev);
  REQUIRE(vk);
  auto exe = load(dev, payloadOf({addKernel()}));
  auto interp = loadRef(dev);
  const int64_t n = 200;
  std::vector<float> a(n);
  for (int64_t i = 0; i < n; ++i) a[i] = float(i);
  auto ba = upload(dev, a), b1 = upload(dev, std::vector<float>(n, 1));
  std::vector<std::unique_ptr<hal::Buffer>> t;
  for (int i = 0; i < 7; ++i) t.push_back(upload(dev, std::vector<float>(n, -1)));
  hal::Workgroups grid = {(n + 63) / 64, 1, 1};
  auto cb = dev.createCommandBuffer();
  cb->dispatch(*exe, 0, grid, {n}, {bind(*ba, n), bind(*b1, n), bind(*t[0], n)});     // c = a + 1
  cb->dispatch(*exe, 0, grid, {n}, {bind(*t[0], n), bind(*t[0], n), bind(*t[1], n)}); // d = 2c
  cb->dispatch(*interp, 0, {1, 1, 1}, {n}, {bind(*t[1], n), bind(*t[0], n), bind(*t[2], n)});
  cb->dispatch(*interp, 0, {1, 1, 1}, {n}, {bind(*t[2], n), bind(*b1, n), bind(*t[3], n)});
  cb->fill(*t[4], 0, n * 4, 0);
  cb->dispatch(*exe, 0, grid, {n}, {bind(*t[3], n), bind(*ba, n), bind(*t[4], n)}); // e*1 + a
  cb->copy(*t[4], 0, *t[5], 0, n * 4);
  cb->dispatch(*interp, 0, {1, 1, 1}, {n}, {bind(*t[5], n), bind(*b1, n), bind(*t[6], n)});
  uint64_t before = vk->queueSubmits();
  Status s = run(dev, *cb);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.diags().str()));
  uint64_t submits = vk->queueSubmits() - before;
  std::vector<float> e = download(*t[2], n), h = download(*t[5], n), k = download(*t[6], n);
  for (int64_t i = 0; i < n; ++i) {
    float c = float(i) + 1;
    REQUIRE(e[i] == 2 * c * c);
    REQUIRE(h[i] == 2 * c * c + float(i));
    REQUIRE(k[i] == h[i]);
  }
  return submits;
}

TEST_CASE("vulkan: vulkan devices load ref executables and run them between their commands") {
  CHECK(hal::lookupDriver("vulkan")->loads("ref"));
  CHECK(hal::lookupDriver("vulkan")->loads("vulkan"));
  CHECK_FALSE(hal::lookupDriver("vulkan")->loads("cpu"));
  auto dev = device0();
  // Two runs of device commands, one VkCommandBuffer and one submit each; the three ref
  // dispatches run on the host between them and after them.
  CHECK(checkMixed(*dev) == 2);
  // A submission of ref dispatches only reaches the queue not at all.
  auto interp = loadRef(*dev);
  auto a = upload(*dev, {1, 2, 3}), c = upload(*dev, {0, 0, 0});
  auto cb = dev->createCommandBuffer();
  cb->dispatch(*interp, 0, {1, 1, 1}, {3}, {bind(*a, 3), bind(*a, 3), bind(*c, 3)});
  auto* vk = dynamic_cast<VulkanDevice*>(dev.get());
  uint64_t before = vk->queueSubmits();
  REQUIRE(run(*dev, *cb).ok());
  CHECK(vk->queueSubmits() == before);
  CHECK(download(*c, 3) == std::vector<float>{1, 4, 9});
  CHECK(has(dev->loadExecutable("ref", "func @f(").diags().str(), "<ref executable>"));
}

TEST_CASE("vulkan: ref dispatches on a device without host-visible memory go through staging") {
  setenv("KILN_VULKAN_STAGING", "1", 1);
  auto dev = freshDevice();
  unsetenv("KILN_VULKAN_STAGING");
  REQUIRE(dev->staging());
  checkMixed(*dev);
}

TEST_CASE("vulkan: a mixed submission waits and signals timeline semaphores in order") {
  auto dev = device0();
  auto exe = load(*dev, payloadOf({addKernel()}));
  auto interp = loadRef(*dev);
  const int64_t n = 64;
  auto a = upload(*dev, std::vector<float>(n, 3));
  auto c = upload(*dev, std::vector<float>(n, 0)), d = upload(*dev, std::vector<float>(n, 0));
  // A ref dispatch first, then a vulkan one: the host waits for the gate before the
  // interpreter runs; a vulkan dispatch last signals on the device.
  for (bool refFirst : {true, false}) {
    auto gate = dev->createSemaphore(0), done = dev->createSemaphore(0);
    auto cb = dev->createCommandBuffer();
    auto interpreted = [&] {
      cb->dispatch(*interp, 0, {1, 1, 1}, {n}, {bind(*a, n), bind(*a, n), bind(*c, n)});
    };
    auto device = [&] {
      cb->dispatch(*exe, 0, {1, 1, 1}, {n}, {bind(*c, n), bind(*a, n), bind(*d, n)});
    };
    if (refFirst) {
      interpreted();
      device();
    } else {
      // The device writes c = a + a first; the interpreter then squares it into d.
      cb->dispatch(*exe, 0, {1, 1, 1}, {n}, {bind(*a, n), bind(*a, n), bind(*c, n)});
      cb->dispatch(*interp, 0, {1, 1, 1}, {n}, {bind(*c, n), bind(*c, n), bind(*d, n)});
    }
    Status submitted = ok();
    std::thread submitter([&] { submitted = dev->submit(*cb, gate.get(), 1, *done, 1); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(done->value() == 0); // nothing ran before the gate
    gate->signal(1);
    submitter.join();
    REQUIRE_MESSAGE(submitted.ok(), (submitted.ok() ? "" : submitted.diags().str()));
    REQUIRE(done->wait(1).ok());
    CHECK(done->value() == 1);
    std::vector<float> got = download(*d, n);
    CHECK(got[n - 1] == (refFirst ? 9 + 3 : 36));
  }
}

TEST_CASE("vulkan: a failing ref dispatch fails the submission and its semaphore, naming the "
          "device") {
  auto dev = device0();
  auto exe = load(*dev, payloadOf({addKernel()}));
  auto interp = loadRef(*dev);
  const int64_t n = 64;
  auto a = upload(*dev, std::vector<float>(n, 2));
  auto c = upload(*dev, std::vector<float>(n, -1)), d = upload(*dev, std::vector<float>(n, -1));
  auto ref0 = hal::openDevice(hal::DeviceId{"ref", 0}, Loc{});
  REQUIRE(ref0.ok());
  auto foreign = (*ref0)->allocate(n * 4);
  REQUIRE(foreign.ok());
  auto failing = [&](auto record) {
    auto cb = dev->createCommandBuffer();
    record(*cb);
    auto sem = dev->createSemaphore(0);
    std::string e = statusError(dev->submit(*cb, nullptr, 0, *sem, 1));
    CHECK(has(statusError(sem->wait(1)), e.substr(0, 20)));
    return e;
  };
  // Refused before anything runs: a buffer of another device, a kernel that does not exist,
  // a push constant too many. The vulkan dispatch before them never ran.
  std::string e = failing([&](hal::CommandBuffer& cb) {
    cb.dispatch(*exe, 0, {1, 1, 1}, {n}, {bind(*a, n), bind(*a, n), bind(*c, n)});
    cb.dispatch(*interp, 0, {1, 1, 1}, {n}, {bind(*a, n), bind(**foreign, n), bind(*d, n)});
  });
  CHECK(has(e, "vulkan[0]: error: kernel @mul on vulkan[0]: input 1 is a buffer of ref[0]; it "
               "must be transferred to vulkan[0] first"));
  CHECK(download(*c, n)[0] == -1);
  e = failing([&](hal::CommandBuffer& cb) {
    cb.dispatch(*interp, 7, {1, 1, 1}, {n}, {bind(*a, n), bind(*a, n), bind(*d, n)});
  });
  CHECK(has(e, "vulkan[0]: error: dispatch of kernel 7 but the executable has 2"));
  e = failing([&](hal::CommandBuffer& cb) {
    cb.dispatch(*interp, 0, {1, 1, 1}, {n, 1}, {bind(*a, n), bind(*a, n), bind(*d, n)});
  });
  CHECK(has(e, "reads 1 push constants, the dispatch has 2"));
  // Fails while it runs: the result is i32, the buffer f32. The vulkan dispatch before it
  // ran, the one after it did not.
  e = failing([&](hal::CommandBuffer& cb) {
    cb.dispatch(*exe, 0, {1, 1, 1}, {n}, {bind(*a, n), bind(*a, n), bind(*c, n)});
    cb.dispatch(*interp, 1, {1, 1, 1}, {n}, {bind(*c, n), bind(*d, n)});
    cb.dispatch(*exe, 0, {1, 1, 1}, {n}, {bind(*a, n), bind(*a, n), bind(*d, n)});
  });
  CHECK(has(e, "vulkan[0]: error: kernel @to_i32: result 0 does not have the shape and element "
               "type of its output buffer"));
  CHECK(download(*c, n)[0] == 4);
  CHECK(download(*d, n)[0] == -1);
  // The device still runs work.
  CHECK(checkMixed(*dev) == 2);
  // A lost device refuses mixed submissions too.
  auto lost = freshDevice();
  auto lexe = loadRef(*lost);
  auto la = upload(*lost, std::vector<float>(n, 1));
  lost->simulateDeviceLost();
  auto cb = lost->createCommandBuffer();
  cb->dispatch(*lexe, 0, {1, 1, 1}, {n}, {bind(*la, n), bind(*la, n), bind(*la, n)});
  auto sem = lost->createSemaphore(0);
  CHECK(has(statusError(lost->submit(*cb, nullptr, 0, *sem, 1)), "was lost"));
  CHECK(has(lost->loadExecutable("ref", kRefKernels).diags().str(), "was lost"));
}

namespace {

// A host module: t = x * y by the interpreter's @mul on `first`, r = t + y by the vulkan @add on
// vulkan[0], returned from `last`; the executor transfers t, y and r between the devices.
std::string mixedHost(const std::string& first, const std::string& last) {
  std::string host = R"(symbol n in [1, 4096]
device FIRST
device vulkan[0]
func @main(%x: tensor<{n}xf32>, %y: tensor<{n}xf32>) -> (tensor<{n}xf32>) {
  %0 = transfer_to %x {device = "FIRST"} : tensor<{n}xf32>
  %1 = transfer_to %y {device = "FIRST"} : tensor<{n}xf32>
  %2 = alloc_buffer {device = "FIRST"} : tensor<{n}xf32>
  launch %0, %1, %2 {device = "FIRST", kernel = "mul", outputs = 1, push = ["n"]}
  %3 = transfer_to %2 {device = "vulkan[0]"} : tensor<{n}xf32>
  %4 = transfer_to %1 {device = "vulkan[0]"} : tensor<{n}xf32>
  free %0
  free %1
  free %2
  %5 = alloc_buffer {device = "vulkan[0]"} : tensor<{n}xf32>
  launch %3, %4, %5 {device = "vulkan[0]", kernel = "add", outputs = 1, push = ["n"], workgroups = ["n ceildiv 64", "1", "1"]}
  free %3
  free %4
  %6 = transfer_to %5 {device = "LAST"} : tensor<{n}xf32>
  free %5
  wait {device = "vulkan[0]"}
  wait {device = "FIRST"}
  return %6
}
)";
  auto replace = [&](const std::string& from, const std::string& to) {
    for (size_t at; (at = host.find(from)) != std::string::npos;) host.replace(at, from.size(), to);
  };
  replace("device FIRST\ndevice vulkan[0]\n",
          first == "vulkan[0]" ? "device vulkan[0]\n" : "device " + first + "\ndevice vulkan[0]\n");
  replace("FIRST", first);
  replace("LAST", last);
  return host;
}

// Runs mixedHost(first, last) through the executor for several n, checked.
void checkMixedModule(const std::string& first, const std::string& last) {
  auto m = parseModule(mixedHost(first, last), "mixed.kir");
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.diags().str()));
  auto program = std::make_shared<Program>();
  program->host = std::shared_ptr<Module>(m.take());
  program->entries = {"main"};
  program->devices = {first};
  if (first != "vulkan[0]") program->devices.push_back("vulkan[0]");
  program->executables = {{"ref", kRefKernels}, {"vulkan", payloadOf({addKernel()})}};
  auto ex = Executor::create(program);
  REQUIRE_MESSAGE(ex.ok(), (ex.ok() ? "" : ex.diags().str()));
  for (int64_t n : {1, 100, 1000}) {
    HostTensor x(ElemType::F32, {n}), y(ElemType::F32, {n});
    auto* px = reinterpret_cast<float*>(x.mutableData());
    auto* py = reinterpret_cast<float*>(y.mutableData());
    for (int64_t i = 0; i < n; ++i) px[i] = float(i), py[i] = 0.5f;
    auto out = (*ex)->call("main", {x, y});
    REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.diags().str()));
    REQUIRE(out->size() == 1);
    const auto* r = reinterpret_cast<const float*>((*out)[0].data());
    for (int64_t i = 0; i < n; ++i) REQUIRE(r[i] == float(i) * 0.5f + 0.5f);
  }
}

} // namespace

TEST_CASE("vulkan: modules over ref[0] or cpu[0] and vulkan[0] move buffers between them") {
  for (const char* other : {"ref[0]", "cpu[0]"}) {
    CAPTURE(other);
    checkMixedModule(other, other);
    checkMixedModule(other, "vulkan[0]");
  }
}

TEST_CASE("vulkan: a module on vulkan[0] alone runs its ref kernels on the device's host side") {
  // Both launches go to vulkan[0]'s queue; the executor flushes them as one submission,
  // which runs @mul on the interpreter between device work.
  checkMixedModule("vulkan[0]", "vulkan[0]");
}

TEST_CASE("vulkan: kiln devices lists vulkan[0]; without a loader it says why") {
  auto runCmd = [](const std::string& cmd) {
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    pclose(p);
    return out;
  };
  std::string kiln = KILN_TOOL;
  std::string out = runCmd(kiln + " devices");
  CHECK(has(out, "vulkan[0]  target vulkan  "));
  out = runCmd("KILN_VULKAN_LOADER=/nonexistent/libvulkan.so.1 " + kiln + " devices 2>&1");
  CHECK(has(out, "vulkan: no devices: the Vulkan loader could not be opened"));
  CHECK(has(out, "ref[0]"));
  out = runCmd("VK_DRIVER_FILES=/nonexistent.json " + kiln + " devices 2>&1");
  CHECK(has(out, "vulkan: no devices: "));
  // A module compiled for ref runs on vulkan[0]: its kernels on the interpreter, as the
  // kernels the vulkan backend leaves tensor-level do.
  std::string kir = std::string(std::getenv("XDG_CACHE_HOME")) + "/neg.kir";
  std::ofstream(kir) << "func @main(%x: tensor<2xf32>) -> (tensor<2xf32>) {\n"
                        "  %0 = neg %x : tensor<2xf32>\n  return %0\n}\n";
  out = runCmd(kiln + " compile " + kir + " --device=ref[0] -o " + kir + ".kmod 2>&1 && " + kiln +
               " run " + kir + ".kmod --device=vulkan[0] --input=2xf32=1 2>&1; echo rc=$?");
  CHECK(has(out, "-1"));
  CHECK(has(out, "rc=0"));
  // One compiled for cpu (when this kiln has the cpu backend) does not: the error says to
  // compile for the device.
  out = runCmd(kiln + " compile " + kir + " --device=cpu[0] -o " + kir + ".cpu.kmod 2>&1");
  if (out.find("no CPU backend") == std::string::npos) {
    out = runCmd(kiln + " run " + kir + ".cpu.kmod --device=vulkan[0] --input=2xf32=1 2>&1");
    CHECK(has(out, "which vulkan[0] does not load; compile the module for vulkan[0]"));
  }
}

namespace {
// Runs after every static object built later (the driver, the instance, the open devices) is
// destroyed, so it sees the messages of their destruction too.
void failOnValidationMessages() {
  if (uint64_t n = hal::vulkan::validationMessageCount()) {
    std::fprintf(stderr, "FAILED: the Vulkan validation layer reported %llu messages\n",
                 static_cast<unsigned long long>(n));
    std::fflush(stderr);
    _exit(1);
  }
}
} // namespace

#endif // KILN_HAVE_VULKAN

int main(int argc, char** argv) {
#ifndef KILN_HAVE_VULKAN
  (void)argc, (void)argv;
  std::printf("SKIP: this build has no vulkan driver (meson feature 'vulkan': the Vulkan "
              "headers, Debian package libvulkan-dev, were not found)\n");
  return 77;
#else
  if (std::string(KILN_VULKAN_KERNEL_DIR).empty()) {
    std::printf("SKIP: spirv-as (Debian package spirv-tools) was not found at build time, so "
                "the test kernels were not assembled\n");
    return 77;
  }
  const char* lvp = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";
  if (!std::getenv("VK_DRIVER_FILES") && !std::getenv("VK_ICD_FILENAMES") &&
      std::filesystem::exists(lvp))
    setenv("VK_DRIVER_FILES", lvp, 1);
  setenv("KILN_VULKAN_VALIDATION", "1", 0);
  char tmpl[] = "/tmp/kiln-vulkan-test-XXXXXX";
  if (const char* dir = mkdtemp(tmpl)) setenv("XDG_CACHE_HOME", dir, 1);
  std::atexit(failOnValidationMessages);
  hal::Driver* d = hal::lookupDriver("vulkan");
  if (!d || d->enumerate().empty()) {
    std::printf("SKIP: no Vulkan device: %s\n",
                d ? d->unavailableReason().c_str() : "no vulkan driver");
    return 77;
  }
  // Every run is validated unless the caller says otherwise: a missing layer fails the test.
  auto inst = hal::vulkan::Instance::get();
  if (inst.ok() && !(*inst)->validation()) {
    if (std::strcmp(std::getenv("KILN_VULKAN_VALIDATION"), "1") == 0) {
      std::printf("FAILED: VK_LAYER_KHRONOS_validation is not installed (Debian package "
                  "vulkan-validationlayers); install it, or set KILN_VULKAN_VALIDATION=0 to "
                  "run without it\n");
      return 1;
    }
    std::printf("note: KILN_VULKAN_VALIDATION=%s: running without the validation layer\n",
                std::getenv("KILN_VULKAN_VALIDATION"));
  }
  doctest::Context ctx(argc, argv);
  int rc = ctx.run();
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
  return rc;
#endif
}
