// compileGpuKernels (see gpu_compile.h).
#include "backends/llvm/gpu_compile.h"

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Target/TargetMachine.h>

#include <chrono>
#include <map>
#include <optional>
#include <set>

#include "backends/kernel_identity.h"
#include "backends/parallel.h"
#include "ir/core/push_constants.h"
#include "passes/passes.h"

namespace kiln::llvmgen {

Result<GpuTargetSpec> resolveGpuTarget(const std::string& name) {
  GpuTargetSpec s;
  s.name = name;
  if (name.rfind("amdgpu:", 0) == 0) {
    s.kind = GpuArch::Amdgpu;
    s.arch = name.substr(7);
    s.machine.triple = "amdgcn-amd-amdhsa";
  } else if (name.rfind("cuda:", 0) == 0) {
    s.kind = GpuArch::Nvptx;
    s.arch = name.substr(5);
    s.machine.triple = "nvptx64-nvidia-cuda";
    // PTX ISA 7.8: sm_90's first, read by CUDA 11.8 and later drivers.
    s.machine.features = "+ptx78";
  } else {
    return error(Loc::named("target"), "'" + name + "' is not a GPU target (amdgpu:*, cuda:*)");
  }
  KILN_TRY(s.desc, lookupTarget(name));
  s.machine.cpu = s.arch;
  s.waveSize = s.kind == GpuArch::Nvptx ? 32 : s.desc.subgroupSizes.front();
  return s;
}

namespace {

// LLVM's error diagnostics, collected instead of ending the process (LLVM's default handler
// exits on DS_Error, which an LDS overflow is).
struct CollectErrors : llvm::DiagnosticHandler {
  std::string* errors;
  explicit CollectErrors(std::string* e) : errors(e) {}
  bool handleDiagnostics(const llvm::DiagnosticInfo& di) override {
    if (di.getSeverity() != llvm::DS_Error) return true;
    std::string s;
    llvm::raw_string_ostream os(s);
    llvm::DiagnosticPrinterRawOStream printer(os);
    di.print(printer);
    *errors += (errors->empty() ? "" : "; ") + os.str();
    return true;
  }
};

double msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

struct Group {
  size_t first = 0;
  std::string entry;
  KernelKey key;
};

struct Compiled {
  std::string code; // AMDGPU object or NVPTX bitcode; or the text asked for
  EmittedGpuKernel info;
  bool cached = false;
};

// The kernel's wave size: gfx1100 runs wave32 unless the kernel's subgroups need 64.
int64_t waveFor(const GpuTargetSpec& spec, const Func& k) {
  int64_t sub = 1;
  walkOps(k, [&](const Op& op) {
    if (op.kind() == OpKind::KernelConfig) sub = op.attrs().getInt("subgroup", 1);
  });
  return sub > spec.waveSize ? sub : spec.waveSize;
}

GpuEmitOptions emitOptions(const GpuTargetSpec& spec, const Func& k, bool aliasing) {
  GpuEmitOptions eo;
  eo.arch = spec.kind;
  eo.waveSize = waveFor(spec, k);
  eo.buffersMayAlias = aliasing;
  return eo;
}

Result<Compiled> compileOne(const Module& m, const Func& k, const Group& g, bool aliasing,
                            const GpuTargetSpec& spec, const GpuCompileOptions& o) {
  Compiled out;
  std::string errors;
  llvm::LLVMContext ctx;
  ctx.setDiagnosticHandler(std::make_unique<CollectErrors>(&errors));
  llvm::Module lm("kiln-kernel", ctx);
  MachineSpec machine = spec.machine;
  int64_t wave = waveFor(spec, k);
  if (spec.kind == GpuArch::Amdgpu && wave != spec.waveSize)
    machine.features = wave == 64 ? "+wavefrontsize64" : "+wavefrontsize32";
  KILN_TRY(std::unique_ptr<llvm::TargetMachine> tm, createTargetMachine(machine));
  lm.setDataLayout(tm->createDataLayout());
  lm.setTargetTriple(tm->getTargetTriple().str());
  KILN_TRY(out.info, emitGpuKernel(lm, k, m.symbols(), g.entry, emitOptions(spec, k, aliasing)));
  auto begin = std::chrono::steady_clock::now();
  KILN_CHECK(optimizeModule(lm, *tm, "<" + spec.name + " backend>"));
  double optimizeMs = msSince(begin);
  begin = std::chrono::steady_clock::now();
  if (o.output == GpuOutput::LlvmIr) {
    out.code = printLlvmModule(lm);
  } else if (o.output == GpuOutput::Assembly) {
    KILN_TRY(out.code, emitAssembly(lm, *tm));
  } else if (spec.kind == GpuArch::Amdgpu) {
    KILN_TRY(out.code, emitObject(lm, *tm));
  } else {
    llvm::raw_string_ostream os(out.code);
    llvm::WriteBitcodeToFile(lm, os);
    os.flush();
  }
  if (!errors.empty())
    return error(k.loc(),
                 "LLVM cannot compile kernel @" + k.name() + " for " + spec.name + ": " + errors);
  if (o.timer) o.timer->addKernel(k.name(), optimizeMs, msSince(begin));
  return out;
}

// Per-kernel results are cached only for executables; the EmittedGpuKernel is recomputed by
// emitting again (cheap) so the cache holds code only.
Result<Compiled> compileGroup(const Module& m, const Func& k, const Group& g, bool aliasing,
                              const GpuTargetSpec& spec, const GpuCompileOptions& o) {
  bool useCache = o.output == GpuOutput::Executable && o.cache && o.cache->enabled();
  std::optional<std::string> hit;
  if (useCache) hit = o.cache->load(g.key);
  std::optional<Result<Compiled>> r;
  if (hit) {
    // Only the kernel's description is needed: emit it into a scratch module.
    llvm::LLVMContext ctx;
    llvm::Module lm("kiln-kernel", ctx);
    KILN_TRY(std::unique_ptr<llvm::TargetMachine> tm, createTargetMachine(spec.machine));
    lm.setDataLayout(tm->createDataLayout());
    Compiled c;
    KILN_TRY(c.info, emitGpuKernel(lm, k, m.symbols(), g.entry, emitOptions(spec, k, aliasing)));
    c.code = std::move(*hit);
    c.cached = true;
    return c;
  }
  if (!runRecoverably([&] { r.emplace(compileOne(m, k, g, aliasing, spec, o)); }))
    return error(k.loc(), "internal error: LLVM failed (a fatal error or a crash) while compiling "
                          "kernel @" +
                              k.name() + " for " + spec.name + "; the compile stops here");
  KILN_TRY(Compiled c, std::move(*r));
  if (useCache) o.cache->store(g.key, c.code);
  return c;
}

// NVPTX: the kernels' optimized modules as one module, printed as PTX.
Result<std::string> linkPtx(const std::vector<std::string>& bitcode, const GpuTargetSpec& spec) {
  std::optional<Result<std::string>> r;
  bool ran = runRecoverably([&] {
    r.emplace([&]() -> Result<std::string> {
      std::string errors;
      llvm::LLVMContext ctx;
      ctx.setDiagnosticHandler(std::make_unique<CollectErrors>(&errors));
      auto all = std::make_unique<llvm::Module>("kiln-kernels", ctx);
      KILN_TRY(std::unique_ptr<llvm::TargetMachine> tm, createTargetMachine(spec.machine));
      all->setDataLayout(tm->createDataLayout());
      all->setTargetTriple(tm->getTargetTriple().str());
      llvm::Linker linker(*all);
      for (const std::string& bc : bitcode) {
        auto mod = llvm::parseBitcodeFile(
            llvm::MemoryBufferRef(llvm::StringRef(bc.data(), bc.size()), "kernel"), ctx);
        if (!mod) {
          std::string why = llvm::toString(mod.takeError());
          return error(Loc::named("<cuda backend>"), "cannot read a kernel's bitcode: " + why);
        }
        if (linker.linkInModule(std::move(*mod)))
          return error(Loc::named("<cuda backend>"), "LLVM cannot link the kernels: " + errors);
      }
      KILN_TRY(std::string ptx, emitAssembly(*all, *tm));
      if (!errors.empty())
        return error(Loc::named("<cuda backend>"), "LLVM cannot emit PTX: " + errors);
      return ptx;
    }());
  });
  if (!ran)
    return error(Loc::named("<cuda backend>"),
                 "internal error: LLVM failed (a fatal error or a crash) while printing PTX");
  return std::move(*r);
}

} // namespace

Result<gpu::GpuImage> compileGpuKernels(const Module& m, const std::vector<const Func*>& kernels,
                                        const GpuTargetSpec& spec, const GpuCompileOptions& o) {
  gpu::GpuImage img;
  img.arch = spec.arch;
  img.kind = spec.kind == GpuArch::Amdgpu ? gpu::GpuCodeKind::HsaCodeObject : gpu::GpuCodeKind::Ptx;
  std::set<std::string> aliasing = aliasingKernels(m);
  std::vector<Group> groups;
  std::vector<size_t> groupOf;
  {
    ScopedPhase phase(o.timer, "deduplicate kernels");
    std::map<std::string, size_t> byIdentity;
    for (size_t i = 0; i < kernels.size(); ++i) {
      const Func* k = kernels[i];
      if (!isLoweredKernel(*k))
        return error(k->loc(), "internal: the " + spec.name +
                                   " backend was given the tensor-level "
                                   "kernel @" +
                                   k->name());
      std::string identity = kernelIdentity(m, *k, aliasing.count(k->name()) > 0);
      auto [it, fresh] = byIdentity.emplace(identity, groups.size());
      if (fresh) {
        KernelKey content = kernelKey({identity});
        groups.push_back(
            {i, "kiln_gpu_kernel_" + content.hex(),
             kernelKey({content.hex(), kernelCacheBuildId(), LLVM_VERSION_STRING,
                        spec.machine.triple, spec.machine.cpu, spec.machine.features})});
      }
      groupOf.push_back(it->second);
    }
    if (o.timer) {
      o.timer->addCount("kernels before deduplication", static_cast<int64_t>(kernels.size()));
      o.timer->addCount("kernels after deduplication", static_cast<int64_t>(groups.size()));
    }
  }
  std::vector<Result<Compiled>> compiled = [&] {
    ScopedPhase phase(o.timer, "compile kernels (LLVM, " + spec.name + ")", groups.size());
    return parallelFor<Compiled>(groups.size(), o.jobs, [&](size_t i) {
      const Func& k = *kernels[groups[i].first];
      Result<Compiled> r = compileGroup(m, k, groups[i], aliasing.count(k.name()) > 0, spec, o);
      if (o.timer) o.timer->kernelDone();
      return r;
    });
  }();
  std::vector<std::string> code;
  std::vector<EmittedGpuKernel> infos;
  for (Result<Compiled>& r : compiled) {
    if (!r.ok()) return r.takeDiags();
    code.push_back(std::move(r->code));
    infos.push_back(std::move(r->info));
  }
  for (size_t i = 0; i < kernels.size(); ++i) {
    const Func& k = *kernels[i];
    const EmittedGpuKernel& e = infos[groupOf[i]];
    gpu::GpuKernelInfo info;
    info.name = k.name();
    info.entry = e.entry;
    for (size_t a = 0; a < k.numArgs(); ++a)
      info.args.push_back({k.arg(a)->type().elem(), k.arg(a)->type().rank(), bool(e.written[a])});
    info.symbols = e.symbols;
    info.workgroupSize = {e.workgroup[0], e.workgroup[1], e.workgroup[2]};
    info.staticSharedBytes = static_cast<uint32_t>(e.staticSharedBytes);
    info.dynamicSharedBytes = static_cast<uint32_t>(e.dynamicSharedBytes);
    info.subgroupSize = static_cast<uint32_t>(waveFor(spec, k));
    info.kernargBytes = gpu::kernargBytes(info.args, info.symbols.size());
    if (e.staticSharedBytes + e.dynamicSharedBytes > spec.desc.sharedMemoryBytes)
      return error(k.loc(), "kernel @" + k.name() + " needs " +
                                std::to_string(e.staticSharedBytes + e.dynamicSharedBytes) +
                                " bytes of shared memory; " + spec.name + " has " +
                                std::to_string(spec.desc.sharedMemoryBytes));
    img.kernels.push_back(std::move(info));
  }
  if (o.output != GpuOutput::Executable) {
    // LLVM IR and AMDGPU assembly comment with ';', PTX with '//'.
    const char* comment =
        o.output == GpuOutput::Assembly && spec.kind == GpuArch::Nvptx ? "//" : ";";
    if (o.text)
      for (size_t i = 0; i < code.size(); ++i)
        *o.text += std::string(comment) + " ----- kernel " + std::to_string(i) + " (@" +
                   kernels[groups[i].first]->name() + "): " + groups[i].entry + " -----\n" +
                   code[i];
    return img;
  }
  if (kernels.empty()) return img;
  if (spec.kind == GpuArch::Amdgpu) {
    ScopedPhase phase(o.timer, "link (lld)");
    KILN_TRY(img.code, linkWithLld(code, {"-shared", "--no-undefined"}, {}, "<amdgpu backend>"));
  } else {
    ScopedPhase phase(o.timer, "link and print PTX");
    KILN_TRY(img.code, linkPtx(code, spec));
    img.code.push_back('\0');
  }
  return img;
}

bool LlvmGpuBackend::acceptsTarget(const std::string& target) const {
  return target.rfind(prefix_, 0) == 0 && lookupTarget(target).ok();
}

std::string LlvmGpuBackend::targetNames() const {
  std::string s;
  for (const std::string& n : kiln::targetNames())
    if (acceptsTarget(n)) s += (s.empty() ? "" : ", ") + n;
  return s;
}

Status LlvmGpuBackend::addCodegenPasses(PassManager& pm, const BackendOptions& o,
                                        const std::vector<DeviceTarget>& devices) const {
  CodegenOptions c;
  KILN_TRY(c.target, lookupTarget(o.target.empty() ? default_ : o.target));
  c.overrides = o.overrides;
  c.devices = devices;
  kiln::addCodegenPasses(pm, c);
  return ok();
}

Result<gpu::GpuImage> LlvmGpuBackend::compile(const Module& m,
                                              const std::vector<const Func*>& kernels,
                                              const std::string& target,
                                              const GpuCompileOptions& o) const {
  KILN_TRY(GpuTargetSpec spec, resolveGpuTarget(target.empty() ? default_ : target));
  KILN_TRY(gpu::GpuImage img, compileGpuKernels(m, kernels, spec, o));
  if (o.output == GpuOutput::Executable && !kernels.empty()) KILN_CHECK(finish(img, spec));
  return img;
}

Result<std::string> LlvmGpuBackend::codeReport(const Module& m,
                                               const std::vector<const Func*>& kernels,
                                               const std::string& target) const {
  GpuCompileOptions co;
  KILN_TRY(gpu::GpuImage img, compile(m, kernels, target, co));
  std::string out;
  for (const gpu::GpuKernelInfo& k : img.kernels) {
    out += "kernel @" + k.name + ": " + target + " code, " +
           std::to_string(k.staticSharedBytes + k.dynamicSharedBytes) + " bytes shared (" +
           (k.dynamicSharedBytes ? "dynamic" : "static") + "), waves of " +
           std::to_string(k.subgroupSize);
    if (img.kind == gpu::GpuCodeKind::HsaCodeObject)
      out += ", " + std::to_string(k.stats.vgprs) + " VGPRs, " + std::to_string(k.stats.sgprs) +
             " SGPRs, " + std::to_string(k.stats.privateBytes) + " bytes scratch" +
             (k.stats.spills ? ", SPILLS" : ", no spills");
    else
      out += ", registers known after the driver's PTX JIT";
    out += "\n";
  }
  return out;
}

Result<std::string> LlvmGpuBackend::serialize(const Module& m,
                                              const std::vector<const Func*>& kernels,
                                              const BackendOptions& o) const {
  GpuCompileOptions co;
  co.timer = o.timer;
  co.jobs = o.jobs;
  co.cache = o.cache;
  co.output = o.textKind == "llvm"  ? GpuOutput::LlvmIr
              : o.textKind == "asm" ? GpuOutput::Assembly
                                    : GpuOutput::Executable;
  co.text = o.text;
  // The kernels were lowered for `o.target` (the last --target); every other architecture
  // named gets an image of the same kernels (its own limits checked), so one module runs on
  // each.
  std::vector<std::string> archs = o.targets;
  if (archs.empty()) archs.push_back(o.target);
  gpu::GpuPayload p;
  p.target = name_;
  for (const std::string& t : archs) {
    if (co.text && archs.size() > 1)
      *co.text += std::string(co.output == GpuOutput::Assembly && name_ == "cuda" ? "//" : ";") +
                  " ===== " + t + " =====\n";
    KILN_TRY(gpu::GpuImage img, compile(m, kernels, t, co));
    p.images.push_back(std::move(img));
  }
  if (o.cache) o.cache->prune();
  return gpu::serializeGpuPayload(p);
}

} // namespace kiln::llvmgen
