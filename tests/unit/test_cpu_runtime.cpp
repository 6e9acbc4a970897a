// Unit tests for the cpu driver: the payload container (round trip, every truncation
// refused), host feature checks and the KILN_CPU_DISABLE_FEATURES override, the thread pool,
// kernels compiled here by the system C compiler (KILN_TEST_CC) into a shared object that
// implements abi.h, loaded and run through the HAL on 1 and 4 threads, tensor-level kernels
// from a `ref` executable on the same device, and the executor launching both with the grid
// and push constants it evaluates for each call.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "ir/text/parser.h"
#include "runtime/cpu/cpu.h"
#include "runtime/drivers.h"
#include "runtime/executor.h"
#include "runtime/module_format.h"

using namespace kiln;
using kiln::cpu::CpuPayload;

namespace {

// A tensor-level kernel, for the `ref` executable a cpu device loads beside its code.
const char* const kTwiceIr = R"(symbol n in [0, 1048576]
func @twice(%x: tensor<{n}xf32>) -> (tensor<{n}xf32>) {
  %0 = add %x, %x : tensor<{n}xf32>
  return %0
}
)";

// kernel 0 adds (and checks the ABI: extents, symbols and grid all say n); kernel 1
// multiplies; kernel 2 fails with status 1; kernel 3 with status 2.
const char* const kCode = R"(#include "runtime/cpu/abi.h"
extern "C" int32_t kiln_cpu_kernel_0(const KilnCpuArgs* a, int64_t begin, int64_t end) {
  const float* x = static_cast<const float*>(a->buffers[0]);
  const float* y = static_cast<const float*>(a->buffers[1]);
  float* z = static_cast<float*>(a->buffers[2]);
  int64_t n = a->symbols[0];
  if (a->extents[0] != n || a->extents[1] != n || a->extents[2] != n || a->grid[0] != n ||
      a->grid[1] != 1 || a->grid[2] != 1 || begin < 0 || end > n)
    return 99;
  for (int64_t i = begin; i < end; ++i) z[i] = x[i] + y[i];
  return 0;
}
extern "C" int32_t kiln_cpu_kernel_1(const KilnCpuArgs* a, int64_t begin, int64_t end) {
  const float* x = static_cast<const float*>(a->buffers[0]);
  const float* y = static_cast<const float*>(a->buffers[1]);
  float* z = static_cast<float*>(a->buffers[2]);
  for (int64_t i = begin; i < end; ++i) z[i] = x[i] * y[i];
  return 0;
}
extern "C" int32_t kiln_cpu_kernel_2(const KilnCpuArgs*, int64_t, int64_t) { return 1; }
extern "C" int32_t kiln_cpu_kernel_3(const KilnCpuArgs*, int64_t, int64_t) { return 2; }
)";

// The shared object built from kCode, or "" when no compiler was found at configure time.
const std::string& sharedObject() {
  static const std::string bytes = [] {
#ifdef KILN_TEST_CC
    namespace fs = std::filesystem;
    fs::path dir = fs::temp_directory_path() / ("kiln-cpu-test-" + std::to_string(getpid()));
    fs::create_directories(dir);
    std::ofstream(dir / "k.cpp") << kCode;
    std::string cmd = std::string(KILN_TEST_CC) + " -x c++ -std=c++17 -O2 -fPIC -shared -I" +
                      KILN_SOURCE_DIR + "/src -o " + (dir / "k.so").string() + " " +
                      (dir / "k.cpp").string();
    std::string out;
    if (std::system(cmd.c_str()) == 0) {
      std::ifstream in(dir / "k.so", std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      out = ss.str();
    }
    fs::remove_all(dir);
    return out;
#else
    return std::string();
#endif
  }();
  return bytes;
}

// A payload whose kernel @add (three rank-1 f32 buffers, push constant n) is compiled as
// `symbol` (kiln_cpu_kernel_N).
CpuPayload addPayload(const std::string& symbol = "kiln_cpu_kernel_0") {
  CpuPayload p;
  p.cpu = "x86-64";
  p.features = {"sse2"};
  kiln::cpu::CpuArgInfo f32{ElemType::F32, 1};
  p.kernels = {{"add", symbol, {"n"}, {f32, f32, f32}}};
  p.sharedObject = sharedObject();
  return p;
}

Result<std::unique_ptr<hal::Executable>> loadOn(hal::Device& d, const CpuPayload& p) {
  return d.loadExecutable("cpu", kiln::cpu::serializeCpuPayload(p));
}

std::unique_ptr<hal::Buffer> floats(hal::Device& d, const std::vector<float>& v) {
  auto b = d.allocate(v.size() * sizeof(float));
  REQUIRE(b.ok());
  REQUIRE((*b)->write(0, v.data(), v.size() * sizeof(float)).ok());
  return b.take();
}

std::vector<float> readFloats(hal::Buffer& b, size_t n) {
  std::vector<float> v(n);
  REQUIRE(b.read(0, v.data(), n * sizeof(float)).ok());
  return v;
}

// Runs kernel `kernel` of `exe` as c = f(a, b) on n elements; returns c or the error.
Result<std::vector<float>> runBinary(hal::Device& d, const hal::Executable& exe, size_t kernel,
                                     int64_t n, std::vector<int64_t> shapeOverride = {}) {
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    a[static_cast<size_t>(i)] = 0.5f * static_cast<float>(i);
    b[static_cast<size_t>(i)] = 3.0f - static_cast<float>(i % 7);
  }
  auto ba = floats(d, a), bb = floats(d, b), bc = floats(d, std::vector<float>(a.size(), -1.0f));
  std::vector<int64_t> shape = shapeOverride.empty() ? std::vector<int64_t>{n} : shapeOverride;
  auto cb = d.createCommandBuffer();
  cb->dispatch(exe, kernel, {n, 1, 1}, {n},
               {{ba.get(), ElemType::F32, shape},
                {bb.get(), ElemType::F32, shape},
                {bc.get(), ElemType::F32, shape}});
  auto sem = d.createSemaphore(0);
  Status s = d.submit(*cb, nullptr, 0, *sem, 1);
  if (!s.ok()) return s.takeDiags();
  return readFloats(*bc, a.size());
}

} // namespace

TEST_CASE("cpu payload: round trip keeps every field") {
  CpuPayload p;
  p.cpu = "x86-64-v3";
  p.features = {"avx2", "fma", ""};
  p.kernels = {{"f", "kiln_cpu_kernel_0", {"n", "seq"}, {{ElemType::F16, 2}, {ElemType::I64, 0}}},
               {"g", "kiln_cpu_kernel_1", {}, {}}};
  p.sharedObject = std::string("\x7f"
                               "ELF\0\1\2",
                               7);
  auto q = kiln::cpu::parseCpuPayload(kiln::cpu::serializeCpuPayload(p));
  REQUIRE_MESSAGE(q.ok(), (q.ok() ? "" : q.diags().str()));
  CHECK(q->cpu == p.cpu);
  CHECK(q->features == p.features);
  REQUIRE(q->kernels.size() == 2);
  CHECK(q->kernels[0].name == "f");
  CHECK(q->kernels[0].symbol == "kiln_cpu_kernel_0");
  CHECK(q->kernels[0].symbols == std::vector<std::string>{"n", "seq"});
  REQUIRE(q->kernels[0].args.size() == 2);
  CHECK(q->kernels[0].args[0].elem == ElemType::F16);
  CHECK(q->kernels[0].args[0].rank == 2);
  CHECK(q->kernels[0].args[1].elem == ElemType::I64);
  CHECK(q->kernels[0].args[1].rank == 0);
  CHECK(q->kernels[1].symbol == "kiln_cpu_kernel_1");
  CHECK(q->sharedObject == p.sharedObject);
}

TEST_CASE("cpu payload: every truncation, a trailing byte, a bad magic and a bad argument are "
          "refused") {
  CpuPayload p;
  p.cpu = "x86-64-v4";
  p.features = {"avx512f", "avx512bw"};
  p.kernels = {{"f", "kiln_cpu_kernel_0", {"n"}, {{ElemType::F32, 1}}}};
  p.sharedObject = "ELFISH";
  std::string bytes = kiln::cpu::serializeCpuPayload(p);
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = kiln::cpu::parseCpuPayload(bytes.substr(0, n));
    REQUIRE_FALSE(r.ok());
    CHECK(r.diags().str().find("<cpu executable>: error:") == 0);
  }
  CHECK_FALSE(kiln::cpu::parseCpuPayload(bytes + "x").ok());
  // A payload of the previous version (with IR text) is refused by its magic.
  std::string old = bytes;
  old[7] = '1';
  auto m = kiln::cpu::parseCpuPayload(old);
  REQUIRE_FALSE(m.ok());
  CHECK(m.diags().str().find("no KILNCPU2 header") != std::string::npos);
  // A huge length or count is refused without allocating it.
  std::string huge = bytes;
  for (int i = 8; i < 16; ++i) huge[static_cast<size_t>(i)] = '\xff';
  CHECK_FALSE(kiln::cpu::parseCpuPayload(huge).ok());
  // An argument's element type must be one kiln knows.
  std::string badType = bytes;
  size_t at = badType.find("f32");
  REQUIRE(at != std::string::npos);
  badType[at + 1] = '9';
  auto t = kiln::cpu::parseCpuPayload(badType);
  REQUIRE_FALSE(t.ok());
  CHECK(t.diags().str().find("argument of unknown type 'f92'") != std::string::npos);
}

TEST_CASE("cpu features: checkable names, the host's baseline, and the disable override") {
  const auto& names = kiln::cpu::checkableCpuFeatures();
  for (const char* f : {"sse4.1", "sse4.2", "popcnt", "avx", "avx2", "fma", "f16c", "bmi", "bmi2",
                        "lzcnt", "movbe", "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl",
                        "avx512bf16", "avx512fp16", "avx512vnni"})
    CHECK_MESSAGE(std::find(names.begin(), names.end(), f) != names.end(), f);
  CHECK_FALSE(kiln::cpu::hostHasCpuFeature("warp-drive"));
#if defined(__x86_64__)
  CHECK(kiln::cpu::hostHasCpuFeature("sse2"));
  CHECK(kiln::cpu::hostHasCpuFeature("cx8"));
  // avx512f implies avx2 and avx on every CPU that has it.
  if (kiln::cpu::hostHasCpuFeature("avx512f")) CHECK(kiln::cpu::hostHasCpuFeature("avx2"));
  if (kiln::cpu::hostHasCpuFeature("avx2")) CHECK(kiln::cpu::hostHasCpuFeature("avx"));
  setenv("KILN_CPU_DISABLE_FEATURES", "avx2,sse2", 1);
  CHECK_FALSE(kiln::cpu::hostHasCpuFeature("sse2"));
  CHECK_FALSE(kiln::cpu::hostHasCpuFeature("avx2"));
  CHECK(kiln::cpu::hostHasCpuFeature("cx8"));
  unsetenv("KILN_CPU_DISABLE_FEATURES");
  CHECK(kiln::cpu::hostHasCpuFeature("sse2"));
#endif
  CHECK_FALSE(kiln::cpu::hostCpuModel().empty());
}

TEST_CASE("cpu thread pool: every item once, on several threads, and the caller alone") {
  for (int threads : {1, 2, 4}) {
    hal::cpu::ThreadPool pool(threads);
    CHECK(pool.threads() == threads);
    for (int64_t total : {0, 1, 7, 1000}) {
      for (int64_t chunk : {1, 3, 64}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(total));
        pool.run(total, chunk, [&](int64_t b, int64_t e) {
          CHECK(e - b <= chunk);
          for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)]++;
        });
        bool once = true;
        for (auto& s : seen) once = once && s.load() == 1;
        CHECK_MESSAGE(once, "threads " << threads << " total " << total << " chunk " << chunk);
      }
    }
  }
  // Back-to-back runs, some while workers still spin and some after they slept: no run is
  // lost or joined twice (a lost wake-up would hang here).
  hal::cpu::ThreadPool pool(4);
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 3000; ++r) {
    if (r % 500 == 499) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    pool.run(r % 17 + 1, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  }
  int64_t want = 0;
  for (int r = 0; r < 3000; ++r) want += r % 17 + 1;
  CHECK(sum.load() == want);
  std::mutex mu;
  std::set<std::thread::id> ids;
  pool.run(64, 1, [&](int64_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  CHECK(ids.size() > 1);
  CHECK(ids.count(std::this_thread::get_id()) == 1); // the caller works too
  // Each thread starts on its own share: of 4 items on 2 threads, items 0 and 1 are the
  // caller's and 2 and 3 the worker's. Each item takes 2 ms, so the caller runs both of its
  // own before it could help the worker (one counter for the whole range gave item 1 to the
  // worker, which took it while the caller ran item 0), unless a thread stalled for
  // milliseconds (allowed in 2 of the 10 runs).
  hal::cpu::ThreadPool two(2);
  int callerKeptItsShare = 0;
  bool workerTookItsShare = false;
  for (int r = 0; r < 10; ++r) {
    std::thread::id at[4];
    two.run(4, 1, [&](int64_t b, int64_t) {
      at[b] = std::this_thread::get_id();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    });
    std::thread::id me = std::this_thread::get_id();
    callerKeptItsShare += at[0] == me && at[1] == me;
    workerTookItsShare = workerTookItsShare || at[2] != me;
  }
  CHECK(callerKeptItsShare >= 8);
  CHECK(workerTookItsShare);
}

TEST_CASE("cpu thread count: --cpu-threads beats KILN_CPU_THREADS beats the cores") {
  setenv("KILN_CPU_THREADS", "3", 1);
  CHECK(hal::cpu::cpuThreadCount() == 3);
  hal::cpu::setCpuThreads(5);
  CHECK(hal::cpu::cpuThreadCount() == 5);
  CHECK(hal::cpu::CpuDevice(0).threads() == 5);
  hal::cpu::setCpuThreads(0);
  setenv("KILN_CPU_THREADS", "zero", 1);
  CHECK(hal::cpu::cpuThreadCount() >= 1);
  unsetenv("KILN_CPU_THREADS");
}

TEST_CASE("cpu driver: one device, cpu[0], named after the host CPU") {
  hal::Driver* d = hal::lookupDriver("cpu");
  REQUIRE(d != nullptr);
  CHECK(d->target() == "cpu");
  auto devs = d->enumerate();
  REQUIRE(devs.size() == 1);
  CHECK(devs[0].id.str() == "cpu[0]");
  CHECK(devs[0].description.find(kiln::cpu::hostCpuModel()) == 0);
  CHECK(devs[0].description.find("threads") != std::string::npos);
  auto dev = hal::openDevice({"cpu", 0}, Loc{});
  REQUIRE(dev.ok());
  CHECK((*dev)->description().find("threads") != std::string::npos);
  // Buffers are aligned for full-width vector access, whatever their size.
  for (uint64_t bytes : {0, 1, 4, 63, 65, 4096, 1000003}) {
    auto b = (*dev)->allocate(bytes);
    REQUIRE(b.ok());
    CHECK(reinterpret_cast<uintptr_t>((*b)->map()) % 64 == 0);
    CHECK((*b)->byteSize() == bytes);
  }
  auto missing = hal::openDevice({"cpu", 1}, Loc{});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.diags().str().find("cpu[1] does not exist") != std::string::npos);
}

TEST_CASE("cpu executable: features the host lacks, or cannot check, are refused clearly") {
  hal::cpu::CpuDevice dev(0, 1);
  CpuPayload p = addPayload();
  p.cpu = "x86-64-v4";
  p.features = {"avx512f", "avx512bw", "sse2"};
  setenv("KILN_CPU_DISABLE_FEATURES", "avx512f,avx512bw", 1);
  auto r = loadOn(dev, p);
  unsetenv("KILN_CPU_DISABLE_FEATURES");
  REQUIRE_FALSE(r.ok());
  CHECK(r.diags().str() ==
        "<cpu executable>: error: this module's CPU code was compiled for x86-64-v4 and needs "
        "avx512f, avx512bw, which this CPU lacks; recompile with --target=cpu or a lower level "
        "such as --target=cpu:x86-64-v3\n");
  p.features = {"sse2", "warp-drive"};
  auto u = loadOn(dev, p);
  REQUIRE_FALSE(u.ok());
  CHECK(u.diags().str().find("needs warp-drive, which this runtime cannot check") !=
        std::string::npos);
  auto t = dev.loadExecutable("sim", kiln::cpu::serializeCpuPayload(addPayload()));
  REQUIRE_FALSE(t.ok());
  CHECK(t.diags().str().find("cpu devices load targets 'cpu' and 'ref'") != std::string::npos);
}

TEST_CASE("cpu executable: payloads without loadable code are refused") {
  hal::cpu::CpuDevice dev(0, 1);
  CpuPayload p = addPayload();
  p.sharedObject = "not an elf";
  CHECK(loadOn(dev, p).diags().str().find("not an x86-64 ELF shared object") != std::string::npos);
  p.sharedObject = std::string("\x7f"
                               "ELF garbage",
                               11);
  CHECK(loadOn(dev, p).diags().str().find("not an x86-64 ELF shared object") !=
        std::string::npos); // refused by the structural check, before dlopen
  p.sharedObject = "";
  CHECK(loadOn(dev, p).diags().str().find("the payload has kernels but no code") !=
        std::string::npos);
  // No kernels, no code: an empty executable.
  p.kernels.clear();
  auto empty = loadOn(dev, p);
  REQUIRE(empty.ok());
  CHECK((*empty)->numKernels() == 0);
}

TEST_CASE("cpu device: a compiled kernel runs through the HAL on 1 and 4 threads") {
  if (sharedObject().empty()) {
    MESSAGE("no C compiler at configure time: skipped");
    return;
  }
  for (int threads : {1, 4}) {
    CAPTURE(threads);
    hal::cpu::CpuDevice dev(0, threads);
    CHECK(dev.threads() == threads);
    auto exe = loadOn(dev, addPayload());
    REQUIRE_MESSAGE(exe.ok(), (exe.ok() ? "" : exe.diags().str()));
    for (int64_t n : {1, 5, 1000, 100000}) {
      auto c = runBinary(dev, **exe, 0, n);
      REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.diags().str()));
      bool right = true;
      for (int64_t i = 0; i < n; ++i)
        right = right && (*c)[static_cast<size_t>(i)] ==
                             0.5f * static_cast<float>(i) + (3.0f - static_cast<float>(i % 7));
      CHECK_MESSAGE(right, "n = " << n);
    }
    // A grid of 0 workgroups runs nothing (the kernel would fail on end > n otherwise).
    auto empty = runBinary(dev, **exe, 0, 0);
    CHECK(empty.ok());
  }
}

TEST_CASE("cpu device: tensor-level kernels run from a `ref` executable on the interpreter") {
  hal::cpu::CpuDevice dev(0, 2);
  auto exe = dev.loadExecutable("ref", kTwiceIr);
  REQUIRE_MESSAGE(exe.ok(), (exe.ok() ? "" : exe.diags().str()));
  CHECK((*exe)->target() == "ref");
  auto in = floats(dev, {1, 2, 3});
  auto out = floats(dev, {0, 0, 0});
  auto cb = dev.createCommandBuffer();
  cb->dispatch(**exe, 0, {1, 1, 1}, {3},
               {{in.get(), ElemType::F32, {3}}, {out.get(), ElemType::F32, {3}}});
  auto sem = dev.createSemaphore(0);
  REQUIRE(dev.submit(*cb, nullptr, 0, *sem, 1).ok());
  CHECK(readFloats(*out, 3) == std::vector<float>{2, 4, 6});
  // Its push constants are the symbols the kernel uses, bound back to their names.
  auto cb2 = dev.createCommandBuffer();
  cb2->dispatch(**exe, 0, {1, 1, 1}, {},
                {{in.get(), ElemType::F32, {3}}, {out.get(), ElemType::F32, {3}}});
  auto sem2 = dev.createSemaphore(0);
  Status s = dev.submit(*cb2, nullptr, 0, *sem2, 1);
  REQUIRE_FALSE(s.ok());
  CHECK(s.diags().str().find("kernel @twice reads 1 push constants, the dispatch has 0") !=
        std::string::npos);
}

TEST_CASE("cpu device: an asynchronous queue signals when its work has run, and fails its "
          "semaphore on an error") {
  hal::cpu::CpuDevice dev(0, 1, /*async=*/true);
  auto exe = dev.loadExecutable("ref", kTwiceIr);
  REQUIRE(exe.ok());
  auto in = floats(dev, {1, 2, 3});
  auto out = floats(dev, {0, 0, 0});
  auto sem = dev.createSemaphore(0);
  for (uint64_t v = 1; v <= 8; ++v) { // eight submissions in a row, run in order
    auto cb = dev.createCommandBuffer();
    cb->dispatch(**exe, 0, {1, 1, 1}, {3},
                 {{in.get(), ElemType::F32, {3}}, {out.get(), ElemType::F32, {3}}});
    cb->copy(*out, 0, *in, 0, 12);
    REQUIRE(dev.submit(*cb, nullptr, 0, *sem, v).ok()); // queued, not run yet
  }
  REQUIRE(sem->wait(8).ok());
  CHECK(readFloats(*in, 3) == std::vector<float>{256, 512, 768});
  // An error reaches the waiter through the semaphore, not through submit.
  auto bad = dev.createCommandBuffer();
  bad->dispatch(**exe, 0, {1, 1, 1}, {},
                {{in.get(), ElemType::F32, {3}}, {out.get(), ElemType::F32, {3}}});
  auto sem2 = dev.createSemaphore(0);
  REQUIRE(dev.submit(*bad, nullptr, 0, *sem2, 1).ok());
  Status s = sem2->wait(1);
  REQUIRE_FALSE(s.ok());
  CHECK(s.diags().str().find("kernel @twice reads 1 push constants") != std::string::npos);
  CHECK(dev.waitIdle().ok());
}

TEST_CASE("cpu device: two loaded executables keep their own code") {
  if (sharedObject().empty()) return;
  hal::cpu::CpuDevice dev(0, 2);
  auto add = loadOn(dev, addPayload("kiln_cpu_kernel_0"));
  auto mul = loadOn(dev, addPayload("kiln_cpu_kernel_1"));
  REQUIRE(add.ok());
  REQUIRE(mul.ok());
  auto a = runBinary(dev, **add, 0, 8);
  auto m = runBinary(dev, **mul, 0, 8);
  REQUIRE(a.ok());
  REQUIRE(m.ok());
  CHECK((*a)[2] == 1.0f + 1.0f);
  CHECK((*m)[2] == 1.0f * 1.0f);
  CHECK((*m)[3] == 1.5f * 0.0f);
  add->reset(); // its code is dlclosed; the next load must not get the old code back
  auto again = loadOn(dev, addPayload("kiln_cpu_kernel_0"));
  REQUIRE(again.ok());
  auto m2 = runBinary(dev, **mul, 0, 8);
  auto a2 = runBinary(dev, **again, 0, 8);
  REQUIRE(m2.ok());
  REQUIRE(a2.ok());
  CHECK(*m2 == *m);
  CHECK(*a2 == *a);
}

TEST_CASE("cpu device: run-time errors name the kernel") {
  if (sharedObject().empty()) return;
  hal::cpu::CpuDevice dev(0, 4);
  auto missing = loadOn(dev, addPayload("kiln_cpu_kernel_9"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.diags().str().find("no entry point 'kiln_cpu_kernel_9'") != std::string::npos);
  CHECK(missing.diags().str().find("undefined symbol") != std::string::npos);

  auto div = loadOn(dev, addPayload("kiln_cpu_kernel_2"));
  REQUIRE(div.ok());
  auto d = runBinary(dev, **div, 0, 100);
  REQUIRE_FALSE(d.ok());
  CHECK(d.diags().str() ==
        "cpu[0]: error: kernel @add: index arithmetic divides by zero (status 1)\n");
  auto step = loadOn(dev, addPayload("kiln_cpu_kernel_3"));
  REQUIRE(step.ok());
  auto s = runBinary(dev, **step, 0, 3);
  REQUIRE_FALSE(s.ok());
  CHECK(s.diags().str().find("kernel @add: loop step is not positive") != std::string::npos);

  auto exe = loadOn(dev, addPayload());
  REQUIRE(exe.ok());
  auto shape = runBinary(dev, **exe, 0, 4, {2, 2});
  REQUIRE_FALSE(shape.ok());
  CHECK(shape.diags().str().find("buffer 0 is not of rank 1 and element type f32") !=
        std::string::npos);

  CpuPayload p = addPayload();
  p.kernels[0].symbols = {"n", "m"};
  auto unbound = loadOn(dev, p);
  REQUIRE(unbound.ok());
  auto u = runBinary(dev, **unbound, 0, 4);
  REQUIRE_FALSE(u.ok());
  CHECK(u.diags().str().find("kernel @add reads 2 push constants, the dispatch has 1") !=
        std::string::npos);
}

// A schedule that launches @add from the cpu executable and @twice from the ref one.
const char* const kHost = R"(symbol n in [1, 1048576]
func @main(%x: tensor<{n}xf32>) -> (tensor<{n}xf32>) {
  %0 = transfer_to %x {device = "cpu[0]"} : tensor<{n}xf32>
  %1 = alloc_buffer {device = "cpu[0]"} : tensor<{n}xf32>
  launch %0, %0, %1 {device = "cpu[0]", kernel = "add", outputs = 1, push = ["n"], workgroups = ["n", "1", "1"]}
  %2 = alloc_buffer {device = "cpu[0]"} : tensor<{n}xf32>
  launch %1, %2 {device = "cpu[0]", kernel = "twice", outputs = 1, push = ["n"]}
  wait {device = "cpu[0]"}
  return %2
}
)";

TEST_CASE("cpu device: the executor resolves each launch to the cpu or the ref executable and "
          "evaluates its grid for every call's dims") {
  if (sharedObject().empty()) return;
  auto host = parseModule(kHost, "main.kir");
  REQUIRE_MESSAGE(host.ok(), (host.ok() ? "" : host.diags().str()));
  Program prog;
  prog.host = std::shared_ptr<Module>(host.take());
  prog.entries = {"main"};
  prog.devices = {"cpu[0]"};
  prog.executables = {{"cpu", kiln::cpu::serializeCpuPayload(addPayload())}, {"ref", kTwiceIr}};
  {
    // Through the .kmod format: code needing a feature the host lacks is refused when the
    // executor loads it.
    Program needy = prog;
    CpuPayload p = addPayload();
    p.cpu = "x86-64-v3";
    p.features = {"sse2", "fma"};
    needy.executables[0].payload = kiln::cpu::serializeCpuPayload(p);
    auto bytes = serializeProgram(needy);
    REQUIRE(bytes.ok());
    auto owner = std::make_shared<std::string>(bytes.take());
    auto loaded = loadProgram(*owner, owner, "t.kmod", ".");
    REQUIRE_MESSAGE(loaded.ok(), (loaded.ok() ? "" : loaded.diags().str()));
    setenv("KILN_CPU_DISABLE_FEATURES", "fma", 1);
    auto refused = Executor::create(std::make_shared<const Program>(loaded.take()));
    unsetenv("KILN_CPU_DISABLE_FEATURES");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.diags().str().find("compiled for x86-64-v3 and needs fma, which this CPU "
                                     "lacks") != std::string::npos);
  }
  auto ex = Executor::create(std::make_shared<const Program>(std::move(prog)));
  REQUIRE_MESSAGE(ex.ok(), (ex.ok() ? "" : ex.diags().str()));
  // Kernel 0 fails unless its grid, extents and push constant all equal this call's n.
  for (int64_t n : {5, 1000}) {
    CAPTURE(n);
    HostTensor x(ElemType::F32, {n});
    for (int64_t i = 0; i < n; ++i) x.setF(i, 0.5 * double(i));
    auto got = (*ex)->call("main", {x});
    REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.diags().str()));
    bool right = (*got)[0].shape() == std::vector<int64_t>{n};
    for (int64_t i = 0; right && i < n; ++i) right = (*got)[0].getF(i) == 2.0 * double(i);
    CHECK(right);
  }
}
