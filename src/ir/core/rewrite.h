// The rewrite engine: patterns rooted at one op kind, and a worklist driver that applies
// them until none matches.
//
// A pattern is a name, a root OpKind and a C++ function written beside a one-line comment
// of the identity it applies (`// x * 1 -> x`). The function inspects the root op and,
// when it matches, rewrites it through the Rewriter and returns true; it returns false
// and changes nothing when it does not match. The rules for writing rules are in
// src/passes/README.md.
//
// The driver (applyPatterns) visits every op of a function. When a pattern rewrites an
// op, the users of the values it touched, the ops it created and the defining ops of the
// root's operands are visited again, and ops left without uses by the rewrite are erased.
// It never loops forever:
//   - its budget grows with the function: kRewritesPerOp × (ops at the start) +
//     kRewritesBase rewrites; running out is an error naming the most-applied patterns;
//   - it hashes the function's state (xxhash over op kinds, operand positions, attribute
//     and type hashes) after rewrites; a state seen before means patterns undid each
//     other, and the error names every pattern applied in the cycle.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include "ir/core/builder.h"
#include "ir/core/ir.h"

namespace kiln {

class Rewriter;

struct Pattern {
  std::string name; // shown in diagnostics: "canonicalize.mul-one"
  OpKind root;
  // Returns true exactly when it rewrote `root` (through the Rewriter).
  std::function<bool(Op& root, Rewriter& rw)> apply;
};

// Patterns grouped by root kind; within a kind they are tried in the order added.
class PatternSet {
public:
  void add(Pattern p);
  void add(std::string name, OpKind root, std::function<bool(Op&, Rewriter&)> apply);
  const std::vector<Pattern>& forKind(OpKind kind) const;
  size_t size() const { return count_; }

private:
  std::map<OpKind, std::vector<Pattern>> byKind_;
  size_t count_ = 0;
};

// The only way patterns change the IR, so that the driver knows what to visit again.
// New ops are inserted just before the root op, which dominates every use of the root's
// results and follows every value the root uses.
class Rewriter {
public:
  Rewriter(Func& func, const SymbolTable& syms);

  Func& func() const { return func_; }
  const SymbolTable& symbols() const { return syms_; }

  // Creates an op before the current root with result types from the shape rules
  // (`resultTypes` for ops that take them from there).
  Result<Op*> create(OpKind kind, const std::vector<Value*>& operands, Attrs attrs = {},
                     std::vector<Type> resultTypes = {});
  // Creates an op before the current root with result types the pattern vouches for.
  Op* createUnchecked(OpKind kind, const std::vector<Value*>& operands, Attrs attrs,
                      std::vector<Type> resultTypes);
  // Points every use of `from` at `to`.
  void replaceAllUsesWith(Value* from, Value* to);
  // Replaces each result of `op` by the matching value and erases `op`.
  void replaceOp(Op* op, const std::vector<Value*>& values);
  // Erases an op whose results have no uses; returns false (and keeps it) otherwise.
  bool eraseOp(Op* op);
  // Changes one operand of an existing op.
  void setOperand(Op* op, size_t index, Value* v);

  // Driver interface.
  void setRoot(Op* root);
  std::vector<Op*> takeTouched();
  std::vector<Op*> takeMaybeDead();
  std::vector<Op*> takeErased();

private:
  void touchUsers(Value* v);
  Func& func_;
  const SymbolTable& syms_;
  Builder builder_;
  std::vector<Op*> touched_;   // ops to visit again
  std::vector<Op*> maybeDead_; // ops that may have lost their last use
  std::vector<Op*> erased_;    // ops destroyed (pointers only, never dereferenced)
};

struct RewriteOptions {
  // Budget = rewritesPerOp × ops + rewritesBase. Tests lower these to reach the limit.
  size_t rewritesPerOp = 16;
  size_t rewritesBase = 1000;
};

struct RewriteStats {
  size_t rewrites = 0;                      // patterns applied
  size_t erased = 0;                        // dead ops removed by the driver
  std::map<std::string, size_t> perPattern; // applications by pattern name
};

// The budget for a function of `numOps` ops.
size_t rewriteBudget(size_t numOps, const RewriteOptions& opts = {});

// Applies `patterns` to `f` until none matches. Fails (leaving `f` valid but partly
// rewritten) on oscillation or an exhausted budget.
Result<RewriteStats> applyPatterns(Func& f, const PatternSet& patterns,
                                   const RewriteOptions& opts = {});

// The hash of a function's state used for oscillation detection: op kinds, operands as
// (position of defining op, result index) or argument index, attribute and result type
// hashes, in op order. Structurally equal functions hash equal.
uint64_t hashFuncState(const Func& f);

} // namespace kiln
