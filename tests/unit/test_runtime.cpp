// Unit tests for the runtime: the .kmod container (every flipped byte and every truncation
// refused, version and bounds errors), the executor (results equal the interpreter's,
// several functions and repeated calls on one load, input errors), the ref driver (buffers
// of another device refused, memory accounting), semaphores, and peak memory reporting.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <doctest/doctest.h>
#include <filesystem>

#include "compiler/compiler.h"
#include "ir/interp/interp.h"
#include "ir/io/mapped_file.h"
#include "ir/io/safetensors.h"
#include "ir/text/parser.h"
#include "ir/text/printer.h"
#include "kiln/compiler.h"
#include "runtime/drivers.h"
#include "runtime/executor.h"
#include "runtime/module_format.h"
#include "runtime/semaphore.h"

using namespace kiln;

namespace {

const char* const kSource = R"(symbol seq in [1, 64]
func @main(%x: tensor<{seq}x4xf32>, %s: tensor<f32>) -> (tensor<{seq}x4xf32>, tensor<4xf32>) {
  %0 = add %x, %s : tensor<{seq}x4xf32>
  %1 = exp %0 : tensor<{seq}x4xf32>
  %2 = reduce_sum %1 {axes = [0], keepdims = 0} : tensor<4xf32>
  return %0, %2
}
func @twice(%x: tensor<3xi32>) -> (tensor<3xi32>) {
  %0 = add %x, %x : tensor<3xi32>
  return %0
}
)";

// These tests are about the runtime on ref devices; a module names no device, so ref[0] is
// given explicitly (the default device is cpu[0] in builds with LLVM).
Program compile(const std::string& text, CompileOptions opts = {}) {
  if (opts.placement.devices.devices.empty() && !opts.placement.devices.autoDeclare)
    opts.placement.devices.devices.push_back("ref[0]");
  auto m = parseModule(text, "t.kir");
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.diags().str()));
  auto p = compileProgram(m.take(), opts);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.diags().str()));
  return p.take();
}

std::string bytesOf(const Program& p) {
  auto b = serializeProgram(p);
  REQUIRE(b.ok());
  return b.take();
}

Result<Program> load(const std::string& bytes) {
  auto owner = std::make_shared<std::string>(bytes);
  return loadProgram(*owner, owner, "t.kmod", ".");
}

HostTensor seqInput(int64_t seq) {
  HostTensor t(ElemType::F32, {seq, 4});
  for (int64_t i = 0; i < t.numElements(); ++i) t.setF(i, 0.25 * static_cast<double>(i) - 1);
  return t;
}

HostTensor scalar(double v) {
  HostTensor t(ElemType::F32, {});
  t.setF(0, v);
  return t;
}

std::unique_ptr<Executor> executorFor(Program p) {
  auto ex = Executor::create(std::make_shared<const Program>(std::move(p)));
  REQUIRE_MESSAGE(ex.ok(), (ex.ok() ? "" : ex.diags().str()));
  return ex.take();
}

} // namespace

TEST_CASE("a module file round-trips and runs like the interpreter, many times") {
  std::string bytes = bytesOf(compile(kSource));
  auto loaded = load(bytes);
  REQUIRE_MESSAGE(loaded.ok(), (loaded.ok() ? "" : loaded.diags().str()));
  CHECK(loaded->entries == std::vector<std::string>{"main", "twice"});
  CHECK(loaded->devices == std::vector<std::string>{"ref[0]"});
  auto ex = executorFor(loaded.take());

  auto source = parseModule(kSource, "t.kir");
  REQUIRE(source.ok());
  WeightStore none(**source);
  for (int64_t seq : {1, 3, 64, 3}) {
    std::vector<HostTensor> in = {seqInput(seq), scalar(0.5)};
    auto want = interpret(*(*source)->lookupFunc("main"), in, none);
    auto got = ex->call("main", in);
    REQUIRE(want.ok());
    REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.diags().str()));
    REQUIRE(got->size() == 2);
    CHECK((*got)[0].identical((*want)[0]));
    CHECK((*got)[1].identical((*want)[1]));
    CHECK(ex->lastStats().dispatches == 3);
  }
  HostTensor i(ElemType::I32, {3});
  for (int k = 0; k < 3; ++k) i.setI(k, k - 1);
  auto twice = ex->call("twice", {i});
  REQUIRE(twice.ok());
  CHECK((*twice)[0].getI(0) == -2);
  CHECK((*twice)[0].getI(2) == 2);
}

const char* const kWeighted = R"(weight @w : tensor<3xf32> = "w.safetensors"["w"]
func @main(%x: tensor<3xf32>) -> (tensor<3xf32>) {
  %0 = weight {name = "w"} : tensor<3xf32>
  %1 = mul %x, %0 : tensor<3xf32>
  return %1
}
)";

// A module with an embedded weight (all four section kinds).
std::string weightedBytes() {
  CompileOptions external;
  external.embedWeights = false;
  Program p = compile(kWeighted, external);
  HostTensor w(ElemType::F32, {3});
  w.setF(0, 1.5);
  p.embeddedWeights["w"] = w;
  return bytesOf(p);
}

TEST_CASE("flipping any byte or truncating anywhere is refused before anything runs") {
  for (const std::string& bytes : {bytesOf(compile(kSource)), weightedBytes()}) {
    REQUIRE(load(bytes).ok());
    for (size_t i = 0; i < bytes.size(); ++i) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ 0x01);
      auto r = load(bad);
      CHECK_MESSAGE(!r.ok(), "flip of byte " << i << " was accepted");
      bad[i] = static_cast<char>(bytes[i] ^ 0x80);
      CHECK_MESSAGE(!load(bad).ok(), "flip of bit 7 of byte " << i << " was accepted");
    }
    for (size_t n = 0; n < bytes.size(); ++n)
      CHECK_MESSAGE(!load(bytes.substr(0, n)).ok(), "truncation to " << n << " bytes was accepted");
    CHECK(!load(bytes + std::string(1, '\0')).ok());
  }
}

TEST_CASE("module file errors say what is wrong") {
  std::string bytes = bytesOf(compile(kSource));
  auto msg = [](const std::string& b) {
    auto r = load(b);
    REQUIRE(!r.ok());
    return r.diags().str();
  };
  // Version 1 modules (grids computed by the runtime from kernel IR) are refused.
  std::string v1 = bytes;
  v1[8] = 1;
  CHECK(msg(v1).find("t.kmod: error: module format version 1 is not supported; this kiln reads "
                     "version 2") != std::string::npos);
  CHECK(msg("hello").find("truncated module: 5 bytes") != std::string::npos);
  CHECK(msg(std::string(64, 'x')).find("not a kiln module (bad magic)") != std::string::npos);
  CHECK(msg(bytes.substr(0, bytes.size() - 10)).find("truncated module: the header says") !=
        std::string::npos);
  std::string flipped = bytes;
  flipped[bytes.size() - 3] ^= 0x10;
  CHECK(msg(flipped).find("checksum mismatch in section") != std::string::npos);
}

TEST_CASE("input errors name what is wrong") {
  auto ex = executorFor(compile(kSource));
  auto err = [&](const std::vector<HostTensor>& in) {
    auto r = ex->call("main", in);
    REQUIRE(!r.ok());
    return r.diags().str();
  };
  CHECK(err({seqInput(2)}).find("@main takes 2 inputs, got 1") != std::string::npos);
  CHECK(err({seqInput(2), HostTensor(ElemType::I32, {})}).find("has element type i32") !=
        std::string::npos);
  CHECK(err({HostTensor(ElemType::F32, {2, 5}), scalar(1)}).find("has shape [2, 5]") !=
        std::string::npos);
  CHECK(err({seqInput(65), scalar(1)}).find("outside its range [1, 64]") != std::string::npos);
  auto missing = ex->call("nope", {});
  REQUIRE(!missing.ok());
  CHECK(missing.diags().str().find("no function @nope") != std::string::npos);
  // The executor still works after errors.
  CHECK(ex->call("main", {seqInput(2), scalar(1)}).ok());
}

TEST_CASE("peak memory is the live set, below the sum of all tensors") {
  Program p = compile(R"(symbol n in [1, 1024]
func @chain(%x: tensor<{n}xf32>) -> (tensor<{n}xf32>) {
  %0 = exp %x : tensor<{n}xf32>
  %1 = neg %0 : tensor<{n}xf32>
  %2 = abs %1 : tensor<{n}xf32>
  %3 = sqrt %2 : tensor<{n}xf32>
  return %3
}
)");
  REQUIRE(p.stats.size() == 1);
  const FunctionStats& s = p.stats[0];
  CHECK(s.dispatches == 4);
  CHECK(s.totalBytes == 5 * 4 * 1024);
  CHECK(s.peakBytes == 2 * 4 * 1024);
  CHECK(s.peakExpr == "8*n");
  CHECK(s.boundAt == "n=1024");
  // The executor's measured peak agrees for a concrete size.
  auto ex = executorFor(std::move(p));
  HostTensor x(ElemType::F32, {100});
  REQUIRE(ex->call("chain", {x}).ok());
  CHECK(ex->lastStats().peakBytes == 2 * 4 * 100);
}

TEST_CASE("readInputsInPlace: aligned inputs are read where they lie, never written") {
  const char* text = R"(symbol n in [1, 1024]
func @chain(%x: tensor<{n}xf32>) -> (tensor<{n}xf32>) {
  %0 = exp %x : tensor<{n}xf32>
  %1 = sub %0, %x : tensor<{n}xf32>
  return %1
}
)";
  Program p = compile(text);
  // The schedule's live set at its peak: the input's upload and both results; memoryAt
  // evaluates it at n = 100.
  auto at = memoryAt(p, "chain", {{"n", 100}});
  REQUIRE(at.ok());
  CHECK(at->peakBytes == 3 * 4 * 100);
  CHECK(!memoryAt(p, "chain", {{"n", 2000}}).ok());
  CHECK(!memoryAt(p, "chain", {{"m", 1}}).ok());
  ExecutorOptions opts;
  opts.readInputsInPlace = true;
  auto ex = Executor::create(std::make_shared<const Program>(std::move(p)), opts);
  REQUIRE(ex.ok());
  HostTensor x(ElemType::F32, {100}); // kiln's tensors are 64-byte aligned
  for (int64_t i = 0; i < 100; ++i) x.setF(i, 0.01 * static_cast<double>(i));
  HostTensor before = x.clone();
  auto out = (*ex)->call("chain", {x});
  REQUIRE(out.ok());
  CHECK(x.identical(before));
  CHECK((*out)[0].getF(7) == doctest::Approx(std::exp(0.07) - 0.07).epsilon(1e-6));
  // Only the results' buffers were allocated: the input was not uploaded.
  uint64_t inPlace = (*ex)->lastStats().peakBytes;
  CHECK(inPlace == 2 * 4 * 100);
  // Memory the device cannot use (not 64-byte aligned) is uploaded as before.
  std::vector<float> raw(101, 0.5f);
  HostTensor odd = HostTensor::view(ElemType::F32, {100}, raw.data() + 1, nullptr);
  REQUIRE((*ex)->call("chain", {odd}).ok());
  CHECK((*ex)->lastStats().peakBytes == inPlace + 4 * 100);
}

TEST_CASE("weights: embedded in the module, or external and checked at load") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "kiln-test-runtime-weights";
  fs::create_directories(dir);
  HostTensor w(ElemType::F32, {2});
  w.setF(0, 3);
  w.setF(1, -4);
  REQUIRE(writeSafetensors((dir / "w.safetensors").string(), {{"w", w}}).ok());
  std::string src = "weight @w : tensor<2xf32> = \"" + (dir / "w.safetensors").string() +
                    "\"[\"w\"]\nfunc @main(%x: tensor<2xf32>) -> (tensor<2xf32>) {\n"
                    "  %0 = weight {name = \"w\"} : tensor<2xf32>\n"
                    "  %1 = mul %x, %0 : tensor<2xf32>\n  return %1\n}\n";
  HostTensor x(ElemType::F32, {2});
  x.setF(0, 2);
  x.setF(1, 0.5);

  std::string embedded = bytesOf(compile(src));
  CompileOptions ext;
  ext.embedWeights = false;
  std::string external = bytesOf(compile(src, ext));
  CHECK(embedded.size() > external.size());
  REQUIRE(
      writeSafetensors((dir / "w.safetensors").string(), {{"w", HostTensor(ElemType::F32, {2})}})
          .ok());
  for (const std::string* bytes : {&embedded, &external}) {
    auto p = load(*bytes);
    REQUIRE(p.ok());
    auto ex = executorFor(p.take());
    auto r = ex->call("main", {x});
    REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.diags().str()));
    // Embedded keeps the values compiled in; external reads the file as it is now (zeros).
    double first = bytes == &embedded ? 6 : 0;
    CHECK((*r)[0].getF(0) == first);
    CHECK(ex->call("main", {x}).ok());
  }
  fs::path file = dir / "external.kmod";
  {
    auto p = load(external);
    REQUIRE(p.ok());
    REQUIRE(writeProgramFile(file.string(), *p).ok());
  }
  CHECK(loadProgramFile(file.string()).ok());
  fs::remove(dir / "w.safetensors");
  auto missing = loadProgramFile(file.string());
  REQUIRE(!missing.ok());
  CHECK(missing.diags().str().find("cannot load weight @w") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("ref devices: own memory, and a kernel never touches another device's buffer") {
  setenv("KILN_REF_DEVICES", "2", 1);
  auto d0 = hal::openDevice({"ref", 0}, Loc{});
  auto d1 = hal::openDevice({"ref", 1}, Loc{});
  REQUIRE(d0.ok());
  REQUIRE(d1.ok());
  auto missing = hal::openDevice({"ref", 5}, Loc::named("--device"));
  REQUIRE(!missing.ok());
  CHECK(missing.diags().str() ==
        "--device: error: device ref[5] does not exist; this build has ref[0]..ref[1]\n");

  Program p = compile(kSource);
  auto exe = (*d0)->loadExecutable("ref", p.executables[0].payload);
  REQUIRE(exe.ok());
  CHECK((*exe)->numKernels() == 4);
  CHECK((*exe)->kernelName(3) == "twice.k0");
  auto in = (*d1)->allocate(12);
  auto out = (*d0)->allocate(12);
  REQUIRE(in.ok());
  REQUIRE(out.ok());
  auto cb = (*d0)->createCommandBuffer();
  cb->dispatch(**exe, 3, {1, 1, 1}, {},
               {{in->get(), ElemType::I32, {3}},
                {in->get(), ElemType::I32, {3}},
                {out->get(), ElemType::I32, {3}}});
  auto sem = (*d0)->createSemaphore(0);
  Status s = (*d0)->submit(*cb, nullptr, 0, *sem, 1);
  REQUIRE(!s.ok());
  CHECK(s.diags().str().find("input 0 is a buffer of ref[1]; it must be transferred to ref[0]") !=
        std::string::npos);
  // The failure reaches whoever waits on the semaphore.
  CHECK(!sem->wait(1).ok());

  auto good = (*d0)->allocate(12);
  REQUIRE(good.ok());
  int32_t vals[3] = {1, 2, 3};
  REQUIRE((*good)->write(0, vals, sizeof vals).ok());
  CHECK(!(*good)->write(4, vals, sizeof vals).ok());
  auto cb2 = (*d0)->createCommandBuffer();
  cb2->dispatch(**exe, 3, {1, 1, 1}, {},
                {{good->get(), ElemType::I32, {3}},
                 {good->get(), ElemType::I32, {3}},
                 {out->get(), ElemType::I32, {3}}});
  auto sem2 = (*d0)->createSemaphore(0);
  Status s2 = (*d0)->submit(*cb2, nullptr, 0, *sem2, 7);
  REQUIRE_MESSAGE(s2.ok(), (s2.ok() ? "" : s2.diags().str()));
  CHECK(sem2->value() == 7);
  int32_t res[3] = {};
  REQUIRE((*out)->read(0, res, sizeof res).ok());
  CHECK(res[2] == 6);
  // A wait for a value nobody signaled would block the synchronous queue forever.
  CHECK(!(*d0)->submit(*cb2, sem.get(), 99, *sem2, 8).ok());
  CHECK((*d0)->memoryStats().bytesInUse >= 24);
  CHECK((*d1)->memoryStats().bytesInUse >= 12);
  unsetenv("KILN_REF_DEVICES");
}

TEST_CASE("timeline semaphores only grow") {
  hal::HostSemaphore s(3);
  s.signal(2);
  CHECK(s.value() == 3);
  s.signal(5);
  CHECK(s.wait(4).ok());
  s.fail(Diags{{error(Loc::named("k"), "boom")}});
  CHECK(s.wait(100).diags().str() == "k: error: boom\n");
}

TEST_CASE("the schedule frees buffers after their last use and keeps returned ones") {
  Program p = compile(kSource);
  const Func* main = p.host->lookupFunc("main");
  std::vector<std::string> kinds;
  for (const auto& op : main->ops()) kinds.emplace_back(op->name());
  CHECK(kinds == std::vector<std::string>{"transfer_to", "transfer_to", "alloc_buffer", "launch",
                                          "free", "free", "alloc_buffer", "launch", "alloc_buffer",
                                          "launch", "free", "wait", "return"});
}

TEST_CASE("weights held in memory by the module are embedded without touching a file") {
  CompileOptions opts;
  opts.embedWeights = false;
  HostTensor w(ElemType::F32, {3});
  w.setF(0, 2);
  w.setF(1, 3);
  w.setF(2, 4);
  auto m = parseModule(kWeighted, "w.kir");
  REQUIRE(m.ok());
  (*m)->setWeightData("w", w);
  auto p = compileProgram(m.take(), opts);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.diags().str()));
  REQUIRE(p->embeddedWeights.count("w") == 1);
  auto loaded = load(bytesOf(*p));
  REQUIRE(loaded.ok());
  auto ex = executorFor(loaded.take());
  HostTensor x(ElemType::F32, {3});
  for (int i = 0; i < 3; ++i) x.setF(i, 1);
  auto r = ex->call("main", {x});
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.diags().str()));
  CHECK((*r)[0].getF(2) == 4);

  auto m2 = parseModule(kWeighted, "w.kir");
  REQUIRE(m2.ok());
  (*m2)->setWeightData("w", HostTensor(ElemType::F32, {4}));
  auto bad = compileProgram(m2.take(), opts);
  REQUIRE(!bad.ok());
  CHECK(bad.diags().str().find("the data held in memory is tensor<4xf32> but the declaration "
                               "says tensor<3xf32>") != std::string::npos);
}

TEST_CASE("a module written to its file as a stream holds the serialized bytes") {
  // Two weights whose sizes are not multiples of 64, so the weights section has gaps.
  const char* const src = R"(weight @a : tensor<3xf32> = "w.safetensors"["a"]
weight @b : tensor<17xf32> = "w.safetensors"["b"]
func @main(%x: tensor<3xf32>, %y: tensor<17xf32>) -> (tensor<3xf32>, tensor<17xf32>) {
  %0 = weight {name = "a"} : tensor<3xf32>
  %1 = weight {name = "b"} : tensor<17xf32>
  %2 = mul %x, %0 : tensor<3xf32>
  %3 = add %y, %1 : tensor<17xf32>
  return %2, %3
}
)";
  CompileOptions opts;
  opts.embedWeights = false;
  HostTensor a(ElemType::F32, {3}), b(ElemType::F32, {17});
  for (int i = 0; i < 3; ++i) a.setF(i, i + 0.5);
  for (int i = 0; i < 17; ++i) b.setF(i, -i);
  auto m = parseModule(src, "w.kir");
  REQUIRE(m.ok());
  (*m)->setWeightData("a", a);
  (*m)->setWeightData("b", b);
  auto p = compileProgram(m.take(), opts);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.diags().str()));
  REQUIRE(p->embeddedWeights.size() == 2);
  std::string bytes = bytesOf(*p);

  namespace fs = std::filesystem;
  fs::path file = fs::temp_directory_path() / "kiln-test-runtime-stream.kmod";
  REQUIRE(writeProgramFile(file.string(), *p).ok());
  auto mapped = mapFile(file.string());
  REQUIRE(mapped.ok());
  CHECK(std::string(reinterpret_cast<const char*>(mapped->data), mapped->size) == bytes);
  auto loaded = loadProgramFile(file.string());
  REQUIRE_MESSAGE(loaded.ok(), (loaded.ok() ? "" : loaded.diags().str()));
  CHECK(loaded->embeddedWeights.at("a").identical(a));
  CHECK(loaded->embeddedWeights.at("b").identical(b));
  fs::remove(file);

  // A file that cannot be created is an error, and nothing is left behind.
  fs::path dir = fs::temp_directory_path() / "kiln-test-runtime-stream-missing";
  fs::remove_all(dir);
  CHECK(!writeProgramFile((dir / "m.kmod").string(), *p).ok());
  CHECK(!fs::exists(dir / "m.kmod"));
}

TEST_CASE("command buffers copy and fill within a device, in order, across a barrier") {
  auto dev = hal::openDevice({"ref", 0}, Loc{});
  REQUIRE(dev.ok());
  auto a = (*dev)->allocate(8);
  auto b = (*dev)->allocate(8);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto cb = (*dev)->createCommandBuffer();
  cb->fill(**a, 0, 8, 0x11);
  cb->fill(**a, 2, 2, 0x22);
  cb->barrier();
  cb->copy(**a, 1, **b, 0, 4);
  cb->fill(**b, 4, 4, 0x33);
  CHECK(cb->numCommands() == 5);
  auto sem = (*dev)->createSemaphore(0);
  REQUIRE((*dev)->submit(*cb, nullptr, 0, *sem, 1).ok());
  uint8_t out[8] = {};
  REQUIRE((*b)->read(0, out, 8).ok());
  CHECK(out[0] == 0x11);
  CHECK(out[1] == 0x22);
  CHECK(out[2] == 0x22);
  CHECK(out[3] == 0x11);
  CHECK(out[4] == 0x33);
  // Out-of-range commands fail the submission and the semaphore, never write outside.
  auto bad = (*dev)->createCommandBuffer();
  bad->copy(**a, 6, **b, 0, 4);
  auto sem2 = (*dev)->createSemaphore(0);
  Status s = (*dev)->submit(*bad, sem.get(), 1, *sem2, 1);
  REQUIRE(!s.ok());
  CHECK(s.diags().str().find("copy reads outside its source buffer") != std::string::npos);
  CHECK(!sem2->wait(1).ok());
}

TEST_CASE("several devices: placement flags, one executable per target, same results") {
  static_assert(std::is_same_v<hal::DeviceId, DeviceTarget>);
  const char* src = R"(
func @main(%x: tensor<4xf32>) -> (tensor<4xf32>) {
  %0 = exp %x : tensor<4xf32>
  %1 = neg %0 : tensor<4xf32>
  %2 = add %1, %x : tensor<4xf32>
  return %2
}
)";
  HostTensor x(ElemType::F32, {4});
  for (int k = 0; k < 4; ++k) x.setF(k, 0.5 * k - 1);
  auto source = parseModule(src, "t.kir");
  REQUIRE(source.ok());
  WeightStore none(**source);
  auto want = interpret(*(*source)->lookupFunc("main"), {x}, none);
  REQUIRE(want.ok());

  // No devices and no flags: exactly one device, as before.
  CHECK(compile(src).devices == std::vector<std::string>{"ref[0]"});

  CompileOptions opts;
  opts.placement.devices.devices = {"ref[0]", "ref[2]"};
  opts.placement.place = {"exp=ref[0]", "neg=ref[2]"};
  std::string report;
  opts.afterPlacement = [&](const Module& m) -> Status {
    for (const auto& op : m.lookupFunc("main")->ops())
      if (op->device()) report += std::string(op->name()) + ":" + op->device()->str() + " ";
    return ok();
  };
  Program p = compile(src, opts);
  CHECK(report.find("exp:ref[0] ") != std::string::npos);
  CHECK(report.find("neg:ref[2] ") != std::string::npos);
  CHECK(report.find("transfer:") != std::string::npos);
  CHECK(p.devices.size() == 2);
  REQUIRE(p.executables.size() == 1);
  CHECK(p.executables[0].target == "ref");
  auto loaded = load(bytesOf(p));
  REQUIRE(loaded.ok());
  auto ex = executorFor(loaded.take());
  auto got = ex->call("main", {x});
  REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.diags().str()));
  CHECK((*got)[0].identical((*want)[0]));

  // A pattern that matches nothing is the placement's error, through the compiler.
  CompileOptions bad;
  bad.placement.devices.devices = {"ref[0]", "ref[1]"};
  bad.placement.place = {"matmul=ref[1]"};
  auto m = parseModule(src, "t.kir");
  REQUIRE(m.ok());
  auto failed = compileProgram(m.take(), bad);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.diags().str().find("matmul") != std::string::npos);
}

TEST_CASE("a freed buffer's memory serves the next allocation of its size") {
  auto d = hal::openDevice({"ref", 0}, Loc{});
  REQUIRE(d.ok());
  uint64_t before = (*d)->memoryStats().bytesInUse;
  const uint8_t* first = nullptr;
  {
    auto a = (*d)->allocate(1 << 20);
    REQUIRE(a.ok());
    first = (*a)->map();
    CHECK((*d)->memoryStats().bytesInUse == before + (1 << 20));
  }
  CHECK((*d)->memoryStats().bytesInUse == before); // live buffers only
  auto b = (*d)->allocate((1 << 20) - 3);          // the same rounded size
  REQUIRE(b.ok());
  CHECK((*b)->map() == first);
  CHECK((*b)->byteSize() == (1 << 20) - 3);
  auto c = (*d)->allocate(1 << 20); // the cached block is taken: fresh memory
  REQUIRE(c.ok());
  CHECK((*c)->map() != first);
  // Imported memory is the caller's: never cached, never counted.
  alignas(64) uint8_t mine[128];
  {
    auto i = (*d)->importHost(mine, sizeof mine);
    REQUIRE(i);
    CHECK(i->map() == mine);
  }
  auto e = (*d)->allocate(128);
  REQUIRE(e.ok());
  CHECK((*e)->map() != mine);
}

TEST_CASE("a freed allocation serves a smaller one: the newest that fits, up to twice its size") {
  auto d = hal::openDevice({"ref", 0}, Loc{});
  REQUIRE(d.ok());
  uint64_t before = (*d)->memoryStats().bytesInUse;
  const uint8_t *small = nullptr, *large = nullptr;
  {
    auto b = (*d)->allocate(3 << 19); // 1.5 MiB, freed after a (reverse order): the newer
    auto a = (*d)->allocate(1 << 20);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    small = (*a)->map();
    large = (*b)->map();
  }
  {
    auto c = (*d)->allocate(800 << 10); // both fit: the newest
    REQUIRE(c.ok());
    CHECK((*c)->map() == large);
    CHECK((*c)->byteSize() == (800 << 10));
    CHECK((*d)->memoryStats().bytesInUse == before + (800 << 10)); // what was asked for
    auto e = (*d)->allocate(600 << 10);                            // 1 MiB is at most twice 600 KiB
    REQUIRE(e.ok());
    CHECK((*e)->map() == small);
  }                                   // c's 1.5 MiB freed after e's 1 MiB
  auto f = (*d)->allocate(400 << 10); // 1 and 1.5 MiB are over twice 400 KiB: fresh memory
  REQUIRE(f.ok());
  CHECK((*f)->map() != small);
  CHECK((*f)->map() != large);
  auto g = (*d)->allocate(3 << 19); // the 1.5 MiB block again, whole (1 MiB is too small)
  REQUIRE(g.ok());
  CHECK((*g)->map() == large);
  std::memset((*g)->map(), 1, 3 << 19);
}

TEST_CASE("launches carry their grid; the executor evaluates it per call and sim checks it") {
  const char* text = R"(symbol n in [1, 4096]
func @main(%x: tensor<{n}xf32>) -> (tensor<{n}xf32>) {
  %0 = exp %x : tensor<{n}xf32>
  %1 = mul %0, %x : tensor<{n}xf32>
  return %1
}
)";
  CompileOptions opts;
  opts.placement.devices.devices = {"sim[0]"};
  Program p = compile(text, opts);
  const Op* launch = nullptr;
  for (const auto& op : p.host->lookupFunc("main")->ops())
    if (op->kind() == OpKind::Launch) launch = op.get();
  REQUIRE(launch != nullptr);
  std::vector<std::string> grid = launch->attrs().getStrs("workgroups");
  REQUIRE(grid.size() == 3);
  CHECK(grid[0].find('n') != std::string::npos); // the grid follows the symbolic dim
  CHECK(launch->attrs().getStrs("push") == std::vector<std::string>{"n"});

  auto source = parseModule(text, "t.kir");
  REQUIRE(source.ok());
  WeightStore none(**source);
  auto run = [&](const Program& prog, int64_t n) -> Result<std::vector<HostTensor>> {
    KILN_TRY(auto ex, Executor::create(std::make_shared<const Program>(prog)));
    HostTensor x(ElemType::F32, {n});
    for (int64_t i = 0; i < n; ++i) x.setF(i, 0.01 * double(i % 100) - 0.3);
    KILN_TRY(auto got, ex->call("main", {x}));
    KILN_TRY(auto want, interpret(*(*source)->lookupFunc("main"), {x}, none));
    if (!got[0].identical(want[0])) return error(Loc{}, "results differ");
    return got;
  };
  for (int64_t n : {3, 1000}) {
    auto r = run(p, n);
    CHECK_MESSAGE(r.ok(), "n = " << n << ": " << (r.ok() ? "" : r.diags().str()));
  }
  // A damaged grid (through the .kmod, which the schedule pass does not see) is refused by
  // the sim device, which checks it against the kernel's prologue.
  Program damaged = p;
  damaged.host = std::shared_ptr<Module>(parseModule(printModule(*p.host), "t.kir").take());
  for (const auto& op : damaged.host->lookupFunc("main")->ops())
    if (op->kind() == OpKind::Launch)
      op->attrs().set("workgroups", std::vector<std::string>{"n + 1", "1", "1"});
  auto loaded = load(bytesOf(damaged));
  REQUIRE_MESSAGE(loaded.ok(), (loaded.ok() ? "" : loaded.diags().str()));
  auto bad = run(loaded.take(), 3);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.diags().str().find("is dispatched over 4x1x1 workgroups but its prologue computes") !=
        std::string::npos);
}
