// Target machines, the optimization pipeline and object emission (see machine.h).
#include "backends/llvm/machine.h"

#include "backends/llvm/x86_minmax.h"

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CodeGen.h>
#include <llvm/Support/CrashRecoveryContext.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>

#include <csignal>
#include <iterator>
#include <mutex>

namespace kiln::llvmgen {

namespace {
struct RangeMinMaxPass : llvm::PassInfoMixin<RangeMinMaxPass> {
  llvm::PreservedAnalyses run(llvm::Function& f, llvm::FunctionAnalysisManager&) {
    return rangeMinMax(f) ? llvm::PreservedAnalyses::none() : llvm::PreservedAnalyses::all();
  }
};
} // namespace

void initializeLlvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
    LLVMInitializeAMDGPUTargetInfo();
    LLVMInitializeAMDGPUTarget();
    LLVMInitializeAMDGPUTargetMC();
    LLVMInitializeAMDGPUAsmPrinter();
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

Result<std::unique_ptr<llvm::TargetMachine>> createTargetMachine(const MachineSpec& spec) {
  initializeLlvm();
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(spec.triple, err);
  if (!target)
    return error(Loc::named("target"), "LLVM has no target for " + spec.triple + ": " + err);
  llvm::TargetOptions opts;
  std::unique_ptr<llvm::TargetMachine> tm(
      target->createTargetMachine(spec.triple, spec.cpu, spec.features, opts, llvm::Reloc::PIC_,
                                  std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!tm) return error(Loc::named("target"), "LLVM cannot create a machine for " + spec.cpu);
  return tm;
}

Status optimizeModule(llvm::Module& m, llvm::TargetMachine& tm, const std::string& what, int level,
                      bool slp) {
  m.setDataLayout(tm.createDataLayout());
  m.setTargetTriple(tm.getTargetTriple().str());
  std::string msg;
  llvm::raw_string_ostream os(msg);
  if (llvm::verifyModule(m, &os))
    return error(Loc::named(what),
                 "internal error: the emitted LLVM IR does not verify: " + os.str());
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = slp;
  pto.LoopUnrolling = true;
  llvm::PassBuilder pb(&tm, pto);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::OptimizationLevel ol = level <= 1   ? llvm::OptimizationLevel::O1
                               : level == 2 ? llvm::OptimizationLevel::O2
                                            : llvm::OptimizationLevel::O3;
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(ol);
  // After the vectorizers: the trees it rewrites are then whole vectors (x86_minmax.h).
  if (hasVrange(tm)) mpm.addPass(llvm::createModuleToFunctionPassAdaptor(RangeMinMaxPass()));
  mpm.run(m, mam);
  return ok();
}

namespace {
Result<std::string> emitFile(llvm::Module& m, llvm::TargetMachine& tm, llvm::CodeGenFileType type) {
  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, type))
    return error(Loc::named(tm.getTargetCPU().str()), "LLVM cannot emit code for this target");
  pm.run(m);
  return std::string(buf.begin(), buf.end());
}
} // namespace

Result<std::string> emitObject(llvm::Module& m, llvm::TargetMachine& tm) {
  return emitFile(m, tm, llvm::CodeGenFileType::ObjectFile);
}

Result<std::string> emitAssembly(llvm::Module& m, llvm::TargetMachine& tm) {
  return emitFile(m, tm, llvm::CodeGenFileType::AssemblyFile);
}

std::string printLlvmModule(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return os.str();
}

bool runRecoverably(const std::function<void()>& fn) {
  // The signals LLVM's crash recovery handles (CrashRecoveryContext.cpp).
  static const int kSignals[] = {SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGSEGV, SIGTRAP};
  static std::mutex mu;
  static struct sigaction armed {};
  static bool enabled = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    struct sigaction now {};
    sigaction(SIGABRT, nullptr, &now);
    if (!enabled || now.sa_sigaction != armed.sa_sigaction) {
      // Someone (an embedding application, a test framework) installed handlers since
      // recovery was enabled: enable it again on top of theirs, so theirs stay the ones a crash
      // outside LLVM reaches.
      if (enabled) {
        struct sigaction theirs[std::size(kSignals)];
        for (size_t i = 0; i < std::size(kSignals); ++i)
          sigaction(kSignals[i], nullptr, &theirs[i]);
        llvm::CrashRecoveryContext::Disable();
        for (size_t i = 0; i < std::size(kSignals); ++i)
          sigaction(kSignals[i], &theirs[i], nullptr);
      }
      llvm::CrashRecoveryContext::Enable();
      sigaction(SIGABRT, nullptr, &armed);
      enabled = true;
    }
  }
  llvm::CrashRecoveryContext crc;
  return crc.RunSafely(fn);
}

} // namespace kiln::llvmgen
