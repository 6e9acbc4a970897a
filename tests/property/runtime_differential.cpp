// kiln-runtime-differential: random programs from the generator give byte-identical results
// through the reference interpreter and through compile → .kmod bytes → RuntimeModule (the
// embedding API over the executor)
// (static programs and programs with symbolic dims), and calling the loaded module a
// second time gives the same bytes again (load once, run many). Then the program runs with
// donations (analysis/donation.h): each result that an op computes in place over an argument
// of its type is donated that argument, and where none does, one result r of an argument
// a's type becomes `max a, r` (or `or` for i1) donated a, if a is read nowhere after; the
// results must match the interpreter's and the donated inputs hold them, sharing storage.
//
// With --device=cpu the module is compiled for and run on the cpu device (code from LLVM):
// integers and booleans must still be identical, floats within a tolerance of their
// precision (the CPU contracts multiply-adds and accumulates matmuls in f32), NaN where the
// interpreter has NaN; an integer cast from a float may land one apart. With --device=vulkan
// (SPIR-V on the device, lavapipe in CI) the same, except that f32 and f64 results are within
// 2e-4 of the tensor's largest magnitude: the device's transcendental functions (atanh, tanh,
// exp) are less exact than libm, and Vulkan computes f64 ones in f32.
//
// Results that depend on a transcendental function (exp, log, tanh, erf, sigmoid, silu, gelu,
// the trigonometric ones, pow, softmax, attention) are approximate on every device but ref:
// the backends compute those in f32 within a few ulp (docs/cpu.md), so an f64 result cast
// from one is compared at the f32 tolerance, and an integer or boolean result derived from
// one (a comparison of two nearly equal values, a floor) may differ: such differences are
// counted and printed, not failures.
//
// --first-seed=S starts both loops at seed S (to split a long run over processes).
//
//   kiln-runtime-differential [--seeds=N] [--symbolic-seeds=N] [--first-seed=S]
//                             [--device=ref|cpu|vulkan|cuda|hip]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <unordered_set>
#include <vector>

#include "analysis/donation.h"
#include "backends/backend.h"
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
#include "runtime/drivers.h"
#ifdef KILN_HAVE_VULKAN
#include "runtime/vulkan/vulkan.h"
#endif
#include "runtime/module_format.h"

namespace {

using namespace kiln;

std::string gDevice = "ref[0]";
int gApproximate = 0; // integer or boolean results that differed after a transcendental op

// Which of `f`'s results depend on a transcendental function.
std::vector<bool> approximateResults(const Func& f) {
  std::unordered_set<const Value*> approx;
  walkOps(f.body(), [&](const Op& op) {
    // softmax, log_softmax and attention compute exp inside.
    bool a = isTranscendental(op.kind()) || op.kind() == OpKind::Softmax ||
             op.kind() == OpKind::LogSoftmax || op.kind() == OpKind::Attention;
    for (size_t i = 0; i < op.numOperands() && !a; ++i) a = approx.count(op.operand(i)) > 0;
    if (a)
      for (size_t r = 0; r < op.numResults(); ++r) approx.insert(op.result(r));
  });
  std::vector<bool> out;
  const Op* ret = f.terminator();
  for (size_t i = 0; i < ret->numOperands(); ++i) out.push_back(approx.count(ret->operand(i)) > 0);
  return out;
}

// Float results of code that may round differently (contraction, f32 accumulation, libm
// in f64 then rounded): close relative to the tensor's largest magnitude.
bool close(const HostTensor& got, const HostTensor& want, std::string& why,
           bool approximate = false) {
  if (got.elem() != want.elem() || got.shape() != want.shape()) {
    why = "types differ";
    return false;
  }
  if (!isFloat(want.elem()) && approximate && !got.identical(want)) {
    ++gApproximate;
    return true;
  }
  if (!isFloat(want.elem())) {
    // Integers are exact, except that an integer cast from a float lands one apart when the
    // float was within rounding of a whole number (8170.99999 vs 8171.00001).
    for (int64_t i = 0; i < want.numElements(); ++i)
      if (std::llabs(got.getI(i) - want.getI(i)) > (isBool(want.elem()) ? 0 : 1)) {
        why = "element " + std::to_string(i) + " differs";
        return false;
      }
    return true;
  }
  // On vulkan, f64 transcendental functions run in f32 (Vulkan has no f64 exp, log, sin).
  bool f64AsF32 = gDevice.rfind("vulkan", 0) == 0;
  double scale = 1, tol = want.elem() == ElemType::F64 && !f64AsF32 && !approximate ? 1e-9
                          : want.elem() == ElemType::F64 || want.elem() == ElemType::F32
                              ? (f64AsF32 ? 2e-4 : 2e-5)
                              : 2e-2;
  for (int64_t i = 0; i < want.numElements(); ++i)
    if (std::isfinite(want.getF(i))) scale = std::max(scale, std::fabs(want.getF(i)));
  for (int64_t i = 0; i < want.numElements(); ++i) {
    double a = got.getF(i), b = want.getF(i);
    if (std::isnan(b) ? std::isnan(a) : (std::isinf(b) ? a == b : std::fabs(a - b) <= tol * scale))
      continue;
    why = "element " + std::to_string(i) + ": " + std::to_string(a) + " vs " + std::to_string(b);
    return false;
  }
  return true;
}

int gDonated = 0; // programs that also ran with donations

// Donates each argument that the op computing a result can write over in place, where the
// donation analysis accepts it; returns how many.
size_t donateWhatCan(Module& m) {
  Func& f = *m.lookupFunc("main");
  const Op* ret = f.terminator();
  size_t n = 0;
  for (size_t r = 0; r < ret->numOperands(); ++r) {
    const Op* w = ret->operand(r)->def();
    bool taken = false;
    for (size_t i = 0; i < f.numArgs(); ++i) taken = taken || f.argDonation(i) == r;
    for (size_t k = 0; w && !taken && k < w->numOperands(); ++k) {
      const Value* a = w->operand(k);
      if (!a->isArg() || f.argDonation(a->index()) || !writesInPlace(*w, k)) continue;
      f.setArgDonation(a->index(), r);
      if (verifyModule(m).ok() && analyzeDonations(f).ok()) {
        ++n;
        break;
      }
      f.setArgDonation(a->index(), std::nullopt);
    }
  }
  return n;
}

// Makes one result r an in-place update of an argument a of its type: `max a, r` (`or` for
// i1) returned in its place, when a is returned nowhere. False when no pair fits.
bool addInPlaceUpdate(Module& m) {
  Func& f = *m.lookupFunc("main");
  Op* ret = f.terminator();
  for (size_t r = 0; r < ret->numOperands(); ++r)
    for (size_t a = 0; a < f.numArgs(); ++a) {
      Value* arg = f.arg(a);
      Value* v = ret->operand(r);
      if (v == arg || arg->type().str() != v->type().str()) continue;
      bool returned = false;
      for (const Use& u : arg->uses()) returned = returned || u.user == ret;
      if (returned) continue;
      Builder b(&f, ret);
      OpKind k = arg->type().elem() == ElemType::I1 ? OpKind::Or : OpKind::Max;
      Result<Op*> op = b.create(k, {arg, v});
      if (!op.ok()) continue;
      ret->setOperand(r, (*op)->result());
      return true;
    }
  return false;
}

// The program again with donations: the results, and the donated inputs holding them in
// the same storage.
std::string checkDonated(const std::string& text, const std::vector<HostTensor>& inputs,
                         std::vector<HostTensor> expected) {
  auto m = parseModule(text, "gen.kir");
  if (!m.ok()) return "";
  if (donateWhatCan(**m) == 0) {
    if (!addInPlaceUpdate(**m) || donateWhatCan(**m) == 0) return "";
    WeightStore weights(**m);
    auto want = interpret(*(*m)->lookupFunc("main"), inputs, weights);
    if (!want.ok()) return "";
    expected = want.take();
  }
  ++gDonated;
  std::string donated = printModule(**m);
  std::vector<bool> approx = approximateResults(*(*m)->lookupFunc("main"));
  CompileOptions copts;
  copts.placement.devices.devices = {gDevice};
  auto program = compileProgram(m.take(), copts);
  if (!program.ok()) return "compile with donations failed: " + program.diags().str();
  auto module = RuntimeModule::fromProgram(program.take());
  if (!module.ok()) return "load with donations failed: " + module.diags().str();
  const Func* f = (*module)->signature("main");
  std::vector<HostTensor> mine;
  for (const HostTensor& t : inputs) mine.push_back(t.clone());
  auto got = (*module)->run("main", mine);
  if (!got.ok()) return "with donations the executor failed: " + got.diags().str();
  std::string why;
  for (size_t i = 0; i < got->size(); ++i)
    if (gDevice.starts_with("ref") ? !(*got)[i].identical(expected[i])
                                   : !close((*got)[i], expected[i], why, approx[i]))
      return "with donations result " + std::to_string(i) + " differs: " + why + "\n" + donated;
  for (size_t a = 0; a < f->numArgs(); ++a) {
    std::optional<size_t> r = f->argDonation(a);
    if (!r) continue;
    if ((*got)[*r].data() != mine[a].data())
      return "result " + std::to_string(*r) + " does not share donated input " + std::to_string(a) +
             "'s storage\n" + donated;
  }
  return "";
}

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
  CompileOptions copts;
  copts.placement.devices.devices = {gDevice};
  auto program = compileProgram(reparsed.take(), copts);
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
    std::string why;
    std::vector<bool> approx = approximateResults(*gen->module->lookupFunc("main"));
    for (size_t i = 0; i < got->size(); ++i)
      if (gDevice.starts_with("ref") ? !(*got)[i].identical((*expected)[i])
                                     : !close((*got)[i], (*expected)[i], why, approx[i]))
        return "result " + std::to_string(i) + " differs on call " + std::to_string(call) + ": " +
               why + " " + formatTensor((*got)[i]) + " vs " + formatTensor((*expected)[i]);
  }
  return expected.ok() ? checkDonated(text, inputs, *expected) : "";
}

int64_t flagValue(const std::string& arg, const std::string& name, int64_t fallback) {
  std::string prefix = "--" + name + "=";
  return arg.starts_with(prefix) ? std::stoll(arg.substr(prefix.size())) : fallback;
}

} // namespace

int main(int argc, char** argv) {
  int64_t seeds = 150, symbolicSeeds = 80, first = 1;
  for (int i = 1; i < argc; ++i) {
    seeds = flagValue(argv[i], "seeds", seeds);
    first = flagValue(argv[i], "first-seed", first);
    symbolicSeeds = flagValue(argv[i], "symbolic-seeds", symbolicSeeds);
    if (std::string(argv[i]).starts_with("--device=")) gDevice = std::string(argv[i]).substr(9);
  }
  if (gDevice.rfind("vulkan", 0) == 0) {
    // lavapipe when no driver is named; SKIP (77) without a device or the vulkan backend.
    if (!std::getenv("VK_DRIVER_FILES") && !std::getenv("VK_ICD_FILENAMES"))
      setenv("VK_DRIVER_FILES", "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json", 1);
#ifdef KILN_HAVE_VULKAN
    // The instance first: the device registry, created after it (and after the layers it
    // loads), is then destroyed before them at exit.
    (void)hal::vulkan::Instance::get();
#endif
    auto id = hal::parseDeviceId(gDevice, Loc::named("--device"));
    auto dev = id.ok() ? hal::openDevice(*id, Loc::named("--device"))
                       : Result<std::shared_ptr<hal::Device>>(id.diags());
    if (!dev.ok() || !lookupTargetBackend("vulkan")) {
      std::printf("SKIP: %s\n",
                  dev.ok() ? "this kiln has no vulkan backend" : dev.diags().str().c_str());
      return 77;
    }
  }
  int failures = 0, checked = 0;
  for (int sym = 0; sym < 2; ++sym)
    for (int64_t s = first; s < first + (sym ? symbolicSeeds : seeds); ++s) {
      int approximate = gApproximate;
      std::string why = check(static_cast<uint64_t>(s), sym == 1);
      ++checked;
      if (gApproximate > approximate)
        std::cout << "seed " << s << (sym ? " (symbolic)" : "")
                  << ": an integer or boolean result computed from a transcendental function "
                     "differs (approximate, not a failure)\n";
      if (why.empty()) continue;
      ++failures;
      std::cout << "seed " << s << (sym ? " (symbolic)" : "") << ": " << why
                << "\n  reproduce: kiln-graphgen --seed=" << s << (sym ? " --symbolic" : "")
                << "\n";
    }
  std::cout << checked - failures << " of " << checked << " programs "
            << (gDevice.starts_with("ref") ? "identical" : "match on " + gDevice) << "; "
            << gDonated << " of them also ran with donated arguments\n";
  if (uint64_t n = hal::vulkanValidationMessages()) {
    std::cout << "FAIL: the Vulkan validation layer reported " << n << " messages (above)\n";
    return 1;
  }
  return failures ? 1 : 0;
}
