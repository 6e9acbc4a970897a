// LLVM target machines, the optimization pipelines and object emission, shared by the LLVM
// backends.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/core/diag.h"

namespace llvm {
class Module;
class TargetMachine;
} // namespace llvm

namespace kiln::llvmgen {

struct MachineSpec {
  std::string triple;   // "x86_64-unknown-linux-gnu"
  std::string cpu;      // LLVM CPU name: "x86-64-v3", "znver4", ...
  std::string features; // "+avx2,+fma,-avx512f" (empty: the CPU's own)
};

// Initializes LLVM's x86, AMDGPU and NVPTX targets once per process.
void initializeLlvm();
Result<std::unique_ptr<llvm::TargetMachine>> createTargetMachine(const MachineSpec& spec);
// Verifies `m` (an invalid module is a backend bug reported as an error naming `what`),
// then runs the new pass manager's default pipeline at `level` (1 to 3; the cpu backend picks
// it per kernel, backends/opt_level.h) for `tm`.
// `slp` = false leaves the SLP vectorizer out (backends/opt_level.h: slpSafe).
Status optimizeModule(llvm::Module& m, llvm::TargetMachine& tm, const std::string& what,
                      int level = 3, bool slp = true);
// The module as an ELF relocatable object (PIC).
Result<std::string> emitObject(llvm::Module& m, llvm::TargetMachine& tm);
// The module as assembly or LLVM IR text (kiln compile --emit=asm / --emit=llvm).
Result<std::string> emitAssembly(llvm::Module& m, llvm::TargetMachine& tm);
std::string printLlvmModule(const llvm::Module& m);
// Links `objects` (ELF relocatable objects) with lld in-process: `flags` ("-shared", ...),
// then the objects, then `libraries`; the linked file's bytes. Errors are located at `what`.
Result<std::string> linkWithLld(const std::vector<std::string>& objects,
                                const std::vector<std::string>& flags,
                                const std::vector<std::string>& libraries, const std::string& what);
// Runs `fn` under an llvm::CrashRecoveryContext, so that an LLVM fatal error (which aborts)
// or a crash inside it returns false on this thread instead of ending the process. Objects
// `fn` had allocated are then leaked; the caller reports an internal error.
bool runRecoverably(const std::function<void()>& fn);

} // namespace kiln::llvmgen
