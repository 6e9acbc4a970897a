// dce: dead code elimination.
//
// Requires:    nothing.
// Guarantees:  every op without side effects has a used result.
// Invalidates: nothing that other passes keep (removed ops had no users).
//
//   %0 = exp %x : tensor<4xf32>
//   return %x                    =>    return %x
//
// One sweep from the end suffices: an op's users all come after it, so by the time the
// sweep reaches an op every dead user has already been erased.
#include "passes/passes.h"

namespace kiln {

namespace {

bool isDead(const Op& op) {
  if (op.has(kSideEffects) || op.has(kTerminator)) return false;
  for (size_t i = 0; i < op.numResults(); ++i)
    if (op.result(i)->hasUses()) return false;
  return true;
}

class DcePass : public Pass {
public:
  Status run(Module& m) override {
    for (const auto& f : m.funcs()) {
      std::vector<Op*> ops = f->opsSnapshot();
      for (auto it = ops.rbegin(); it != ops.rend(); ++it)
        if (isDead(**it)) f->erase(*it);
    }
    return ok();
  }
};

} // namespace

std::unique_ptr<Pass> createDcePass() { return std::make_unique<DcePass>(); }

} // namespace kiln
