// RefExecutable: parses and verifies its IR-text payload; each function is one kernel.
#include "ir/parser.h"
#include "ir/verifier.h"
#include "runtime/ref/ref.h"

namespace kiln::hal::ref {

Result<std::unique_ptr<RefExecutable>> RefExecutable::load(const std::string& target,
                                                           const std::string& payload) {
  auto exe = std::make_unique<RefExecutable>();
  KILN_CHECK(exe->parse(target, payload));
  return exe;
}

Status RefExecutable::parse(const std::string& target, const std::string& irText) {
  target_ = target;
  KILN_TRY(module_, parseModule(irText, "<" + target + " executable>"));
  KILN_CHECK(verifyModule(*module_));
  bool kernelIr = target == "sim" || target == "cpu";
  for (const auto& f : module_->funcs()) {
    for (const auto& op : f->ops()) {
      OpLevel level = op->info().level;
      if (level == OpLevel::Tensor || (level == OpLevel::Kernel && kernelIr)) continue;
      return error(op->loc(), target + " kernel @" + f->name() + " contains the op '" +
                                  std::string(op->name()) + "', which a " + target +
                                  " device cannot run");
    }
    kernels_.push_back(f.get());
  }
  weights_ = std::make_unique<WeightStore>(*module_);
  return ok();
}

} // namespace kiln::hal::ref
