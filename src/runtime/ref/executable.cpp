// RefExecutable: parses and verifies its IR-text payload; each function is one kernel.
#include "ir/parser.h"
#include "ir/verifier.h"
#include "runtime/ref/ref.h"

namespace kiln::hal::ref {

Result<std::unique_ptr<RefExecutable>> RefExecutable::load(const std::string& payload) {
  auto exe = std::make_unique<RefExecutable>();
  KILN_TRY(exe->module_, parseModule(payload, "<ref executable>"));
  KILN_CHECK(verifyModule(*exe->module_));
  for (const auto& f : exe->module_->funcs()) {
    for (const auto& op : f->ops())
      if (op->info().level != OpLevel::Tensor)
        return error(op->loc(), "ref kernel @" + f->name() + " contains the non-tensor op '" +
                                    std::string(op->name()) + "'");
    exe->kernels_.push_back(f.get());
  }
  exe->weights_ = std::make_unique<WeightStore>(*exe->module_);
  return exe;
}

} // namespace kiln::hal::ref
