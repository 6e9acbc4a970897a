// Target backends: the compiler side of each executable target, as hal::Driver is the
// runtime side. A backend has the name of the executable target its driver loads (a
// device's driver says which: ref[0] -> "ref", cpu[0] -> "cpu"), builds the codegen
// pipeline for its devices from options, and serializes the executable of the kernels
// launched on them.
//
// compileProgram (compiler/compiler.cpp) places the module, groups its devices by backend,
// runs each backend's pipeline over the ops of its devices, schedules, and asks each backend
// for its executable. Adding a backend: a folder src/backends/NAME/ with a TargetBackend
// subclass, one row in backend.cpp's table, and a runtime driver whose target() is NAME
// (docs/architecture.md walks through it).
#pragma once

#include <string>
#include <vector>

#include "backends/kernel_cache.h"
#include "ir/core/device.h"
#include "ir/core/ir.h"
#include "passes/compile_timer.h"
#include "passes/pass_manager.h"
#include "target/target.h"
#include "target/tile_config.h"

namespace kiln {

struct BackendOptions {
  std::string target; // codegen target name (--target); empty: the backend's default
  // Every --target this backend accepted, in order (`target` is the last). A backend whose
  // executables hold code per architecture (amdgpu, cuda) writes an image for each.
  std::vector<std::string> targets;
  TileOverrides overrides; // --tile-config
  // The devices of this backend the module runs on (placed or not), for backends that read
  // a present device's limits.
  std::vector<DeviceTarget> devices;
  // --emit=llvm|asm|spirv: a backend whose code has such a form writes it here (and its
  // executable may then be empty); others ignore it.
  std::string textKind;
  std::string* text = nullptr;
  // Phases, counts and kernel progress of serialize() (kiln compile --time-passes, --progress).
  CompileTimer* timer = nullptr;
  // Threads that compile kernels at once (0: the hardware's); the payload is the same for any.
  unsigned jobs = 0;
  // Compiled kernels kept across compiles (null or disabled: none).
  KernelCache* cache = nullptr;
  // LLVM optimization levels per kernel kind (kiln compile --opt-level; backends/opt_level.h):
  // empty is $KILN_OPT_LEVEL, else the default rule. Backends without LLVM ignore it.
  std::string optLevel;
};

class TargetBackend {
public:
  virtual ~TargetBackend() = default;
  // The executable target, as the runtime driver's Driver::target().
  virtual const std::string& name() const = 0;
  // Whether --target=NAME is a codegen target of this backend.
  virtual bool acceptsTarget(const std::string& target) const = 0;
  // The codegen target names it accepts, for messages ("" when it takes none).
  virtual std::string targetNames() const = 0;
  // The codegen target that `target` (one it accepts) stands for on this machine: the cpu
  // backend's `cpu` is the host's x86-64 level (cpu:x86-64-v4 on an AVX-512 host), what its
  // compiles tile for; every other name is itself.
  virtual Result<std::string> concreteTarget(const std::string& target) const { return target; }
  // Appends the codegen pipeline for the ops placed on `devices` (every op when empty);
  // backends whose kernels stay tensor-level add nothing.
  virtual Status addCodegenPasses(PassManager& pm, const BackendOptions& o,
                                  const std::vector<DeviceTarget>& devices) const = 0;
  // Whether its executables run tensor-level kernels (ref, sim: IR text). A backend whose
  // executables hold compiled code only (cpu) hands the kernels it left tensor-level to the
  // ref executable, which its devices load beside their own.
  virtual bool runsTensorKernels() const = 0;
  // The payload of the executable holding `kernels` (functions of `m`, in kernel order).
  virtual Result<std::string> serialize(const Module& m, const std::vector<const Func*>& kernels,
                                        const BackendOptions& o) const = 0;
  // What the compiled code says about each of `kernels` for codegen target `target`, one line
  // per kernel (kiln compile --emit=kernels: registers, shared memory and scratch of GPU code),
  // or "" when the backend reports nothing beyond kernelReport (passes/codegen.h).
  virtual Result<std::string> codeReport(const Module& m, const std::vector<const Func*>& kernels,
                                         const std::string& target) const {
    (void)m, (void)kernels, (void)target;
    return std::string();
  }
};

// The --emit=kernels report: kernelReport for `target`, then the code report of the backend
// that compiles for it (the module's lowered kernels, compiled once more to read their code).
Result<std::string> kernelsReport(const Module& m, const TargetDesc& target);

// Every backend built into this binary.
const std::vector<const TargetBackend*>& targetBackends();
const TargetBackend* lookupTargetBackend(const std::string& name);

// The executable payload of backends that ship kernels as kiln IR text (ref, sim): the
// kernels in order, one function each, with their locations.
std::string kernelIrText(const Module& m, const std::vector<const Func*>& kernels);

} // namespace kiln
