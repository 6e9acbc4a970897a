// RefExecutable: parses and verifies its IR-text payload; each function is one kernel.
#include "ir/parser.h"
#include "ir/verifier.h"
#include "runtime/ref/ref.h"

namespace kiln::hal::ref {

Result<std::unique_ptr<RefExecutable>> RefExecutable::load(const std::string& target,
                                                           const std::string& payload) {
  auto exe = std::make_unique<RefExecutable>();
  exe->target_ = target;
  KILN_TRY(exe->module_, parseModule(payload, "<" + target + " executable>"));
  KILN_CHECK(verifyModule(*exe->module_));
  for (const auto& f : exe->module_->funcs()) {
    for (const auto& op : f->ops()) {
      OpLevel level = op->info().level;
      if (level == OpLevel::Tensor || (level == OpLevel::Kernel && target == "sim")) continue;
      return error(op->loc(), target + " kernel @" + f->name() + " contains the op '" +
                                  std::string(op->name()) + "', which a " + target +
                                  " device cannot run");
    }
    exe->kernels_.push_back(f.get());
  }
  exe->weights_ = std::make_unique<WeightStore>(*exe->module_);
  return exe;
}

} // namespace kiln::hal::ref
