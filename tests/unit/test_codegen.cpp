// Unit tests for code generation: kernel-level types, value bounds, the footprint function,
// target tables, tile configs (parsing and a sweep of manual configs that must compile and
// run correctly on sim or be refused with a reason), the final resource check, and the
// simulator's barrier, shared-memory and out-of-bounds behaviour.
#include <cmath>
#include <doctest/doctest.h>
#include <sstream>

#include "analysis/value_bounds.h"
#include "ir/interp/interp.h"
#include "ir/text/parser.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"
#include "passes/codegen.h"
#include "passes/pass_manager.h"
#include "passes/passes.h"
#include "runtime/sim/sim.h"
#include "target/target.h"

using namespace kiln;

namespace {

std::unique_ptr<Module> parse(const std::string& text) {
  auto m = parseModule(text, "test.kir");
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.diags().str()));
  Status v = verifyModule(**m);
  REQUIRE_MESSAGE(v.ok(), (v.ok() ? "" : v.diags().str()));
  return m.take();
}

Status runPipeline(Module& m, const std::string& pipeline) {
  PassManager pm;
  KILN_CHECK(pm.addPipeline(pipeline));
  std::ostringstream sink;
  KILN_CHECK(pm.run(m, sink));
  return verifyModule(m);
}

HostTensor ramp(ElemType e, std::vector<int64_t> shape, double scale) {
  HostTensor t(e, std::move(shape));
  for (int64_t i = 0; i < t.numElements(); ++i) t.setF(i, std::sin(static_cast<double>(i)) * scale);
  return t;
}

// Runs @main of `compiled` on sim and of a fresh parse of `text` on the reference.
void expectSame(const std::string& text, Module& compiled, const std::vector<HostTensor>& in) {
  auto ref = parse(text);
  WeightStore rw(*ref), sw(compiled);
  auto want = interpret(*ref->lookupFunc("main"), in, rw);
  REQUIRE(want.ok());
  auto got = sim::runOnSim(*compiled.lookupFunc("main"), in, sw);
  REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.diags().str()));
  REQUIRE(got->size() == want->size());
  for (size_t o = 0; o < got->size(); ++o)
    for (int64_t i = 0; i < (*want)[o].numElements(); ++i)
      REQUIRE((*got)[o].getF(i) == doctest::Approx((*want)[o].getF(i)).epsilon(1e-5));
}

// shape-infer, then the codegen passes with `opts` (what a target backend runs).
Status runCodegen(Module& m, const CodegenOptions& opts) {
  PassManager pm;
  KILN_CHECK(pm.addPipeline("shape-infer"));
  addCodegenPasses(pm, opts);
  std::ostringstream sink;
  KILN_CHECK(pm.run(m, sink));
  return verifyModule(m);
}

CodegenOptions optionsFor(const std::string& target, TileOverrides overrides = {}) {
  CodegenOptions o;
  o.target = *lookupTarget(target);
  o.overrides = std::move(overrides);
  return o;
}

const char* kMatmul = R"(symbol m in [1, 256]
func @main(%x: tensor<{m}x24xf32>, %w: tensor<24x40xf32>) -> (tensor<{m}x40xf32>) {
  %0 = matmul %x, %w : tensor<{m}x40xf32>
  %1 = tanh %0 : tensor<{m}x40xf32>
  return %1
}
)";

} // namespace

TEST_CASE("kernel-level types print and parse back") {
  for (const char* t : {"index", "f32", "i1", "vector<4xf16>", "buffer<4x{n}xf32>",
                        "buffer<64x64xf16, shared>", "buffer<2xf64, private>"}) {
    auto m = parseModule(
        std::string("symbol n in [1, 8]\nfunc @f(%a: ") + t + ") -> () {\n  return\n}\n", "t.kir");
    REQUIRE_MESSAGE(m.ok(), t);
    CHECK((*m)->funcs()[0]->arg(0)->type().str() == t);
  }
  CHECK(Type::buffer(ElemType::F32, {Dim(4)}) != Type::tensor(ElemType::F32, {4}));
  CHECK(Type::index().isIndex());
  auto bad = parseModule("func @f(%a: buffer<4xf32, texture>) -> () {\n  return\n}\n", "t.kir");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.diags().str().find("memory space") != std::string::npos);
}

TEST_CASE("value bounds: ranges and divisibility through index ops") {
  auto m = parse(R"(symbol n in [8, 64] divisible_by 8
func @k(%b: buffer<{n}xf32>) -> () {
  %c4 = iconst {value = 4} : index
  %c3 = iconst {value = 3} : index
  %n = symbol {name = "n"} : index
  kernel_config %c4, %c4, %c4 {workgroup = [32, 1, 1]}
  %t = local_id {axis = 0} : index
  %a = imul %n, %c4 : index
  %s = isub %a, %c3 : index
  %d = ifloordiv %n, %c4 : index
  %e = iceildiv %s, %c4 : index
  %r = imod %t, %c3 : index
  %mn = imin %n, %t : index
  %mx = imax %n, %t : index
  %lt = icmp %t, %n {pred = "lt"} : i1
  %sel = sselect %lt, %t, %n : index
  for %c3, %n, %c4 (%i: index) {
  }
  return
}
)");
  const Func& k = *m->lookupFunc("k");
  ValueBounds vb(k, m->symbols());
  auto byName = [&](size_t opIndex) { return k.opsSnapshot()[opIndex]->result(0); };
  CHECK(vb.of(byName(2)) == Range{8, 64, 8}); // n
  CHECK(vb.of(byName(4)).lo == 0);            // local_id
  CHECK(vb.of(byName(4)).hi == 31);
  CHECK(vb.of(byName(5)) == Range{32, 256, 32}); // 4n
  CHECK(vb.of(byName(6)).lo == 29);              // 4n - 3
  CHECK(vb.of(byName(6)).divisor == 1);
  CHECK(vb.of(byName(7)) == Range{2, 16, 1}); // n floordiv 4
  CHECK(vb.of(byName(8)).hi == 64);           // (4n-3) ceildiv 4
  CHECK(vb.of(byName(9)) == Range{0, 2, 1});  // t mod 3
  CHECK(vb.of(byName(10)).hi == 31);          // min(n, t)
  CHECK(vb.of(byName(11)).lo == 8);           // max(n, t)
  CHECK_FALSE(vb.provablyTrue(byName(12)));   // t < n is not always true
  CHECK(vb.of(byName(13)).hi == 64);          // select
  const Value* iv = k.opsSnapshot()[14]->region(0)->arg(0);
  CHECK(vb.of(iv).lo == 3); // for iv
  CHECK(vb.of(iv).hi == 63);
  CHECK(vb.of(iv).divisor == 1);
  CHECK(dimDivisibleBy(Dim(SymExpr::symbol("n")), 8, m->symbols()));
  CHECK_FALSE(dimDivisibleBy(Dim(SymExpr::symbol("n")), 16, m->symbols()));
  CHECK_FALSE(dimDivisibleBy(Dim::unknown(), 1, m->symbols()));
}

TEST_CASE("value bounds: workgroup ids lie below the kernel_config's grid") {
  // The launch's grid is the kernel_config's operands (kernelGrid), so a target that allows
  // 2^31 - 1 workgroups does not make a small kernel's ids (and its indices) 64-bit.
  auto m = parse(R"(symbol n in [1, 1000]
func @k(%b: buffer<{n}xf32>) -> () {
  %c1 = iconst {value = 1} : index
  %c256 = iconst {value = 256} : index
  %n = symbol {name = "n"} : index
  %g = iceildiv %n, %c256 : index
  kernel_config %g, %c1, %n {workgroup = [256, 1, 1]}
  %x = workgroup_id {axis = 0} : index
  %y = workgroup_id {axis = 1} : index
  %z = workgroup_id {axis = 2} : index
  return
}
)");
  const Func& k = *m->lookupFunc("k");
  auto id = [&](size_t opIndex) { return k.opsSnapshot()[opIndex]->result(0); };
  ValueBounds vb(k, m->symbols(), INT32_MAX);
  CHECK(vb.of(id(5)) == Range{0, 3, 1}); // below n ceildiv 256 <= 4
  CHECK(vb.of(id(6)).lo == 0);           // one workgroup along y
  CHECK(vb.of(id(6)).hi == 0);
  CHECK(vb.of(id(7)) == Range{0, 999, 1}); // below n <= 1000
  ValueBounds small(k, m->symbols(), 100); // the target's limit, where it is lower
  CHECK(small.of(id(7)) == Range{0, 99, 1});
}

TEST_CASE("the footprint function is 64-bit and saturates") {
  CHECK(sharedFootprint({{ElemType::F16, {128, 32}}, {ElemType::F16, {32, 128}}}) == 16384);
  // 286,720 bytes: the attention kernel that broke a Llama build elsewhere.
  CHECK(sharedFootprint({{ElemType::F16, {140, 1024}}}) == 286720);
  CHECK(sharedFootprint({{ElemType::F64, {int64_t(1) << 40, int64_t(1) << 40}}}) == UINT64_MAX);
  CHECK(sharedFootprint({{ElemType::F32, {-1}}}) == UINT64_MAX);
}

TEST_CASE("split-key attention: the footprint function refuses partials that do not fit") {
  // A decode step (one query row) with 1024-wide value rows: each subgroup's partial row
  // takes 4 KiB of shared memory. vulkan:generic (16 KiB, 128 threads, subgroups of 32)
  // cannot hold 4 subgroups' rows, so tile takes 2; cuda:sm_90 takes 8.
  const char* text =
      R"(func @main(%q: tensor<1x8x1x64xf32>, %k: tensor<1x2x64x64xf32>, %v: tensor<1x2x64x1024xf32>) -> (tensor<1x8x1x1024xf32>) {
  %0 = attention %q, %k, %v {causal = 1, scale = 0.125} : tensor<1x8x1x1024xf32>
  return %0
}
)";
  struct Want {
    const char* target;
    int64_t threads;
    uint64_t shared;
  };
  for (Want w : {Want{"vulkan:generic", 64, 2 * (2 + 1024) * 4},
                 Want{"cuda:sm_90", 256, 8 * (2 + 1024) * 4}}) {
    CAPTURE(w.target);
    auto m = parse(text);
    Status st = runCodegen(*m, optionsFor(w.target));
    REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.diags().str()));
    const Op* d = m->lookupFunc("main")->ops().front().get();
    CHECK(d->attrs().getInts("tile") == std::vector<int64_t>{1, 32});
    CHECK(d->attrs().getInts("workgroup") == std::vector<int64_t>{w.threads, 1, 1});
    CHECK(sharedFootprint(sharedBuffersOf(*m->lookupFunc("main_dispatch_0"))) == w.shared);
  }
  // The refusal itself: 4 subgroups' partials are 16,416 bytes against 16,384.
  auto t = lookupTarget("vulkan:generic");
  REQUIRE(t.ok());
  std::optional<std::string> why =
      sharedMemoryProblem("[1, 32]", {{ElemType::F32, {4, 2}}, {ElemType::F32, {4, 1024}}}, *t);
  REQUIRE(why.has_value());
  CHECK(why->find("16416") != std::string::npos);
}

TEST_CASE("staged attention: key tiles sized by the footprint function, forced plans checked") {
  // A prefill's attention stages its keys and values in shared memory: 32 keys of a 64-dim
  // head (16 KiB), 16 of a 128-dim head, whose q rows (128 floats per thread beside 128
  // output floats) are shared too: 16 KiB + 32 KiB. lavapipe (32 KiB) cannot hold those q
  // rows with 64 threads, so every thread reads its keys itself there.
  auto head = [](int64_t d, int64_t kv) {
    std::string q = "tensor<1x8x{s}x" + std::to_string(d) + "xf32>";
    std::string k = "tensor<1x" + std::to_string(kv) + "x{s}x" + std::to_string(d) + "xf32>";
    return "symbol s in [1, 4096]\nfunc @main(%q: " + q + ", %k: " + k + ", %v: " + k + ") -> (" +
           q + ") {\n  %0 = attention %q, %k, %v {causal = 1, scale = 0.125} : " + q +
           "\n  return %0\n}\n";
  };
  struct Want {
    int64_t d;
    const char* target;
    std::vector<int64_t> tile;
    uint64_t shared;
  };
  for (const Want& w :
       {Want{64, "cuda:sm_90", {1, 0, 32}, 16384}, Want{128, "cuda:sm_90", {1, 0, 16}, 49152},
        Want{128, "vulkan:nvidia-sm90", {1, 0, 16}, 49152},
        Want{64, "vulkan:lavapipe", {1, 0, 32}, 16384}, Want{128, "vulkan:lavapipe", {1}, 0}}) {
    CAPTURE(w.target);
    CAPTURE(w.d);
    auto m = parse(head(w.d, 2));
    Status st = runCodegen(*m, optionsFor(w.target));
    REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.diags().str()));
    const Op* d = m->lookupFunc("main")->ops().front().get();
    CHECK(d->attrs().getInts("tile") == w.tile);
    CHECK(sharedFootprint(sharedBuffersOf(*m->lookupFunc("main_dispatch_0"))) == w.shared);
  }

  // Plans forced onto the dispatch: refused with a reason, or compiled and run on sim.
  auto forced = [](const std::string& tile, const std::string& wg) {
    const char* ty = "tensor<1x4x{s}x128xf32>";
    const char* kv = "tensor<1x1x{s}x128xf32>";
    std::string args =
        std::string("(%q: ") + ty + ", %k: " + kv + ", %v: " + kv + ") -> (" + ty + ")";
    return std::string("symbol s in [1, 4096]\nfunc @main") + args +
           " {\n  %0 = dispatch %q, %k, %v {kernel = \"k\", tile = " + tile +
           ", workgroup = " + wg + "} : " + ty + "\n  return %0\n}\nfunc @k" + args +
           " {\n  %0 = attention %q, %k, %v {causal = 1, scale = 0.125} : " + ty +
           "\n  return %0\n}\n";
  };
  struct Refused {
    const char* tile;
    const char* target;
    const char* why;
  };
  for (const Refused& r :
       {Refused{"[1, 0, 32]", "vulkan:nvidia-sm90",
                "needs 65536 bytes of shared memory, more than the 49152-byte limit"},
        Refused{"[1, 0, 12]", "cuda:sm_90", "a multiple of 8 keys per stage"},
        Refused{"[1, 0, 32]", "cpu", "stages keys in shared memory; cpu is a cpu target"}}) {
    CAPTURE(r.tile);
    auto m = parse(forced(r.tile, "[64, 1, 1]"));
    Status st = runPipeline(*m, std::string("lower{target=") + r.target + "}");
    REQUIRE_FALSE(st.ok());
    CHECK(st.diags().str().find(r.why) != std::string::npos);
  }
  // 32 threads with their q rows shared and 8 keys a stage fit lavapipe (24 KiB), and give
  // the reference's results on sim with and without the LLVM GPU targets' register rows.
  for (const char* target : {"vulkan:lavapipe", "cuda:sm_90"}) {
    CAPTURE(target);
    auto m = parse(forced("[1, 0, 8]", "[32, 1, 1]"));
    Status st = runPipeline(*m, std::string("lower{target=") + target + "}");
    REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.diags().str()));
    CHECK(sharedFootprint(sharedBuffersOf(*m->lookupFunc("k"))) == (8 * 256 + 128 * 32) * 4);
    auto ref = forced("[1, 0, 8]", "[32, 1, 1]");
    expectSame(ref, *m,
               {ramp(ElemType::F32, {1, 4, 37, 128}, 1.0),
                ramp(ElemType::F32, {1, 1, 37, 128}, 0.5),
                ramp(ElemType::F32, {1, 1, 37, 128}, 2.0)});
  }
}

TEST_CASE("targets: every named target, device limits replace the table") {
  for (const char* n : {"cpu", "cpu:x86-64-v2", "cpu:x86-64-v3", "cpu:x86-64-v4", "vulkan:lavapipe",
                        "vulkan:nvidia-sm90", "vulkan:generic", "amdgpu:gfx90a", "amdgpu:gfx942",
                        "amdgpu:gfx1100", "cuda:sm_80", "cuda:sm_90"}) {
    auto t = lookupTarget(n);
    REQUIRE(t.ok());
    CHECK(t->sharedMemoryBytes > 0);
    CHECK(!t->subgroupSizes.empty());
    CHECK(t->supports(ElemType::F16));
  }
  auto bad = lookupTarget("vulkan:nope");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.diags().str().find("amdgpu:gfx942") != std::string::npos);
  TargetDesc dev;
  dev.sharedMemoryBytes = 12345;
  TargetDesc t = withDeviceLimits(*lookupTarget("vulkan:generic"), dev);
  CHECK(t.sharedMemoryBytes == 12345);
  CHECK(t.maxWorkgroupInvocations == 128);
}

TEST_CASE("cpu targets: x86-64 levels, cpu plans with one thread per workgroup") {
  struct Level {
    const char* name;
    int64_t bits, regs;
    std::vector<int64_t> tile;
  };
  for (const Level& l : {Level{"cpu", 256, 16, {144, 128, 96, 6, 16}},
                         Level{"cpu:x86-64-v2", 128, 16, {144, 64, 96, 6, 8}},
                         Level{"cpu:x86-64-v3", 256, 16, {144, 128, 96, 6, 16}},
                         Level{"cpu:x86-64-v4", 512, 32, {192, 224, 96, 8, 32}}}) {
    CAPTURE(l.name);
    auto t = lookupTarget(l.name);
    REQUIRE(t.ok());
    CHECK(t->cpu);
    CHECK_FALSE(t->wideAccumulation);
    CHECK(t->preferredVectorBits == l.bits);
    CHECK(t->vectorRegisters == l.regs);
    // The register block fits: MR x NR / lanes accumulators, at most registers - 4.
    CHECK(l.tile[3] * l.tile[4] / (l.bits / 32) <= l.regs - 4);
    CodegenOptions opts;
    opts.target = *t;
    const char* text = R"(symbol m in [1, 4096]
func @main(%x: tensor<{m}x96xf32>, %w: tensor<96x200xf32>) -> (tensor<{m}x200xf32>) {
  %0 = matmul %x, %w : tensor<{m}x200xf32>
  return %0
}
)";
    auto m = parse(text);
    REQUIRE(runCodegen(*m, opts).ok());
    const Op* d = m->lookupFunc("main")->ops().front().get();
    CHECK(d->attrs().getInts("tile") == l.tile);
    CHECK(d->attrs().getInts("workgroup") == std::vector<int64_t>{1, 1, 1});
    CHECK(sharedFootprint(sharedBuffersOf(*m->lookupFunc("main_dispatch_0"))) == 0);
  }
  for (const char* n : {"vulkan:lavapipe", "amdgpu:gfx942"}) CHECK_FALSE(lookupTarget(n)->cpu);
  // GPUs accumulate in f32 (f64 accumulators double a register tile and spill it).
  for (const char* n : {"vulkan:lavapipe", "amdgpu:gfx942", "cuda:sm_90"})
    CHECK_FALSE(lookupTarget(n)->wideAccumulation);
}

TEST_CASE("cpu matmul blocks: rows cover a modest M, splits read the operands least") {
  CodegenOptions opts;
  opts.target = *lookupTarget("cpu");
  auto tileOf = [&](const std::string& a, const std::string& b, const std::string& c) {
    auto m = parse("func @main(%a: tensor<" + a + "xf32>, %b: tensor<" + b + "xf32>) -> (tensor<" +
                   c + "xf32>) {\n  %0 = matmul %a, %b : tensor<" + c + "xf32>\n  return %0\n}\n");
    REQUIRE(runCodegen(*m, opts).ok());
    return m->lookupFunc("main")->ops().front()->attrs().getInts("tile");
  };
  // A 128-token prefill's projection: one row block, so the weight is packed once.
  CHECK(tileOf("128x2048", "2048x5632", "128x5632") == std::vector<int64_t>{132, 128, 256, 6, 16});
  // A 1x1 conv over a 7x7 map: 8 blocks from the rows (the 9 MB weight read once), not
  // 132 x 32 blocks, which compute as many padded elements and read the weight twice.
  CHECK(tileOf("512x4608", "4608x49", "512x49") == std::vector<int64_t>{66, 64, 256, 6, 16});
  // A short product with 8 blocks either way: the split that packs the larger B less.
  CHECK(tileOf("96x576", "576x49", "96x49") == std::vector<int64_t>{24, 32, 256, 6, 16});
}

TEST_CASE("cpu matmul tiles: each compiles and runs correctly on sim at M = 1 .. 19") {
  int runs = 0;
  for (const char* tile : {"[6, 16, 1, 6, 16]", "[12, 32, 5, 6, 16]", "[2, 8, 24, 1, 8]",
                           "[8, 40, 7, 4, 20]", "[6, 16, 100, 3, 4]"}) {
    auto cfg = parseTileConfig(std::string(R"({"kernels": {"*": {"tile": )") + tile + "}}}", "c");
    REQUIRE(cfg.ok());
    for (int64_t rows : {1, 5, 6, 7, 19}) {
      CAPTURE(tile);
      CAPTURE(rows);
      auto m = parse(kMatmul);
      Status st = runCodegen(*m, optionsFor("cpu", *cfg));
      REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.diags().str()));
      expectSame(kMatmul, *m,
                 {ramp(ElemType::F32, {rows, 24}, 1.0), ramp(ElemType::F32, {24, 40}, 0.5)});
      ++runs;
    }
  }
  CHECK(runs == 25);
}

TEST_CASE("tile configs: malformed files are errors, never crashes") {
  for (const char* text :
       {"", "{", "[]", R"({"kernels": 3})", R"({"kernels": {"k": 1}})",
        R"({"kernels": {"k": {"tile": "big"}}})", R"({"kernels": {"k": {"tile": [0]}}})",
        R"({"kernels": {"k": {"workgroup": [1, 2]}}})",
        R"({"kernels": {"k": {"subgroups": 4096}}})", R"({"kernels": {"k": {"warps": 8}}})",
        R"({"kernels": {"k": {"tile": [1e300]}}})"}) {
    auto c = parseTileConfig(text, "cfg.json");
    CHECK_FALSE(c.ok());
  }
  auto good = parseTileConfig(R"({"kernels": {"*": {"subgroups": 8, "collapse": false}}})", "c");
  REQUIRE(good.ok());
  CHECK(good->at("*").subgroups == 8);
  CHECK_FALSE(good->at("*").collapse);
}

TEST_CASE("manual configs: each one compiles and runs correctly on sim, or is refused") {
  int compiled = 0, refused = 0;
  std::vector<HostTensor> in = {ramp(ElemType::F32, {19, 24}, 1.0),
                                ramp(ElemType::F32, {24, 40}, 0.5)};
  for (const char* target : {"vulkan:generic", "vulkan:nvidia-sm90", "amdgpu:gfx942"}) {
    for (int64_t subgroups : {1, 4, 8, 16}) {
      for (const char* tile : {"", "[32, 32, 8]", "[128, 256, 64]", "[7, 5, 3]", "[16, 8, 4]"}) {
        std::string json = R"({"kernels": {"*": {"subgroups": )" + std::to_string(subgroups) +
                           (*tile ? std::string(R"(, "tile": )") + tile : "") + "}}}";
        CAPTURE(target);
        CAPTURE(json);
        auto cfg = parseTileConfig(json, "sweep.json");
        REQUIRE(cfg.ok());
        auto m = parse(kMatmul);
        Status st = runCodegen(*m, optionsFor(target, *cfg));
        if (!st.ok()) {
          std::string msg = st.diags().str();
          CHECK(msg.find("refused") != std::string::npos);
          ++refused;
          continue;
        }
        ++compiled;
        expectSame(kMatmul, *m, in);
      }
    }
  }
  MESSAGE("manual configs: " << compiled << " compiled and matched, " << refused << " refused");
  CHECK(compiled > 5);
  CHECK(refused > 5);
}

TEST_CASE("the final resource check names the kernel, the bytes and the limit") {
  // A plan forced onto the dispatch (as a tuner or a hand edit would) that tile never chose.
  auto m = parse(
      R"(func @main(%x: tensor<256x256xf32>, %w: tensor<256x256xf32>) -> (tensor<256x256xf32>) {
  %0 = dispatch %x, %w {kernel = "k", tile = [128, 128, 64], workgroup = [16, 8, 1]} : tensor<256x256xf32>
  return %0
}
func @k(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>) -> (tensor<256x256xf32>) {
  %0 = matmul %a, %b : tensor<256x256xf32>
  return %0
}
)");
  Status st = runPipeline(*m, "lower{target=vulkan:generic}");
  REQUIRE_FALSE(st.ok());
  std::string msg = st.diags().str();
  CHECK(msg.find("kernel @k needs 65536 bytes of shared memory, more than the 16384-byte limit "
                 "of vulkan:generic") != std::string::npos);
}

TEST_CASE("sim: barriers order shared-memory phases; errors name the kernel and index") {
  auto m = parse(R"(func @k(%in: buffer<4xf32>, %out: buffer<4xf32>) -> () {
  %c1 = iconst {value = 1} : index
  %c3 = iconst {value = 3} : index
  kernel_config %c1, %c1, %c1 {workgroup = [4, 1, 1]}
  %t = local_id {axis = 0} : index
  %s = alloc : buffer<4xf32, shared>
  %v = load %in, %t : f32
  store %v, %s, %t
  barrier
  %r = isub %c3, %t : index
  %w = load %s, %r : f32
  store %w, %out, %t
  return
}
func @oob(%in: buffer<4xf32>, %out: buffer<4xf32>) -> () {
  %c1 = iconst {value = 1} : index
  %c2 = iconst {value = 2} : index
  kernel_config %c1, %c1, %c1 {workgroup = [4, 1, 1]}
  %t = local_id {axis = 0} : index
  %i = iadd %t, %c2 : index
  %v = load %in, %i : f32
  store %v, %out, %t
  return
}
func @diverge(%in: buffer<4xf32>, %out: buffer<4xf32>) -> () {
  %c0 = iconst {value = 0} : index
  %c1 = iconst {value = 1} : index
  kernel_config %c1, %c1, %c1 {workgroup = [4, 1, 1]}
  %t = local_id {axis = 0} : index
  for %c0, %t, %c1 (%i: index) {
    barrier
  }
  return
}
)");
  HostTensor in = ramp(ElemType::F32, {4}, 1.0);
  HostTensor out(ElemType::F32, {4});
  std::vector<sim::BufferRef> b = {{in}, {out}};
  REQUIRE(sim::runKernel(*m->lookupFunc("k"), b, {}, {1, 1, 1}).ok());
  for (int64_t i = 0; i < 4; ++i) CHECK(out.getF(i) == in.getF(3 - i));

  Status oob = sim::runKernel(*m->lookupFunc("oob"), b, {}, {1, 1, 1});
  REQUIRE_FALSE(oob.ok());
  CHECK(
      oob.diags().str().find("kernel @oob: out-of-bounds access at [4] of a buffer of shape [4]") !=
      std::string::npos);
  CHECK(oob.diags().str().find("thread (2, 0, 0)") != std::string::npos);

  Status div = sim::runKernel(*m->lookupFunc("diverge"), b, {}, {1, 1, 1});
  REQUIRE_FALSE(div.ok());
  CHECK(div.diags().str().find("never reach") != std::string::npos);

  std::vector<sim::BufferRef> wrong = {{in}};
  CHECK_FALSE(sim::runKernel(*m->lookupFunc("k"), wrong, {}, {1, 1, 1}).ok());
}

TEST_CASE("sim: subgroup ops exchange within subgroups; divergence and bad lanes are errors") {
  auto m = parse(R"(func @k(%in: buffer<8xf32>, %out: buffer<8xf32>) -> () {
  %c0 = iconst {value = 0} : index
  %c1 = iconst {value = 1} : index
  %c3 = iconst {value = 3} : index
  kernel_config %c1, %c1, %c1 {subgroup = 4, workgroup = [8, 1, 1]}
  %t = local_id {axis = 0} : index
  %l = lane_id : index
  %v = load %in, %t : f32
  %mx = subgroup_reduce %v {fn = max} : f32
  %from = isub %c3, %l : index
  %r = subgroup_shuffle %v, %from : f32
  %s = compute %mx, %r {fn = add} : f32
  store %s, %out, %t
  return
}
func @diverge(%in: buffer<8xf32>, %out: buffer<8xf32>) -> () {
  %c1 = iconst {value = 1} : index
  %c2 = iconst {value = 2} : index
  kernel_config %c1, %c1, %c1 {subgroup = 4, workgroup = [8, 1, 1]}
  %t = local_id {axis = 0} : index
  %v = load %in, %t : f32
  %c = icmp %t, %c2 {pred = "lt"} : i1
  %r = if %c : f32 {
    %x = subgroup_reduce %v {fn = add} : f32
    yield %x
  } else {
    yield %v
  }
  store %r, %out, %t
  return
}
func @badlane(%in: buffer<8xf32>, %out: buffer<8xf32>) -> () {
  %c1 = iconst {value = 1} : index
  kernel_config %c1, %c1, %c1 {subgroup = 4, workgroup = [8, 1, 1]}
  %t = local_id {axis = 0} : index
  %v = load %in, %t : f32
  %r = subgroup_shuffle %v, %t : f32
  store %r, %out, %t
  return
}
)");
  HostTensor in = ramp(ElemType::F32, {8}, 1.0);
  HostTensor out(ElemType::F32, {8});
  std::vector<sim::BufferRef> b = {{in}, {out}};
  REQUIRE(sim::runKernel(*m->lookupFunc("k"), b, {}, {1, 1, 1}).ok());
  for (int64_t t = 0; t < 8; ++t) {
    int64_t g = t / 4, lane = t % 4;
    double mx =
        std::max({in.getF(4 * g), in.getF(4 * g + 1), in.getF(4 * g + 2), in.getF(4 * g + 3)});
    CHECK(out.getF(t) == doctest::Approx(mx + in.getF(4 * g + 3 - lane)));
  }
  Status div = sim::runKernel(*m->lookupFunc("diverge"), b, {}, {1, 1, 1});
  REQUIRE_FALSE(div.ok());
  CHECK(div.diags().str().find("do not all reach this subgroup op together") != std::string::npos);
  Status lane = sim::runKernel(*m->lookupFunc("badlane"), b, {}, {1, 1, 1});
  REQUIRE_FALSE(lane.ok());
  CHECK(lane.diags().str().find("lane 4 is outside the subgroup of 4") != std::string::npos);
}

TEST_CASE("fuse + lower keep dynamic dims correct at lengths 1, 7, 33 and 2047") {
  const char* text = R"(symbol s in [1, 4096]
func @main(%x: tensor<{s}x4xf32>, %g: tensor<4xf32>) -> (tensor<{s}x4xf32>) {
  %0 = mul %x, %g : tensor<{s}x4xf32>
  %1 = softmax %0 {axis = 1} : tensor<{s}x4xf32>
  %2 = reduce_max %x {axes = [1], keepdims = 1} : tensor<{s}x1xf32>
  %3 = sub %1, %2 : tensor<{s}x4xf32>
  return %3
}
)";
  for (int64_t n : {1, 7, 33, 2047}) {
    CAPTURE(n);
    auto m = parse(text);
    REQUIRE(runPipeline(*m, "codegen").ok());
    expectSame(text, *m, {ramp(ElemType::F32, {n, 4}, 3.0), ramp(ElemType::F32, {4}, 1.0)});
  }
}

TEST_CASE("fusion rules are per-target switches") {
  const char* text = R"(func @main(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> (tensor<4x8xf32>) {
  %t = transpose %w {perm = [1, 0]} : tensor<8x8xf32>
  %0 = matmul %x, %t : tensor<4x8xf32>
  %1 = exp %0 : tensor<4x8xf32>
  return %1
}
)";
  auto dispatches = [&](FusionRules rules) {
    CodegenOptions opts;
    opts.target.fusion = rules;
    auto m = parse(text);
    PassManager pm;
    pm.addPass("fuse", createFusePass(opts));
    std::ostringstream sink;
    REQUIRE(pm.run(*m, sink).ok());
    int n = 0;
    for (const auto& op : m->lookupFunc("main")->ops()) n += op->kind() == OpKind::Dispatch;
    return n;
  };
  CHECK(dispatches({}) == 1);
  CHECK(dispatches({true, false, true}) == 2); // exp stays apart from the matmul
  CHECK(dispatches({true, true, false}) == 2); // the transpose is materialized on its own
  CHECK(dispatches({false, false, false}) == 3);
}
