// The rewrite engine: pattern sets, the Rewriter patterns mutate through, and the worklist
// driver with its size-proportional budget and oscillation detection (see rewrite.h).
#include "ir/core/rewrite.h"

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <xxhash.h>

namespace kiln {

namespace {

// Hashing the whole function after every rewrite would make a long rewrite of a large
// function quadratic. The state is hashed after every `1 + ops / kOpsPerHashStride`-th
// rewrite instead: hashing then costs O(kOpsPerHashStride) per rewrite on average, and
// a cycle of length L is still caught within stride × L rewrites, far inside the budget.
constexpr size_t kOpsPerHashStride = 1024;

const SymbolTable& symbolsOf(const Func& f) {
  static const SymbolTable kNoSymbols;
  return f.parent() ? f.parent()->symbols() : kNoSymbols;
}

bool isTriviallyDead(const Op& op) {
  if (op.has(kSideEffects) || op.has(kTerminator)) return false;
  for (size_t i = 0; i < op.numResults(); ++i)
    if (op.result(i)->hasUses()) return false;
  return true;
}

// Patterns index operands and results as the op table promises; an op that breaks the
// table (possible in unverified IR) is left for the verifier to report.
bool fitsOpTable(const Op& op) {
  const OpInfo& info = op.info();
  int n = static_cast<int>(op.numOperands());
  if (n < info.minOperands || (info.maxOperands >= 0 && n > info.maxOperands)) return false;
  if (info.numResults >= 0 && static_cast<int>(op.numResults()) != info.numResults) return false;
  for (Value* v : op.operands())
    if (!v) return false;
  return true;
}

void removeAll(std::vector<Op*>& v, Op* op) {
  v.erase(std::remove(v.begin(), v.end(), op), v.end());
}

} // namespace

void PatternSet::add(Pattern p) {
  byKind_[p.root].push_back(std::move(p));
  ++count_;
}

void PatternSet::add(std::string name, OpKind root, std::function<bool(Op&, Rewriter&)> apply) {
  add(Pattern{std::move(name), root, std::move(apply)});
}

const std::vector<Pattern>& PatternSet::forKind(OpKind kind) const {
  static const std::vector<Pattern> kNone;
  auto it = byKind_.find(kind);
  return it == byKind_.end() ? kNone : it->second;
}

Rewriter::Rewriter(Func& func, const SymbolTable& syms)
    : func_(func), syms_(syms), builder_(&func) {}

void Rewriter::setRoot(Op* root) {
  builder_.setInsertionPoint(root);
  builder_.setLoc(root->loc());
  // What replaces an op runs where it ran.
  builder_.setDevice(root->device());
}

Result<Op*> Rewriter::create(OpKind kind, const std::vector<Value*>& operands, Attrs attrs,
                             std::vector<Type> resultTypes) {
  KILN_TRY(Op * op, builder_.create(kind, operands, std::move(attrs), std::move(resultTypes)));
  touched_.push_back(op);
  maybeDead_.push_back(op);
  return op;
}

Op* Rewriter::createUnchecked(OpKind kind, const std::vector<Value*>& operands, Attrs attrs,
                              std::vector<Type> resultTypes) {
  Op* op = builder_.createUnchecked(kind, operands, std::move(attrs), std::move(resultTypes));
  touched_.push_back(op);
  maybeDead_.push_back(op);
  return op;
}

void Rewriter::touchUsers(Value* v) {
  for (const Use& u : v->uses()) touched_.push_back(u.user);
}

void Rewriter::replaceAllUsesWith(Value* from, Value* to) {
  if (from == to) return;
  from->replaceAllUsesWith(to);
  touchUsers(to);
  if (to->def()) touched_.push_back(to->def());
  if (from->def()) maybeDead_.push_back(from->def());
}

void Rewriter::replaceOp(Op* op, const std::vector<Value*>& values) {
  for (size_t i = 0; i < op->numResults() && i < values.size(); ++i)
    replaceAllUsesWith(op->result(i), values[i]);
  eraseOp(op);
}

bool Rewriter::eraseOp(Op* op) {
  for (size_t i = 0; i < op->numResults(); ++i)
    if (op->result(i)->hasUses()) return false;
  for (Value* v : op->operands()) {
    if (v && v->def()) {
      maybeDead_.push_back(v->def());
      touched_.push_back(v->def());
    }
  }
  removeAll(touched_, op);
  removeAll(maybeDead_, op);
  erased_.push_back(op);
  func_.erase(op);
  return true;
}

void Rewriter::setOperand(Op* op, size_t index, Value* v) {
  Value* old = op->operand(index);
  op->setOperand(index, v);
  touched_.push_back(op);
  for (size_t i = 0; i < op->numResults(); ++i) touchUsers(op->result(i));
  if (old && old->def()) maybeDead_.push_back(old->def());
  if (v && v->def()) touched_.push_back(v->def());
}

std::vector<Op*> Rewriter::takeTouched() { return std::exchange(touched_, {}); }
std::vector<Op*> Rewriter::takeMaybeDead() { return std::exchange(maybeDead_, {}); }
std::vector<Op*> Rewriter::takeErased() { return std::exchange(erased_, {}); }

size_t rewriteBudget(size_t numOps, const RewriteOptions& opts) {
  return opts.rewritesPerOp * numOps + opts.rewritesBase;
}

uint64_t hashFuncState(const Func& f) {
  std::unordered_map<const Op*, uint64_t> position;
  uint64_t n = 0;
  for (const auto& op : f.ops()) position[op.get()] = n++;

  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  auto word = [&](uint64_t w) { XXH3_64bits_update(st, &w, sizeof(w)); };
  word(f.numArgs());
  for (size_t i = 0; i < f.numArgs(); ++i) word(f.arg(i)->type().hash());
  for (const Type& t : f.resultTypes()) word(t.hash());
  for (const auto& op : f.ops()) {
    word(static_cast<uint64_t>(op->kind()));
    word(op->numOperands());
    for (Value* v : op->operands()) {
      if (!v) {
        word(0);
      } else if (v->isArg()) {
        word(1);
        word(v->index());
      } else if (auto it = position.find(v->def()); it != position.end()) {
        word(2);
        word(it->second);
        word(v->index());
      } else {
        word(3); // defined outside this function: invalid IR, but hashing must not fail
      }
    }
    word(op->attrs().hash());
    word(op->numResults());
    for (size_t i = 0; i < op->numResults(); ++i) word(op->result(i)->type().hash());
  }
  uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

namespace {

// Worklist state of one applyPatterns call.
class Driver {
public:
  Driver(Func& f, const PatternSet& patterns, const RewriteOptions& opts)
      : f_(f), patterns_(patterns), rw_(f, symbolsOf(f)), budget_(rewriteBudget(f.numOps(), opts)),
        hashStride_(1 + f.numOps() / kOpsPerHashStride),
        budgetText_(std::to_string(opts.rewritesPerOp) + " per op × " + std::to_string(f.numOps()) +
                    " ops + " + std::to_string(opts.rewritesBase)) {}

  Result<RewriteStats> run() {
    std::vector<Op*> ops = f_.opsSnapshot();
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) push(*it);
    seen_[hashFuncState(f_)] = 0;

    while (!stack_.empty()) {
      Op* op = stack_.back();
      stack_.pop_back();
      // A pointer no longer queued was erased (or already visited through a duplicate).
      if (!queued_.erase(op) || !fitsOpTable(*op)) continue;
      for (const Pattern& p : patterns_.forKind(op->kind())) {
        rw_.setRoot(op);
        if (!p.apply(*op, rw_)) continue;
        KILN_CHECK(recordRewrite(p));
        settle();
        KILN_CHECK(checkOscillation());
        break; // the root may be gone; if it changed in place it is queued again
      }
    }
    return std::move(stats_);
  }

private:
  void push(Op* op) {
    if (queued_.insert(op).second) stack_.push_back(op);
  }

  Status recordRewrite(const Pattern& p) {
    ++stats_.rewrites;
    ++stats_.perPattern[p.name];
    log_.push_back(&p);
    if (stats_.rewrites <= budget_) return ok();
    std::vector<std::pair<size_t, std::string>> counts;
    for (const auto& [name, count] : stats_.perPattern) counts.emplace_back(count, name);
    std::sort(counts.begin(), counts.end(), std::greater<>());
    std::string most;
    for (size_t i = 0; i < counts.size() && i < 3; ++i)
      most += (i ? ", " : "") + counts[i].second + " (" + std::to_string(counts[i].first) + ")";
    Diag d = error(f_.loc(), "rewriting @" + f_.name() + " did not reach a fixed point within " +
                                 std::to_string(budget_) + " rewrites (" + budgetText_ +
                                 "); most applied patterns: " + most);
    return d;
  }

  // Erases what the rewrite left dead, forgets erased ops and queues what changed.
  void settle() {
    std::vector<Op*> maybeDead = rw_.takeMaybeDead();
    while (!maybeDead.empty()) {
      Op* op = maybeDead.back();
      maybeDead.pop_back();
      if (!isTriviallyDead(*op) || !rw_.eraseOp(op)) continue;
      ++stats_.erased;
      // eraseOp forgot `op` in the rewriter's lists; forget it here too.
      removeAll(maybeDead, op);
      for (Op* more : rw_.takeMaybeDead()) maybeDead.push_back(more);
    }
    for (Op* op : rw_.takeErased()) queued_.erase(op);
    for (Op* op : rw_.takeTouched()) push(op);
  }

  Status checkOscillation() {
    if (stats_.rewrites % hashStride_ != 0) return ok();
    uint64_t h = hashFuncState(f_);
    auto [it, inserted] = seen_.emplace(h, stats_.rewrites);
    if (inserted) return ok();
    size_t from = it->second;
    std::vector<std::string> names;
    std::map<std::string, size_t> counts;
    for (size_t i = from; i < log_.size(); ++i) {
      const std::string& name = log_[i]->name;
      if (counts[name]++ == 0) names.push_back(name);
    }
    std::string list;
    for (size_t i = 0; i < names.size(); ++i) list += (i ? ", " : "") + names[i];
    Diag d = error(f_.loc(), "rewrite patterns oscillate in @" + f_.name() + ": after rewrite " +
                                 std::to_string(stats_.rewrites) +
                                 " the function is back to its state after rewrite " +
                                 std::to_string(from) + "; patterns that undo each other: " + list);
    for (const std::string& name : names)
      d.notes.push_back(note(f_.loc(), "'" + name + "' applied " + std::to_string(counts[name]) +
                                           " times in the cycle"));
    return d;
  }

  Func& f_;
  const PatternSet& patterns_;
  Rewriter rw_;
  size_t budget_;
  size_t hashStride_;
  std::string budgetText_;
  RewriteStats stats_;
  std::vector<Op*> stack_;
  std::unordered_set<Op*> queued_;
  std::unordered_map<uint64_t, size_t> seen_; // state hash -> rewrite count when first seen
  std::vector<const Pattern*> log_;           // pattern of each rewrite, in order
};

} // namespace

Result<RewriteStats> applyPatterns(Func& f, const PatternSet& patterns,
                                   const RewriteOptions& opts) {
  return Driver(f, patterns, opts).run();
}

} // namespace kiln
