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
#include "ir/printer.h"
#include "passes/passes.h"

namespace kiln::cpu {

namespace {

constexpr const char* kTriple = "x86_64-unknown-linux-gnu";

bool isLowered(const Func& f) { return f.numArgs() > 0 && f.arg(0)->type().isBuffer(); }

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
    return error(Loc::named("--target"),
                 "unknown CPU target '" + name + "' (known: " + known + ")");
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
                                      const std::string& irText, const std::string& target,
                                      CpuOutput output) {
  KILN_TRY(CpuTargetSpec spec, resolveCpuTarget(target));
  CpuCompiled out;
  CpuPayload& p = out.payload;
  p.cpu = spec.machine.cpu;
  p.features = spec.required;
  p.ir = irText;
  llvm::LLVMContext ctx;
  auto lm = std::make_unique<llvm::Module>("kiln-kernels", ctx);
  bool any = false;
  std::set<std::string> aliasing = aliasingKernels(m);
  for (size_t i = 0; i < kernels.size(); ++i) {
    CpuKernelInfo info;
    info.name = kernels[i]->name();
    if (isLowered(*kernels[i])) {
      KILN_TRY(llvmgen::EmittedKernel e,
               llvmgen::emitCpuKernel(*lm, *kernels[i], m.symbols(),
                                      "kiln_cpu_kernel_" + std::to_string(i),
                                      aliasing.count(kernels[i]->name()) > 0));
      info.lowered = true;
      info.symbol = e.symbol;
      info.symbols = e.symbols;
      any = true;
    }
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
  if (!any) return out;
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
    KILN_TRY(CpuCompiled c,
             compileCpuKernels(m, kernels, kernelIrText(m, kernels), targetOf(o), out));
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
