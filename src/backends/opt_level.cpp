// LLVM optimization levels per kernel (see opt_level.h).
#include "backends/opt_level.h"

#include <cstdlib>

namespace kiln {

const char* optLevelName(OptLevel l) {
  switch (l) {
  case OptLevel::O1: return "O1";
  case OptLevel::O2: return "O2";
  case OptLevel::O3: return "O3";
  }
  return "O3";
}

namespace {

bool isCompute(const Value* v, OpKind fn) {
  return v && v->def() && v->def()->kind() == OpKind::Compute &&
         v->def()->attrs().getOp("fn") == fn;
}

// Whether v is a load (scalar, masked or vector) of `buffer`.
bool loads(const Value* v, const Value* buffer) {
  if (!v || !v->def()) return false;
  OpKind k = v->def()->kind();
  return (k == OpKind::Load || k == OpKind::MaskedLoad || k == OpKind::VectorLoad) &&
         v->def()->operand(0) == buffer;
}

bool insideLoop(const Op& op) {
  for (const Op* p = op.parentOp(); p; p = p->parentOp())
    if (p->kind() == OpKind::For) return true;
  return false;
}

// sum = add(x, mul(a, b)) or add(mul(a, b), x) with accumulator(x): the x.
template <typename Pred> bool addsProductTo(const Value* sum, Pred accumulator) {
  if (!isCompute(sum, OpKind::Add)) return false;
  const Op& add = *sum->def();
  if (add.numOperands() != 2) return false;
  for (int i = 0; i < 2; ++i)
    if (isCompute(add.operand(1 - i), OpKind::Mul) && accumulator(add.operand(i))) return true;
  return false;
}

} // namespace

bool slpSafe(const Func& k) {
  bool safe = true;
  walkOps(k, [&](const Op& op) {
    const Value* r = op.numResults() == 1 ? op.result(0) : nullptr;
    if (r && r->type().elem() == ElemType::F64 &&
        (isCompute(r, OpKind::Max) || isCompute(r, OpKind::Min)))
      safe = false;
  });
  return safe;
}

bool accumulatesProducts(const Func& k) {
  bool found = false;
  walkOps(k, [&](const Op& op) {
    if (found || !insideLoop(op)) return;
    switch (op.kind()) {
    case OpKind::Store:
    case OpKind::VectorStore: {
      const Value* buffer = op.operand(1);
      found = addsProductTo(op.operand(0), [&](const Value* x) { return loads(x, buffer); });
      break;
    }
    case OpKind::MaskedStore: {
      const Value* buffer = op.operand(2);
      found = addsProductTo(op.operand(1), [&](const Value* x) { return loads(x, buffer); });
      break;
    }
    case OpKind::Yield: {
      const Op* loop = op.parentOp();
      if (!loop || loop->kind() != OpKind::For) break;
      for (const Value* v : op.operands())
        found = found || addsProductTo(v, [&](const Value* x) {
                  return x->isBlockArg() && x->blockArgOf()->parentOp() == loop;
                });
      break;
    }
    default: break;
    }
  });
  return found;
}

OptLevel chooseOptLevel(const Func& k, const OptLevelRule& rule) {
  return accumulatesProducts(k) ? rule.contraction : rule.other;
}

namespace {

bool parseLevel(const std::string& s, OptLevel* out) {
  std::string d = s.size() == 2 && (s[0] == 'O' || s[0] == 'o') ? s.substr(1) : s;
  if (d == "1")
    *out = OptLevel::O1;
  else if (d == "2")
    *out = OptLevel::O2;
  else if (d == "3")
    *out = OptLevel::O3;
  else
    return false;
  return true;
}

} // namespace

Result<OptLevelRule> parseOptLevelRule(const std::string& text, const Loc& where) {
  OptLevelRule rule;
  if (text == "auto") return rule;
  size_t slash = text.find('/');
  bool good = slash == std::string::npos
                  ? parseLevel(text, &rule.contraction) && parseLevel(text, &rule.other)
                  : parseLevel(text.substr(0, slash), &rule.contraction) &&
                        parseLevel(text.substr(slash + 1), &rule.other);
  if (!good)
    return error(where,
                 "expected auto, O1, O2, O3 or CONTRACTION/OTHER (e.g. O3/O1), got '" + text + "'");
  return rule;
}

Result<OptLevelRule> resolveOptLevelRule(const std::string& flag) {
  if (!flag.empty()) return parseOptLevelRule(flag);
  const char* env = std::getenv("KILN_OPT_LEVEL");
  if (!env || !*env) return OptLevelRule{};
  return parseOptLevelRule(env, Loc::named("KILN_OPT_LEVEL"));
}

} // namespace kiln
