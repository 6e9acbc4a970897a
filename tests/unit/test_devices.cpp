// Unit tests for devices: targets, declarations and their text form, resolution against
// the declared set, the affinity analysis (bound, clones, transfers, pins), placement
// globs, partitioning and the cost model.
#include <doctest/doctest.h>

#include "analysis/cost.h"
#include "ir/core/builder.h"
#include "ir/text/parser.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"
#include "passes/affinity.h"
#include "passes/pass.h"
#include "passes/placement.h"
#include "passes/placement_report.h"

using namespace kiln;

namespace {

std::unique_ptr<Module> parse(const std::string& text) {
  auto m = parseModule(text, "t.kir");
  REQUIRE_MESSAGE(m.ok(), m.diags().str());
  return m.take();
}

std::string errors(const Status& s) {
  REQUIRE(!s.ok());
  return s.diags().str();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

} // namespace

TEST_CASE("device targets parse as KIND[ORDINAL] and reject everything else") {
  auto t = parseDeviceTarget("hip[7]", Loc{});
  REQUIRE(t.ok());
  CHECK(t->kind == "hip");
  CHECK(t->ordinal == 7);
  CHECK(t->str() == "hip[7]");
  CHECK(parseDeviceTarget("ref", Loc{})->str() == "ref[0]");
  for (const char* bad : {"tpu[0]", "ref[", "ref[]", "ref[-1]", "ref[1x]", "ref[99999999]", "ref1",
                          "", "[0]", "ref[0]x"})
    CHECK_MESSAGE(!parseDeviceTarget(bad, Loc{}).ok(), bad);
}

TEST_CASE("declarations: names and targets are unique, lookups find both") {
  Module m;
  CHECK(m.addDevice({"", {"ref", 0}, Loc{}}).ok());
  CHECK(m.addDevice({"gpu", {"vulkan", 1}, Loc{}}).ok());
  CHECK(!m.addDevice({"gpu", {"hip", 0}, Loc{}}).ok());
  CHECK(!m.addDevice({"", {"ref", 0}, Loc{}}).ok());
  REQUIRE(m.lookupDevice("gpu"));
  CHECK(m.lookupDevice("gpu")->target.str() == "vulkan[1]");
  CHECK(m.findDevice({"ref", 0}));
  CHECK(!m.findDevice({"ref", 1}));
  CHECK(!m.lookupDevice(""));
}

TEST_CASE("text form: devices on ops, arguments and results round-trip") {
  const std::string text = R"(device ref[0]
device @d1 = ref[1]

func @main(%x: tensor<4xf32> on ref[0]) -> (tensor<4xf32> on @d1) {
  %0 = neg %x : tensor<4xf32> on ref[0]
  %1 = transfer %0 {to = "ref[1]"} : tensor<4xf32> on @d1
  return %1
}
)";
  auto m = parse(text);
  CHECK(printModule(*m) == text);
  Func* f = m->lookupFunc("main");
  CHECK(f->argDevice(0)->str() == "ref[0]");
  CHECK(f->resultDevice(0)->str() == "ref[1]");
  CHECK(f->ops().front()->device()->str() == "ref[0]");
  CHECK(verifyPlacement(*m).ok());
}

TEST_CASE("resolution: flags declare, references must be declared, auto declares them") {
  const std::string text = R"(func @main(%x: tensor<4xf32>) -> (tensor<4xf32>) {
  %0 = neg %x : tensor<4xf32> on hip[7]
  return %0
}
)";
  {
    auto m = parse(text);
    DeviceOptions opts;
    for (int i = 0; i < 7; ++i) opts.devices.push_back("hip[" + std::to_string(i) + "]");
    std::string e = errors(resolveDevices(*m, opts));
    CHECK(e.find("t.kir:2:3: error: op 'neg' in @main runs on device hip[7], which is not "
                 "declared; declare device hip[7]") != std::string::npos);
    CHECK(e.find("note: the op: %0 = neg %x : tensor<4xf32> on hip[7]") != std::string::npos);
    CHECK(e.find("declared devices: hip[0], hip[1], hip[2], hip[3], hip[4], hip[5], hip[6]") !=
          std::string::npos);
    opts.devices.push_back("hip[7]");
    opts.devices.push_back("hip[7]"); // a repeat is kept once
    CHECK(resolveDevices(*m, opts).ok());
    CHECK(m->devices().size() == 8);
  }
  {
    auto m = parse(text);
    DeviceOptions opts;
    opts.autoDeclare = true;
    CHECK(resolveDevices(*m, opts).ok());
    REQUIRE(m->devices().size() == 1);
    CHECK(m->devices()[0].target.str() == "hip[7]");
  }
  {
    auto m = parse(text);
    DeviceOptions opts;
    opts.devices = {"gpu[0]"};
    CHECK(errors(resolveDevices(*m, opts)).find("device=gpu[0]: error: unknown device kind") !=
          std::string::npos);
  }
}

TEST_CASE("affinity: a shared constant is cloned per consuming device, never transferred") {
  auto m = parse(R"(device ref[0]
device ref[1]
device ref[2]
func @main(%x: tensor<4xf32> on ref[0]) -> (tensor<4xf32> on ref[2]) {
  %c = constant {value = dense<1.0> : tensor<4xf32>} : tensor<4xf32> on ref[0]
  %b = broadcast %c : tensor<2x4xf32>
  %0 = add %x, %c : tensor<4xf32> on ref[0]
  %1 = add %0, %c : tensor<4xf32> on ref[1]
  %2 = add %1, %c : tensor<4xf32> on ref[2]
  %3 = add %2, %b : tensor<2x4xf32> on ref[1]
  %4 = reduce_sum %3 {axes = [0], keepdims = 0} : tensor<4xf32> on ref[2]
  return %4
}
)");
  auto stats = runAffinity(*m);
  REQUIRE_MESSAGE(stats.ok(), stats.diags().str());
  std::string out = printModule(*m);
  CHECK(count(out, "= constant") == 3); // one per device
  CHECK(count(out, "= broadcast") == 1);
  CHECK(stats->clones == 2);
  // Only computed values cross: %0 to ref[1], %1 to ref[2], %2 to ref[1], %3 to ref[2].
  CHECK(stats->transfers == 4);
  for (const auto& op : m->lookupFunc("main")->ops())
    if (op->kind() == OpKind::Transfer) CHECK(!isCheapToClone(*op->operand(0)->def()));
  CHECK(verifyPlacement(*m).ok());
  // A second run finds nothing to do.
  auto again = runAffinity(*m);
  REQUIRE(again.ok());
  CHECK(again->clones == 0);
  CHECK(again->transfers == 0);
  CHECK(printModule(*m) == out);
}

TEST_CASE("affinity: elementwise ops over shapes and constants are recomputed, not moved") {
  auto m = parse(R"(device ref[0]
device ref[1]
func @main(%x: tensor<4x4xf32> on ref[0]) -> (tensor<4x4xf32> on ref[1]) {
  %i = iota {axis = 0} : tensor<4x4xi64>
  %j = iota {axis = 1} : tensor<4x4xi64>
  %lt = lt %i, %j : tensor<4x4xi1>
  %f = cast %lt {to = f32} : tensor<4x4xf32>
  %p = exp %f : tensor<4x4xf32> on ref[0]
  %xs = mul %x, %x : tensor<4x4xf32>
  %0 = add %x, %f : tensor<4x4xf32> on ref[0]
  %1 = add %0, %f : tensor<4x4xf32> on ref[1]
  %2 = add %1, %p : tensor<4x4xf32> on ref[1]
  %3 = add %2, %xs : tensor<4x4xf32> on ref[1]
  return %3
}
)");
  const Func& f0 = *m->lookupFunc("main");
  auto first = [&](OpKind kind) -> const Op& {
    for (const auto& op : f0.ops())
      if (op->kind() == kind) return *op;
    FAIL("no such op");
    return *f0.ops().front();
  };
  // The mask (lt, cast over iotas) is; a pinned op and one that reads an argument are not.
  CHECK(isCheapToClone(first(OpKind::Lt)));
  CHECK(isCheapToClone(first(OpKind::Cast)));
  CHECK(recomputable(first(OpKind::Exp)) == false);
  CHECK(recomputable(first(OpKind::Mul)));
  CHECK(isCheapToClone(first(OpKind::Mul)) == false);
  auto stats = runAffinity(*m);
  REQUIRE_MESSAGE(stats.ok(), stats.diags().str());
  std::string out = printModule(*m);
  CHECK(count(out, "= lt ") == 2); // one per device
  CHECK(count(out, "= cast ") == 2);
  CHECK(count(out, "= exp ") == 1);
  CHECK(count(out, "= mul ") == 1);
  // %0 and the pinned %p cross to ref[1]; %xs is computed once, on one device, and crosses
  // if that is ref[0]; the mask never crosses.
  for (const auto& op : m->lookupFunc("main")->ops())
    if (op->kind() == OpKind::Transfer) {
      CHECK(!isCheapToClone(*op->operand(0)->def()));
      CHECK(op->operand(0)->def()->kind() != OpKind::Cast);
    }
  CHECK(verifyPlacement(*m).ok());
}

TEST_CASE("affinity: the number of lattice updates stays within values x devices") {
  // A wide graph where every op joins operands from many pinned devices.
  Module m;
  for (int i = 0; i < 8; ++i) CHECK(m.addDevice({"", {"ref", i}, Loc{}}).ok());
  Func* f = m.addFunc(std::make_unique<Func>("main", Loc::named("t")));
  Type t = Type::tensor(ElemType::F32, {4});
  Builder b(f);
  std::vector<Value*> vals;
  for (int i = 0; i < 8; ++i) {
    Value* a = f->addArg(t, "x" + std::to_string(i));
    f->setArgDevice(static_cast<size_t>(i), DeviceTarget{"ref", i});
    vals.push_back(a);
  }
  for (int i = 0; i < 400; ++i) {
    Value* x = vals[vals.size() - 1 - static_cast<size_t>(i % 8)];
    Value* y = vals[static_cast<size_t>(i * 7) % vals.size()];
    vals.push_back(b.createUnchecked(OpKind::Add, {x, y}, {}, {t})->result());
  }
  b.createUnchecked(OpKind::Return, {vals.back()}, {}, {});
  f->setResultTypes({t});
  auto stats = runAffinity(m);
  REQUIRE_MESSAGE(stats.ok(), stats.diags().str());
  CHECK(stats->updates <= vals.size() * 8);
  CHECK(verifyPlacement(m).ok());
}

TEST_CASE("affinity: strict mode reports a conflict with the value, pin and consumers") {
  auto m = parse(R"(device ref[0]
device ref[1]
func @main(%x: tensor<4xf32> on ref[0]) -> (tensor<4xf32> on ref[0]) {
  %0 = neg %x : tensor<4xf32> on ref[1]
  return %0
}
)");
  AffinityOptions opts;
  opts.allowTransfers = false;
  auto r = runAffinity(*m, opts);
  REQUIRE(!r.ok());
  std::string e = r.diags().str();
  CHECK(e.find("value %x is pinned to ref[0] but is consumed on another device") !=
        std::string::npos);
  CHECK(e.find("consumer on ref[1]: %0 = neg %x : tensor<4xf32> on ref[1]") != std::string::npos);
  CHECK(e.find("value %0 is pinned to ref[1]") != std::string::npos);
  CHECK(e.find("consumer: result 0 of @main on ref[0]") != std::string::npos);
}

TEST_CASE("verifyPlacement: unplaced ops and cross-device operands are caught") {
  auto m = parse(R"(device ref[0]
device ref[1]
func @main(%x: tensor<4xf32> on ref[0]) -> (tensor<4xf32> on ref[0]) {
  %0 = neg %x : tensor<4xf32> on ref[1]
  %1 = abs %0 : tensor<4xf32>
  return %1
}
)");
  std::string e = errors(verifyPlacement(*m));
  CHECK(e.find("operand 0 lives on ref[0], not on the op's device ref[1]") != std::string::npos);
  CHECK(e.find("'abs' has no declared device after affinity") != std::string::npos);
}

TEST_CASE("cse keeps per-device clones apart") {
  auto m = parse(R"(device ref[0]
device ref[1]
func @main(%x: tensor<4xf32> on ref[0]) -> (tensor<4xf32> on ref[1]) {
  %c = constant {value = dense<1.0> : tensor<4xf32>} : tensor<4xf32>
  %0 = add %x, %c : tensor<4xf32> on ref[0]
  %1 = add %0, %c : tensor<4xf32> on ref[1]
  return %1
}
)");
  REQUIRE(runAffinity(*m).ok());
  const PassInfo* cse = lookupPass("cse");
  REQUIRE(cse);
  REQUIRE(cse->create({}).take()->run(*m).ok());
  CHECK(count(printModule(*m), "= constant") == 2);
  CHECK(verifyPlacement(*m).ok());
}

TEST_CASE("globs match op, value, node and weight names") {
  CHECK(globMatch("*", ""));
  CHECK(globMatch("blocks.1.*", "blocks.1.wq"));
  CHECK(!globMatch("blocks.1.*", "blocks.10"));
  CHECK(globMatch("blocks.?.w?", "blocks.3.wk"));
  CHECK(globMatch("*a*b*c*", "xxaxxbxxcxx"));
  CHECK(!globMatch("*a*b*c", "xxaxxbxxcxx"));
  CHECK(!globMatch("matmul", "matmul2"));
}

TEST_CASE("partition: stages are contiguous, balanced and pinned to the first N devices") {
  Module m;
  for (int i = 0; i < 4; ++i) CHECK(m.addDevice({"", {"ref", i}, Loc{}}).ok());
  Func* f = m.addFunc(std::make_unique<Func>("main", Loc::named("t")));
  Type t = Type::tensor(ElemType::F32, {16});
  Value* v = f->addArg(t, "x");
  Builder b(f);
  for (int i = 0; i < 40; ++i) v = b.createUnchecked(OpKind::Exp, {v}, {}, {t})->result();
  b.createUnchecked(OpKind::Return, {v}, {}, {});
  f->setResultTypes({t});
  REQUIRE(partitionPipeline(m, 4).ok());
  std::vector<int> perStage(4, 0);
  int64_t last = 0;
  for (const auto& op : f->ops()) {
    if (op->has(kTerminator)) continue;
    REQUIRE(op->device());
    CHECK(op->device()->ordinal >= last); // contiguous, in order
    last = op->device()->ordinal;
    ++perStage[static_cast<size_t>(last)];
  }
  CHECK(perStage == std::vector<int>{10, 10, 10, 10});
  CHECK(!partitionPipeline(m, 5).ok());
  CHECK(parsePartitionSpec("pipeline:8").ok());
  CHECK(!parsePartitionSpec("pipeline:0").ok());
  CHECK(!parsePartitionSpec("pipeline:x").ok());
  CHECK(!parsePartitionSpec("data:2").ok());
  CHECK(!parsePartitionSpec("pipeline:2,pipeline:2").ok());
  CHECK(!parsePartitionSpec("tensor:2,").ok());
  CHECK(!parsePartitionSpec("pipeline:16,tensor:8").ok()); // 128 devices
  auto both = parsePartitionSpec("pipeline:2,tensor:4");
  REQUIRE(both.ok());
  CHECK(both->stages == 2);
  CHECK(both->tensor == 4);
  auto tensor = parsePartitionSpec("tensor:2");
  REQUIRE(tensor.ok());
  CHECK(!tensor->stages);
  CHECK(tensor->tensor == 2);
}

TEST_CASE("cost model: matmul FLOPs and bytes; symbolic dims at their upper bound") {
  auto m = parse(R"(symbol n in [1, 64]
func @main(%a: tensor<{n}x32xf32>, %b: tensor<32x16xf32>) -> (tensor<{n}x16xf32>) {
  %0 = matmul %a, %b : tensor<{n}x16xf32>
  return %0
}
)");
  const Op& mm = *m->lookupFunc("main")->ops().front();
  OpCost c = opCost(mm, m->symbols());
  CHECK(c.flops == 2 * 64 * 16 * 32);
  CHECK(c.bytes == (64 * 32 + 32 * 16 + 64 * 16) * 4);
  CHECK(valueBytes(*mm.result(), m->symbols()) == 64 * 16 * 4);
}

TEST_CASE("placement report: peak memory frees values after their last use") {
  auto m = parse(R"(device ref[0]
func @main(%x: tensor<4xf32> on ref[0]) -> (tensor<4xf32> on ref[0]) {
  %c = constant {value = dense<1.0> : tensor<4xf32>} : tensor<4xf32> on ref[0]
  %0 = add %x, %c : tensor<4xf32> on ref[0]
  %1 = exp %0 : tensor<4xf32> on ref[0]
  %2 = neg %1 : tensor<4xf32> on ref[0]
  return %2
}
)");
  auto report = placementReport(*m);
  REQUIRE_MESSAGE(report.ok(), report.diags().str());
  // x and c are resident (32), %0 (48), %1 while %0 is live (64), then %0 goes, %2 (64).
  CHECK(report->find("device ref[0]: 4 ops, 12 flops, 16 weight bytes, peak memory 64 bytes") !=
        std::string::npos);
  CHECK(report->find("transfers: 0 (0 bytes)") != std::string::npos);
  CHECK(report->find("constant at t.kir:3:3  16 bytes  on ref[0]\n") != std::string::npos);
  auto dot = placementDot(*m);
  REQUIRE(dot.ok());
  CHECK(dot->find("n1 [label=\"%1 = add\\nref[0]\", fillcolor=\"#8dd3c7\"];") != std::string::npos);
  // Unplaced modules are refused.
  auto raw =
      parse("device ref[0]\nfunc @f(%x: tensor<4xf32>) -> (tensor<4xf32>) {\n  return %x\n}\n");
  CHECK(!placementReport(*raw).ok());
}
