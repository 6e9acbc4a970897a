// kiln-property: properties every random program from the generator must have.
//
// For each seed (static programs and programs with symbolic dims):
//   1. print → parse → print is byte-identical;
//   2. the pipeline (default canonicalize,cse,dce) keeps the results the reference
//      interpreter computes for the original;
//   3. running the pipeline a second time changes nothing (the printed text is equal).
//
// Result comparison: shapes and element types must be equal. Integers and i1 compare
// exactly. Floats compare as |a - b| <= atol + rtol * |b| with rtol = 1e-5, atol = 1e-6
// for f32 and f64; for f16 and bf16 both grow to 8 units in the last place of the type
// (8 * 2^-10 and 8 * 2^-7), because a rewrite may change where a narrow type rounds.
// NaN equals NaN; infinities must match exactly.
//
// A failing seed is shrunk: the same seed is generated with fewer ops (the generator's
// draws are a prefix of the longer program's), and the smallest op count that still
// fails is reported with the command that prints its program.
//
//   kiln-property [--seeds=A:B] [--symbolic-seeds=A:B] [--ops=K] [--pipeline=P] [-v]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "graphgen.h"
#include "ir/interp/interp.h"
#include "ir/io/npy.h"
#include "ir/io/weights.h"
#include "ir/text/parser.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"
#include "passes/pass_manager.h"

namespace {

using kiln::ElemType;
using kiln::HostTensor;

struct Config {
  int64_t staticFirst = 1, staticLast = 300;
  int64_t symbolicFirst = 1, symbolicLast = 100;
  int ops = 12;
  std::string pipeline = "canonicalize,cse,dce";
  bool verbose = false;
};

struct Tolerance {
  double rtol, atol;
};

Tolerance toleranceFor(ElemType e) {
  if (e == ElemType::F16) return {8 * 0x1p-10, 8 * 0x1p-10};
  if (e == ElemType::BF16) return {8 * 0x1p-7, 8 * 0x1p-7};
  return {1e-5, 1e-6};
}

std::string shapeStr(const HostTensor& t) {
  std::string s;
  for (int64_t d : t.shape()) s += std::to_string(d) + "x";
  return s + std::string(kiln::elemTypeName(t.elem()));
}

// Empty when equal, else what differs.
std::string compareTensors(const HostTensor& want, const HostTensor& got) {
  if (want.elem() != got.elem() || want.shape() != got.shape())
    return "type " + shapeStr(got) + ", expected " + shapeStr(want);
  bool floating = kiln::isFloat(want.elem());
  Tolerance tol = toleranceFor(want.elem());
  for (int64_t i = 0; i < want.numElements(); ++i) {
    bool same = true;
    if (floating) {
      double a = want.getF(i), b = got.getF(i);
      if (std::isnan(a) || std::isnan(b))
        same = std::isnan(a) && std::isnan(b);
      else if (std::isinf(a) || std::isinf(b))
        same = a == b;
      else
        same = std::fabs(a - b) <= tol.atol + tol.rtol * std::fabs(a);
    } else {
      same = want.getI(i) == got.getI(i);
    }
    if (!same) {
      std::ostringstream os;
      os.precision(17);
      os << "element " << i << " is " << got.getF(i) << ", expected " << want.getF(i);
      return os.str();
    }
  }
  return "";
}

// The first line where two texts differ, for a readable report.
std::string firstDifference(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  for (int line = 1;; ++line) {
    bool ha = static_cast<bool>(std::getline(sa, la));
    bool hb = static_cast<bool>(std::getline(sb, lb));
    if (!ha && !hb) return "texts differ only in their final newline";
    if (la != lb || ha != hb)
      return "line " + std::to_string(line) + ":\n    first:  " + (ha ? la : "<end>") +
             "\n    second: " + (hb ? lb : "<end>");
  }
}

kiln::Status runPipeline(const std::string& pipeline, kiln::Module& m) {
  kiln::PassManager pm;
  KILN_CHECK(pm.addPipeline(pipeline));
  std::ostringstream dump;
  return pm.run(m, dump);
}

// Checks one program; the reason it fails, or nothing when it holds every property.
std::optional<std::string> check(const kiln::graphgen::Options& opts, const Config& cfg) {
  auto program = kiln::graphgen::generate(opts);
  if (!program.ok()) return "the generated program does not verify:\n" + program.diags().str();
  const kiln::Module& original = *program->module;
  std::string text = kiln::printModule(original);

  auto parsed = kiln::parseModule(kiln::graphgen::programText(*program), "generated.kir");
  if (!parsed.ok()) return "the printed program does not parse:\n" + parsed.diags().str();
  kiln::Module& module = **parsed;
  std::string reprinted = kiln::printModule(module);
  if (reprinted != text)
    return "print -> parse -> print is not byte-identical at " + firstDifference(text, reprinted);

  std::vector<HostTensor> inputs;
  for (const std::string& literal : program->inputLiterals) {
    auto t = kiln::parseTensorLiteral(literal, kiln::Loc::named("kiln-inputs"));
    if (!t.ok()) return "an input literal does not parse:\n" + t.diags().str();
    inputs.push_back(t.take());
  }
  kiln::WeightStore noWeights(original);
  auto want = kiln::interpret(*original.lookupFunc("main"), inputs, noWeights);
  if (!want.ok()) return "the interpreter rejects the generated program:\n" + want.diags().str();

  if (auto s = runPipeline(cfg.pipeline, module); !s.ok())
    return cfg.pipeline + " failed:\n" + s.diags().str();
  if (auto s = kiln::verifyModule(module); !s.ok())
    return "the module does not verify after " + cfg.pipeline + ":\n" + s.diags().str();
  const kiln::Func* main = module.lookupFunc("main");
  if (!main) return cfg.pipeline + " removed @main";
  kiln::WeightStore noWeights2(module);
  auto got = kiln::interpret(*main, inputs, noWeights2);
  if (!got.ok()) return "the interpreter rejects the optimized program:\n" + got.diags().str();
  if (got->size() != want->size()) return "the optimized program has another result count";
  for (size_t i = 0; i < want->size(); ++i) {
    std::string diff = compareTensors((*want)[i], (*got)[i]);
    if (!diff.empty())
      return "result " + std::to_string(i) + " after " + cfg.pipeline + ": " + diff;
  }

  std::string once = kiln::printModule(module);
  if (auto s = runPipeline(cfg.pipeline, module); !s.ok())
    return "the second run of " + cfg.pipeline + " failed:\n" + s.diags().str();
  std::string twice = kiln::printModule(module);
  if (twice != once)
    return "a second run of " + cfg.pipeline + " changed the IR at " + firstDifference(once, twice);
  return std::nullopt;
}

std::string reproduce(const kiln::graphgen::Options& opts) {
  return "kiln-graphgen --seed " + std::to_string(opts.seed) + " --ops " +
         std::to_string(opts.numOps) + (opts.symbolic ? " --symbolic" : "");
}

// Checks seeds first..last; returns the number that failed.
int checkSeeds(int64_t first, int64_t last, bool symbolic, const Config& cfg, int& checked) {
  int failed = 0;
  for (int64_t seed = first; seed <= last; ++seed) {
    kiln::graphgen::Options opts{static_cast<uint64_t>(seed), cfg.ops, symbolic};
    ++checked;
    auto failure = check(opts, cfg);
    if (cfg.verbose) std::cout << reproduce(opts) << ": " << (failure ? "FAIL" : "ok") << "\n";
    if (!failure) continue;
    ++failed;
    kiln::graphgen::Options smallest = opts;
    std::string reason = *failure;
    for (int k = 0; k < opts.numOps; ++k) {
      kiln::graphgen::Options fewer{opts.seed, k, symbolic};
      if (auto f = check(fewer, cfg)) {
        smallest = fewer;
        reason = *f;
        break;
      }
    }
    std::cout << "FAIL seed " << seed << (symbolic ? " (symbolic)" : "") << " with " << opts.numOps
              << " ops; smallest failing op count " << smallest.numOps
              << ", reproduce with: " << reproduce(smallest) << "\n  " << reason << "\n";
    if (auto p = kiln::graphgen::generate(smallest); p.ok())
      std::cout << "  program:\n" << kiln::graphgen::programText(*p) << "\n";
  }
  return failed;
}

bool parseRange(std::string_view text, int64_t& first, int64_t& last) {
  auto colon = text.find(':');
  if (colon == std::string_view::npos) return false;
  try {
    size_t used = 0;
    std::string a(text.substr(0, colon)), b(text.substr(colon + 1));
    first = std::stoll(a, &used);
    if (used != a.size()) return false;
    last = std::stoll(b, &used);
    if (used != b.size()) return false;
  } catch (const std::exception&) {
    return false;
  }
  return first >= 0 && first <= last + 1;
}

} // namespace

int main(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    bool good = true;
    if (arg.starts_with("--seeds="))
      good = parseRange(arg.substr(8), cfg.staticFirst, cfg.staticLast);
    else if (arg.starts_with("--symbolic-seeds="))
      good = parseRange(arg.substr(17), cfg.symbolicFirst, cfg.symbolicLast);
    else if (arg.starts_with("--ops="))
      cfg.ops = std::atoi(std::string(arg.substr(6)).c_str());
    else if (arg.starts_with("--pipeline="))
      cfg.pipeline = std::string(arg.substr(11));
    else if (arg == "-v" || arg == "--verbose")
      cfg.verbose = true;
    else
      good = false;
    if (!good || cfg.ops < 0) {
      std::cerr << "kiln-property: error: bad argument '" << arg
                << "'\nusage: kiln-property [--seeds=A:B] [--symbolic-seeds=A:B] [--ops=K] "
                   "[--pipeline=P] [-v]\n";
      return 1;
    }
  }
  kiln::PassManager probe;
  if (auto s = probe.addPipeline(cfg.pipeline); !s.ok()) {
    std::cerr << "kiln-property: error: " << s.diags().str() << "\n";
    return 1;
  }
  int checked = 0;
  int failed = checkSeeds(cfg.staticFirst, cfg.staticLast, false, cfg, checked);
  failed += checkSeeds(cfg.symbolicFirst, cfg.symbolicLast, true, cfg, checked);
  std::cout << "kiln-property: " << checked << " programs checked, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}
