// RefExecutable: parses and verifies its IR-text payload; each function is one kernel.
#include "ir/core/push_constants.h"
#include "ir/text/parser.h"
#include "ir/verify/verifier.h"
#include "runtime/ref/ref.h"

namespace kiln::hal::ref {

Result<std::unique_ptr<RefExecutable>> RefExecutable::load(const std::string& target,
                                                           const std::string& payload) {
  auto exe = std::make_unique<RefExecutable>();
  exe->target_ = target;
  KILN_TRY(exe->module_, parseModule(payload, "<" + target + " executable>"));
  KILN_CHECK(verifyModule(*exe->module_));
  bool kernelIr = target == "sim";
  for (const auto& f : exe->module_->funcs()) {
    for (const auto& op : f->ops()) {
      OpLevel level = op->info().level;
      if (level == OpLevel::Tensor || (level == OpLevel::Kernel && kernelIr)) continue;
      return error(op->loc(), target + " kernel @" + f->name() + " contains the op '" +
                                  std::string(op->name()) + "', which a " + target +
                                  " device cannot run");
    }
    exe->kernels_.push_back(f.get());
    // Lowered kernels take buffers (kernel IR); tensor-level ones take tensors.
    exe->lowered_.push_back(f->numArgs() > 0 && f->arg(0)->type().isBuffer());
    exe->push_.push_back(pushConstantSymbols(*f));
  }
  exe->weights_ = std::make_unique<WeightStore>(*exe->module_);
  return exe;
}

Result<SymbolBinding> RefExecutable::bindPushConstants(size_t index,
                                                       const std::vector<int64_t>& values,
                                                       const Loc& loc) const {
  const std::vector<std::string>& names = push_[index];
  if (values.size() != names.size())
    return error(loc, "kernel @" + kernelName(index) + " reads " + std::to_string(names.size()) +
                          " push constants, the dispatch has " + std::to_string(values.size()));
  SymbolBinding dims;
  for (size_t i = 0; i < names.size(); ++i) dims.emplace(names[i], values[i]);
  return dims;
}

} // namespace kiln::hal::ref
