// compileCpuKernels: kernel IR -> LLVM IR (backends/llvm/emit.h) -> O3 or O2 (chosen per
// kernel, backends/opt_level.h) -> x86-64 object -> shared object (lld), plus the payload's
// description of every kernel.
//
// Kernels that print alike (but for their names) compile once and share an entry point,
// named by a hash of that text. Each distinct kernel is its own LLVM module in its own
// LLVMContext, optimized and code-generated on a thread of parallelFor; the objects are
// linked in kernel order, so the shared object is the same for any thread count. With a
// KernelCache, a kernel's object is looked up before it is compiled and stored after.
#include "backends/cpu/cpu_backend.h"

#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include "backends/kernel_identity.h"
#include "backends/llvm/emit.h"
#include "backends/opt_level.h"
#include "backends/parallel.h"
#include "ir/core/push_constants.h"
#include "ir/text/printer.h"
#include "passes/passes.h"

namespace kiln::cpu {

namespace {

constexpr const char* kTriple = "x86_64-unknown-linux-gnu";

} // namespace

const std::vector<std::string>& cpuTargetNames() {
  static const std::vector<std::string> names = {"cpu", "cpu:x86-64-v2", "cpu:x86-64-v3",
                                                 "cpu:x86-64-v4"};
  return names;
}

bool isCpuTargetName(const std::string& name) {
  const auto& n = cpuTargetNames();
  return std::find(n.begin(), n.end(), name) != n.end();
}

Result<CpuTargetSpec> resolveCpuTarget(const std::string& name) {
  if (!isCpuTargetName(name)) {
    std::string known;
    for (const std::string& n : cpuTargetNames()) known += (known.empty() ? "" : ", ") + n;
    return error(Loc::named("target"), "unknown CPU target '" + name + "' (known: " + known + ")");
  }
  CpuTargetSpec spec;
  spec.name = name;
  spec.machine.triple = kTriple;
  if (name == "cpu") {
    spec.machine.cpu = llvm::sys::getHostCPUName().str();
    std::string features;
    for (const auto& f : llvm::sys::getHostCPUFeatures())
      features +=
          std::string(features.empty() ? "" : ",") + (f.second ? "+" : "-") + f.first().str();
    spec.machine.features = features;
  } else {
    spec.machine.cpu = name.substr(4);
  }
  KILN_TRY(std::unique_ptr<llvm::TargetMachine> tm, llvmgen::createTargetMachine(spec.machine));
  const llvm::MCSubtargetInfo* sti = tm->getMCSubtargetInfo();
  for (const std::string& f : checkableCpuFeatures())
    if (sti->checkFeatures("+" + f)) spec.required.push_back(f);
  return spec;
}

Result<std::string> cpuTargetLevel(const std::string& name) {
  if (name != "cpu") return name;
  KILN_TRY(CpuTargetSpec host, resolveCpuTarget("cpu"));
  auto has = [&](const char* f) {
    return std::find(host.required.begin(), host.required.end(), f) != host.required.end();
  };
  return std::string(has("avx512f") && has("avx512bw") && has("avx512dq") && has("avx512vl")
                         ? "cpu:x86-64-v4"
                     : has("avx2") && has("fma") ? "cpu:x86-64-v3"
                                                 : "cpu:x86-64-v2");
}

Result<TargetDesc> cpuCodegenTarget(const std::string& name) {
  if (name != "cpu") return lookupTarget(name);
  KILN_TRY(std::string level, cpuTargetLevel(name));
  KILN_TRY(TargetDesc t, lookupTarget(level));
  t.name = "cpu";
  return t;
}

namespace {

// Kernels whose code is the same: the IR text (named alike), the symbols' ranges it may read
// and whether its buffers may alias. `first` is the one that is compiled.
struct KernelGroup {
  size_t first = 0;
  std::string symbol;            // the entry point every member's launches call
  OptLevel level = OptLevel::O3; // the LLVM pipeline (chooseOptLevel of the first member)
};

struct CompiledGroup {
  std::string code; // object, LLVM IR or assembly
  bool cached = false;
};

double msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

struct LlvmCode {
  std::string code; // object, LLVM IR or assembly
  double optimizeMs = 0, codegenMs = 0;
};

// One kernel's code, in an LLVMContext of its own.
Result<LlvmCode> compileWithLlvm(const Module& m, const Func& k, const std::string& symbol,
                                 OptLevel level, bool aliasing, const CpuTargetSpec& spec,
                                 unsigned vectorBits, CpuOutput output) {
  LlvmCode out;
  llvm::LLVMContext ctx;
  llvm::Module lm("kiln-kernel", ctx);
  KILN_TRY(llvmgen::EmittedKernel e, llvmgen::emitCpuKernel(lm, k, m.symbols(), symbol, aliasing));
  // The code reads KilnCpuArgs::symbols[i] as its i-th symbol op's value: the push order.
  std::vector<std::string> push = pushConstantSymbols(k);
  if (e.symbols.size() > push.size() ||
      !std::equal(e.symbols.begin(), e.symbols.end(), push.begin()))
    return error(k.loc(), "internal: kernel @" + k.name() +
                              " reads its symbols in another order than its push constants");
  // Vectorize at the width the kernels were tiled for (LLVM's x86-64-v4 would otherwise
  // prefer 256-bit vectors and leave the 512-bit register tiles half used).
  for (llvm::Function& f : lm)
    if (!f.isDeclaration()) f.addFnAttr("prefer-vector-width", std::to_string(vectorBits));
  KILN_TRY(std::unique_ptr<llvm::TargetMachine> tm, llvmgen::createTargetMachine(spec.machine));
  auto begin = std::chrono::steady_clock::now();
  KILN_CHECK(
      llvmgen::optimizeModule(lm, *tm, "<cpu backend>", static_cast<int>(level), slpSafe(k)));
  out.optimizeMs = msSince(begin);
  begin = std::chrono::steady_clock::now();
  if (output == CpuOutput::LlvmIr) {
    out.code = llvmgen::printLlvmModule(lm);
  } else if (output == CpuOutput::Assembly) {
    KILN_TRY(out.code, llvmgen::emitAssembly(lm, *tm));
  } else {
    KILN_TRY(out.code, llvmgen::emitObject(lm, *tm));
  }
  out.codegenMs = msSince(begin);
  return out;
}

// One group's code: from the cache, else compiled (this runs on a worker thread). A fatal
// error or crash inside LLVM is an error of this kernel, never the end of the process.
Result<CompiledGroup> compileGroup(const Module& m, const Func& k, const KernelGroup& g,
                                   bool aliasing, const CpuTargetSpec& spec, unsigned vectorBits,
                                   CpuOutput output, const CpuCompileOptions& co,
                                   const KernelKey& key) {
  CompiledGroup out;
  bool useCache = output == CpuOutput::Executable && co.cache && co.cache->enabled();
  if (useCache)
    if (std::optional<std::string> hit = co.cache->load(key)) {
      out.code = std::move(*hit);
      out.cached = true;
      return out;
    }
  std::optional<Result<LlvmCode>> compiled;
  if (!llvmgen::runRecoverably([&] {
        compiled.emplace(
            compileWithLlvm(m, k, g.symbol, g.level, aliasing, spec, vectorBits, output));
      }))
    return error(k.loc(), "internal error: LLVM failed (a fatal error or a crash) while compiling "
                          "kernel @" +
                              k.name() + "; the compile stops here");
  KILN_TRY(LlvmCode code, std::move(*compiled));
  if (useCache) co.cache->store(key, code.code);
  if (co.timer)
    co.timer->addKernel(k.name(), code.optimizeMs, code.codegenMs, optLevelName(g.level));
  out.code = std::move(code.code);
  return out;
}

} // namespace

Result<CpuCompiled> compileCpuKernels(const Module& m, const std::vector<const Func*>& kernels,
                                      const std::string& target, CpuOutput output,
                                      const CpuCompileOptions& co) {
  KILN_TRY(CpuTargetSpec spec, resolveCpuTarget(target));
  KILN_TRY(TargetDesc desc, cpuCodegenTarget(target));
  CpuCompiled out;
  CpuPayload& p = out.payload;
  p.cpu = spec.machine.cpu;
  p.features = spec.required;
  std::set<std::string> aliasing = aliasingKernels(m);
  KILN_TRY(OptLevelRule levels, resolveOptLevelRule(co.optLevel));

  // Kernels that would compile to the same code compile once and share an entry point.
  std::vector<KernelGroup> groups;
  std::vector<KernelKey> keys;
  {
    ScopedPhase phase(co.timer, "deduplicate kernels");
    std::map<std::string, size_t> byIdentity;
    for (size_t i = 0; i < kernels.size(); ++i) {
      const Func& k = *kernels[i];
      if (!isLoweredKernel(k))
        return error(k.loc(),
                     "internal: the CPU backend was given the tensor-level kernel @" + k.name());
      std::string identity = kernelIdentity(m, k, aliasing.count(k.name()) > 0);
      auto [it, fresh] = byIdentity.emplace(identity, groups.size());
      if (fresh) {
        KernelKey content = kernelKey({identity});
        OptLevel level = chooseOptLevel(k, levels);
        groups.push_back({i, "kiln_cpu_kernel_" + content.hex(), level});
        // The cache key adds what else decides the code: the machine, the vector width, the
        // optimization level, LLVM and this build of kiln.
        keys.push_back(kernelKey({content.hex(), kernelCacheBuildId(), LLVM_VERSION_STRING,
                                  spec.machine.triple, spec.machine.cpu, spec.machine.features,
                                  std::to_string(desc.preferredVectorBits), optLevelName(level)}));
      }
      const KernelGroup& g = groups[it->second];
      CpuKernelInfo info;
      info.name = k.name();
      info.symbol = g.symbol;
      info.symbols = pushConstantSymbols(k);
      for (size_t a = 0; a < k.numArgs(); ++a)
        info.args.push_back({k.arg(a)->type().elem(), k.arg(a)->type().rank()});
      p.kernels.push_back(std::move(info));
    }
    if (co.timer) {
      co.timer->addCount("kernels before deduplication", static_cast<int64_t>(kernels.size()));
      co.timer->addCount("kernels after deduplication", static_cast<int64_t>(groups.size()));
      for (OptLevel l : {OptLevel::O3, OptLevel::O2, OptLevel::O1}) {
        int64_t n = std::count_if(groups.begin(), groups.end(),
                                  [&](const KernelGroup& g) { return g.level == l; });
        if (n > 0) co.timer->addCount(std::string("kernels optimized at ") + optLevelName(l), n);
      }
    }
  }

  std::vector<Result<CompiledGroup>> compiled = [&] {
    unsigned jobs = static_cast<unsigned>(std::min<size_t>(resolveJobs(co.jobs), groups.size()));
    ScopedPhase phase(co.timer,
                      "compile kernels (LLVM, " + std::to_string(std::max(1u, jobs)) + " threads)",
                      groups.size());
    return parallelFor<CompiledGroup>(groups.size(), co.jobs, [&](size_t i) {
      const Func& k = *kernels[groups[i].first];
      Result<CompiledGroup> r = compileGroup(m, k, groups[i], aliasing.count(k.name()) > 0, spec,
                                             desc.preferredVectorBits, output, co, keys[i]);
      if (co.timer) co.timer->kernelDone();
      return r;
    });
  }();
  // The first failure in kernel order, whatever thread found it first.
  std::vector<std::string> code;
  int64_t hits = 0;
  for (Result<CompiledGroup>& r : compiled) {
    if (!r.ok()) return r.takeDiags();
    hits += r->cached ? 1 : 0;
    code.push_back(std::move(r->code));
  }
  if (co.timer && co.cache && co.cache->enabled() && output == CpuOutput::Executable) {
    co.timer->addCount("kernel cache hits", hits);
    co.timer->addCount("kernel cache misses", static_cast<int64_t>(groups.size()) - hits);
    if (co.cache->corrupt() > 0)
      co.timer->addCount("kernel cache entries damaged (ignored, rewritten)",
                         static_cast<int64_t>(co.cache->corrupt()));
  }
  if (output != CpuOutput::Executable) {
    // One module per distinct kernel, each headed by a comment naming it.
    const char* comment = output == CpuOutput::LlvmIr ? ";" : "#";
    for (size_t i = 0; i < code.size(); ++i)
      out.text += std::string(comment) + " ----- kernel " + std::to_string(i) + " (@" +
                  kernels[groups[i].first]->name() + "): " + groups[i].symbol + ", " +
                  optLevelName(groups[i].level) + " -----\n" + code[i];
    return out;
  }
  if (kernels.empty()) return out;
  ScopedPhase phase(co.timer, "link (lld)");
  KILN_TRY(p.sharedObject, linkSharedObject(code));
  return out;
}

namespace {

class CpuBackend : public TargetBackend {
public:
  const std::string& name() const override {
    static const std::string n = "cpu";
    return n;
  }
  bool acceptsTarget(const std::string& target) const override { return isCpuTargetName(target); }
  bool runsTensorKernels() const override { return false; }
  std::string targetNames() const override {
    std::string s;
    for (const std::string& n : cpuTargetNames()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }
  Result<std::string> concreteTarget(const std::string& target) const override {
    return cpuTargetLevel(target);
  }
  Status addCodegenPasses(PassManager& pm, const BackendOptions& o,
                          const std::vector<DeviceTarget>& devices) const override {
    CodegenOptions c;
    KILN_TRY(c.target, cpuCodegenTarget(targetOf(o)));
    c.overrides = o.overrides;
    c.devices = devices;
    kiln::addCodegenPasses(pm, c);
    return ok();
  }
  Result<std::string> serialize(const Module& m, const std::vector<const Func*>& kernels,
                                const BackendOptions& o) const override {
    CpuOutput out = o.textKind == "llvm"  ? CpuOutput::LlvmIr
                    : o.textKind == "asm" ? CpuOutput::Assembly
                                          : CpuOutput::Executable;
    CpuCompileOptions co;
    co.timer = o.timer;
    co.jobs = o.jobs;
    co.cache = o.cache;
    co.optLevel = o.optLevel;
    KILN_TRY(CpuCompiled c, compileCpuKernels(m, kernels, targetOf(o), out, co));
    if (o.cache) o.cache->prune();
    if (o.text && out != CpuOutput::Executable) *o.text = c.text;
    return serializeCpuPayload(c.payload);
  }

private:
  static std::string targetOf(const BackendOptions& o) {
    return o.target.empty() ? "cpu" : o.target;
  }
};

} // namespace

const TargetBackend* cpuBackend() {
  static const CpuBackend b;
  return &b;
}

} // namespace kiln::cpu

namespace kiln::cpu {

Result<std::string> linkSharedObject(const std::vector<std::string>& objects) {
  std::vector<std::string> libraries;
#ifdef KILN_CLANG_RT_BUILTINS
  if (std::filesystem::exists(KILN_CLANG_RT_BUILTINS)) libraries.push_back(KILN_CLANG_RT_BUILTINS);
#endif
  return llvmgen::linkWithLld(objects,
                              {"-shared", "--eh-frame-hdr", "-z", "noexecstack", "-z", "now",
                               "--hash-style=gnu", "-soname", "kiln-kernels.so"},
                              libraries, "<cpu backend>");
}

} // namespace kiln::cpu
