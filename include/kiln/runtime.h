// kiln's runtime embedding API (C++): load a module once, run its functions many times.
// Links against the runtime alone (no compiler passes, no LLVM).
//
//   auto m = kiln::RuntimeModule::open("model.kmod");      // Result<unique_ptr<...>>
//   if (!m.ok()) { std::cerr << m.diags().str(); return 1; }
//   kiln::HostTensor x(kiln::ElemType::F32, {2, 4});       // bind inputs from memory
//   std::memcpy(x.mutableData(), data, x.byteSize());
//   auto outs = (*m)->run("main", {x});                    // Result<vector<HostTensor>>
//   const float* y = reinterpret_cast<const float*>((*outs)[0].data());
//
// Over the ranks of an MPI job (docs/distributed.md): every rank opens the module with a
// transport, and rank 0 gets the results.
//
//   kiln::ExecutorOptions opts;
//   opts.transport = kiln::dist::openMpi(&comm).take();      // or openMpi(): MPI_COMM_WORLD
//   auto m = kiln::RuntimeModule::open("two.kmod", opts);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ir/core/diag.h"
#include "ir/core/host_tensor.h"
#include "runtime/dist/transport.h"
#include "runtime/executor.h"
#include "runtime/program.h"

namespace kiln {

class RuntimeModule {
public:
  // A .kmod file: validated (header, version, checksums), mapped, external weights checked.
  static Result<std::unique_ptr<RuntimeModule>> open(const std::string& path,
                                                     const ExecutorOptions& opts = {});
  // .kmod bytes in memory (copied); relative external weight paths resolve against `baseDir`.
  static Result<std::unique_ptr<RuntimeModule>>
  fromBytes(std::string bytes, const ExecutorOptions& opts = {}, const std::string& baseDir = ".");
  // A program compiled in memory (kiln/compiler.h).
  static Result<std::unique_ptr<RuntimeModule>> fromProgram(Program program,
                                                            const ExecutorOptions& opts = {});

  // Entry functions, in module order, and their signatures.
  const std::vector<std::string>& functions() const { return executor_->program().entries; }
  const Func* signature(const std::string& function) const {
    return executor_->program().entry(function);
  }
  // Checks the inputs (count, element types, shapes, symbol ranges), runs, reads back.
  Result<std::vector<HostTensor>> run(const std::string& function,
                                      const std::vector<HostTensor>& inputs) {
    return executor_->call(function, inputs);
  }
  const CallStats& lastStats() const { return executor_->lastStats(); }
  // This process's rank under ExecutorOptions::transport (0 without one).
  int rank() const { return executor_->rank(); }
  // The program it runs (what a .kmod holds: schedule, executables, weights, stats).
  const Program& program() const { return executor_->program(); }

private:
  explicit RuntimeModule(std::unique_ptr<Executor> e) : executor_(std::move(e)) {}
  std::unique_ptr<Executor> executor_;
};

} // namespace kiln
