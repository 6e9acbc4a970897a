// RuntimeModule (include/kiln/runtime.h): a Program behind an Executor.
#include <filesystem>

#include "kiln/runtime.h"
#include "runtime/module_format.h"

namespace kiln {

Result<std::unique_ptr<RuntimeModule>> RuntimeModule::fromProgram(Program program,
                                                                  const ExecutorOptions& opts) {
  KILN_TRY(std::unique_ptr<Executor> ex,
           Executor::create(std::make_shared<const Program>(std::move(program)), opts));
  return std::unique_ptr<RuntimeModule>(new RuntimeModule(std::move(ex)));
}

Result<std::unique_ptr<RuntimeModule>> RuntimeModule::open(const std::string& path,
                                                           const ExecutorOptions& opts) {
  KILN_TRY(Program p, loadProgramFile(path));
  return fromProgram(std::move(p), opts);
}

Result<std::unique_ptr<RuntimeModule>> RuntimeModule::fromBytes(std::string bytes,
                                                                const ExecutorOptions& opts,
                                                                const std::string& baseDir) {
  auto owner = std::make_shared<const std::string>(std::move(bytes));
  KILN_TRY(Program p, loadProgram(*owner, owner, "<memory>", baseDir));
  WeightStore store(*p.host);
  for (const WeightDecl& w : p.host->weights())
    if (!p.embeddedWeights.count(w.name)) KILN_CHECK(store.get(w.name));
  return fromProgram(std::move(p), opts);
}

} // namespace kiln
