// Unit tests for the hip and cuda drivers against the fake libamdhip64.so and libcuda.so.1 of
// tests/fake_gpu (KILN_HIP_LIBRARY / KILN_CUDA_LIBRARY point the drivers at them): enumeration
// and descriptions, buffers, executable loading (image per arch, limits, the JIT's log),
// launches (the kernarg block word by word, grid, workgroup, shared memory), and every failure
// (allocation, launch, status word, missing library) as an error value. They prove the drivers'
// logic and the call sequence only: no kernel runs on a GPU here. Also the GPU payload
// container (gpu/payload.h) and the kernarg packing (gpu/kernargs.h) on their own.
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>

#include "ir/text/parser.h"
#include "runtime/cuda/cuda.h"
#include "runtime/executor.h"
#include "runtime/gpu/device.h"
#include "runtime/gpu/kernargs.h"
#include "runtime/gpu/payload.h"
#include "runtime/hip/hip.h"

using namespace kiln;
using namespace kiln::gpu;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// "loc: error: message" of the first diagnostic.
std::string firstError(const Diags& d) {
  std::string s = d.list.empty() ? "" : d.list[0].str();
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// The control functions every fake exports (fake_gpu/fake_state.h).
struct Fake {
  explicit Fake(const char* path, const char* env) {
    setenv(env, path, 1);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib != nullptr);
    reset = reinterpret_cast<void (*)()>(dlsym(lib, "fake_gpu_reset"));
    set = reinterpret_cast<void (*)(const char*, const char*)>(dlsym(lib, "fake_gpu_set"));
    logFn = reinterpret_cast<size_t (*)(char*, size_t)>(dlsym(lib, "fake_gpu_log"));
    kernargsFn = reinterpret_cast<size_t (*)(uint64_t*, size_t)>(dlsym(lib, "fake_gpu_kernargs"));
    REQUIRE((reset && set && logFn && kernargsFn));
    reset();
  }
  std::string log() const {
    std::string s(logFn(nullptr, 0) + 1, '\0');
    logFn(s.data(), s.size());
    s.pop_back();
    return s;
  }
  std::vector<uint64_t> kernargs() const {
    std::vector<uint64_t> w(256);
    w.resize(kernargsFn(w.data(), w.size()));
    return w;
  }
  void* lib = nullptr;
  void (*reset)() = nullptr;
  void (*set)(const char*, const char*) = nullptr;
  size_t (*logFn)(char*, size_t) = nullptr;
  size_t (*kernargsFn)(uint64_t*, size_t) = nullptr;
};

Fake hipFake() { return Fake(KILN_FAKE_HIP, "KILN_HIP_LIBRARY"); }
Fake cudaFake() { return Fake(KILN_FAKE_CUDA, "KILN_CUDA_LIBRARY"); }

// A fake code object: an ELF64 header for EM_AMDGPU with the processor's EF_AMDGPU_MACH, then
// one "kiln-fake-kernel ENTRY KERNARG_BYTES" line per kernel (what the fake HIP reads).
std::string codeObject(uint32_t mach, const std::vector<GpuKernelInfo>& kernels) {
  std::string elf(64, '\0');
  std::memcpy(elf.data(),
              "\x7f"
              "ELF",
              4);
  elf[4] = 2, elf[5] = 1;
  elf[18] = char(224);
  std::memcpy(elf.data() + 48, &mach, 4);
  for (const GpuKernelInfo& k : kernels)
    elf += "kiln-fake-kernel " + k.entry + " " + std::to_string(k.kernargBytes) + "\n";
  return elf;
}

// PTX with one .entry per kernel taking one .u64 parameter per kernarg word.
std::string ptx(const std::string& arch, const std::vector<GpuKernelInfo>& kernels) {
  std::string s = ".version 8.0\n.target " + arch + "\n.address_size 64\n";
  for (const GpuKernelInfo& k : kernels) {
    s += ".visible .entry " + k.entry + "(\n";
    for (uint64_t i = 0; i < k.kernargBytes / 8; ++i)
      s += std::string(i ? ",\n" : "") + "  .param .u64 p" + std::to_string(i);
    s += "\n)\n{\n  ret;\n}\n";
  }
  return s + std::string(1, '\0');
}

// A kernel reading a rank-2 f32 buffer and writing a rank-1 one, with one push constant.
GpuKernelInfo kernel(const std::string& name = "main_dispatch_0") {
  GpuKernelInfo k;
  k.name = name;
  k.entry = name;
  k.args = {{ElemType::F32, 2, false}, {ElemType::F32, 1, true}};
  k.symbols = {"n"};
  k.workgroupSize = {64, 1, 1};
  k.subgroupSize = 0;
  k.kernargBytes = kernargBytes(k.args, k.symbols.size());
  return k;
}

constexpr uint32_t kGfx90a = 0x03f, kGfx942 = 0x04c;

std::string amdPayload(std::vector<GpuKernelInfo> kernels = {kernel()},
                       std::vector<std::pair<std::string, uint32_t>> archs = {
                           {"gfx942", kGfx942}}) {
  GpuPayload p;
  p.target = "amdgpu";
  for (const auto& [arch, mach] : archs)
    p.images.push_back({arch, GpuCodeKind::HsaCodeObject, codeObject(mach, kernels), kernels});
  return serializeGpuPayload(p);
}

std::string cudaPayload(std::vector<GpuKernelInfo> kernels = {kernel()},
                        std::vector<std::string> archs = {"sm_90"}) {
  GpuPayload p;
  p.target = "cuda";
  for (const std::string& arch : archs)
    p.images.push_back({arch, GpuCodeKind::Ptx, ptx(arch, kernels), kernels});
  return serializeGpuPayload(p);
}

std::shared_ptr<hal::Device> open(hal::Driver* d) {
  Result<std::shared_ptr<hal::Device>> dev = d->open(0);
  INFO((dev.ok() ? std::string() : firstError(dev.diags())));
  REQUIRE(dev.ok());
  return *dev;
}

std::unique_ptr<hal::Buffer> allocate(hal::Device& dev, uint64_t bytes) {
  Result<std::unique_ptr<hal::Buffer>> b = dev.allocate(bytes);
  REQUIRE(b.ok());
  return b.take();
}

uint64_t addressOf(hal::Buffer& b) { return dynamic_cast<hal::gpu::GpuBuffer&>(b).address(); }

struct Launch {
  std::unique_ptr<hal::Buffer> in, out;
  std::unique_ptr<hal::Executable> exe;
};

Launch prepare(hal::Device& dev, const std::string& target, const std::string& payload) {
  Launch l;
  l.in = allocate(dev, 4 * 8 * 4);
  l.out = allocate(dev, 8 * 4);
  Result<std::unique_ptr<hal::Executable>> exe = dev.loadExecutable(target, payload);
  INFO((exe.ok() ? std::string() : firstError(exe.diags())));
  REQUIRE(exe.ok());
  l.exe = exe.take();
  return l;
}

// Submits one dispatch of kernel 0 over `grid`; the error, or "" when it ran.
std::string dispatch(hal::Device& dev, Launch& l, hal::Workgroups grid,
                     std::vector<int64_t> push = {7}) {
  auto cb = dev.createCommandBuffer();
  cb->dispatch(*l.exe, 0, grid, push,
               {{l.in.get(), ElemType::F32, {4, 8}}, {l.out.get(), ElemType::F32, {8}}});
  auto sem = dev.createSemaphore(0);
  Status s = dev.submit(*cb, nullptr, 0, *sem, 1);
  Status waited = sem->wait(1);
  CHECK(s.ok() == waited.ok());
  return s.ok() ? "" : firstError(s.diags());
}

// The block the fake received for dispatch(): both buffers' addresses, the extents 4, 8 and 8,
// the push constant, the status word's address.
void checkKernargs(const Fake& fake, Launch& l, int64_t push) {
  std::vector<uint64_t> w = fake.kernargs();
  REQUIRE(w.size() == 7);
  CHECK(w[0] == addressOf(*l.in));
  CHECK(w[1] == addressOf(*l.out));
  CHECK(w[2] == 4);
  CHECK(w[3] == 8);
  CHECK(w[4] == 8);
  CHECK(w[5] == uint64_t(push));
  CHECK(w[6] != 0);
  CHECK(w[6] != w[0]);
  CHECK(w[6] != w[1]);
}

struct Recorder : hal::DispatchProfiler {
  std::vector<double> seconds;
  void record(const hal::Executable&, size_t, const hal::Workgroups&, double s) override {
    seconds.push_back(s);
  }
};

} // namespace

TEST_CASE("gpu payload: round trip") {
  GpuKernelInfo k = kernel();
  k.staticSharedBytes = 1024;
  k.dynamicSharedBytes = 4096;
  k.subgroupSize = 64;
  k.stats = {32, 16, 8, true};
  GpuPayload p;
  p.target = "amdgpu";
  p.images.push_back({"gfx90a", GpuCodeKind::HsaCodeObject, codeObject(kGfx90a, {k}), {k}});
  p.images.push_back({"gfx942", GpuCodeKind::HsaCodeObject, codeObject(kGfx942, {k}), {k}});
  std::string bytes = serializeGpuPayload(p);
  Result<GpuPayload> back = parseGpuPayload(bytes);
  REQUIRE(back.ok());
  REQUIRE(back->images.size() == 2);
  const GpuKernelInfo& b = back->images[1].kernels[0];
  CHECK(back->images[1].arch == "gfx942");
  CHECK(back->images[1].code == p.images[1].code);
  CHECK(b.args.size() == 2);
  CHECK(b.args[1].written);
  CHECK(b.symbols == std::vector<std::string>{"n"});
  CHECK(b.staticSharedBytes == 1024);
  CHECK(b.dynamicSharedBytes == 4096);
  CHECK(b.kernargBytes == 56);
  CHECK(b.stats.spills);
  CHECK(serializeGpuPayload(*back) == bytes);
}

TEST_CASE("gpu payload: an image with no kernels round-trips") {
  // A module whose work all runs on the host (a constant, ConstantOfShape) still carries one
  // image per architecture, with no code: its payload is the smallest a valid one can be.
  GpuPayload p;
  p.target = "cuda";
  p.images.push_back({"sm_90", GpuCodeKind::Ptx, "", {}});
  std::string bytes = serializeGpuPayload(p);
  Result<GpuPayload> back = parseGpuPayload(bytes);
  REQUIRE(back.ok());
  REQUIRE(back->images.size() == 1);
  CHECK(back->images[0].arch == "sm_90");
  CHECK(back->images[0].kernels.empty());
  CHECK(serializeGpuPayload(*back) == bytes);
  for (size_t n = 0; n < bytes.size(); ++n) CHECK_FALSE(parseGpuPayload(bytes.substr(0, n)).ok());
}

TEST_CASE("gpu payload: corrupt payloads are errors") {
  std::string bytes = amdPayload();
  // Every truncation is refused (never a crash or a partial payload).
  for (size_t n = 0; n < bytes.size(); ++n) {
    Result<GpuPayload> r = parseGpuPayload(bytes.substr(0, n));
    CHECK_FALSE(r.ok());
  }
  // Every flipped byte is refused or parses to a payload that serializes back to those bytes.
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string flipped = bytes;
    flipped[i] = char(flipped[i] ^ 0x5a);
    Result<GpuPayload> r = parseGpuPayload(flipped);
    CAPTURE(i);
    if (r.ok()) CHECK(serializeGpuPayload(*r) == flipped);
  }
  CHECK(contains(firstError(parseGpuPayload("KILNGPU0").diags()), "no KILNGPU1 header"));
  CHECK(contains(firstError(parseGpuPayload(bytes + "x").diags()), "1 bytes after its last"));

  GpuKernelInfo bad = kernel();
  bad.kernargBytes = 48;
  GpuPayload p;
  p.target = "amdgpu";
  p.images.push_back({"gfx942", GpuCodeKind::HsaCodeObject, "code", {bad}});
  CHECK(contains(firstError(parseGpuPayload(serializeGpuPayload(p)).diags()),
                 "declares 48 kernarg bytes; its arguments take 56"));

  p.images[0].kernels[0] = kernel();
  p.images[0].kind = GpuCodeKind::Ptx;
  CHECK(contains(firstError(parseGpuPayload(serializeGpuPayload(p)).diags()),
                 "wrong kind for target amdgpu"));

  p.images[0].kind = GpuCodeKind::HsaCodeObject;
  p.images[0].kernels[0].workgroupSize = {64, 32, 1};
  CHECK(contains(firstError(parseGpuPayload(serializeGpuPayload(p)).diags()),
                 "2048 threads per workgroup"));
}

TEST_CASE("gpu payload: imageForArch names both sides") {
  Result<GpuPayload> p =
      parseGpuPayload(amdPayload({kernel()}, {{"gfx90a", kGfx90a}, {"gfx942", kGfx942}}));
  REQUIRE(p.ok());
  Result<const GpuImage*> hit = imageForArch(*p, "gfx942", "hip[0]");
  REQUIRE(hit.ok());
  CHECK((*hit)->arch == "gfx942");
  Result<const GpuImage*> miss = imageForArch(*p, "gfx1100", "hip[0]");
  REQUIRE_FALSE(miss.ok());
  CHECK(firstError(miss.diags()) ==
        "hip[0]: error: this module's amdgpu code was compiled for gfx90a, gfx942; hip[0] is "
        "gfx1100 (recompile with --target=amdgpu:gfx1100)");
}

TEST_CASE("kernargs: packed per the ABI, mismatches refused") {
  GpuKernelInfo k = kernel();
  Loc loc = Loc::named("test");
  Result<std::vector<uint64_t>> w =
      packKernargs(k, {{0x1000, {4, 8}}, {0x2000, {8}}}, {-5}, 0x3000, loc);
  REQUIRE(w.ok());
  CHECK(*w == std::vector<uint64_t>{0x1000, 0x2000, 4, 8, 8, uint64_t(-5), 0x3000});
  CHECK(w->size() * 8 == k.kernargBytes);
  CHECK(contains(firstError(packKernargs(k, {{0x1000, {4}}, {0x2000, {8}}}, {1}, 0, loc).diags()),
                 "buffer 0 holds a tensor of rank 1; the kernel takes rank 2"));
  CHECK(contains(firstError(packKernargs(k, {{0x1000, {4, 8}}}, {1}, 0, loc).diags()),
                 "takes 2 buffers, got 1"));
  CHECK(contains(firstError(packKernargs(k, {{0x1000, {4, 8}}, {0x2000, {8}}}, {}, 0, loc).diags()),
                 "reads 1 push constants, the dispatch has 0"));
}

TEST_CASE("hip: devices and descriptions") {
  Fake fake = hipFake();
  hal::Driver* d = hal::hip::hipDriver();
  CHECK(d->name() == "hip");
  CHECK(d->target() == "amdgpu");
  CHECK(d->loads("amdgpu"));
  CHECK(d->loads("ref"));
  CHECK_FALSE(d->loads("cuda"));
  std::vector<hal::DeviceInfo> devices = d->enumerate();
  REQUIRE(devices.size() == 1);
  CHECK(devices[0].id.str() == "hip[0]");
  CHECK(contains(devices[0].description, "Fake AMD GPU 0, gfx942:sramecc+:xnack-, 65536 MiB "
                                         "memory, wave 64, shared memory 64 KiB"));
  CHECK(d->unavailableReason().empty());
  fake.set("devices", "2");
  CHECK(d->enumerate().size() == 2);
  fake.set("devices", "0");
  CHECK(d->enumerate().empty());
  CHECK(contains(d->unavailableReason(), "finds no AMD GPU"));
  CHECK_FALSE(d->open(0).ok());
}

TEST_CASE("hip: buffers, copies and fills") {
  Fake fake = hipFake();
  auto dev = open(hal::hip::hipDriver());
  auto a = allocate(*dev, 64), b = allocate(*dev, 64);
  CHECK(dev->memoryStats().bytesInUse == 128);
  CHECK(a->map() == nullptr);
  std::vector<uint8_t> data(64), back(64, 0);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 3);
  REQUIRE(a->write(0, data.data(), 64).ok());
  REQUIRE(a->read(0, back.data(), 64).ok());
  CHECK(back == data);
  CHECK(contains(firstError(a->read(60, back.data(), 8).diags()), "outside a buffer of 64 bytes"));

  auto cb = dev->createCommandBuffer();
  cb->copy(*a, 8, *b, 0, 32);
  cb->barrier();
  cb->fill(*b, 32, 32, 0xab);
  auto sem = dev->createSemaphore(0);
  REQUIRE(dev->submit(*cb, nullptr, 0, *sem, 5).ok());
  CHECK(sem->value() == 5);
  REQUIRE(b->read(0, back.data(), 64).ok());
  for (size_t i = 0; i < 32; ++i) CHECK(back[i] == data[i + 8]);
  for (size_t i = 32; i < 64; ++i) CHECK(back[i] == 0xab);
  std::string log = fake.log();
  CHECK(contains(log, "hipMemcpyAsync(32, kind 3)"));
  CHECK(contains(log, "hipMemsetAsync(171, 32)"));
  CHECK(contains(log, "hipStreamSynchronize()"));

  // A buffer of another device is refused before anything is queued.
  auto other = open(hal::hip::hipDriver());
  auto c = allocate(*other, 64);
  auto cb2 = dev->createCommandBuffer();
  cb2->copy(*c, 0, *b, 0, 8);
  auto sem2 = dev->createSemaphore(0);
  Status s = dev->submit(*cb2, nullptr, 0, *sem2, 1);
  CHECK(contains(firstError(s.diags()), "copy from a buffer of hip[0] submitted to hip[0]"));
  CHECK_FALSE(sem2->wait(1).ok());
}

TEST_CASE("hip: load and launch pass the ABI's kernarg block") {
  Fake fake = hipFake();
  auto dev = open(hal::hip::hipDriver());
  Launch l = prepare(*dev, "amdgpu", amdPayload());
  CHECK(l.exe->numKernels() == 1);
  CHECK(l.exe->kernelName(0) == "main_dispatch_0");
  CHECK(dispatch(*dev, l, {3, 2, 1}, {7}) == "");
  checkKernargs(fake, l, 7);
  std::string log = fake.log();
  CHECK(contains(log, "hipModuleGetFunction(main_dispatch_0)"));
  CHECK(contains(log, "hipModuleLaunchKernel(main_dispatch_0 grid 3,2,1 block 64,1,1 shared 0 "
                      "kernarg 56)"));
  // The status words are zeroed before the launch and read back after the stream finished.
  CHECK(log.find("hipMemsetAsync(0, 4)") < log.find("hipModuleLaunchKernel"));
  CHECK(log.find("hipStreamSynchronize") < log.rfind("hipMemcpy(4, kind 2)"));

  // An empty grid launches nothing; a grid beyond the device's fails the semaphore.
  fake.reset();
  CHECK(dispatch(*dev, l, {0, 1, 1}) == "");
  CHECK_FALSE(contains(fake.log(), "hipModuleLaunchKernel"));
  CHECK(contains(dispatch(*dev, l, {1, 70000, 1}),
                 "kernel @main_dispatch_0 on hip[0]: grid 1x70000x1 exceeds the device's 65536 "
                 "workgroups along axis 1"));
  CHECK(contains(dispatch(*dev, l, {1, 1, 1}, {}), "reads 1 push constants, the dispatch has 0"));
  CHECK(contains(dispatch(*dev, l, {-1, 1, 1}), "has an invalid grid -1x1x1"));
}

TEST_CASE("hip: the image of the device's arch is chosen, a mismatch lists both") {
  Fake fake = hipFake();
  fake.set("arch", "gfx90a:xnack-");
  auto dev = open(hal::hip::hipDriver());
  std::string both = amdPayload({kernel()}, {{"gfx942", kGfx942}, {"gfx90a", kGfx90a}});
  // The fake refuses a code object for another processor, so loading proves the choice.
  Launch l = prepare(*dev, "amdgpu", both);
  CHECK(dispatch(*dev, l, {1, 1, 1}) == "");

  fake.set("arch", "gfx1100");
  auto rdna = open(hal::hip::hipDriver());
  Result<std::unique_ptr<hal::Executable>> miss = rdna->loadExecutable("amdgpu", both);
  REQUIRE_FALSE(miss.ok());
  CHECK(firstError(miss.diags()) ==
        "hip[0]: error: this module's amdgpu code was compiled for gfx942, gfx90a; hip[0] is "
        "gfx1100 (recompile with --target=amdgpu:gfx1100)");
  CHECK(contains(firstError(rdna->loadExecutable("cuda", cudaPayload()).diags()),
                 "cannot load an executable for target 'cuda'"));
}

TEST_CASE("hip: load refuses what the device cannot run") {
  hipFake();
  auto dev = open(hal::hip::hipDriver());
  GpuKernelInfo big = kernel();
  big.staticSharedBytes = 70000;
  big.subgroupSize = 32;
  Result<std::unique_ptr<hal::Executable>> r = dev->loadExecutable("amdgpu", amdPayload({big}));
  REQUIRE_FALSE(r.ok());
  std::string e = firstError(r.diags());
  CHECK(contains(e, "kernel 'main_dispatch_0' cannot run on hip[0] (Fake AMD GPU 0): it needs "
                    "70000 bytes of shared memory (the device allows 65536 per workgroup) and "
                    "subgroups of 32 (the device runs subgroups of 64)"));

  GpuPayload notElf;
  notElf.target = "amdgpu";
  notElf.images.push_back(
      {"gfx942", GpuCodeKind::HsaCodeObject, std::string(100, 'x'), {kernel()}});
  CHECK(contains(firstError(dev->loadExecutable("amdgpu", serializeGpuPayload(notElf)).diags()),
                 "the gfx942 image is not an AMDGPU code object"));

  GpuKernelInfo renamed = kernel();
  renamed.entry = "missing_entry";
  GpuPayload p;
  p.target = "amdgpu";
  p.images.push_back(
      {"gfx942", GpuCodeKind::HsaCodeObject, codeObject(kGfx942, {kernel()}), {renamed}});
  CHECK(contains(firstError(dev->loadExecutable("amdgpu", serializeGpuPayload(p)).diags()),
                 "hipModuleGetFunction of 'missing_entry' (kernel @main_dispatch_0) failed: "
                 "hipErrorNotFound"));
}

TEST_CASE("hip: tensor-level kernels of a `ref` executable run between the stream's commands") {
  Fake fake = hipFake();
  auto dev = open(hal::hip::hipDriver());
  const char* twice = R"(symbol n in [0, 1048576]
func @twice(%x: tensor<{n}xf32>) -> (tensor<{n}xf32>) {
  %0 = add %x, %x : tensor<{n}xf32>
  return %0
}
)";
  Result<std::unique_ptr<hal::Executable>> exe = dev->loadExecutable("ref", twice);
  REQUIRE(exe.ok());
  auto a = allocate(*dev, 12), b = allocate(*dev, 12), c = allocate(*dev, 12);
  std::vector<float> in = {1, 2, 3};
  REQUIRE(a->write(0, in.data(), 12).ok());
  // copy a -> b on the stream, then b * 2 -> c on the interpreter: the copy must have finished.
  auto cb = dev->createCommandBuffer();
  cb->copy(*a, 0, *b, 0, 12);
  cb->dispatch(**exe, 0, {1, 1, 1}, {3},
               {{b.get(), ElemType::F32, {3}}, {c.get(), ElemType::F32, {3}}});
  auto sem = dev->createSemaphore(0);
  REQUIRE(dev->submit(*cb, nullptr, 0, *sem, 1).ok());
  std::vector<float> out(3);
  REQUIRE(c->read(0, out.data(), 12).ok());
  CHECK(out == std::vector<float>{2, 4, 6});
  std::string log = fake.log();
  CHECK(log.find("hipMemcpyAsync(12, kind 3)") < log.find("hipStreamSynchronize"));
  CHECK(log.find("hipStreamSynchronize") < log.find("hipMemcpy(12, kind 2)"));
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_CASE("cuda: freed memory serves the next allocation of its size class") {
  Fake fake = cudaFake();
  auto dev = open(hal::cuda::cudaDriver());
  uint64_t first = 0;
  {
    auto a = allocate(*dev, 1000);
    first = static_cast<hal::gpu::GpuBuffer&>(*a).address();
  }
  CHECK(dev->memoryStats().bytesInUse == 0);
  auto b = allocate(*dev, 1024); // 1000 and 1024 bytes are both 4 granules of 256
  CHECK(static_cast<hal::gpu::GpuBuffer&>(*b).address() == first);
  CHECK(dev->memoryStats().bytesInUse == 1024);
  std::string log = fake.log();
  CHECK(occurrences(log, "cuMemAlloc_v2(1024)") == 1);
  CHECK(occurrences(log, "cuMemFree_v2") == 0);

  // Out of memory with freed buffers kept: they are freed, and the allocation tried again.
  { auto c = allocate(*dev, 4096); }
  fake.set("fail", "cuMemAlloc_v2 1");
  auto d = allocate(*dev, 8192);
  log = fake.log();
  CHECK(occurrences(log, "cuMemAlloc_v2(8192)") == 2);
  CHECK(occurrences(log, "cuMemFree_v2") == 1);
  // With nothing kept, the failure is the allocation's error.
  fake.set("fail", "cuMemAlloc_v2 1");
  Result<std::unique_ptr<hal::Buffer>> e = dev->allocate(300);
  REQUIRE_FALSE(e.ok());
  CHECK(contains(firstError(e.diags()), "cuMemAlloc of 512 bytes failed"));
}

TEST_CASE("hip: failures of the library are errors") {
  Fake fake = hipFake();
  auto dev = open(hal::hip::hipDriver());
  fake.set("fail", "hipMalloc 2");
  auto first = dev->allocate(16);
  CHECK(first.ok());
  auto second = dev->allocate(16);
  REQUIRE_FALSE(second.ok());
  CHECK(firstError(second.diags()) ==
        "hip[0]: error: hip[0] (Fake AMD GPU 0): hipMalloc of 256 bytes failed: "
        "hipErrorOutOfMemory (out of memory)");
  CHECK(dev->memoryStats().bytesInUse == 16);

  Launch l = prepare(*dev, "amdgpu", amdPayload());
  fake.set("fail", "hipModuleLaunchKernel 1");
  CHECK(contains(dispatch(*dev, l, {1, 1, 1}),
                 "hipModuleLaunchKernel of kernel @main_dispatch_0 failed: hipErrorLaunchFailure"));
  fake.set("fail", "hipStreamSynchronize 1");
  CHECK(contains(dispatch(*dev, l, {1, 1, 1}), "hipStreamSynchronize (a kernel or copy on the "
                                               "stream failed) failed: hipErrorLaunchFailure"));
  fake.set("fail", "hipModuleLoadData 1");
  CHECK(contains(firstError(dev->loadExecutable("amdgpu", amdPayload()).diags()),
                 "hipModuleLoadData of the gfx942 code object failed: hipErrorInvalidImage"));
  // The device still works afterwards.
  CHECK(dispatch(*dev, l, {1, 1, 1}) == "");
}

TEST_CASE("hip: a status word a kernel set fails the submission") {
  Fake fake = hipFake();
  auto dev = open(hal::hip::hipDriver());
  Launch l = prepare(*dev, "amdgpu", amdPayload());
  fake.set("status", "3");
  CHECK(dispatch(*dev, l, {2, 1, 1}) ==
        "hip[0]: error: kernel @main_dispatch_0 on hip[0] (Fake AMD GPU 0): an index read from "
        "tensor data (a gather or scatter index) is out of range (status 3)");
  // The words are reset by the next submission.
  CHECK(dispatch(*dev, l, {2, 1, 1}) == "");
}

TEST_CASE("hip: profiles time each dispatch with events") {
  hipFake();
  auto dev = open(hal::hip::hipDriver());
  Launch l = prepare(*dev, "amdgpu", amdPayload());
  Recorder rec;
  REQUIRE(dev->setProfiler(&rec));
  CHECK(dispatch(*dev, l, {1, 1, 1}) == "");
  CHECK(dispatch(*dev, l, {1, 1, 1}) == "");
  dev->setProfiler(nullptr);
  REQUIRE(rec.seconds.size() == 2);
  CHECK(rec.seconds[0] == doctest::Approx(0.001)); // the fake's clock: 1 ms per event
}

TEST_CASE("hip: the executor runs a schedule's launches on hip[0]") {
  Fake fake = hipFake();
  // What the compiler makes of `abs` over tensor<{n}xf32> for a GPU device: upload, allocate,
  // launch over n/64 workgroups with n as the push constant, read back.
  Result<std::unique_ptr<Module>> host = parseModule(R"(symbol n in [1, 65536]

func @main(%x: tensor<{n}xf32>) -> (tensor<{n}xf32>) {
  %0 = transfer_to %x {device = "hip[0]"} : tensor<{n}xf32>
  %1 = alloc_buffer {device = "hip[0]"} : tensor<{n}xf32>
  launch %0, %1 {device = "hip[0]", kernel = "main_dispatch_0", outputs = 1, push = ["n"], workgroups = ["n ceildiv 64", "1", "1"]}
  free %0
  wait {device = "hip[0]"}
  return %1
}
)",
                                                     "schedule.kir");
  REQUIRE(host.ok());
  GpuKernelInfo k = kernel();
  k.args = {{ElemType::F32, 1, false}, {ElemType::F32, 1, true}};
  k.kernargBytes = kernargBytes(k.args, 1);
  Program p;
  p.host = std::shared_ptr<Module>(host.take());
  p.entries = {"main"};
  p.devices = {"hip[0]"};
  p.executables = {{"amdgpu", amdPayload({k})}};
  Result<std::unique_ptr<Executor>> ex = Executor::create(std::make_shared<const Program>(p));
  REQUIRE(ex.ok());
  HostTensor x(ElemType::F32, {100});
  Result<std::vector<HostTensor>> r = (*ex)->call("main", {x});
  INFO((r.ok() ? std::string() : firstError(r.diags())));
  REQUIRE(r.ok());
  CHECK((*r)[0].shape() == std::vector<int64_t>{100});
  std::string log = fake.log();
  CHECK(contains(log, "hipMemcpy(400, kind 1)"));
  CHECK(contains(log, "hipModuleLaunchKernel(main_dispatch_0 grid 2,1,1 block 64,1,1 shared 0 "
                      "kernarg 48)"));
  CHECK(contains(log, "hipMemcpy(400, kind 2)"));
  std::vector<uint64_t> w = fake.kernargs();
  REQUIRE(w.size() == 6);
  CHECK(w[2] == 100); // the input's extent
  CHECK(w[3] == 100); // the output's
  CHECK(w[4] == 100); // n

  // A status a kernel stored fails the call with the kernel's name.
  fake.set("status", "2");
  Result<std::vector<HostTensor>> failed = (*ex)->call("main", {x});
  REQUIRE_FALSE(failed.ok());
  CHECK(contains(firstError(failed.diags()),
                 "kernel @main_dispatch_0 on hip[0] (Fake AMD GPU 0): loop step is not positive"));
}

namespace {

// Opens device 0 of `driver`, uploads, loads `payload`, copies, fills, launches and reads back;
// the first error, or "" when everything ran.
std::string wholeRun(hal::Driver* driver, const std::string& target, const std::string& payload) {
  Result<std::shared_ptr<hal::Device>> dev = driver->open(0);
  if (!dev.ok()) return firstError(dev.diags());
  Result<std::unique_ptr<hal::Buffer>> in = (*dev)->allocate(128), out = (*dev)->allocate(32);
  if (!in.ok()) return firstError(in.diags());
  if (!out.ok()) return firstError(out.diags());
  std::vector<uint8_t> bytes(128, 1);
  if (Status s = (*in)->write(0, bytes.data(), 128); !s.ok()) return firstError(s.diags());
  Result<std::unique_ptr<hal::Executable>> exe = (*dev)->loadExecutable(target, payload);
  if (!exe.ok()) return firstError(exe.diags());
  auto cb = (*dev)->createCommandBuffer();
  cb->copy(**in, 0, **out, 0, 16);
  cb->fill(**out, 16, 16, 7);
  cb->dispatch(**exe, 0, {2, 1, 1}, {3},
               {{in->get(), ElemType::F32, {4, 8}}, {out->get(), ElemType::F32, {8}}});
  auto sem = (*dev)->createSemaphore(0);
  if (Status s = (*dev)->submit(*cb, nullptr, 0, *sem, 1); !s.ok()) return firstError(s.diags());
  if (Status s = (*out)->read(0, bytes.data(), 32); !s.ok()) return firstError(s.diags());
  return "";
}

// Makes each of `calls` fail at its first, second and third use in a whole run: every failure
// is an error that names the call, the device still works afterwards.
void failEachCall(const Fake& fake, hal::Driver* driver, const std::string& target,
                  const std::string& payload, const std::vector<std::string>& calls) {
  for (const std::string& call : calls) {
    CAPTURE(call);
    int injected = 0;
    for (int n = 1; n <= 3; ++n) {
      CAPTURE(n);
      fake.reset();
      fake.set("fail", (call + " " + std::to_string(n)).c_str());
      std::string e = wholeRun(driver, target, payload);
      if (contains(fake.log(), "failed on request")) {
        ++injected;
        CHECK(contains(e, "error: "));
        CHECK(contains(e, call.substr(0, call.find('_'))));
      } else {
        CHECK(e == ""); // the run makes fewer than n such calls
      }
      fake.reset();
      CHECK(wholeRun(driver, target, payload) == "");
    }
    CHECK(injected > 0);
  }
}

} // namespace

TEST_CASE("hip: each failing call is an error") {
  Fake fake = hipFake();
  failEachCall(fake, hal::hip::hipDriver(), "amdgpu", amdPayload(),
               {"hipMalloc", "hipMemcpy", "hipMemcpyAsync", "hipMemsetAsync", "hipStreamCreate",
                "hipStreamSynchronize", "hipModuleLoadData", "hipModuleLaunchKernel"});
}

TEST_CASE("cuda: each failing call is an error") {
  Fake fake = cudaFake();
  failEachCall(fake, hal::cuda::cudaDriver(), "cuda", cudaPayload(),
               {"cuDevicePrimaryCtxRetain", "cuMemAlloc_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2",
                "cuMemcpyDtoDAsync_v2", "cuMemsetD8Async", "cuStreamCreate", "cuStreamSynchronize",
                "cuLaunchKernel"});
}

TEST_CASE("hip: a missing library is a reason, not a crash") {
  setenv("KILN_HIP_LIBRARY", "/nonexistent/libamdhip64.so", 1);
  hal::Driver* d = hal::hip::hipDriver();
  CHECK(d->enumerate().empty());
  std::string why = d->unavailableReason();
  CHECK(contains(why, "/nonexistent/libamdhip64.so could not be opened"));
  CHECK(contains(why, "KILN_HIP_LIBRARY"));
  CHECK_FALSE(d->open(0).ok());
}

TEST_CASE("cuda: devices and descriptions") {
  cudaFake();
  hal::Driver* d = hal::cuda::cudaDriver();
  CHECK(d->name() == "cuda");
  CHECK(d->target() == "cuda");
  std::vector<hal::DeviceInfo> devices = d->enumerate();
  REQUIRE(devices.size() == 1);
  CHECK(devices[0].id.str() == "cuda[0]");
  CHECK(contains(devices[0].description,
                 "Fake NVIDIA GPU 0, sm_90 (compute capability 9.0), 81920 MiB memory, warp 32, "
                 "shared memory 48 KiB (227 KiB opt-in)"));
  CHECK(d->unavailableReason().empty());
}

TEST_CASE("cuda: buffers and launches in the primary context") {
  Fake fake = cudaFake();
  auto dev = open(hal::cuda::cudaDriver());
  Launch l = prepare(*dev, "cuda", cudaPayload());
  std::vector<float> in(32);
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(i);
  REQUIRE(l.in->write(0, in.data(), 128).ok());
  std::vector<float> back(32);
  REQUIRE(l.in->read(0, back.data(), 128).ok());
  CHECK(back == in);
  CHECK(dispatch(*dev, l, {5, 1, 2}, {-1}) == "");
  checkKernargs(fake, l, -1);
  std::string log = fake.log();
  CHECK(contains(log, "cuDevicePrimaryCtxRetain(0)"));
  CHECK(contains(log, "cuModuleLoadDataEx(2 options)"));
  CHECK(
      contains(log, "cuLaunchKernel(main_dispatch_0 grid 5,1,2 block 64,1,1 shared 0 kernarg 56)"));
  CHECK_FALSE(contains(log, "cuFuncSetAttribute"));
}

TEST_CASE("cuda: the JIT's error log becomes the error") {
  Fake fake = cudaFake();
  auto dev = open(hal::cuda::cudaDriver());
  fake.set("jit_log", "ptxas application ptx input, line 7; error   : Unknown symbol 'x'\n");
  Result<std::unique_ptr<hal::Executable>> r = dev->loadExecutable("cuda", cudaPayload());
  REQUIRE_FALSE(r.ok());
  CHECK(firstError(r.diags()) ==
        "cuda[0]: error: cuda[0] (Fake NVIDIA GPU 0): the CUDA JIT could not load the sm_90 PTX "
        "(CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed)): ptxas application ptx input, "
        "line 7; error   : Unknown symbol 'x'");
}

TEST_CASE("cuda: compute capability chooses the image") {
  Fake fake = cudaFake();
  fake.set("arch", "8.0");
  auto dev = open(hal::cuda::cudaDriver());
  Result<std::unique_ptr<hal::Executable>> miss = dev->loadExecutable("cuda", cudaPayload());
  REQUIRE_FALSE(miss.ok());
  CHECK(firstError(miss.diags()) ==
        "cuda[0]: error: this module's cuda code was compiled for sm_90; cuda[0] is sm_80 "
        "(recompile with --target=cuda:sm_80)");
  // With both images, the sm_80 one loads (the fake's JIT refuses .target sm_90 on sm_80).
  Launch l = prepare(*dev, "cuda", cudaPayload({kernel()}, {"sm_90", "sm_80"}));
  CHECK(dispatch(*dev, l, {1, 1, 1}) == "");
}

TEST_CASE("cuda: more than 48 KiB of dynamic shared memory is opted into") {
  Fake fake = cudaFake();
  auto dev = open(hal::cuda::cudaDriver());
  GpuKernelInfo k = kernel();
  k.dynamicSharedBytes = 100000;
  Launch l = prepare(*dev, "cuda", cudaPayload({k}));
  CHECK(contains(fake.log(), "cuFuncSetAttribute(8, 100000)"));
  CHECK(dispatch(*dev, l, {1, 1, 1}) == "");
  CHECK(contains(fake.log(), "shared 100000 kernarg 56"));

  // Static and dynamic together above 48 KiB opt in too.
  k.staticSharedBytes = 40000;
  k.dynamicSharedBytes = 20000;
  Launch both = prepare(*dev, "cuda", cudaPayload({k}));
  CHECK(contains(fake.log(), "cuFuncSetAttribute(8, 20000)"));
  k.staticSharedBytes = 0;

  k.dynamicSharedBytes = 240000;
  Result<std::unique_ptr<hal::Executable>> r = dev->loadExecutable("cuda", cudaPayload({k}));
  REQUIRE_FALSE(r.ok());
  CHECK(contains(firstError(r.diags()), "240000 bytes of shared memory (the device allows 232448 "
                                        "per workgroup)"));
  k.dynamicSharedBytes = 0;
  k.subgroupSize = 64;
  CHECK(contains(firstError(dev->loadExecutable("cuda", cudaPayload({k})).diags()),
                 "subgroups of 64 (the device runs subgroups of 32)"));
}

TEST_CASE("cuda: failures are errors") {
  Fake fake = cudaFake();
  auto dev = open(hal::cuda::cudaDriver());
  fake.set("fail", "cuMemAlloc_v2 1");
  auto b = dev->allocate(1024);
  REQUIRE_FALSE(b.ok());
  CHECK(firstError(b.diags()) == "cuda[0]: error: cuda[0] (Fake NVIDIA GPU 0): cuMemAlloc of 1024 "
                                 "bytes failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  Launch l = prepare(*dev, "cuda", cudaPayload());
  fake.set("status", "1");
  CHECK(contains(dispatch(*dev, l, {1, 1, 1}),
                 "kernel @main_dispatch_0 on cuda[0] (Fake NVIDIA GPU 0): index arithmetic "
                 "divides by zero (status 1)"));
  fake.set("fail", "cuStreamSynchronize 1");
  CHECK(contains(dispatch(*dev, l, {1, 1, 1}), "CUDA_ERROR_LAUNCH_FAILED"));
  fake.set("fail", "cuDevicePrimaryCtxRetain 1");
  Result<std::shared_ptr<hal::Device>> d = hal::cuda::cudaDriver()->open(0);
  REQUIRE_FALSE(d.ok());
  CHECK(contains(firstError(d.diags()), "cuDevicePrimaryCtxRetain failed: "
                                        "CUDA_ERROR_OUT_OF_MEMORY"));
}

TEST_CASE("cuda: a missing library is a reason, not a crash") {
  setenv("KILN_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  hal::Driver* d = hal::cuda::cudaDriver();
  CHECK(d->enumerate().empty());
  CHECK(contains(d->unavailableReason(), "/nonexistent/libcuda.so.1 could not be opened"));
  CHECK_FALSE(d->open(0).ok());
}
