// Unit tests for donation: the `donate` syntax and its verifier rule, the analysis that finds
// each donated result's in-place writer (and refuses the rest with a reason), --donate specs,
// the schedule writing into the argument's upload, and the executor updating the caller's
// tensor in place (same storage, no copy) on ref, sim and cpu, a KV-cache loop included, with
// the read-only and overlapping-input fallbacks.
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>

#include "kiln/kiln.h"

#include "analysis/donation.h"
#include "analysis/donation_specs.h"
#include "compiler/compiler.h"
#include "ir/interp/interp.h"
#include "ir/text/parser.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"
#include "runtime/drivers.h"
#include "runtime/executor.h"

using namespace kiln;

namespace {

// A KV cache of 6 positions x 2 heads x 3 features; each call writes one position and
// returns the cache and the sum over positions of the cache before the write.
const char* const kKv =
    R"(func @step(%cache: tensor<6x2x3xf32> donate 0, %pos: tensor<1x1xi64>, %kv: tensor<1x2x3xf32>) -> (tensor<6x2x3xf32>, tensor<2x3xf32>) {
  %s = reduce_sum %cache {axes = [0], keepdims = 0} : tensor<2x3xf32>
  %c = scatter_nd %cache, %pos, %kv : tensor<6x2x3xf32>
  return %c, %s
}
)";

std::unique_ptr<Module> parse(const std::string& text) {
  auto m = parseModule(text, "t.kir");
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.diags().str()));
  return m.take();
}

std::string compileError(const std::string& text, std::vector<std::string> donate = {}) {
  auto m = parseModule(text, "t.kir");
  if (!m.ok()) return m.diags().str();
  CompileOptions o;
  o.placement.devices.devices.push_back("ref[0]");
  o.donate = std::move(donate);
  auto p = compileProgram(m.take(), o);
  return p.ok() ? "" : p.diags().str();
}

std::shared_ptr<const Program> compileFor(const std::string& text, const std::string& device,
                                          std::vector<std::string> donate = {}) {
  CompileOptions o;
  o.placement.devices.devices.push_back(device);
  o.donate = std::move(donate);
  auto p = compileProgram(parse(text), o);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.diags().str()));
  return std::make_shared<const Program>(p.take());
}

std::vector<std::string> devicesToTest() {
  std::vector<std::string> d = {"ref[0]", "sim[0]"};
  if (hal::lookupDriver("cpu") && defaultDeviceName() == "cpu[0]") d.push_back("cpu[0]");
  return d;
}

HostTensor filled(ElemType e, std::vector<int64_t> shape, double start, double step) {
  HostTensor t(e, std::move(shape));
  for (int64_t i = 0; i < t.numElements(); ++i) t.setF(i, start + step * static_cast<double>(i));
  return t;
}

HostTensor index1(int64_t v) {
  HostTensor t(ElemType::I64, {1, 1});
  t.setI(0, v);
  return t;
}

} // namespace

TEST_CASE("donate is text: it parses, prints back, and the verifier checks it") {
  auto m = parse(kKv);
  const Func& f = *m->lookupFunc("step");
  CHECK(f.argDonation(0) == std::optional<size_t>(0));
  CHECK(!f.argDonation(1));
  std::string text = printModule(*m);
  CHECK(text.find("%cache: tensor<6x2x3xf32> donate 0,") != std::string::npos);
  CHECK(parse(text)->lookupFunc("step")->argDonation(0) == std::optional<size_t>(0));

  auto bad = [](const std::string& t) {
    auto r = parseModule(t, "t.kir");
    REQUIRE(r.ok());
    Status s = verifyModule(**r);
    return s.ok() ? std::string() : s.diags().str();
  };
  CHECK(bad("func @f(%x: tensor<4xf32> donate 1) -> (tensor<4xf32>) {\n  return %x\n}\n")
            .find("donated to result 1, but @f has 1 results") != std::string::npos);
  CHECK(bad("func @f(%x: tensor<4xf32> donate 0) -> (tensor<4xi32>) {\n"
            "  %0 = cast %x {to = i32} : tensor<4xi32>\n  return %0\n}\n")
            .find("a donation needs the same type") != std::string::npos);
  CHECK(bad("func @f(%x: tensor<4xf32> donate 0, %y: tensor<4xf32> donate 0) -> "
            "(tensor<4xf32>) {\n  %0 = add %x, %y : tensor<4xf32>\n  return %0\n}\n")
            .find("takes two donations") != std::string::npos);
  auto r = parseModule("func @f(%x: tensor<4xf32> donate) -> (tensor<4xf32>) {\n  return %x\n}\n",
                       "t.kir");
  REQUIRE(!r.ok());
  CHECK(r.diags().str().find("the index of the result") != std::string::npos);
}

TEST_CASE("the analysis names the writer, or says which rule a donation breaks") {
  auto m = parse(kKv);
  auto d = analyzeDonations(*m->lookupFunc("step"));
  REQUIRE(d.ok());
  REQUIRE(d->size() == 1);
  CHECK((*d)[0].writer->kind() == OpKind::ScatterNd);
  CHECK((*d)[0].operand == 0);

  // The argument returned unchanged needs no writer.
  auto id = parse("func @f(%x: tensor<4xf32> donate 0) -> (tensor<4xf32>) {\n  return %x\n}\n");
  auto di = analyzeDonations(*id->lookupFunc("f"));
  REQUIRE(di.ok());
  CHECK((*di)[0].writer == nullptr);

  CHECK(compileError("func @f(%x: tensor<4x4xf32> donate 0, %w: tensor<4x4xf32>) -> "
                     "(tensor<4x4xf32>) {\n  %0 = matmul %x, %w : tensor<4x4xf32>\n"
                     "  return %0\n}\n")
            .find("'matmul' cannot write its result over %x") != std::string::npos);
  CHECK(compileError("func @f(%x: tensor<4xf32> donate 0, %y: tensor<4xf32>) -> "
                     "(tensor<4xf32>) {\n  %0 = exp %y : tensor<4xf32>\n  return %0\n}\n")
            .find("which does not read %x") != std::string::npos);
  CHECK(compileError("func @f(%x: tensor<4xf32> donate 0) -> (tensor<4xf32>, tensor<4xf32>) {\n"
                     "  %0 = exp %x : tensor<4xf32>\n  return %0, %x\n}\n")
            .find("also returned as result 1") != std::string::npos);
  CHECK(compileError("func @f(%x: tensor<4xf32> donate 0) -> (tensor<4xf32>, tensor<4xf32>) {\n"
                     "  %0 = exp %x : tensor<4xf32>\n  %1 = neg %x : tensor<4xf32>\n"
                     "  return %0, %1\n}\n")
            .find("'neg' reads %x after 'exp' has written over it") != std::string::npos);
  // The writer must read the argument itself, not something computed from it.
  CHECK(compileError("func @f(%x: tensor<4xf32> donate 0, %y: tensor<3x4xf32>) -> "
                     "(tensor<4xf32>) {\n  %0 = add %y, %x : tensor<3x4xf32>\n"
                     "  %1 = reduce_sum %0 {axes = [0], keepdims = 0} : tensor<4xf32>\n"
                     "  return %1\n}\n")
            .find("computed by 'reduce_sum', which does not read %x") != std::string::npos);
}

TEST_CASE("--donate specs: by name or index, the result by type, with clear errors") {
  const std::string two = "func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, "
                          "tensor<2xf32>) {\n  %0 = add %a, %b : tensor<4xf32>\n"
                          "  %1 = slice %b {starts = [0], ends = [2], axes = [0], steps = [1]} : "
                          "tensor<2xf32>\n  return %0, %1\n}\n";
  auto apply =
      [&](std::vector<std::string> specs) -> std::pair<std::unique_ptr<Module>, std::string> {
    auto m = parse(two);
    Status s = applyDonations(*m, specs);
    return {std::move(m), s.ok() ? "" : s.diags().str()};
  };
  {
    auto [m, err] = apply({"a"});
    CHECK(err.empty());
    CHECK(m->lookupFunc("main")->argDonation(0) == std::optional<size_t>(0));
  }
  {
    auto [m, err] = apply({"@main:%b:0"});
    CHECK(err.empty());
    CHECK(m->lookupFunc("main")->argDonation(1) == std::optional<size_t>(0));
  }
  CHECK(apply({"1"}).first->lookupFunc("main")->argDonation(1) == std::optional<size_t>(0));
  CHECK(apply({"c"}).second.find("--donate=c: error: @main has no argument %c") !=
        std::string::npos);
  CHECK(apply({"a:1"}).second.empty()); // the type mismatch is the verifier's to report
  CHECK(apply({"@nope:a"}).second.find("no function @nope") != std::string::npos);
  CHECK(apply({"a", "b"}).second.find("no result of type tensor<4xf32>") != std::string::npos);
  CHECK(compileError(two, {"a:1"}).find("a donation needs the same type") != std::string::npos);
}

TEST_CASE("the writer's launch writes into the donated argument's upload") {
  auto p = compileFor(kKv, "ref[0]");
  std::string s = printSchedule(*p);
  CHECK(s.find("%0 = transfer_to %cache {device = \"ref[0]\", donated = 1}") != std::string::npos);
  CHECK(s.find("launch %0, %1, %2, %0 {device = \"ref[0]\", kernel = \"step.k1\", outputs = 1}") !=
        std::string::npos);
  CHECK(s.find("free %0") == std::string::npos);
}

TEST_CASE("a KV cache updates in place, call after call, on every device") {
  auto ref = parse(kKv);
  for (const std::string& dev : devicesToTest()) {
    CAPTURE(dev);
    auto ex = Executor::create(compileFor(kKv, dev));
    REQUIRE_MESSAGE(ex.ok(), (ex.ok() ? "" : ex.diags().str()));
    HostTensor cache(ElemType::F32, {6, 2, 3});
    HostTensor expect = cache.clone();
    for (int64_t step = 0; step < 6; ++step) {
      HostTensor kv = filled(ElemType::F32, {1, 2, 3}, static_cast<double>(step), 0.5);
      // The interpreter's answer, from a copy of the cache before this step.
      WeightStore ws(*ref);
      auto want = interpret(*ref->lookupFunc("step"), {expect, index1(step), kv}, ws);
      REQUIRE(want.ok());
      const uint8_t* storage = cache.data();
      auto got = (*ex)->call("step", {cache, index1(step), kv});
      REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.diags().str()));
      // Result 0 is the caller's tensor, updated where it lies.
      CHECK((*got)[0].data() == storage);
      CHECK(cache.identical((*want)[0]));
      CHECK((*got)[1].identical((*want)[1]));
      expect = (*want)[0];
    }
  }
}

TEST_CASE("in-place scatter_nd: duplicate indices apply in order, reductions, negatives") {
  const std::string src =
      R"(func @main(%d: tensor<5x4xi32> donate 0, %i: tensor<3x1xi64>, %u: tensor<3x4xi32>) -> (tensor<5x4xi32>) {
  %0 = scatter_nd %d, %i, %u {reduction = "REDUCTION"} : tensor<5x4xi32>
  return %0
}
)";
  for (std::string red : {"none", "add", "mul", "max", "min"}) {
    std::string text = src;
    text.replace(text.find("REDUCTION"), 9, red);
    auto ref = parse(text);
    HostTensor idx(ElemType::I64, {3, 1});
    idx.setI(0, 2);
    idx.setI(1, -3); // the same row as 2
    idx.setI(2, 4);
    HostTensor upd = filled(ElemType::I32, {3, 4}, -5, 3);
    HostTensor data = filled(ElemType::I32, {5, 4}, 1, 1);
    WeightStore ws(*ref);
    auto want = interpret(*ref->lookupFunc("main"), {data, idx, upd}, ws);
    REQUIRE(want.ok());
    for (const std::string& dev : devicesToTest()) {
      CAPTURE(red);
      CAPTURE(dev);
      auto ex = Executor::create(compileFor(text, dev));
      REQUIRE(ex.ok());
      HostTensor mine = data.clone();
      auto got = (*ex)->call("main", {mine, idx, upd});
      REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.diags().str()));
      CHECK((*got)[0].identical((*want)[0]));
      CHECK(mine.identical((*want)[0]));
    }
  }
}

TEST_CASE("read-only and overlapping donated inputs fall back to a copy") {
  const std::string text = "func @main(%x: tensor<4xf32> donate 0, %y: tensor<4xf32>) -> "
                           "(tensor<4xf32>) {\n  %0 = add %x, %y : tensor<4xf32>\n"
                           "  return %0\n}\n";
  for (const std::string& dev : devicesToTest()) {
    CAPTURE(dev);
    auto ex = Executor::create(compileFor(text, dev));
    REQUIRE(ex.ok());
    HostTensor base = filled(ElemType::F32, {4}, 1, 1);
    // A view: kiln may not write it, so the result is new and the input unchanged.
    HostTensor view = HostTensor::view(ElemType::F32, {4}, base.data(), nullptr);
    auto got = (*ex)->call("main", {view, base});
    REQUIRE(got.ok());
    CHECK((*got)[0].data() != base.data());
    CHECK((*got)[0].getF(3) == 8.0);
    CHECK(base.getF(3) == 4.0);
    // The same storage as both arguments: not written in place either.
    auto twice = (*ex)->call("main", {base, base});
    REQUIRE(twice.ok());
    CHECK((*twice)[0].data() != base.data());
    CHECK((*twice)[0].getF(0) == 2.0);
    CHECK(base.getF(0) == 1.0);
    // A writable tensor not aligned as device buffers are: copied, and written back.
    HostTensor big(ElemType::F32, {5});
    HostTensor odd = HostTensor::wrap(ElemType::F32, {4}, big.mutableData() + 4, nullptr);
    for (int64_t i = 0; i < 4; ++i) odd.setF(i, 10);
    auto back = (*ex)->call("main", {odd, base});
    REQUIRE(back.ok());
    CHECK((*back)[0].data() == odd.data());
    CHECK(odd.getF(0) == 11.0);
  }
}

TEST_CASE("the C API updates a donated input in the caller's memory") {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "kiln-donation-c";
  std::filesystem::create_directories(dir);
  std::string path = (dir / "kv.kir").string();
  std::ofstream(path) << kKv;
  kiln_module* m = kiln_module_load(path.c_str());
  REQUIRE_MESSAGE(m, kiln_last_error());
  alignas(64) float cache[6 * 2 * 3] = {};
  float kv[6];
  for (int i = 0; i < 6; ++i) kv[i] = static_cast<float>(i + 1);
  int64_t pos = 4;
  kiln_tensor in[3] = {{KILN_F32, 3, {6, 2, 3}, cache, sizeof cache},
                       {KILN_I64, 2, {1, 1}, &pos, sizeof pos},
                       {KILN_F32, 3, {1, 2, 3}, kv, sizeof kv}};
  kiln_tensor* out = nullptr;
  size_t n = 0;
  REQUIRE_MESSAGE(kiln_module_run(m, "step", in, 3, &out, &n) == 0, kiln_last_error());
  REQUIRE(n == 2);
  for (int i = 0; i < 6; ++i) {
    CHECK(cache[4 * 6 + i] == kv[i]);
    CHECK(static_cast<const float*>(out[0].data)[4 * 6 + i] == kv[i]);
  }
  CHECK(cache[0] == 0.0f);
  kiln_tensors_free(out, n);
  kiln_module_free(m);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a schedule's donated upload of an argument the signature does not donate is a copy") {
  // A hand-written (or damaged) schedule cannot make the executor write a caller's tensor.
  const std::string text = R"(func @main(%x: tensor<4xf32>) -> (tensor<4xf32>) {
  %0 = transfer_to %x {device = "ref[0]", donated = 1} : tensor<4xf32>
  launch %0, %0 {device = "ref[0]", kernel = "k", outputs = 1}
  wait {device = "ref[0]"}
  return %0
}
func @k(%a: tensor<4xf32>) -> (tensor<4xf32>) {
  %0 = neg %a : tensor<4xf32>
  return %0
}
)";
  auto ex = Executor::create(compileFor(text, "ref[0]"));
  REQUIRE_MESSAGE(ex.ok(), (ex.ok() ? "" : ex.diags().str()));
  HostTensor x = filled(ElemType::F32, {4}, 1, 1);
  auto got = (*ex)->call("main", {x});
  REQUIRE(got.ok());
  CHECK((*got)[0].data() != x.data());
  CHECK((*got)[0].getF(0) == -1.0);
  CHECK(x.getF(0) == 1.0);
}
