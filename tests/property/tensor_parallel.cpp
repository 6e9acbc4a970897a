// kiln-property-tensor-parallel: random matmul / elementwise graphs sharded over T devices
// must compute what they computed on one.
//
// For each seed: a random program over x: S x H of matmuls with weights (held in memory,
// so the pass cuts their shards there), unary and binary elementwise ops, broadcast
// multiplies by a constant row, residual adds, softmax and reductions over the last dim,
// transposes and reshapes that split the last dim in two, and batched matmuls of such
// reshaped values. T is 2 or 4 over ref[0..T-1] (sometimes with 2 pipeline stages, over
// 2T devices). Then
//   1. placement with tensor:T succeeds, and verifyModule + verifyPlacement hold;
//   2. the interpreter's results on the sharded module match the unsharded ones within f32
//      reduction-order tolerance (|got - want| <= 1e-4 * max(1, |want|max));
//   3. print -> parse -> print is byte-identical, and affinity leaves the sharded module as
//      it is;
//   4. compiled (schedule over its devices) to module bytes and run by the executor, it
//      gives the sharded interpreter's results bit for bit (the collectives combine in
//      operand order, in f64, on both).
// It also counts the collectives and the weights split by columns and by rows, so a rule
// that stops sharding shows in the summary line.
//
//   kiln-property-tensor-parallel [--seeds=A:B] [--ops=K] [-v]
#include <cmath>
#include <cstdint>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "compiler/compiler.h"
#include "ir/core/builder.h"
#include "ir/interp/interp.h"
#include "ir/io/weights.h"
#include "ir/text/parser.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"
#include "kiln/runtime.h"
#include "passes/affinity.h"
#include "passes/placement.h"
#include "runtime/module_format.h"
#include "seed_args.h"

namespace {

using kiln::HostTensor;
using kiln::OpKind;
using kiln::Type;
using kiln::Value;

int64_t collectives = 0, shardedWeights = 0, runtimeChecked = 0;

HostTensor randomTensor(std::mt19937_64& rng, std::vector<int64_t> shape, double scale) {
  HostTensor t(kiln::ElemType::F32, std::move(shape));
  std::uniform_real_distribution<double> u(-scale, scale);
  for (int64_t i = 0; i < t.numElements(); ++i) t.setF(i, u(rng));
  return t;
}

Type f32(std::vector<int64_t> shape) { return Type::tensor(kiln::ElemType::F32, shape); }

struct Program {
  std::unique_ptr<kiln::Module> module;
  std::vector<HostTensor> inputs;
};

// Builds the random program; every value is S x W for a width W from {8, 16, 32} (or its
// heads view), so ops combine freely.
Program generate(uint64_t seed, int ops) {
  std::mt19937_64 rng(seed);
  const int64_t S = 4 + static_cast<int64_t>(rng() % 2) * 4;
  const int64_t widths[] = {8, 16, 32};
  auto m = std::make_unique<kiln::Module>();
  auto fn = std::make_unique<kiln::Func>("main", kiln::Loc::named("tp"));
  int64_t h = widths[rng() % 3];
  Value* x = fn->addArg(f32({S, h}), "x");
  kiln::Func* f = m->addFunc(std::move(fn));
  kiln::Builder b(f);
  std::vector<Value*> pool = {x};
  int weights = 0;
  auto width = [](Value* v) { return v->type().shape().back().expr().constantValue().value(); };
  auto make = [&](OpKind k, std::vector<Value*> operands, kiln::Attrs a = {},
                  std::vector<Type> types = {}) {
    auto op = b.create(k, operands, std::move(a), std::move(types));
    if (!op.ok()) {
      std::cerr << op.diags().str();
      std::abort();
    }
    return (*op)->result();
  };
  auto weight = [&](int64_t rows, int64_t cols) {
    std::string name = "w" + std::to_string(weights++);
    HostTensor t = randomTensor(rng, {rows, cols}, 1.0 / std::sqrt(static_cast<double>(rows)));
    (void)m->addWeight(
        {name, f32({rows, cols}), "none.safetensors", name, kiln::Loc::named("tp"), std::nullopt});
    m->setWeightData(name, t);
    kiln::Attrs a;
    a.set("name", name);
    return make(OpKind::Weight, {}, a, {f32({rows, cols})});
  };
  for (int i = 0; i < ops; ++i) {
    Value* cur = pool.back();
    int64_t w = width(cur);
    Value* out = nullptr;
    switch (rng() % 9) {
    case 0:
    case 1: // a projection
    case 2: out = make(OpKind::Matmul, {cur, weight(w, widths[rng() % 3])}); break;
    case 3: { // an activation
      const OpKind unary[] = {OpKind::Relu, OpKind::Tanh, OpKind::Silu, OpKind::Neg};
      out = make(unary[rng() % 4], {cur});
      break;
    }
    case 4: { // a residual add with an earlier value of the same width, or a scaled row
      Value* other = nullptr;
      for (Value* v : pool)
        if (v != cur && width(v) == w && rng() % 2) other = v;
      if (other) {
        out = make(OpKind::Add, {cur, other});
      } else {
        out = make(OpKind::Mul, {cur, b.constant(randomTensor(rng, {w}, 1.0))});
      }
      break;
    }
    case 5: { // softmax or a norm-like reduction over the last dim
      if (rng() % 2) {
        kiln::Attrs a;
        a.set("axis", int64_t{-1});
        out = make(OpKind::Softmax, {cur}, a);
      } else {
        kiln::Attrs a;
        a.set("axes", std::vector<int64_t>{1});
        a.set("keepdims", int64_t{1});
        Value* mean = make(OpKind::ReduceMean, {make(OpKind::Mul, {cur, cur})}, a);
        out = make(OpKind::Mul,
                   {cur, make(OpKind::Rsqrt,
                              {make(OpKind::Add, {mean, b.scalar(kiln::ElemType::F32, 1.0)})})});
      }
      break;
    }
    case 6: { // heads: S x w -> S x 2 x w/2 -> 2 x S x w/2, per-head scores, back
      Value* r = make(OpKind::Reshape, {cur}, {}, {f32({S, 2, w / 2})});
      kiln::Attrs p;
      p.set("perm", std::vector<int64_t>{1, 0, 2});
      Value* heads = make(OpKind::Transpose, {r}, p);
      kiln::Attrs pk;
      pk.set("perm", std::vector<int64_t>{1, 2, 0});
      Value* kt = make(OpKind::Transpose, {r}, pk); // 2 x w/2 x S
      Value* scores = make(OpKind::Matmul, {heads, kt});
      kiln::Attrs sm;
      sm.set("axis", int64_t{-1});
      Value* probs = make(OpKind::Softmax, {scores}, sm);
      Value* mixed = make(OpKind::Matmul, {probs, heads}); // 2 x S x w/2
      Value* back = make(OpKind::Transpose, {mixed}, p);
      out = make(OpKind::Reshape, {back}, {}, {f32({S, w})});
      break;
    }
    case 7: { // a transpose pair around an elementwise op
      kiln::Attrs p;
      p.set("perm", std::vector<int64_t>{1, 0});
      Value* t = make(OpKind::Tanh, {make(OpKind::Transpose, {cur}, p)});
      out = make(OpKind::Transpose, {t}, p);
      break;
    }
    default: // a gated pair of projections (SwiGLU), then one back to w
    {
      int64_t f2 = widths[rng() % 3];
      Value* gate = make(OpKind::Silu, {make(OpKind::Matmul, {cur, weight(w, f2)})});
      Value* up = make(OpKind::Matmul, {cur, weight(w, f2)});
      out = make(OpKind::Matmul, {make(OpKind::Mul, {gate, up}), weight(f2, w)});
      break;
    }
    }
    pool.push_back(out);
  }
  std::vector<Value*> results = {pool.back()};
  if (pool.size() > 3 && rng() % 2) results.push_back(pool[pool.size() / 2]);
  std::vector<Type> types;
  for (Value* v : results) types.push_back(v->type());
  b.createUnchecked(OpKind::Return, results, {}, {});
  f->setResultTypes(types);
  Program p;
  p.module = std::move(m);
  p.inputs.push_back(randomTensor(rng, {S, h}, 1.0));
  return p;
}

std::optional<std::string> close(const std::vector<HostTensor>& want,
                                 const std::vector<HostTensor>& got) {
  if (want.size() != got.size()) return "result counts differ";
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i].shape() != got[i].shape()) return "result " + std::to_string(i) + ": shape differs";
    double scale = 1;
    for (int64_t k = 0; k < want[i].numElements(); ++k)
      scale = std::max(scale, std::fabs(want[i].getF(k)));
    for (int64_t k = 0; k < want[i].numElements(); ++k) {
      double a = want[i].getF(k), g = got[i].getF(k);
      if (std::isnan(a) != std::isnan(g) || std::fabs(a - g) > 1e-4 * scale)
        return "result " + std::to_string(i) + " element " + std::to_string(k) + ": " +
               std::to_string(g) + " instead of " + std::to_string(a);
    }
  }
  return std::nullopt;
}

std::optional<std::string> check(uint64_t seed, int ops) {
  Program prog = generate(seed, ops);
  kiln::Module& m = *prog.module;
  if (auto s = kiln::verifyModule(m); !s.ok())
    return "the program does not verify:\n" + s.diags().str();
  std::string source = kiln::printModule(m);
  kiln::WeightStore store(m);
  auto want = kiln::interpret(*m.lookupFunc("main"), prog.inputs, store);
  if (!want.ok()) return "the interpreter fails:\n" + want.diags().str();

  int tensor = seed % 2 ? 2 : 4;
  int stages = seed % 5 == 0 ? 2 : 1;
  kiln::PlacementOptions po;
  for (int i = 0; i < tensor * stages; ++i)
    po.devices.devices.push_back("ref[" + std::to_string(i) + "]");
  po.tensor = tensor;
  if (stages > 1) po.stages = stages;
  po.affinity = true;
  if (auto s = kiln::placeModule(m, po); !s.ok())
    return "tensor:" + std::to_string(tensor) + " fails on\n" + source + "\n" + s.diags().str();
  if (auto s = kiln::verifyPlacement(m); !s.ok()) return "placement:\n" + s.diags().str();
  for (const auto& op : m.lookupFunc("main")->ops()) collectives += op->has(kiln::kCollective);
  for (const auto& w : m.weights()) shardedWeights += w.shard.has_value();

  kiln::WeightStore sharded(m);
  auto got = kiln::interpret(*m.lookupFunc("main"), prog.inputs, sharded);
  if (!got.ok()) return "the interpreter rejects the sharded program:\n" + got.diags().str();
  if (auto d = close(*want, *got))
    return *d + " after tensor:" + std::to_string(tensor) + " of\n" + source;

  std::string text = kiln::printModule(m);
  auto reparsed = kiln::parseModule(text, "sharded.kir");
  if (!reparsed.ok())
    return "the sharded module does not parse:\n" + reparsed.diags().str() + "\n" + text;
  if (kiln::printModule(**reparsed) != text) return "the sharded module does not round-trip";
  auto again = kiln::runAffinity(**reparsed);
  if (!again.ok()) return "affinity on the sharded module failed:\n" + again.diags().str();
  if (kiln::printModule(**reparsed) != text) return "affinity changed the sharded module";

  // The weights live in memory: compile the module itself (it keeps them), not the text.
  kiln::CompileOptions co;
  co.recognizeAttention = false; // the interpreter ran the unfused matmul-softmax-matmul
  auto compiled = kiln::compileProgram(std::move(prog.module), co);
  if (!compiled.ok()) return "the sharded module does not compile:\n" + compiled.diags().str();
  auto bytes = kiln::serializeProgram(*compiled);
  if (!bytes.ok()) return "serialize failed:\n" + bytes.diags().str();
  auto module = kiln::RuntimeModule::fromBytes(bytes.take());
  if (!module.ok()) return "the module does not load:\n" + module.diags().str();
  auto ran = (*module)->run("main", prog.inputs);
  if (!ran.ok()) return "the executor fails on\n" + text + "\n" + ran.diags().str();
  for (size_t i = 0; i < got->size(); ++i)
    if (!(*got)[i].identical((*ran)[i]))
      return "result " + std::to_string(i) +
             " differs between the interpreter and the executor for\n" + text;
  ++runtimeChecked;
  return std::nullopt;
}

} // namespace

int main(int argc, char** argv) {
  kiln::property::SeedArgs args;
  args.last = 120;
  args.ops = 10;
  if (!kiln::property::parseSeedArgs(
          argc, argv, args, "usage: kiln-property-tensor-parallel [--seeds=A:B] [--ops=K] [-v]"))
    return 2;
  const int64_t first = args.first, last = args.last;
  const int ops = args.ops;
  const bool verbose = args.verbose;
  int failed = 0;
  for (int64_t seed = first; seed <= last; ++seed) {
    auto failure = check(static_cast<uint64_t>(seed), ops);
    if (verbose) std::cout << "seed " << seed << ": " << (failure ? "FAIL" : "ok") << "\n";
    if (!failure) continue;
    ++failed;
    std::cout << "FAIL seed " << seed << ":\n  " << *failure << "\n";
  }
  std::cout << (last - first + 1) << " random programs sharded, " << failed << " failed; "
            << runtimeChecked << " run through compile and the executor; " << collectives
            << " collectives, " << shardedWeights << " weight shards\n";
  return failed ? 1 : 0;
}
