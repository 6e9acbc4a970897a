// cse: common subexpression elimination by hash-consing.
//
// Requires:    nothing.
// Guarantees:  no two side-effect-free ops have the same kind, operands (in order),
//              attributes, result types and device; the later one's uses point at the
//              earlier. (Clones that affinity made per device stay apart.)
// Invalidates: op identities of the removed duplicates.
//
//   %0 = exp %x : tensor<4xf32>        %0 = exp %x : tensor<4xf32>
//   %1 = exp %x : tensor<4xf32>  =>    %1 = add %0, %0 : tensor<4xf32>
//   %2 = add %0, %1 : tensor<4xf32>
//
// Operand order is part of the key: `add %a, %b` and `add %b, %a` stay apart (no
// blanket commutativity; canonicalize orders constants, nothing else). An equal hash is
// confirmed by comparing the ops in full before one replaces the other.
#include <unordered_map>
#include <xxhash.h>

#include "passes/passes.h"

namespace kiln {

namespace {

uint64_t opKey(const Op& op) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  auto word = [&](uint64_t w) { XXH3_64bits_update(st, &w, sizeof(w)); };
  word(static_cast<uint64_t>(op.kind()));
  word(op.numOperands());
  for (Value* v : op.operands()) word(reinterpret_cast<uintptr_t>(v));
  word(op.attrs().hash());
  word(op.numResults());
  for (size_t i = 0; i < op.numResults(); ++i) word(op.result(i)->type().hash());
  uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

bool sameComputation(const Op& a, const Op& b) {
  if (a.kind() != b.kind() || a.operands() != b.operands() || a.numResults() != b.numResults() ||
      a.device() != b.device())
    return false;
  for (size_t i = 0; i < a.numResults(); ++i)
    if (a.result(i)->type() != b.result(i)->type()) return false;
  return a.attrs() == b.attrs();
}

void cseFunc(Func& f) {
  std::unordered_multimap<uint64_t, Op*> seen;
  for (Op* op : f.opsSnapshot()) {
    // Kernel IR has loop scopes and memory: two equal loads or index ops in different
    // loops are not interchangeable, so cse leaves kernels alone.
    if (op->has(kSideEffects) || op->has(kTerminator) || op->info().level == OpLevel::Kernel)
      continue;
    uint64_t key = opKey(*op);
    Op* same = nullptr;
    for (auto [it, end] = seen.equal_range(key); it != end && !same; ++it)
      if (sameComputation(*it->second, *op)) same = it->second;
    if (!same) {
      seen.emplace(key, op);
      continue;
    }
    for (size_t i = 0; i < op->numResults(); ++i)
      op->result(i)->replaceAllUsesWith(same->result(i));
    f.erase(op);
  }
}

class CsePass : public Pass {
public:
  Status run(Module& m) override {
    for (const auto& f : m.funcs()) cseFunc(*f);
    return ok();
  }
};

} // namespace

std::unique_ptr<Pass> createCsePass() { return std::make_unique<CsePass>(); }

} // namespace kiln
