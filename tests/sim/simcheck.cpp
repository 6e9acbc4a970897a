// kiln-simcheck: proves `lower` correct on the sim device against the reference interpreter.
//
//   kiln-simcheck FILE.kir|--graphgen-seed=S [--graphgen-ops=N] [--symbolic]
//                 [--pipeline=P] [--target=T] [--tile-config=F] [--dims=a=1,b=7] [--seed=N]
//                 [--reference-func=NAME]
//
// Parses the program twice; runs @main of the first copy on the reference interpreter and
// of the second, after the pipeline (default: the codegen pipeline; none: no passes), on the
// sim driver (lowered dispatches simulated, others interpreted), with the same random
// inputs; compares every output (integers and i1 exactly, floats within a tolerance of
// their precision — f32 within 1e-4 when the target accumulates matmuls in f32 — NaN
// equal to NaN). When the reference fails (an index out of range)
// the sim run must fail too. Prints one summary line; exits 1 on any difference.
// --reference-func names the function the reference runs instead of @main (for
// hand-written kernel IR, which the reference interpreter cannot run).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "graphgen.h"
#include "ir/interp/interp.h"
#include "ir/io/npy.h"
#include "ir/text/parser.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"
#include "passes/codegen.h"
#include "passes/pass_manager.h"
#include "runtime/sim/sim.h"
#include "target/target.h"

using namespace kiln;

namespace {

int failWith(const Diags& d) {
  std::cerr << d.str();
  return 1;
}

std::string arg(int argc, char** argv, const std::string& name, const std::string& def = "") {
  std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind(prefix, 0) == 0) return argv[i] + prefix.size();
  return def;
}
bool flag(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--" + name) return true;
  return false;
}

// `narrow`: the target accumulates matmuls in f32 (no wideAccumulation, e.g. cpu), whose
// rounding error grows with K (about 2e-5 at K = 300 for inputs in [-1, 1]).
bool close(double a, double b, ElemType e, bool narrow) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  double tol = e == ElemType::F64 ? 1e-9 : e == ElemType::F32 ? (narrow ? 1e-4 : 1e-5) : 1e-2;
  return std::fabs(a - b) <= tol * (1 + std::fabs(b));
}

} // namespace

int main(int argc, char** argv) {
  std::string file;
  for (int i = 1; i < argc; ++i)
    if (argv[i][0] != '-') file = argv[i];
  std::string text;
  std::vector<HostTensor> inputs;
  bool haveInputs = false;
  if (!arg(argc, argv, "graphgen-seed").empty()) {
    graphgen::Options o;
    o.seed = std::stoull(arg(argc, argv, "graphgen-seed"));
    o.numOps = std::stoi(arg(argc, argv, "graphgen-ops", "12"));
    o.symbolic = flag(argc, argv, "symbolic");
    auto p = graphgen::generate(o);
    if (!p.ok()) return failWith(p.diags());
    text = printModule(*p->module);
    for (const std::string& lit : p->inputLiterals) {
      auto t = parseTensorLiteral(lit, Loc::named("graphgen input"));
      if (!t.ok()) return failWith(t.diags());
      inputs.push_back(*t);
    }
    haveInputs = true;
    file = "graphgen-" + arg(argc, argv, "graphgen-seed");
  } else {
    std::ifstream in(file);
    if (!in) {
      std::cerr << "kiln-simcheck: cannot read " << file << "\n";
      return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }

  // --target and --tile-config become the codegen passes' options.
  PassManagerOptions pmOpts;
  std::string targetName = arg(argc, argv, "target", "cpu");
  auto target = lookupTarget(targetName);
  if (!target.ok()) return failWith(target.diags());
  if (std::string t = arg(argc, argv, "target"); !t.empty()) pmOpts.defaults["target"] = t;
  if (std::string c = arg(argc, argv, "tile-config"); !c.empty())
    pmOpts.defaults["tile-config"] = c;

  auto ref = parseModule(text, file);
  auto sim = parseModule(text, file);
  if (!ref.ok()) return failWith(ref.diags());
  if (!sim.ok()) return failWith(sim.diags());
  Module& rm = **ref;
  Module& sm = **sim;
  Status v = verifyModule(rm);
  if (!v.ok()) return failWith(v.diags());

  PassManager pm(pmOpts);
  std::string pipeline = arg(argc, argv, "pipeline", "codegen");
  if (pipeline != "none") {
    Status added = pm.addPipeline(pipeline);
    if (!added.ok()) return failWith(added.diags());
  }
  Status ran = pm.passNames().empty() ? Status(ok()) : pm.run(sm, std::cerr);
  if (!ran.ok()) return failWith(ran.diags());
  Status v2 = verifyModule(sm);
  if (!v2.ok()) return failWith(v2.diags());

  Func* rf = rm.lookupFunc(arg(argc, argv, "reference-func", "main"));
  Func* sf = sm.lookupFunc("main");
  if (!rf || !sf) {
    std::cerr << "kiln-simcheck: no @main\n";
    return 1;
  }

  if (!haveInputs) {
    // Symbol values from --dims, the rest at their lower bound; data random but tame.
    SymbolBinding dims;
    for (const auto& [name, info] : rm.symbols().all()) dims[name] = info.lo;
    std::stringstream ds(arg(argc, argv, "dims"));
    std::string item;
    while (std::getline(ds, item, ','))
      if (auto eq = item.find('='); eq != std::string::npos)
        dims[item.substr(0, eq)] = std::stoll(item.substr(eq + 1));
    std::mt19937_64 rng(std::stoull(arg(argc, argv, "seed", "1")));
    for (size_t i = 0; i < rf->numArgs(); ++i) {
      const Type& t = rf->arg(i)->type();
      std::vector<int64_t> shape;
      for (const Dim& d : t.shape()) {
        auto n = d.expr().evaluate(dims);
        if (!n) {
          std::cerr << "kiln-simcheck: give --dims for " << d.str() << "\n";
          return 1;
        }
        shape.push_back(*n);
      }
      HostTensor x(t.elem(), shape);
      for (int64_t e = 0; e < x.numElements(); ++e) {
        uint64_t r = rng();
        if (isFloat(t.elem()))
          x.setF(e, static_cast<double>(r % 4001) / 1000.0 - 2.0);
        else if (isBool(t.elem()))
          x.setI(e, static_cast<int64_t>(r & 1));
        else
          x.setI(e, static_cast<int64_t>(r % 4));
      }
      inputs.push_back(x);
    }
  }

  WeightStore rw(rm), sw(sm);
  auto expected = interpret(*rf, inputs, rw);
  sim::SimStats stats;
  auto got = sim::runOnSim(*sf, inputs, sw, &stats);
  int lowered = 0, host = 0;
  for (const auto& op : sf->ops())
    if (op->kind() == OpKind::Dispatch) {
      Func* k = dispatchKernel(sm, *op);
      (k && isLoweredKernel(*k)) ? ++lowered : ++host;
    }
  if (!expected.ok()) {
    if (got.ok()) {
      std::cerr << "FAIL: the reference failed but sim did not:\n" << expected.diags().str();
      return 1;
    }
    std::cout << "ok: both fail (reference: " << expected.diags().list[0].message << ")\n";
    return 0;
  }
  if (!got.ok()) {
    std::cerr << "FAIL: sim failed:\n" << got.diags().str();
    return 1;
  }
  if (got->size() != expected->size()) {
    std::cerr << "FAIL: " << got->size() << " outputs, expected " << expected->size() << "\n";
    return 1;
  }
  for (size_t o = 0; o < got->size(); ++o) {
    const HostTensor& a = (*got)[o];
    const HostTensor& b = (*expected)[o];
    if (a.elem() != b.elem() || a.shape() != b.shape()) {
      std::cerr << "FAIL: output " << o << " has another type or shape\n";
      return 1;
    }
    for (int64_t e = 0; e < a.numElements(); ++e) {
      bool same = isFloat(a.elem())
                      ? close(a.getF(e), b.getF(e), a.elem(), !target->wideAccumulation)
                      : a.getI(e) == b.getI(e);
      if (!same) {
        std::cerr << "FAIL: output " << o << " element " << e << ": sim " << a.getF(e)
                  << ", reference " << b.getF(e) << "\n";
        return 1;
      }
    }
  }
  std::cout << "ok: " << got->size() << " outputs match; dispatches: " << lowered << " lowered, "
            << host << " on host; sim ran " << stats.kernels << " kernels, " << stats.workgroups
            << " workgroups, " << stats.barriers << " barrier phases\n";
  return 0;
}
