// kiln-runtime-differential: random programs from the generator give byte-identical results
// through the reference interpreter and through compile → .kmod bytes → RuntimeModule (the
// embedding API over the executor)
// (static programs and programs with symbolic dims), and calling the loaded module a
// second time gives the same bytes again (load once, run many).
//
//   kiln-runtime-differential [--seeds=N] [--symbolic-seeds=N]
#include <cstdio>
#include <iostream>
#include <string>

#include "compiler/compiler.h"
#include "graphgen.h"
#include "ir/interp.h"
#include "ir/npy.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/weights.h"
#include "kiln/runtime.h"
#include "runtime/module_format.h"

namespace {

using namespace kiln;

// Empty on success, else what went wrong.
std::string check(uint64_t seed, bool symbolic) {
  graphgen::Options opts;
  opts.seed = seed;
  opts.symbolic = symbolic;
  auto gen = graphgen::generate(opts);
  if (!gen.ok()) return "generator failed: " + gen.diags().str();
  std::string text = printModule(*gen->module);
  std::vector<HostTensor> inputs;
  for (const std::string& lit : gen->inputLiterals) {
    auto t = parseTensorLiteral(lit, Loc::named("input"));
    if (!t.ok()) return "bad input literal: " + t.diags().str();
    inputs.push_back(t.take());
  }
  WeightStore weights(*gen->module);
  auto expected = interpret(*gen->module->lookupFunc("main"), inputs, weights);

  auto reparsed = parseModule(text, "gen.kir");
  if (!reparsed.ok()) return "reparse failed";
  auto program = compileProgram(reparsed.take(), {});
  if (!program.ok()) return "compile failed: " + program.diags().str();
  auto bytes = serializeProgram(*program);
  if (!bytes.ok()) return "serialize failed: " + bytes.diags().str();
  // Through the embedding API: module bytes loaded once, called twice.
  auto module = RuntimeModule::fromBytes(bytes.take());
  if (!module.ok()) return "load failed: " + module.diags().str();
  for (int call = 0; call < 2; ++call) {
    auto got = (*module)->run("main", inputs);
    if (expected.ok() != got.ok())
      return std::string("interpreter ") + (expected.ok() ? "succeeded" : "failed") +
             " but the executor " + (got.ok() ? "succeeded" : "failed: " + got.diags().str());
    if (!got.ok()) continue;
    if (got->size() != expected->size()) return "result counts differ";
    for (size_t i = 0; i < got->size(); ++i)
      if (!(*got)[i].identical((*expected)[i]))
        return "result " + std::to_string(i) + " differs on call " + std::to_string(call) + ": " +
               formatTensor((*got)[i]) + " vs " + formatTensor((*expected)[i]);
  }
  return "";
}

int64_t flagValue(const std::string& arg, const std::string& name, int64_t fallback) {
  std::string prefix = "--" + name + "=";
  return arg.starts_with(prefix) ? std::stoll(arg.substr(prefix.size())) : fallback;
}

} // namespace

int main(int argc, char** argv) {
  int64_t seeds = 150, symbolicSeeds = 80;
  for (int i = 1; i < argc; ++i) {
    seeds = flagValue(argv[i], "seeds", seeds);
    symbolicSeeds = flagValue(argv[i], "symbolic-seeds", symbolicSeeds);
  }
  int failures = 0, checked = 0;
  for (int sym = 0; sym < 2; ++sym)
    for (int64_t s = 1; s <= (sym ? symbolicSeeds : seeds); ++s) {
      std::string why = check(static_cast<uint64_t>(s), sym == 1);
      ++checked;
      if (why.empty()) continue;
      ++failures;
      std::cout << "seed " << s << (sym ? " (symbolic)" : "") << ": " << why
                << "\n  reproduce: kiln-graphgen --seed=" << s << (sym ? " --symbolic" : "")
                << "\n";
    }
  std::cout << checked - failures << " of " << checked << " programs identical\n";
  return failures ? 1 : 0;
}
