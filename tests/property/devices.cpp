// kiln-property-devices: random placements of random programs must place and compute
// the same results.
//
// For each seed: a program from the generator, 1 to 8 declared devices (ref[0..]), and
// a random placement: each op, argument and result is pinned to a random device with
// probability 1/3.
// Some operands are read through `transfer` ops written in the input. Then
//   1. affinity succeeds and verifyModule + verifyPlacement hold;
//   2. no cheap-to-clone value is ever the operand of a transfer;
//   3. the reference interpreter gives bit-identical results (transfer is the identity,
//      clones compute what their original computed);
//   4. print -> parse -> print of the placed module is byte-identical, and affinity on
//      the reparsed module changes nothing;
//   5. the placed module compiled (schedule over its devices) to module bytes and run by
//      the executor over ref[0..] gives the interpreter's results bit for bit.
//
// With --bench-ops=N it instead times affinity on one large random graph of N ops over 8
// devices (1% of ops pinned) and prints the numbers; it never asserts a time.
//
//   kiln-property-devices [--seeds=A:B] [--ops=K] [--bench-ops=N] [-v]
#include <chrono>
#include <cstdint>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "compiler/compiler.h"
#include "graphgen.h"
#include "ir/core/builder.h"
#include "ir/interp/interp.h"
#include "ir/io/npy.h"
#include "ir/io/weights.h"
#include "ir/text/parser.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"
#include "kiln/runtime.h"
#include "passes/affinity.h"
#include "runtime/module_format.h"
#include "seed_args.h"

namespace {

using kiln::HostTensor;

// Programs run through the runtime (step 5), and those among them over several devices.
int runtimeChecked = 0, runtimeMultiDevice = 0;

void declareDevices(kiln::Module& m, int n) {
  for (int i = 0; i < n; ++i) {
    kiln::Status s = m.addDevice({"", {"ref", i}, kiln::Loc::named("test")});
    (void)s.ok();
  }
}

// Pins about a third of the ops, arguments and results to random devices.
void randomPins(kiln::Module& m, std::mt19937_64& rng, int devices, int percent) {
  auto pick = [&]() -> std::optional<kiln::DeviceTarget> {
    if (static_cast<int>(rng() % 100) >= percent) return std::nullopt;
    return kiln::DeviceTarget{"ref", static_cast<int64_t>(rng() % static_cast<uint64_t>(devices))};
  };
  for (const auto& f : m.funcs()) {
    for (size_t i = 0; i < f->numArgs(); ++i) f->setArgDevice(i, pick());
    for (size_t i = 0; i < f->resultTypes().size(); ++i) f->setResultDevice(i, pick());
    for (const auto& op : f->ops())
      if (!op->has(kiln::kTerminator)) op->setDevice(pick());
  }
}

// Reads some operands through transfers written in the input (sometimes twice to the same
// device, sometimes to where the value already is, sometimes of constants), so that
// affinity's merging, removal and clone-instead-of-transfer paths run too.
void randomTransfers(kiln::Module& m, std::mt19937_64& rng, int devices) {
  for (const auto& f : m.funcs())
    for (kiln::Op* op : f->opsSnapshot()) {
      if (op->numOperands() == 0 || rng() % 10 != 0) continue;
      size_t i = rng() % op->numOperands();
      kiln::DeviceTarget to{"ref", static_cast<int64_t>(rng() % static_cast<uint64_t>(devices))};
      kiln::Attrs a;
      a.set("to", to.str());
      kiln::Builder b(f.get(), op);
      kiln::Value* v = op->operand(i);
      kiln::Op* t = b.createUnchecked(kiln::OpKind::Transfer, {v}, a, {v->type()});
      if (rng() % 2) t->setDevice(to);
      op->setOperand(i, t->result());
    }
}

std::optional<std::string> check(uint64_t seed, int ops) {
  kiln::graphgen::Options opts{seed, ops, seed % 3 == 0};
  auto program = kiln::graphgen::generate(opts);
  if (!program.ok()) return "the generated program does not verify:\n" + program.diags().str();
  kiln::Module& m = *program->module;
  std::vector<HostTensor> inputs;
  for (const std::string& literal : program->inputLiterals) {
    auto t = kiln::parseTensorLiteral(literal, kiln::Loc::named("kiln-inputs"));
    if (!t.ok()) return "an input literal does not parse:\n" + t.diags().str();
    inputs.push_back(t.take());
  }
  kiln::WeightStore noWeights(m);
  auto want = kiln::interpret(*m.lookupFunc("main"), inputs, noWeights);
  // Some symbolic programs fail at the sizes the generator picked (a generator limit, not
  // a placement one): they still have to place, only the results go unchecked.
  bool compare = want.ok();

  std::mt19937_64 rng(seed);
  int devices = 1 + static_cast<int>(rng() % 8);
  declareDevices(m, devices);
  randomPins(m, rng, devices, 33);
  randomTransfers(m, rng, devices);
  std::string pinned = kiln::printModule(m);
  auto placed = kiln::runAffinity(m);
  if (!placed.ok()) return "affinity failed on\n" + pinned + "\n" + placed.diags().str();
  if (auto s = kiln::verifyModule(m); !s.ok()) return "does not verify:\n" + s.diags().str();
  if (auto s = kiln::verifyPlacement(m); !s.ok()) return "placement:\n" + s.diags().str();
  for (const auto& op : m.lookupFunc("main")->ops())
    if (op->kind() == kiln::OpKind::Transfer && !op->operand(0)->isArg() &&
        kiln::isCheapToClone(*op->operand(0)->def()))
      return "a cheap value is transferred: " + kiln::printOp(*op);

  if (compare) {
    auto got = kiln::interpret(*m.lookupFunc("main"), inputs, noWeights);
    if (!got.ok()) return "the interpreter rejects the placed program:\n" + got.diags().str();
    for (size_t i = 0; i < want->size(); ++i)
      if (!(*want)[i].identical((*got)[i]))
        return "result " + std::to_string(i) + " differs after placement of\n" + pinned;
  }

  std::string text = kiln::printModule(m);
  auto reparsed = kiln::parseModule(text, "placed.kir");
  if (!reparsed.ok()) return "the placed module does not parse:\n" + reparsed.diags().str();
  if (kiln::printModule(**reparsed) != text) return "placed module does not round-trip";
  auto again = kiln::runAffinity(**reparsed);
  if (!again.ok()) return "affinity on the placed module failed:\n" + again.diags().str();
  if (kiln::printModule(**reparsed) != text) return "a second affinity changed the IR";

  if (!compare) return std::nullopt;
  auto source = kiln::parseModule(text, "placed.kir");
  if (!source.ok()) return "the placed module does not parse:\n" + source.diags().str();
  auto compiled = kiln::compileProgram(source.take(), {});
  if (!compiled.ok()) return "the placed module does not compile:\n" + compiled.diags().str();
  if (compiled->devices.size() > static_cast<size_t>(devices))
    return "the compiled module uses " + std::to_string(compiled->devices.size()) + " devices";
  auto bytes = kiln::serializeProgram(*compiled);
  if (!bytes.ok()) return "serialize failed:\n" + bytes.diags().str();
  auto module = kiln::RuntimeModule::fromBytes(bytes.take());
  if (!module.ok()) return "the module does not load:\n" + module.diags().str();
  auto ran = (*module)->run("main", inputs);
  if (!ran.ok()) return "the executor fails on\n" + text + "\n" + ran.diags().str();
  for (size_t i = 0; i < want->size(); ++i)
    if (!(*want)[i].identical((*ran)[i]))
      return "result " + std::to_string(i) + " differs through the runtime for\n" + text;
  ++runtimeChecked;
  runtimeMultiDevice += compiled->devices.size() > 1;
  return std::nullopt;
}

// A large random graph, built directly (the general generator is too slow for 100k
// ops): a few arguments and constants, then `ops` unary and binary elementwise ops whose
// operands are drawn from recent values (so chains are long) and from anywhere (so there
// are long edges), one result per 64 ops.
std::unique_ptr<kiln::Module> bigGraph(int ops, uint64_t seed) {
  auto m = std::make_unique<kiln::Module>();
  auto f = std::make_unique<kiln::Func>("main", kiln::Loc::named("bench"));
  kiln::Type t = kiln::Type::tensor(kiln::ElemType::F32, {16, 16});
  std::vector<kiln::Value*> values;
  for (int i = 0; i < 4; ++i) values.push_back(f->addArg(t, "x" + std::to_string(i)));
  kiln::Func* fn = m->addFunc(std::move(f));
  std::mt19937_64 rng(seed);
  kiln::Builder b(fn);
  for (int i = 0; i < 16; ++i) {
    HostTensor c(kiln::ElemType::F32, {16, 16});
    for (int64_t k = 0; k < 256; ++k) c.setF(k, static_cast<double>((k * 7 + i) % 13));
    values.push_back(b.constant(std::move(c)));
  }
  const kiln::OpKind unary[] = {kiln::OpKind::Neg, kiln::OpKind::Tanh, kiln::OpKind::Abs};
  const kiln::OpKind binary[] = {kiln::OpKind::Add, kiln::OpKind::Mul, kiln::OpKind::Sub};
  std::vector<kiln::Value*> results;
  auto draw = [&]() {
    size_t n = values.size();
    if (rng() % 4 == 0) return values[rng() % n];
    return values[n - 1 - rng() % std::min<size_t>(n, 8)];
  };
  for (int i = 0; i < ops; ++i) {
    bool un = rng() % 3 == 0;
    std::vector<kiln::Value*> operands = {draw()};
    if (!un) operands.push_back(draw());
    kiln::OpKind k = un ? unary[rng() % 3] : binary[rng() % 3];
    values.push_back(b.createUnchecked(k, operands, {}, {t})->result());
    if (i % 64 == 63) results.push_back(values.back());
  }
  b.createUnchecked(kiln::OpKind::Return, results, {}, {});
  fn->setResultTypes(std::vector<kiln::Type>(results.size(), t));
  return m;
}

int bench(int ops) {
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  std::unique_ptr<kiln::Module> module = bigGraph(ops, 7);
  kiln::Module& m = *module;
  if (auto s = kiln::verifyModule(m); !s.ok()) {
    std::cerr << s.diags().str();
    return 1;
  }
  size_t numOps = m.lookupFunc("main")->numOps();
  declareDevices(m, 8);
  std::mt19937_64 rng(7);
  randomPins(m, rng, 8, 1);
  auto t1 = Clock::now();
  auto placed = kiln::runAffinity(m);
  auto t2 = Clock::now();
  if (!placed.ok()) {
    std::cerr << placed.diags().str();
    return 1;
  }
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::cout << "affinity: " << numOps << " ops, 8 devices, 1% pinned\n"
            << "  generate " << ms(t1 - t0) << " ms\n"
            << "  affinity " << ms(t2 - t1) << " ms (analysis, clones, transfers, verify)\n"
            << "  lattice updates " << placed->updates << ", clones " << placed->clones
            << ", transfers " << placed->transfers << "\n";
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  kiln::property::SeedArgs args;
  args.last = 300;
  int benchOps = 0;
  if (!kiln::property::parseSeedArgs(
          argc, argv, args,
          "usage: kiln-property-devices [--seeds=A:B] [--ops=K] [--bench-ops=N] [-v]",
          [&](std::string_view a) {
            if (a.rfind("--bench-ops=", 0) != 0) return false;
            benchOps = std::stoi(std::string(a.substr(12)));
            return true;
          }))
    return 2;
  if (benchOps) return bench(benchOps);
  const int64_t first = args.first, last = args.last;
  const int ops = args.ops;
  const bool verbose = args.verbose;
  int failed = 0;
  for (int64_t seed = first; seed <= last; ++seed) {
    auto failure = check(static_cast<uint64_t>(seed), ops);
    if (verbose) std::cout << "seed " << seed << ": " << (failure ? "FAIL" : "ok") << "\n";
    if (!failure) continue;
    ++failed;
    std::cout << "FAIL seed " << seed << " (kiln-graphgen --seed " << seed << " --ops " << ops
              << (seed % 3 == 0 ? " --symbolic" : "") << "):\n  " << *failure << "\n";
  }
  std::cout << (last - first + 1) << " random placements checked, " << failed << " failed; "
            << runtimeChecked << " run through compile and the executor (" << runtimeMultiDevice
            << " over several devices), identical to the interpreter\n";
  return failed ? 1 : 0;
}
