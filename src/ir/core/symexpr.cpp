// Symbolic integer expressions: canonical construction, printing, parsing, evaluation,
// and the range analysis behind bounds() and the provably* queries (contract in symexpr.h).
//
// Canonical form: an expression is either an atom (a symbol, or a floordiv / ceildiv / mod
// / min / max node over canonical children) or a polynomial `c + sum(k_i * m_i)` whose
// monomials m_i are sorted lists of atoms with non-zero coefficients. A polynomial that is
// exactly one atom is stored as that atom, so `x` has one representation. When folding
// would overflow int64 (or a product would explode into too many terms) the constructors
// keep an opaque Add / Mul node instead, which is still exact, just not simplified.
#include "ir/core/symexpr.h"

#include <xxhash.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <numeric>
#include <vector>

namespace kiln {
namespace detail {

// The order of the kinds is part of the canonical order of expressions.
enum class SymKind : uint8_t { Symbol, FloorDiv, CeilDiv, Mod, Min, Max, Add, Mul, Poly };

struct SymTerm {
  int64_t coef = 0;
  std::vector<SymExpr> atoms; // sorted; a repeated atom is a power
};

struct SymNode {
  SymKind kind = SymKind::Poly;
  uint32_t depth = 1; // nesting depth, bounded by the parser so recursion stays shallow
  uint64_t hash = 0;
  std::string name;           // Symbol
  std::vector<SymExpr> args;  // FloorDiv..Mul: two children
  int64_t constant = 0;       // Poly
  std::vector<SymTerm> terms; // Poly: sorted by monomial, no zero coefficients
};

} // namespace detail

using detail::SymKind;
using detail::SymNode;
using detail::SymTerm;

namespace {

constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
// Products of sums beyond this many terms stay unexpanded: expansion is exponential.
constexpr size_t kMaxTerms = 256;
// Parenthesis / unary / min-max nesting accepted by the parser.
constexpr uint32_t kMaxParseDepth = 200;

const SymNode& nodeOf(const SymExpr& e) { return *e.node(); }
SymKind kindOf(const SymExpr& e) { return e.node()->kind; }

uint64_t hashNode(const SymNode& n) {
  std::vector<uint64_t> w;
  w.push_back(static_cast<uint64_t>(n.kind));
  switch (n.kind) {
  case SymKind::Symbol: return XXH3_64bits_withSeed(n.name.data(), n.name.size(), 0x53594d);
  case SymKind::Poly:
    w.push_back(static_cast<uint64_t>(n.constant));
    for (const SymTerm& t : n.terms) {
      w.push_back(static_cast<uint64_t>(t.coef));
      w.push_back(t.atoms.size());
      for (const SymExpr& a : t.atoms) w.push_back(a.hash());
    }
    break;
  default:
    for (const SymExpr& a : n.args) w.push_back(a.hash());
    break;
  }
  return XXH3_64bits(w.data(), w.size() * sizeof(uint64_t));
}

SymExpr makeNode(SymNode n) {
  n.hash = hashNode(n);
  for (const SymExpr& a : n.args) n.depth = std::max(n.depth, a.node()->depth + 1);
  for (const SymTerm& t : n.terms)
    for (const SymExpr& a : t.atoms) n.depth = std::max(n.depth, a.node()->depth + 1);
  return SymExpr(std::make_shared<const SymNode>(std::move(n)));
}

int cmpExpr(const SymExpr& a, const SymExpr& b);

int cmpAtoms(const std::vector<SymExpr>& a, const std::vector<SymExpr>& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (int c = cmpExpr(a[i], b[i])) return c;
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return 0;
}

int cmpInt(int64_t a, int64_t b) { return a < b ? -1 : (a > b ? 1 : 0); }

int cmpExpr(const SymExpr& a, const SymExpr& b) {
  if (a.node() == b.node()) return 0;
  const SymNode& x = nodeOf(a);
  const SymNode& y = nodeOf(b);
  if (x.kind != y.kind) return x.kind < y.kind ? -1 : 1;
  switch (x.kind) {
  case SymKind::Symbol: {
    int c = x.name.compare(y.name);
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  case SymKind::Poly:
    for (size_t i = 0; i < x.terms.size() && i < y.terms.size(); ++i) {
      if (int c = cmpAtoms(x.terms[i].atoms, y.terms[i].atoms)) return c;
      if (int c = cmpInt(x.terms[i].coef, y.terms[i].coef)) return c;
    }
    if (x.terms.size() != y.terms.size()) return x.terms.size() < y.terms.size() ? -1 : 1;
    return cmpInt(x.constant, y.constant);
  default: return cmpAtoms(x.args, y.args);
  }
}

SymExpr makeConstant(int64_t v) {
  SymNode n;
  n.constant = v;
  return makeNode(std::move(n));
}

// An atom over two children. Min, Max and the opaque Add, Mul are commutative: their
// children are sorted so that operand order never matters.
SymExpr makeBinary(SymKind k, SymExpr a, SymExpr b) {
  bool commutative =
      k == SymKind::Min || k == SymKind::Max || k == SymKind::Add || k == SymKind::Mul;
  if (commutative && cmpExpr(b, a) < 0) std::swap(a, b);
  SymNode n;
  n.kind = k;
  n.args = {std::move(a), std::move(b)};
  return makeNode(std::move(n));
}

struct Poly {
  int64_t c = 0;
  std::vector<SymTerm> terms;
};

Poly toPoly(const SymExpr& e) {
  const SymNode& n = nodeOf(e);
  if (n.kind == SymKind::Poly) return Poly{n.constant, n.terms};
  return Poly{0, {SymTerm{1, {e}}}};
}

SymExpr fromPoly(Poly p) {
  if (p.terms.empty()) return makeConstant(p.c);
  if (p.c == 0 && p.terms.size() == 1 && p.terms[0].coef == 1 && p.terms[0].atoms.size() == 1)
    return p.terms[0].atoms[0];
  SymNode n;
  n.constant = p.c;
  n.terms = std::move(p.terms);
  return makeNode(std::move(n));
}

// a + scale*b, or nullopt when a coefficient overflows.
std::optional<Poly> addPoly(const Poly& a, const Poly& b, int64_t scale) {
  Poly r;
  int64_t bc;
  if (__builtin_mul_overflow(b.c, scale, &bc) || __builtin_add_overflow(a.c, bc, &r.c))
    return std::nullopt;
  size_t i = 0, j = 0;
  while (i < a.terms.size() || j < b.terms.size()) {
    int c = i == a.terms.size()   ? 1
            : j == b.terms.size() ? -1
                                  : cmpAtoms(a.terms[i].atoms, b.terms[j].atoms);
    if (c < 0) {
      r.terms.push_back(a.terms[i++]);
      continue;
    }
    int64_t k;
    if (__builtin_mul_overflow(b.terms[j].coef, scale, &k)) return std::nullopt;
    if (c == 0 && __builtin_add_overflow(k, a.terms[i].coef, &k)) return std::nullopt;
    if (k != 0) r.terms.push_back(SymTerm{k, b.terms[j].atoms});
    if (c == 0) ++i;
    ++j;
  }
  return r;
}

std::optional<Poly> mulPoly(const Poly& a, const Poly& b) {
  if ((a.terms.size() + 1) * (b.terms.size() + 1) > kMaxTerms) return std::nullopt;
  // The constants take part as terms with an empty monomial.
  std::vector<SymTerm> xs = a.terms, ys = b.terms;
  xs.push_back(SymTerm{a.c, {}});
  ys.push_back(SymTerm{b.c, {}});
  std::vector<SymTerm> prod;
  for (const SymTerm& x : xs) {
    for (const SymTerm& y : ys) {
      SymTerm t;
      if (__builtin_mul_overflow(x.coef, y.coef, &t.coef)) return std::nullopt;
      if (t.coef == 0) continue;
      std::merge(x.atoms.begin(), x.atoms.end(), y.atoms.begin(), y.atoms.end(),
                 std::back_inserter(t.atoms),
                 [](const SymExpr& p, const SymExpr& q) { return cmpExpr(p, q) < 0; });
      prod.push_back(std::move(t));
    }
  }
  std::stable_sort(prod.begin(), prod.end(), [](const SymTerm& p, const SymTerm& q) {
    return cmpAtoms(p.atoms, q.atoms) < 0;
  });
  Poly r;
  for (SymTerm& t : prod) {
    if (t.atoms.empty()) {
      if (__builtin_add_overflow(r.c, t.coef, &r.c)) return std::nullopt;
    } else if (!r.terms.empty() && cmpAtoms(r.terms.back().atoms, t.atoms) == 0) {
      if (__builtin_add_overflow(r.terms.back().coef, t.coef, &r.terms.back().coef))
        return std::nullopt;
    } else {
      r.terms.push_back(std::move(t));
    }
  }
  std::erase_if(r.terms, [](const SymTerm& t) { return t.coef == 0; });
  return r;
}

// Integer division and remainder with the rounding of each kind; nullopt for a zero divisor
// or INT64_MIN / -1.
std::optional<int64_t> foldDiv(SymKind k, int64_t a, int64_t b) {
  if (b == 0) return std::nullopt;
  if (b == -1) {
    if (k == SymKind::Mod) return 0;
    if (a == kI64Min) return std::nullopt;
    return -a;
  }
  int64_t q = a / b, r = a % b;
  bool inexact = r != 0;
  bool negative = (r < 0) != (b < 0);
  switch (k) {
  case SymKind::FloorDiv: return inexact && negative ? q - 1 : q;
  case SymKind::CeilDiv: return inexact && !negative ? q + 1 : q;
  case SymKind::Mod: return inexact && negative ? r + b : r;
  default: return std::nullopt;
  }
}

uint64_t magnitude(int64_t v) {
  return v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
}

SymExpr divLike(SymKind k, const SymExpr& a, const SymExpr& b) {
  std::optional<int64_t> cb = b.constantValue();
  if (!cb || *cb == 0) return makeBinary(k, a, b);
  int64_t c = *cb;
  if (std::optional<int64_t> ca = a.constantValue()) {
    if (std::optional<int64_t> v = foldDiv(k, *ca, c)) return makeConstant(*v);
    return makeBinary(k, a, b);
  }
  if (c == 1) return k == SymKind::Mod ? makeConstant(0) : a;
  if (c == -1) return k == SymKind::Mod ? makeConstant(0) : makeConstant(-1) * a;

  // a = c*q + r, where q gets the terms c divides and the floor quotient of the constant;
  // then floor((c*q + r)/c) = q + floor(r/c), likewise for ceil, and (c*q + r) mod c = r mod c.
  Poly p = toPoly(a), q, r;
  for (SymTerm& t : p.terms) {
    if (t.coef % c == 0)
      q.terms.push_back(SymTerm{t.coef / c, std::move(t.atoms)});
    else
      r.terms.push_back(std::move(t));
  }
  q.c = *foldDiv(SymKind::FloorDiv, p.c, c);
  r.c = *foldDiv(SymKind::Mod, p.c, c);
  SymExpr quotient = fromPoly(std::move(q));
  if (r.terms.empty()) {
    if (k == SymKind::Mod) return makeConstant(r.c);
    return quotient + makeConstant(*foldDiv(k, r.c, c));
  }
  // (g*r') / (g*c') = r' / c' and (g*r') mod (g*c') = g * (r' mod c').
  uint64_t g = magnitude(c);
  g = std::gcd(g, magnitude(r.c));
  for (const SymTerm& t : r.terms) g = std::gcd(g, magnitude(t.coef));
  if (g > 1 && g <= static_cast<uint64_t>(kI64Max)) {
    auto scale = static_cast<int64_t>(g);
    r.c /= scale;
    for (SymTerm& t : r.terms) t.coef /= scale;
    // No term of r/g is a multiple of c/g, so this recursion stops after one step.
    SymExpr reduced = divLike(k, fromPoly(std::move(r)), makeConstant(c / scale));
    return k == SymKind::Mod ? makeConstant(scale) * reduced : quotient + reduced;
  }
  SymExpr rest = fromPoly(std::move(r));
  const SymNode& rn = nodeOf(rest);
  int64_t inner = 0, merged = 0;
  bool constInner = rn.args.size() == 2 && rn.args[1].isConstant();
  if (constInner) inner = *rn.args[1].constantValue();
  SymExpr atom = rest;
  if (k == SymKind::FloorDiv && rn.kind == SymKind::FloorDiv && constInner && c > 0 && inner > 0 &&
      !__builtin_mul_overflow(inner, c, &merged)) {
    // floor(floor(x/d)/c) = floor(x/(d*c)) for positive d and c.
    atom = divLike(SymKind::FloorDiv, rn.args[0], makeConstant(merged));
  } else if (k == SymKind::Mod && rn.kind == SymKind::Mod && constInner && inner % c == 0) {
    // (x mod d) mod c = x mod c when c divides d: both are congruent to x modulo c.
    atom = divLike(SymKind::Mod, rn.args[0], makeConstant(c));
  } else {
    atom = makeBinary(k, std::move(rest), makeConstant(c));
  }
  return k == SymKind::Mod ? atom : quotient + atom;
}

SymExpr minMax(SymKind k, const SymExpr& a, const SymExpr& b) {
  if (a == b) return a;
  std::optional<int64_t> ca = a.constantValue(), cb = b.constantValue();
  if (ca && cb) return (k == SymKind::Min) == (*ca <= *cb) ? a : b;
  // Absorption: min(min(x, y), y) = min(x, y) and min(max(x, y), y) = y (dually for max).
  SymKind dual = k == SymKind::Min ? SymKind::Max : SymKind::Min;
  for (const auto& [inner, other] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
    const SymNode& n = nodeOf(*inner);
    bool contains = !n.args.empty() && (n.args[0] == *other || n.args[1] == *other);
    if (contains && n.kind == k) return *inner;
    if (contains && n.kind == dual) return *other;
  }
  // When a - b is a constant the answer does not depend on the symbols.
  if (std::optional<int64_t> d = (a - b).constantValue()) {
    bool aIsSmaller = *d <= 0;
    return (k == SymKind::Min) == aIsSmaller ? a : b;
  }
  return makeBinary(k, a, b);
}

// ---- printing -------------------------------------------------------------------------------

// Precedence levels: a sum, a product (or floordiv/ceildiv/mod chain), a primary.
enum Prec { kSumPrec = 0, kProductPrec = 1, kPrimaryPrec = 2 };

void print(const SymExpr& e, std::string& out, int need);

bool isDivLike(const SymExpr& e) {
  SymKind k = kindOf(e);
  return k == SymKind::FloorDiv || k == SymKind::CeilDiv || k == SymKind::Mod;
}

// Atoms that print as a product-level operator chain and so need parentheses as a factor.
bool printsAsChain(const SymExpr& e) { return isDivLike(e) || kindOf(e) == SymKind::Mul; }

int precOf(const SymExpr& e) {
  const SymNode& n = nodeOf(e);
  switch (n.kind) {
  case SymKind::Symbol:
  case SymKind::Min:
  case SymKind::Max: return kPrimaryPrec;
  case SymKind::FloorDiv:
  case SymKind::CeilDiv:
  case SymKind::Mod:
  case SymKind::Mul: return kProductPrec;
  case SymKind::Add: return kSumPrec;
  case SymKind::Poly:
    if (n.terms.empty()) return n.constant < 0 ? kProductPrec : kPrimaryPrec;
    if (n.terms.size() == 1 && n.constant == 0) return kProductPrec;
    return kSumPrec;
  }
  return kSumPrec;
}

// One monomial after its coefficient text. A lone atom needs no parentheses only when
// nothing binds to it first: `2*x floordiv 8` and `-x floordiv 8` read as `(2*x) floordiv 8`
// and `(-x) floordiv 8`, so those print as `2*(x floordiv 8)` and `-(x floordiv 8)`.
void printMonomial(const std::string& prefix, const std::vector<SymExpr>& atoms,
                   bool afterUnaryMinus, std::string& out) {
  bool bare = prefix.empty() && !afterUnaryMinus && atoms.size() == 1;
  out += prefix;
  for (size_t i = 0; i < atoms.size(); ++i) {
    if (i) out += "*";
    print(atoms[i], out, bare || !printsAsChain(atoms[i]) ? kProductPrec : kPrimaryPrec);
  }
}

void printPoly(const SymNode& n, std::string& out) {
  if (n.terms.empty()) {
    out += std::to_string(n.constant);
    return;
  }
  // Positive terms first, so that `n - 2*m` reads as written rather than `-2*m + n`.
  bool first = true;
  auto emit = [&](int64_t coef, const std::vector<SymExpr>& atoms) {
    bool unaryMinus = first && coef < 0;
    std::string digits;
    if (coef == kI64Min) {
      // `- 9223372036854775808` would not parse as one literal; `+ -922...` does.
      out += first ? "" : " + ";
      digits = std::to_string(coef);
      unaryMinus = false;
    } else {
      out += coef < 0 ? (first ? "-" : " - ") : (first ? "" : " + ");
      if (magnitude(coef) != 1 || atoms.empty()) digits = std::to_string(magnitude(coef));
    }
    if (atoms.empty())
      out += digits;
    else
      printMonomial(digits.empty() ? "" : digits + "*", atoms, unaryMinus, out);
    first = false;
  };
  for (const SymTerm& t : n.terms)
    if (t.coef > 0) emit(t.coef, t.atoms);
  for (const SymTerm& t : n.terms)
    if (t.coef < 0) emit(t.coef, t.atoms);
  if (n.constant != 0) emit(n.constant, {});
}

void print(const SymExpr& e, std::string& out, int need) {
  bool parens = precOf(e) < need;
  if (parens) out += "(";
  const SymNode& n = nodeOf(e);
  switch (n.kind) {
  case SymKind::Symbol: out += n.name; break;
  case SymKind::Poly: printPoly(n, out); break;
  case SymKind::FloorDiv:
  case SymKind::CeilDiv:
  case SymKind::Mod:
    print(n.args[0], out, kProductPrec);
    out += n.kind == SymKind::FloorDiv  ? " floordiv "
           : n.kind == SymKind::CeilDiv ? " ceildiv "
                                        : " mod ";
    print(n.args[1], out, kPrimaryPrec);
    break;
  case SymKind::Min:
  case SymKind::Max:
    out += n.kind == SymKind::Min ? "min(" : "max(";
    print(n.args[0], out, kSumPrec);
    out += ", ";
    print(n.args[1], out, kSumPrec);
    out += ")";
    break;
  // Unsimplified nodes parenthesize their children so that parsing rebuilds the same node.
  case SymKind::Add:
    print(n.args[0], out, kPrimaryPrec);
    out += " + ";
    print(n.args[1], out, kPrimaryPrec);
    break;
  case SymKind::Mul:
    print(n.args[0], out, kPrimaryPrec);
    out += "*";
    print(n.args[1], out, kPrimaryPrec);
    break;
  }
  if (parens) out += ")";
}

// ---- evaluation -----------------------------------------------------------------------------

std::optional<int64_t> eval(const SymExpr& e, const SymbolBinding& b) {
  const SymNode& n = nodeOf(e);
  switch (n.kind) {
  case SymKind::Symbol: {
    auto it = b.find(n.name);
    if (it == b.end()) return std::nullopt;
    return it->second;
  }
  case SymKind::Poly: {
    int64_t sum = n.constant;
    for (const SymTerm& t : n.terms) {
      int64_t prod = t.coef;
      for (const SymExpr& a : t.atoms) {
        std::optional<int64_t> v = eval(a, b);
        if (!v || __builtin_mul_overflow(prod, *v, &prod)) return std::nullopt;
      }
      if (__builtin_add_overflow(sum, prod, &sum)) return std::nullopt;
    }
    return sum;
  }
  default: break;
  }
  std::optional<int64_t> x = eval(n.args[0], b), y = eval(n.args[1], b);
  if (!x || !y) return std::nullopt;
  int64_t r;
  switch (n.kind) {
  case SymKind::Min: return std::min(*x, *y);
  case SymKind::Max: return std::max(*x, *y);
  case SymKind::Add:
    if (__builtin_add_overflow(*x, *y, &r)) return std::nullopt;
    return r;
  case SymKind::Mul:
    if (__builtin_mul_overflow(*x, *y, &r)) return std::nullopt;
    return r;
  default: return foldDiv(n.kind, *x, *y);
  }
}

bool validSymbolName(std::string_view s) {
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (s.empty() || !alpha(s[0])) return false;
  for (char c : s)
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  return s != "min" && s != "max" && s != "floordiv" && s != "ceildiv" && s != "mod";
}

} // namespace

// ---- SymbolTable ----------------------------------------------------------------------------

Status SymbolTable::declare(SymbolInfo info) {
  const std::string& name = info.name;
  if (!validSymbolName(name))
    return error(info.loc, "'" + name +
                               "' is not a valid symbol name (letters, digits and '_', not a "
                               "keyword)");
  if (const SymbolInfo* prev = lookup(name)) {
    Diag d = error(info.loc, "symbol '" + name + "' is already declared");
    d.notes.push_back(note(prev->loc, "previous declaration of '" + name + "'"));
    return d;
  }
  std::string range = "[" + std::to_string(info.lo) + ", " + std::to_string(info.hi) + "]";
  if (info.lo < 0)
    return error(info.loc, "symbol '" + name + "' has range " + range +
                               " with a negative lower bound; dims are never negative");
  if (info.lo > info.hi) return error(info.loc, "symbol '" + name + "' has empty range " + range);
  if (info.divisor < 1)
    return error(info.loc, "symbol '" + name + "' has divisor " + std::to_string(info.divisor) +
                               "; it must be at least 1");
  int64_t rem = info.lo % info.divisor, firstMultiple = info.lo;
  if ((rem != 0 && __builtin_add_overflow(info.lo, info.divisor - rem, &firstMultiple)) ||
      firstMultiple > info.hi)
    return error(info.loc, "symbol '" + name + "' has no value in " + range + " divisible by " +
                               std::to_string(info.divisor));
  syms_.emplace(name, std::move(info));
  return ok();
}

const SymbolInfo* SymbolTable::lookup(std::string_view name) const {
  auto it = syms_.find(name);
  return it == syms_.end() ? nullptr : &it->second;
}

// ---- SymExpr --------------------------------------------------------------------------------

SymExpr::SymExpr() {
  static const std::shared_ptr<const SymNode> zero = makeConstant(0).node_;
  node_ = zero;
}

SymExpr SymExpr::constant(int64_t v) { return makeConstant(v); }

SymExpr SymExpr::symbol(std::string name) {
  SymNode n;
  n.kind = SymKind::Symbol;
  n.name = std::move(name);
  return makeNode(std::move(n));
}

SymExpr operator+(const SymExpr& a, const SymExpr& b) {
  if (std::optional<Poly> p = addPoly(toPoly(a), toPoly(b), 1)) return fromPoly(std::move(*p));
  return makeBinary(SymKind::Add, a, b);
}

SymExpr operator-(const SymExpr& a, const SymExpr& b) {
  if (std::optional<Poly> p = addPoly(toPoly(a), toPoly(b), -1)) return fromPoly(std::move(*p));
  return makeBinary(SymKind::Add, a, SymExpr::constant(-1) * b);
}

SymExpr operator*(const SymExpr& a, const SymExpr& b) {
  if (std::optional<Poly> p = mulPoly(toPoly(a), toPoly(b))) return fromPoly(std::move(*p));
  return makeBinary(SymKind::Mul, a, b);
}

SymExpr SymExpr::floorDiv(const SymExpr& a, const SymExpr& b) {
  return divLike(SymKind::FloorDiv, a, b);
}
SymExpr SymExpr::ceilDiv(const SymExpr& a, const SymExpr& b) {
  return divLike(SymKind::CeilDiv, a, b);
}
SymExpr SymExpr::mod(const SymExpr& a, const SymExpr& b) { return divLike(SymKind::Mod, a, b); }
SymExpr SymExpr::min(const SymExpr& a, const SymExpr& b) { return minMax(SymKind::Min, a, b); }
SymExpr SymExpr::max(const SymExpr& a, const SymExpr& b) { return minMax(SymKind::Max, a, b); }

bool SymExpr::isConstant() const { return node_->kind == SymKind::Poly && node_->terms.empty(); }

std::optional<int64_t> SymExpr::constantValue() const {
  if (!isConstant()) return std::nullopt;
  return node_->constant;
}

std::optional<std::string> SymExpr::symbolName() const {
  if (node_->kind != SymKind::Symbol) return std::nullopt;
  return node_->name;
}

bool SymExpr::operator==(const SymExpr& other) const {
  return node_ == other.node_ || (node_->hash == other.node_->hash && cmpExpr(*this, other) == 0);
}

bool SymExpr::operator<(const SymExpr& other) const { return cmpExpr(*this, other) < 0; }

uint64_t SymExpr::hash() const { return node_->hash; }

std::string SymExpr::str() const {
  std::string out;
  print(*this, out, kSumPrec);
  return out;
}

std::optional<int64_t> SymExpr::evaluate(const SymbolBinding& binding) const {
  return eval(*this, binding);
}

SymExpr SymExpr::substitute(const std::map<std::string, SymExpr, std::less<>>& subst) const {
  const SymNode& n = *node_;
  switch (n.kind) {
  case SymKind::Symbol: {
    auto it = subst.find(n.name);
    return it == subst.end() ? *this : it->second;
  }
  case SymKind::Poly: {
    SymExpr sum = constant(n.constant);
    for (const SymTerm& t : n.terms) {
      SymExpr prod = constant(t.coef);
      for (const SymExpr& a : t.atoms) prod = prod * a.substitute(subst);
      sum = sum + prod;
    }
    return sum;
  }
  default: break;
  }
  SymExpr x = n.args[0].substitute(subst), y = n.args[1].substitute(subst);
  switch (n.kind) {
  case SymKind::Min: return min(x, y);
  case SymKind::Max: return max(x, y);
  case SymKind::Add: return x + y;
  case SymKind::Mul: return x * y;
  default: return divLike(n.kind, x, y);
  }
}

void SymExpr::collectSymbols(std::set<std::string>& out) const {
  const SymNode& n = *node_;
  if (n.kind == SymKind::Symbol) out.insert(n.name);
  for (const SymTerm& t : n.terms)
    for (const SymExpr& a : t.atoms) a.collectSymbols(out);
  for (const SymExpr& a : n.args) a.collectSymbols(out);
}

// ---- range analysis -------------------------------------------------------------------------
//
// Interval arithmetic in 128 bits, so that sums and products of int64 bounds are exact.
// Finite bounds stay below 2^125 in magnitude; beyond that a bound becomes infinite in the
// direction where that only widens the interval (a lower bound past +2^125 is clamped to
// 2^125, which is still below the true value), so every step stays sound.

namespace {

using Ext = __int128;
constexpr Ext kBig = Ext(1) << 125;
constexpr Ext kPosInf = Ext(1) << 126;
constexpr Ext kNegInf = -kPosInf;

struct Range {
  Ext lo = kNegInf;
  Ext hi = kPosInf;
  uint64_t div = 1; // every value is a multiple of div; 0: the value is always 0
};

Ext normLo(Ext v) { return v <= -kBig ? kNegInf : (v >= kBig ? kBig : v); }
Ext normHi(Ext v) { return v >= kBig ? kPosInf : (v <= -kBig ? -kBig : v); }
bool finite(Ext v) { return v > -kBig && v < kBig; }

Ext extMul(Ext x, Ext y) {
  if (x == 0 || y == 0) return 0;
  bool neg = (x < 0) != (y < 0);
  Ext r;
  if (x == kPosInf || x == kNegInf || y == kPosInf || y == kNegInf ||
      __builtin_mul_overflow(x, y, &r))
    return neg ? kNegInf : kPosInf;
  return r;
}

// Floor or ceil division of an extended value by a finite non-zero value.
Ext extDiv(Ext x, Ext c, bool ceil) {
  if (x == kPosInf || x == kNegInf) return (x > 0) == (c > 0) ? kPosInf : kNegInf;
  Ext q = x / c, r = x % c;
  if (r != 0 && ((r < 0) != (c < 0)) && !ceil) --q;
  if (r != 0 && ((r < 0) == (c < 0)) && ceil) ++q;
  return q;
}

Range addRange(const Range& a, const Range& b) {
  Range r;
  r.lo = a.lo == kNegInf || b.lo == kNegInf ? kNegInf : normLo(a.lo + b.lo);
  r.hi = a.hi == kPosInf || b.hi == kPosInf ? kPosInf : normHi(a.hi + b.hi);
  r.div = std::gcd(a.div, b.div);
  return r;
}

uint64_t mulDiv(uint64_t a, uint64_t b) {
  uint64_t r;
  // On overflow either factor still divides the product.
  return __builtin_mul_overflow(a, b, &r) ? a : r;
}

Range mulRange(const Range& a, const Range& b) {
  Ext c[4] = {extMul(a.lo, b.lo), extMul(a.lo, b.hi), extMul(a.hi, b.lo), extMul(a.hi, b.hi)};
  Range r;
  r.lo = normLo(*std::min_element(c, c + 4));
  r.hi = normHi(*std::max_element(c, c + 4));
  r.div = a.div == 0 || b.div == 0 ? 0 : mulDiv(a.div, b.div);
  return r;
}

Range constRange(int64_t v) { return Range{v, v, magnitude(v)}; }

Range analyze(const SymExpr& e, const SymbolTable& syms);

Range divRange(SymKind k, const Range& a, const Range& b, std::optional<int64_t> cb) {
  Range r;
  if (k == SymKind::Mod) {
    if (cb && *cb > 0) {
      Ext c = *cb;
      if (a.lo >= 0 && a.hi < c) return a;
      r.lo = 0;
      r.hi = c - 1;
      if (finite(a.lo) && finite(a.hi) && extDiv(a.lo, c, false) == extDiv(a.hi, c, false)) {
        r.lo = a.lo - c * extDiv(a.lo, c, false);
        r.hi = a.hi - c * extDiv(a.hi, c, false);
      }
      r.div = std::gcd(a.div, magnitude(*cb));
    } else if (b.lo > 0) {
      r.lo = 0;
      r.hi = b.hi == kPosInf ? kPosInf : b.hi - 1;
      if (a.lo >= 0) r.hi = std::min(r.hi, a.hi);
      r.div = std::gcd(a.div, b.div);
    } else if (b.hi < 0) {
      r.lo = b.lo == kNegInf ? kNegInf : b.lo + 1;
      r.hi = 0;
      r.div = std::gcd(a.div, b.div);
    }
    return r;
  }
  bool ceil = k == SymKind::CeilDiv;
  if (cb && *cb != 0) {
    Ext x = extDiv(a.lo, *cb, ceil), y = extDiv(a.hi, *cb, ceil);
    r.lo = normLo(std::min(x, y));
    r.hi = normHi(std::max(x, y));
    // An exact quotient of a multiple of d by c (c divides d) is a multiple of d/c.
    uint64_t m = magnitude(*cb);
    r.div = a.div == 0 ? 0 : (a.div % m == 0 ? a.div / m : 1);
    return r;
  }
  bool oneSign = b.lo > 0 || b.hi < 0;
  if (oneSign && finite(a.lo) && finite(a.hi) && finite(b.lo) && finite(b.hi)) {
    // x/y is monotone in each argument while y keeps its sign, so the corners bound it.
    Ext c[4] = {extDiv(a.lo, b.lo, ceil), extDiv(a.lo, b.hi, ceil), extDiv(a.hi, b.lo, ceil),
                extDiv(a.hi, b.hi, ceil)};
    r.lo = normLo(*std::min_element(c, c + 4));
    r.hi = normHi(*std::max_element(c, c + 4));
  }
  return r;
}

// The analysis proper: combines the children's ranges and then tightens the interval to
// the multiples of the divisor.
Range analyzeNode(const SymExpr& e, const SymbolTable& syms) {
  const SymNode& n = nodeOf(e);
  switch (n.kind) {
  case SymKind::Symbol: {
    const SymbolInfo* info = syms.lookup(n.name);
    if (!info) return Range{kI64Min, kI64Max, 1};
    return Range{info->lo, info->hi, magnitude(info->divisor)};
  }
  case SymKind::Poly: {
    Range sum = constRange(n.constant);
    for (const SymTerm& t : n.terms) {
      Range prod = constRange(t.coef);
      for (const SymExpr& a : t.atoms) prod = mulRange(prod, analyze(a, syms));
      sum = addRange(sum, prod);
    }
    return sum;
  }
  default: break;
  }
  Range a = analyze(n.args[0], syms), b = analyze(n.args[1], syms);
  switch (n.kind) {
  case SymKind::Add: return addRange(a, b);
  case SymKind::Mul: return mulRange(a, b);
  case SymKind::Min:
    return Range{std::min(a.lo, b.lo), std::min(a.hi, b.hi), std::gcd(a.div, b.div)};
  case SymKind::Max:
    return Range{std::max(a.lo, b.lo), std::max(a.hi, b.hi), std::gcd(a.div, b.div)};
  default: return divRange(n.kind, a, b, n.args[1].constantValue());
  }
}

Range analyze(const SymExpr& e, const SymbolTable& syms) {
  Range r = analyzeNode(e, syms);
  if (r.div > 1) {
    Ext d = r.div;
    if (finite(r.lo)) r.lo = extDiv(r.lo, d, true) * d;
    if (finite(r.hi)) r.hi = extDiv(r.hi, d, false) * d;
  }
  if (r.lo == r.hi && finite(r.lo) && r.lo >= kI64Min && r.lo <= kI64Max)
    r.div = magnitude(static_cast<int64_t>(r.lo));
  return r;
}

bool divisibleBy(const Range& r, uint64_t d) { return d != 0 && (r.div == 0 || r.div % d == 0); }

// Soundly non-negative / positive, assuming the inputs are already simplified.
bool nonNegative(const SymExpr& e, const SymbolTable& syms) { return analyze(e, syms).lo >= 0; }

SymExpr simplify(const SymExpr& e, const SymbolTable& syms);

// k*d*(x floordiv d) → k*x when x is a multiple of d (the division is exact), and
// likewise for ceildiv.
std::optional<SymExpr> exactMultiple(const SymTerm& t, const SymbolTable& syms) {
  if (t.atoms.size() != 1 || !isDivLike(t.atoms[0]) || kindOf(t.atoms[0]) == SymKind::Mod)
    return std::nullopt;
  const SymNode& a = nodeOf(t.atoms[0]);
  std::optional<int64_t> d = a.args[1].constantValue();
  if (!d || *d <= 0 || t.coef % *d != 0) return std::nullopt;
  if (!divisibleBy(analyze(a.args[0], syms), magnitude(*d))) return std::nullopt;
  return SymExpr::constant(t.coef / *d) * a.args[0];
}

SymExpr simplifyDiv(SymKind k, const SymExpr& x, const SymExpr& y, const SymbolTable& syms) {
  SymExpr r = divLike(k, x, y);
  const SymNode& n = nodeOf(r);
  std::optional<int64_t> c = n.kind == k ? n.args[1].constantValue() : std::nullopt;
  if (!c || *c <= 0) return r;
  const SymExpr& num = n.args[0];
  Range nr = analyze(num, syms);
  if (k == SymKind::Mod) {
    if (divisibleBy(nr, magnitude(*c))) return SymExpr::constant(0);
    if (nr.lo >= 0 && nr.hi < *c) return num;
    return r;
  }
  if (!divisibleBy(nr, magnitude(*c))) return r;
  // An exact division rounds neither way, so ceildiv becomes the canonical floordiv.
  if (k == SymKind::CeilDiv) return simplifyDiv(SymKind::FloorDiv, num, n.args[1], syms);
  // It also distributes over a sum of multiples of c, and each piece reduces by the
  // constructors' gcd rule: (a + 2*b) floordiv 4 with 4 | a and 2 | b gives
  // a floordiv 4 + b floordiv 2.
  Poly p = toPoly(num);
  if (p.terms.size() + (p.c != 0 ? 1 : 0) > 1) {
    bool each = p.c % *c == 0;
    for (const SymTerm& t : p.terms)
      each = each && divisibleBy(analyze(fromPoly(Poly{0, {t}}), syms), magnitude(*c));
    if (each) {
      SymExpr sum = SymExpr::constant(p.c / *c);
      for (const SymTerm& t : p.terms)
        sum = sum + simplifyDiv(SymKind::FloorDiv, fromPoly(Poly{0, {t}}), n.args[1], syms);
      return sum;
    }
  }
  return r;
}

SymExpr simplifyNode(const SymExpr& e, const SymbolTable& syms) {
  const SymNode& n = nodeOf(e);
  switch (n.kind) {
  case SymKind::Symbol: return e;
  case SymKind::Poly: {
    SymExpr sum = SymExpr::constant(n.constant);
    for (const SymTerm& t : n.terms) {
      SymTerm st{t.coef, {}};
      SymExpr prod = SymExpr::constant(t.coef);
      for (const SymExpr& a : t.atoms) {
        SymExpr s = simplify(a, syms);
        st.atoms.push_back(s);
        prod = prod * s;
      }
      std::optional<SymExpr> exact = exactMultiple(st, syms);
      sum = sum + (exact ? *exact : prod);
    }
    return sum;
  }
  default: break;
  }
  SymExpr x = simplify(n.args[0], syms), y = simplify(n.args[1], syms);
  switch (n.kind) {
  case SymKind::Min:
  case SymKind::Max: {
    bool xFirst = nonNegative(y - x, syms); // x <= y
    bool yFirst = nonNegative(x - y, syms); // y <= x
    if (xFirst || yFirst) return (n.kind == SymKind::Min) == xFirst ? x : y;
    return minMax(n.kind, x, y);
  }
  case SymKind::Add: return x + y;
  case SymKind::Mul: return x * y;
  default: return simplifyDiv(n.kind, x, y, syms);
  }
}

SymExpr simplify(const SymExpr& e, const SymbolTable& syms) {
  SymExpr r = simplifyNode(e, syms);
  Range range = analyze(r, syms);
  if (range.lo == range.hi && finite(range.lo) && range.lo >= kI64Min && range.lo <= kI64Max)
    return SymExpr::constant(static_cast<int64_t>(range.lo));
  return r;
}

int64_t clampI64(Ext v) {
  return v < kI64Min ? kI64Min : (v > kI64Max ? kI64Max : static_cast<int64_t>(v));
}

// The range of b - a after simplification under the ranges.
Range differenceRange(const SymExpr& a, const SymExpr& b, const SymbolTable& syms) {
  return analyze(simplify(b - a, syms), syms);
}

} // namespace

SymExpr simplifyWithRanges(const SymExpr& e, const SymbolTable& syms) { return simplify(e, syms); }

SymBounds bounds(const SymExpr& e, const SymbolTable& syms) {
  Range r = analyze(e, syms);
  int64_t div = r.div == 0 ? 1
                           : (r.div > static_cast<uint64_t>(kI64Max) ? int64_t{1} << 62
                                                                     : static_cast<int64_t>(r.div));
  return SymBounds{clampI64(r.lo), clampI64(r.hi), div};
}

bool provablyEqual(const SymExpr& a, const SymExpr& b, const SymbolTable& syms) {
  if (a == b) return true;
  Range r = differenceRange(a, b, syms);
  return r.lo == 0 && r.hi == 0;
}

bool provablyLE(const SymExpr& a, const SymExpr& b, const SymbolTable& syms) {
  return a == b || differenceRange(a, b, syms).lo >= 0;
}

bool provablyLT(const SymExpr& a, const SymExpr& b, const SymbolTable& syms) {
  return differenceRange(a, b, syms).lo >= 1;
}

bool provablyDivisible(const SymExpr& a, int64_t divisor, const SymbolTable& syms) {
  SymExpr s = simplify(a, syms);
  if (divisor == 0) return s.constantValue() == 0;
  return divisibleBy(analyze(s, syms), magnitude(divisor));
}

// ---- parsing --------------------------------------------------------------------------------

namespace {

class SymParser {
public:
  SymParser(std::string_view text, const Loc& loc) : text_(text), base_(loc) {}

  Result<SymExpr> parse() {
    skipSpace();
    KILN_TRY(SymExpr e, parseSum());
    skipSpace();
    if (pos_ < text_.size())
      return fail(pos_, "unexpected '" + std::string(1, text_[pos_]) + "' after expression");
    return e;
  }

private:
  std::string_view text_;
  Loc base_;
  size_t pos_ = 0;
  uint32_t depth_ = 0;

  Loc locAt(size_t offset) const {
    if (base_.line == 0) return base_;
    Loc l = base_;
    for (size_t i = 0; i < offset && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++l.line;
        l.col = 1;
      } else {
        ++l.col;
      }
    }
    return l;
  }

  Diag fail(size_t offset, std::string msg) const { return error(locAt(offset), std::move(msg)); }

  // Chains such as `x floordiv y floordiv z ...` nest without parentheses; every later walk
  // over the tree recurses, so its depth is bounded here as well.
  Status checkDepth(const SymExpr& e, size_t offset) const {
    if (e.node()->depth <= kMaxParseDepth) return ok();
    return fail(offset, "expression nests too deeply (more than " + std::to_string(kMaxParseDepth) +
                            " levels)");
  }

  void skipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  static bool identStart(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  }
  static bool identChar(char c) { return identStart(c) || (c >= '0' && c <= '9'); }
  static bool digit(char c) { return c >= '0' && c <= '9'; }

  // The identifier at the current position, without consuming it.
  std::string_view peekWord() const {
    size_t end = pos_;
    if (end < text_.size() && identStart(text_[end]))
      while (end < text_.size() && identChar(text_[end])) ++end;
    return text_.substr(pos_, end - pos_);
  }

  bool consume(char c) {
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  Status expect(char c, std::string_view what) {
    if (consume(c)) return ok();
    std::string found =
        pos_ < text_.size() ? "'" + std::string(1, text_[pos_]) + "'" : "end of input";
    return fail(pos_,
                "expected '" + std::string(1, c) + "' " + std::string(what) + ", found " + found);
  }

  Result<SymExpr> parseSum() {
    KILN_TRY(SymExpr lhs, parseProduct());
    while (true) {
      skipSpace();
      if (pos_ >= text_.size() || (text_[pos_] != '+' && text_[pos_] != '-')) return lhs;
      size_t at = pos_;
      bool plus = text_[pos_++] == '+';
      KILN_TRY(SymExpr rhs, parseProduct());
      lhs = plus ? lhs + rhs : lhs - rhs;
      KILN_CHECK(checkDepth(lhs, at));
    }
  }

  Result<SymExpr> parseProduct() {
    KILN_TRY(SymExpr lhs, parseUnary());
    while (true) {
      skipSpace();
      if (pos_ < text_.size() && text_[pos_] == '*') {
        ++pos_;
        KILN_TRY(SymExpr rhs, parseUnary());
        lhs = lhs * rhs;
        KILN_CHECK(checkDepth(lhs, pos_));
        continue;
      }
      std::string_view w = peekWord();
      if (w != "floordiv" && w != "ceildiv" && w != "mod") return lhs;
      size_t at = pos_;
      pos_ += w.size();
      KILN_TRY(SymExpr rhs, parseUnary());
      lhs = w == "floordiv"  ? SymExpr::floorDiv(lhs, rhs)
            : w == "ceildiv" ? SymExpr::ceilDiv(lhs, rhs)
                             : SymExpr::mod(lhs, rhs);
      KILN_CHECK(checkDepth(lhs, at));
    }
  }

  Result<SymExpr> parseUnary() {
    skipSpace();
    if (++depth_ > kMaxParseDepth)
      return fail(pos_, "expression nests too deeply (more than " + std::to_string(kMaxParseDepth) +
                            " levels)");
    Result<SymExpr> r = parseUnaryInner();
    --depth_;
    return r;
  }

  Result<SymExpr> parseUnaryInner() {
    if (pos_ < text_.size() && text_[pos_] == '-') {
      size_t start = pos_++;
      skipSpace();
      // A literal directly after '-' is read with its sign, so INT64_MIN is expressible.
      if (pos_ < text_.size() && digit(text_[pos_])) return parseInteger(start, true);
      KILN_TRY(SymExpr operand, parseUnary());
      return SymExpr::constant(-1) * operand;
    }
    return parsePrimary();
  }

  Result<SymExpr> parseInteger(size_t start, bool negative) {
    uint64_t limit = negative ? uint64_t{1} << 63 : static_cast<uint64_t>(kI64Max);
    uint64_t v = 0;
    while (pos_ < text_.size() && digit(text_[pos_])) {
      uint64_t d = static_cast<uint64_t>(text_[pos_] - '0');
      if (v > (limit - d) / 10) return fail(start, "integer literal does not fit in 64 bits");
      v = v * 10 + d;
      ++pos_;
    }
    if (pos_ < text_.size() && identChar(text_[pos_]))
      return fail(pos_, "unexpected '" + std::string(1, text_[pos_]) + "' in integer literal");
    return SymExpr::constant(negative ? static_cast<int64_t>(uint64_t{0} - v)
                                      : static_cast<int64_t>(v));
  }

  Result<SymExpr> parsePrimary() {
    skipSpace();
    size_t start = pos_;
    if (pos_ >= text_.size()) return fail(pos_, "expected an expression, found end of input");
    char c = text_[pos_];
    if (digit(c)) return parseInteger(start, false);
    if (c == '(') {
      ++pos_;
      KILN_TRY(SymExpr e, parseSum());
      KILN_CHECK(expect(')', "to close '('"));
      return e;
    }
    std::string_view w = peekWord();
    if (w.empty()) return fail(pos_, "expected an expression, found '" + std::string(1, c) + "'");
    if (w == "floordiv" || w == "ceildiv" || w == "mod")
      return fail(pos_, "expected an expression, found '" + std::string(w) + "'");
    pos_ += w.size();
    if (w == "min" || w == "max") {
      KILN_CHECK(expect('(', "after '" + std::string(w) + "'"));
      KILN_TRY(SymExpr a, parseSum());
      KILN_CHECK(expect(',', "between the operands of '" + std::string(w) + "'"));
      KILN_TRY(SymExpr b, parseSum());
      KILN_CHECK(expect(')', "to close '" + std::string(w) + "('"));
      return w == "min" ? SymExpr::min(a, b) : SymExpr::max(a, b);
    }
    return SymExpr::symbol(std::string(w));
  }
};

} // namespace

Result<SymExpr> parseSymExpr(std::string_view text, const Loc& loc) {
  return SymParser(text, loc).parse();
}

void* lowerSymExpr(const SymExpr& e, const SymLowering& l) {
  const SymNode& n = nodeOf(e);
  switch (n.kind) {
  case SymKind::Symbol: return l.symbol(n.name);
  case SymKind::FloorDiv:
    return l.binary("floordiv", lowerSymExpr(n.args[0], l), lowerSymExpr(n.args[1], l));
  case SymKind::CeilDiv:
    return l.binary("ceildiv", lowerSymExpr(n.args[0], l), lowerSymExpr(n.args[1], l));
  case SymKind::Mod: return l.binary("mod", lowerSymExpr(n.args[0], l), lowerSymExpr(n.args[1], l));
  case SymKind::Min: return l.binary("min", lowerSymExpr(n.args[0], l), lowerSymExpr(n.args[1], l));
  case SymKind::Max: return l.binary("max", lowerSymExpr(n.args[0], l), lowerSymExpr(n.args[1], l));
  case SymKind::Add: return l.binary("add", lowerSymExpr(n.args[0], l), lowerSymExpr(n.args[1], l));
  case SymKind::Mul: return l.binary("mul", lowerSymExpr(n.args[0], l), lowerSymExpr(n.args[1], l));
  case SymKind::Poly: break;
  }
  void* acc = nullptr;
  if (n.constant != 0 || n.terms.empty()) acc = l.constant(n.constant);
  for (const SymTerm& t : n.terms) {
    void* prod = t.coef == 1 ? nullptr : l.constant(t.coef);
    for (const SymExpr& a : t.atoms) {
      void* x = lowerSymExpr(a, l);
      prod = prod ? l.binary("mul", prod, x) : x;
    }
    acc = acc ? l.binary("add", acc, prod) : prod;
  }
  return acc;
}

} // namespace kiln
