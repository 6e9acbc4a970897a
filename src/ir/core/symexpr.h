// Symbolic integer expressions for tensor dimensions.
//
// A SymExpr is an immutable value over named symbols and 64-bit constants, built with
// + - * floordiv ceildiv mod min max. Constructors simplify eagerly into one canonical
// form (sums of products with integer coefficients, constants folded, terms sorted), so
// two expressions that simplification proves equal compare equal with ==, print alike
// and hash alike. Nothing here needs the symbols' ranges; the range-aware queries
// (bounds, provably*) take a SymbolTable.
//
// Text form (printed by str(), read by parseSymExpr): `seq`, `2*seq + 1`,
// `seq floordiv 8`, `seq ceildiv 8`, `seq mod 8`, `min(seq, 128)`, `max(a, b)`, with the
// usual precedence (* floordiv ceildiv mod bind tighter than + -) and parentheses.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "ir/core/diag.h"

namespace kiln {

// A symbol's declaration: `symbol seq in [1, 4096] divisible_by 8`. A data-dependent symbol
// (`symbol nz in [0, 12] data_dependent`) is the size of a result that only running an op
// tells (nonzero, unique, non_max_suppression: ops with the kDataShaped trait): that op binds
// it when it runs, and the schedule allocates its result for `hi` (docs/ir.md).
struct SymbolInfo {
  std::string name;
  int64_t lo = 0;
  int64_t hi = 0;
  int64_t divisor = 1; // every value the symbol takes is a multiple of this
  Loc loc;
  bool dataDependent = false;
};

class SymbolTable {
public:
  // Fails if the name is already declared or the range/divisor is empty or invalid.
  Status declare(SymbolInfo info);
  const SymbolInfo* lookup(std::string_view name) const;
  const std::map<std::string, SymbolInfo, std::less<>>& all() const { return syms_; }

private:
  std::map<std::string, SymbolInfo, std::less<>> syms_;
};

// Concrete values for symbols, bound from input shapes at run time.
using SymbolBinding = std::map<std::string, int64_t, std::less<>>;

namespace detail {
struct SymNode;
}

class SymExpr {
public:
  SymExpr(); // the constant 0
  static SymExpr constant(int64_t v);
  static SymExpr symbol(std::string name);

  friend SymExpr operator+(const SymExpr& a, const SymExpr& b);
  friend SymExpr operator-(const SymExpr& a, const SymExpr& b);
  friend SymExpr operator*(const SymExpr& a, const SymExpr& b);
  static SymExpr floorDiv(const SymExpr& a, const SymExpr& b);
  static SymExpr ceilDiv(const SymExpr& a, const SymExpr& b);
  static SymExpr mod(const SymExpr& a, const SymExpr& b);
  static SymExpr min(const SymExpr& a, const SymExpr& b);
  static SymExpr max(const SymExpr& a, const SymExpr& b);

  bool isConstant() const;
  std::optional<int64_t> constantValue() const;
  // The symbol's name when the expression is exactly one symbol.
  std::optional<std::string> symbolName() const;

  bool operator==(const SymExpr& other) const;
  bool operator!=(const SymExpr& other) const { return !(*this == other); }
  // A total order on canonical forms (for sorting and maps), not numeric order.
  bool operator<(const SymExpr& other) const;
  uint64_t hash() const;
  std::string str() const;

  // Value under a binding; nullopt if a symbol is unbound, a divisor is 0 or the
  // arithmetic overflows.
  std::optional<int64_t> evaluate(const SymbolBinding& binding) const;
  // Replaces symbols by expressions (those not in the map stay).
  SymExpr substitute(const std::map<std::string, SymExpr, std::less<>>& subst) const;
  void collectSymbols(std::set<std::string>& out) const;

  const detail::SymNode* node() const { return node_.get(); }
  explicit SymExpr(std::shared_ptr<const detail::SymNode> n) : node_(std::move(n)) {}

private:
  std::shared_ptr<const detail::SymNode> node_;
};

// What the symbols' ranges imply for an expression: every value lies in [lo, hi] and is
// a multiple of divisor. Conservative: unknown symbols give the full int64 range.
struct SymBounds {
  int64_t lo;
  int64_t hi;
  int64_t divisor;
};
SymBounds bounds(const SymExpr& e, const SymbolTable& syms);

// True only when the relation holds for every value the symbols can take.
bool provablyEqual(const SymExpr& a, const SymExpr& b, const SymbolTable& syms);
bool provablyLE(const SymExpr& a, const SymExpr& b, const SymbolTable& syms);
bool provablyLT(const SymExpr& a, const SymExpr& b, const SymbolTable& syms);
bool provablyDivisible(const SymExpr& a, int64_t divisor, const SymbolTable& syms);

// Simplification that uses the symbols' ranges and divisors: drops min/max operands that
// can never win, folds `x mod c` to 0 and `x floordiv c` to exact quotients when x is
// provably a multiple of c, turns `c*(x floordiv c)` into x then, and folds anything whose
// range is a single value to that constant. The result equals e for every value in range.
SymExpr simplifyWithRanges(const SymExpr& e, const SymbolTable& syms);

// Rebuilds `e` from caller-supplied leaves and operations (`op` is one of add, mul,
// floordiv, ceildiv, mod, min, max), bottom-up; used to emit code that computes `e`.
struct SymLowering {
  std::function<void*(int64_t)> constant;
  std::function<void*(const std::string&)> symbol;
  std::function<void*(std::string_view op, void*, void*)> binary;
};
void* lowerSymExpr(const SymExpr& e, const SymLowering& l);

// Parses the text form. `loc` is where the text starts; errors point into it.
Result<SymExpr> parseSymExpr(std::string_view text, const Loc& loc);

} // namespace kiln
