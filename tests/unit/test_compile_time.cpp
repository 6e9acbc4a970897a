// Unit tests for the compile-time machinery: the kernel cache (entries, damage, pruning),
// the compile timer (phases, counts, kernels, progress) and parallelFor (order, errors).
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "backends/kernel_cache.h"
#include "backends/parallel.h"
#include "passes/compile_timer.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    std::string base = (fs::temp_directory_path() / "kiln-cache-test-XXXXXX").string();
    REQUIRE(mkdtemp(base.data()));
    path = base;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::vector<fs::path> entries(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
  return out;
}

std::string readAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeAll(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

} // namespace

TEST_CASE("kernel cache: keys depend on every part and on the parts' boundaries") {
  CHECK(kernelKey({"ab", "c"}).hex() == kernelKey({"ab", "c"}).hex());
  CHECK(kernelKey({"ab", "c"}).hex() != kernelKey({"a", "bc"}).hex());
  CHECK(kernelKey({"ab", "c"}).hex() != kernelKey({"ab", "d"}).hex());
  CHECK(kernelKey({"x"}).hex().size() == 32);
}

TEST_CASE("kernel cache: a stored entry loads back; a damaged one is a miss and is rewritten") {
  TempDir dir;
  KernelCache cache({dir.path, 1 << 20});
  KernelKey key = kernelKey({"kernel"});
  CHECK_FALSE(cache.load(key));
  cache.store(key, "object code");
  REQUIRE(entries(dir.path).size() == 1); // no temporary file left behind
  CHECK(cache.load(key).value_or("") == "object code");

  fs::path entry = entries(dir.path).front();
  std::string good = readAll(entry);
  // A flipped data byte, a truncated file, a wrong magic: each detected.
  std::string flipped = good;
  flipped.back() ^= 1;
  for (const std::string& bad : {flipped, good.substr(0, good.size() - 3), good.substr(0, 10),
                                 "XILNKC01" + good.substr(8)}) {
    writeAll(entry, bad);
    CHECK_FALSE(cache.load(key));
  }
  CHECK(cache.corrupt() == 4);
  cache.store(key, "object code");
  CHECK(cache.load(key).value_or("") == "object code");
  // An entry renamed to another key's name is not that key's.
  KernelKey other = kernelKey({"other"});
  fs::copy_file(entry, fs::path(dir.path) / (other.hex() + ".kko"));
  CHECK_FALSE(cache.load(other));
}

TEST_CASE("kernel cache: pruning keeps the most recently used entries within the bound") {
  TempDir dir;
  std::string data(1000, 'x');
  KernelCache big({dir.path, 1 << 20});
  for (int i = 0; i < 5; ++i) big.store(kernelKey({std::to_string(i)}), data);
  // Entry 0 is the oldest by time; reading it makes it the most recent.
  auto t = fs::file_time_type::clock::now();
  for (int i = 0; i < 5; ++i)
    fs::last_write_time(fs::path(dir.path) / (kernelKey({std::to_string(i)}).hex() + ".kko"),
                        t - std::chrono::hours(10 - i));
  REQUIRE(big.load(kernelKey({"0"})));
  KernelCache small({dir.path, 2500});
  small.prune();
  CHECK(entries(dir.path).size() == 2);
  CHECK(small.load(kernelKey({"0"})));
  CHECK(small.load(kernelKey({"4"})));
  CHECK_FALSE(small.load(kernelKey({"1"})));
}

TEST_CASE("kernel cache: a disabled cache reads and writes nothing") {
  TempDir dir;
  KernelCache off({"", 1 << 20});
  CHECK_FALSE(off.enabled());
  off.store(kernelKey({"k"}), "data");
  CHECK_FALSE(off.load(kernelKey({"k"})));
  off.prune();
  CHECK(entries(dir.path).empty());
}

TEST_CASE("kernel cache: KILN_CACHE_DIR, then XDG_CACHE_HOME, then HOME choose the directory") {
  std::string saved[3];
  const char* names[3] = {"KILN_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  bool had[3];
  for (int i = 0; i < 3; ++i) {
    const char* v = getenv(names[i]);
    had[i] = v != nullptr;
    if (v) saved[i] = v;
  }
  setenv("KILN_CACHE_DIR", "/tmp/k", 1);
  setenv("XDG_CACHE_HOME", "/tmp/x", 1);
  setenv("HOME", "/tmp/h", 1);
  CHECK(defaultKernelCacheDir() == "/tmp/k");
  unsetenv("KILN_CACHE_DIR");
  CHECK(defaultKernelCacheDir() == "/tmp/x/kiln");
  unsetenv("XDG_CACHE_HOME");
  CHECK(defaultKernelCacheDir() == "/tmp/h/.cache/kiln");
  for (int i = 0; i < 3; ++i) {
    if (had[i])
      setenv(names[i], saved[i].c_str(), 1);
    else
      unsetenv(names[i]);
  }
}

TEST_CASE("compile timer: nested phases in order, counts, slowest kernels, progress") {
  CompileTimer t;
  std::vector<std::string> seen;
  t.setProgress([&](const std::string& phase, size_t done, size_t total) {
    seen.push_back(phase + " " + std::to_string(done) + "/" + std::to_string(total));
  });
  {
    ScopedPhase outer(&t, "codegen cpu");
    t.addPhase("fuse", 1.5);
    ScopedPhase inner(&t, "compile kernels", 2);
    t.addKernel("k_fast", 1, 1, "O2");
    t.kernelDone();
    t.addKernel("k_slow", 50, 7, "O3");
    t.kernelDone();
  }
  t.addCount("kernels before deduplication", 3);
  t.addCount("kernels before deduplication", 2);
  CHECK(t.count("kernels before deduplication") == 5);
  std::string table = t.table(1);
  size_t a = table.find("codegen cpu"), b = table.find("  fuse"), c = table.find("compile kernels");
  CHECK(a != std::string::npos);
  CHECK(b > a);
  CHECK(c > b);
  CHECK(table.find("k_slow") != std::string::npos);
  CHECK(table.find("k_fast") == std::string::npos); // only the slowest one
  CHECK(table.find("kernels before deduplication: 5") != std::string::npos);
  // Times summed per group (the optimization level), O3 first.
  size_t o3 = table.find("  O3: 1 kernels, optimize 50.0 ms, code generation 7.0 ms\n");
  size_t o2 = table.find("  O2: 1 kernels, optimize 1.0 ms, code generation 1.0 ms\n");
  CHECK(o3 != std::string::npos);
  CHECK(o2 > o3);
  CHECK(seen == std::vector<std::string>{"codegen cpu 0/0", "compile kernels 0/2",
                                         "compile kernels 1/2", "compile kernels 2/2"});
}

TEST_CASE("parallelFor: results in task order for any thread count; failures are values") {
  for (unsigned jobs : {1u, 2u, 4u, 16u}) {
    std::atomic<int> ran{0};
    auto r = parallelFor<int>(20, jobs, [&](size_t i) -> Result<int> {
      ++ran;
      if (i % 7 == 3) return error(Loc::named("task"), "task " + std::to_string(i) + " failed");
      return static_cast<int>(i * i);
    });
    REQUIRE(r.size() == 20);
    CHECK(ran == 20);
    for (size_t i = 0; i < 20; ++i) {
      if (i % 7 == 3) {
        REQUIRE_FALSE(r[i].ok());
        CHECK(r[i].diags().str().find("task " + std::to_string(i) + " failed") !=
              std::string::npos);
      } else {
        REQUIRE(r[i].ok());
        CHECK(*r[i] == static_cast<int>(i * i));
      }
    }
  }
  CHECK(parallelFor<int>(0, 4, [](size_t) -> Result<int> { return 1; }).empty());
  CHECK(resolveJobs(3) == 3);
  CHECK(resolveJobs(0) >= 1);
}
