// compileCpuKernels: kernel IR -> LLVM IR (backends/llvm/emit.h) -> O3 -> x86-64 object ->
// shared object (lld), plus the payload's description of every kernel.
#include "backends/cpu/cpu_backend.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <set>

#include <algorithm>

#include "backends/llvm/emit.h"
#include "ir/core/push_constants.h"
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

Result<TargetDesc> cpuCodegenTarget(const std::string& name) {
  if (name != "cpu") return lookupTarget(name);
  KILN_TRY(CpuTargetSpec host, resolveCpuTarget("cpu"));
  auto has = [&](const char* f) {
    return std::find(host.required.begin(), host.required.end(), f) != host.required.end();
  };
  std::string level = has("avx512f") && has("avx512bw") && has("avx512dq") && has("avx512vl")
                          ? "cpu:x86-64-v4"
                      : has("avx2") && has("fma") ? "cpu:x86-64-v3"
                                                  : "cpu:x86-64-v2";
  KILN_TRY(TargetDesc t, lookupTarget(level));
  t.name = "cpu";
  return t;
}

// Kernels some launch binds one buffer to twice (an input written in place: donation).
static std::set<std::string> aliasingKernels(const Module& m) {
  std::set<std::string> out;
  for (const auto& f : m.funcs())
    for (const auto& op : f->ops()) {
      if (op->kind() != OpKind::Launch) continue;
      std::set<const Value*> seen;
      for (const Value* v : op->operands())
        if (!seen.insert(v).second) out.insert(op->attrs().getStr("kernel"));
    }
  return out;
}

Result<CpuCompiled> compileCpuKernels(const Module& m, const std::vector<const Func*>& kernels,
                                      const std::string& target, CpuOutput output) {
  KILN_TRY(CpuTargetSpec spec, resolveCpuTarget(target));
  CpuCompiled out;
  CpuPayload& p = out.payload;
  p.cpu = spec.machine.cpu;
  p.features = spec.required;
  llvm::LLVMContext ctx;
  auto lm = std::make_unique<llvm::Module>("kiln-kernels", ctx);
  std::set<std::string> aliasing = aliasingKernels(m);
  for (size_t i = 0; i < kernels.size(); ++i) {
    const Func& k = *kernels[i];
    if (!isLoweredKernel(k))
      return error(k.loc(),
                   "internal: the CPU backend was given the tensor-level kernel @" + k.name());
    KILN_TRY(llvmgen::EmittedKernel e,
             llvmgen::emitCpuKernel(*lm, k, m.symbols(), "kiln_cpu_kernel_" + std::to_string(i),
                                    aliasing.count(k.name()) > 0));
    CpuKernelInfo info;
    info.name = k.name();
    info.symbol = e.symbol;
    info.symbols = pushConstantSymbols(k);
    // The code reads KilnCpuArgs::symbols[i] as its i-th symbol op's value: the push order.
    if (e.symbols.size() > info.symbols.size() ||
        !std::equal(e.symbols.begin(), e.symbols.end(), info.symbols.begin()))
      return error(k.loc(), "internal: kernel @" + k.name() +
                                " reads its symbols in another order than its push constants");
    for (size_t a = 0; a < k.numArgs(); ++a)
      info.args.push_back({k.arg(a)->type().elem(), k.arg(a)->type().rank()});
    p.kernels.push_back(std::move(info));
  }
  // Vectorize at the width the kernels were tiled for (LLVM's x86-64-v4 would otherwise
  // prefer 256-bit vectors and leave the 512-bit register tiles half used).
  KILN_TRY(TargetDesc desc, cpuCodegenTarget(target));
  for (llvm::Function& f : *lm)
    if (!f.isDeclaration())
      f.addFnAttr("prefer-vector-width", std::to_string(desc.preferredVectorBits));
  KILN_TRY(std::unique_ptr<llvm::TargetMachine> tm, llvmgen::createTargetMachine(spec.machine));
  KILN_CHECK(llvmgen::optimizeModule(*lm, *tm, "<cpu backend>"));
  if (output == CpuOutput::LlvmIr) {
    out.text = llvmgen::printLlvmModule(*lm);
    return out;
  }
  if (output == CpuOutput::Assembly) {
    KILN_TRY(out.text, llvmgen::emitAssembly(*lm, *tm));
    return out;
  }
  if (kernels.empty()) return out;
  KILN_TRY(std::string object, llvmgen::emitObject(*lm, *tm));
  KILN_TRY(p.sharedObject, linkSharedObject(object));
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
    KILN_TRY(CpuCompiled c, compileCpuKernels(m, kernels, targetOf(o), out));
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
