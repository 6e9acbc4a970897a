// Unit tests for symbolic expressions: canonical forms, printing and parsing, evaluation,
// symbol declarations, bounds and the provably* queries, range-aware simplification, and a
// seeded random check of all of them against direct integer arithmetic.
#include <climits>
#include <cmath>
#include <doctest/doctest.h>
#include <random>

#include "ir/core/symexpr.h"

using namespace kiln;

namespace {

SymExpr S(const char* name) { return SymExpr::symbol(name); }
SymExpr C(int64_t v) { return SymExpr::constant(v); }

SymExpr parse(std::string_view text) {
  Result<SymExpr> r = parseSymExpr(text, Loc{"t.kir", 1, 1});
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.diags().str()));
  return *r;
}

std::string parseError(std::string_view text) {
  Result<SymExpr> r = parseSymExpr(text, Loc{"t.kir", 3, 10});
  REQUIRE_FALSE(r.ok());
  return r.diags().list.at(0).str();
}

SymbolTable table(std::initializer_list<SymbolInfo> infos) {
  SymbolTable t;
  for (const SymbolInfo& i : infos) REQUIRE(t.declare(i).ok());
  return t;
}

} // namespace

TEST_CASE("constants fold and simple identities hold") {
  SymExpr x = S("x");
  CHECK(SymExpr() == C(0));
  CHECK((C(2) + C(3)).constantValue() == 5);
  CHECK((C(7) * C(-6)).constantValue() == -42);
  CHECK(x + C(0) == x);
  CHECK(x * C(1) == x);
  CHECK(x * C(0) == C(0));
  CHECK(x - x == C(0));
  CHECK(C(2) * x + C(3) * x == C(5) * x);
  CHECK((x + S("y")) * C(2) == C(2) * x + C(2) * S("y"));
  CHECK(x + S("y") == S("y") + x);
  CHECK(x * S("y") == S("y") * x);
  CHECK((x + C(1)) * (x - C(1)) == x * x - C(1));
  CHECK(x.symbolName() == "x");
  CHECK_FALSE((x + C(1)).symbolName().has_value());
  CHECK_FALSE(x.isConstant());
  CHECK((x - x).isConstant());
  // Equal forms hash alike; different forms (almost surely) not.
  CHECK(((x + S("y")) * C(2)).hash() == (C(2) * S("y") + C(2) * x).hash());
  CHECK(x.hash() != S("y").hash());
  CHECK(x != S("y"));
}

TEST_CASE("floordiv, ceildiv and mod fold with floor semantics") {
  CHECK(SymExpr::floorDiv(C(7), C(2)).constantValue() == 3);
  CHECK(SymExpr::floorDiv(C(-7), C(2)).constantValue() == -4);
  CHECK(SymExpr::floorDiv(C(7), C(-2)).constantValue() == -4);
  CHECK(SymExpr::floorDiv(C(-7), C(-2)).constantValue() == 3);
  CHECK(SymExpr::ceilDiv(C(7), C(2)).constantValue() == 4);
  CHECK(SymExpr::ceilDiv(C(-7), C(2)).constantValue() == -3);
  CHECK(SymExpr::ceilDiv(C(8), C(2)).constantValue() == 4);
  CHECK(SymExpr::mod(C(7), C(3)).constantValue() == 1);
  CHECK(SymExpr::mod(C(-7), C(3)).constantValue() == 2);
  CHECK(SymExpr::mod(C(7), C(-3)).constantValue() == -2);
  CHECK(SymExpr::mod(C(-6), C(3)).constantValue() == 0);
  CHECK(SymExpr::mod(C(INT64_MIN), C(-1)).constantValue() == 0);

  SymExpr x = S("x");
  CHECK(SymExpr::floorDiv(x, C(1)) == x);
  CHECK(SymExpr::mod(x, C(1)) == C(0));
  CHECK(SymExpr::floorDiv(C(12) * x, C(4)) == C(3) * x);
  CHECK(SymExpr::ceilDiv(C(12) * x, C(4)) == C(3) * x);
  CHECK(SymExpr::mod(C(12) * x, C(4)) == C(0));
  // Multiples of the divisor move out of the division.
  CHECK(SymExpr::floorDiv(C(8) * x + C(9), C(8)) == x + C(1));
  CHECK(SymExpr::floorDiv(C(8) * x + S("y"), C(8)) == x + SymExpr::floorDiv(S("y"), C(8)));
  CHECK(SymExpr::mod(C(8) * x + S("y"), C(8)) == SymExpr::mod(S("y"), C(8)));
  // A common factor of numerator and divisor cancels.
  CHECK(SymExpr::floorDiv(C(2) * x, C(8)) == SymExpr::floorDiv(x, C(4)));
  CHECK(SymExpr::mod(C(2) * x, C(8)) == C(2) * SymExpr::mod(x, C(4)));
  // Nested divisions merge.
  CHECK(SymExpr::floorDiv(SymExpr::floorDiv(x, C(4)), C(2)) == SymExpr::floorDiv(x, C(8)));
  CHECK(SymExpr::mod(SymExpr::mod(x, C(8)), C(4)) == SymExpr::mod(x, C(4)));
}

TEST_CASE("division by zero keeps the node and does not evaluate") {
  SymExpr e = SymExpr::floorDiv(C(5), C(0));
  CHECK_FALSE(e.isConstant());
  CHECK(e.str() == "5 floordiv 0");
  CHECK_FALSE(e.evaluate({}).has_value());
  CHECK_FALSE(SymExpr::mod(S("x"), C(0)).evaluate({{"x", 3}}).has_value());
  CHECK_FALSE(SymExpr::ceilDiv(S("x"), S("y")).evaluate({{"x", 3}, {"y", 0}}).has_value());
}

TEST_CASE("min and max fold constants, duplicates and constant offsets") {
  SymExpr x = S("x");
  CHECK(SymExpr::min(C(3), C(5)).constantValue() == 3);
  CHECK(SymExpr::max(C(3), C(5)).constantValue() == 5);
  CHECK(SymExpr::min(C(INT64_MAX), C(INT64_MIN)).constantValue() == INT64_MIN);
  CHECK(SymExpr::min(x, x) == x);
  CHECK(SymExpr::max(x, x) == x);
  CHECK(SymExpr::min(x, x + C(2)) == x);
  CHECK(SymExpr::max(x, x + C(2)) == x + C(2));
  CHECK(SymExpr::min(x, C(128)) == SymExpr::min(C(128), x));
  CHECK(SymExpr::min(x, C(128)).str() == "min(x, 128)");
}

TEST_CASE("printing follows the text form") {
  SymExpr seq = S("seq"), n = S("n"), m = S("m");
  CHECK(seq.str() == "seq");
  CHECK((C(2) * seq + C(1)).str() == "2*seq + 1");
  CHECK((seq - C(1)).str() == "seq - 1");
  CHECK((n - C(2) * m).str() == "n - 2*m");
  CHECK((C(0) - seq).str() == "-seq");
  CHECK((C(5) - seq).str() == "-seq + 5");
  CHECK(C(-3).str() == "-3");
  CHECK(SymExpr::floorDiv(seq, C(8)).str() == "seq floordiv 8");
  CHECK(SymExpr::ceilDiv(seq, C(8)).str() == "seq ceildiv 8");
  CHECK(SymExpr::mod(seq, C(8)).str() == "seq mod 8");
  CHECK(SymExpr::floorDiv(seq + C(1), C(8)).str() == "(seq + 1) floordiv 8");
  CHECK((C(2) * SymExpr::floorDiv(seq, C(8))).str() == "2*(seq floordiv 8)");
  CHECK((C(0) - SymExpr::floorDiv(seq, C(8))).str() == "-(seq floordiv 8)");
  CHECK((n - SymExpr::floorDiv(seq, C(8))).str() == "n - seq floordiv 8");
  CHECK(SymExpr::floorDiv(seq, n * m).str() == "seq floordiv (m*n)");
  CHECK(SymExpr::max(n, m).str() == "max(m, n)");
  CHECK((n * n * m).str() == "m*n*n");
}

TEST_CASE("print then parse gives the same expression") {
  const char* texts[] = {
      "seq",
      "2*seq + 1",
      "seq - 1",
      "n - 2*m",
      "-seq",
      "-seq - 7",
      "seq floordiv 8",
      "seq ceildiv 8",
      "seq mod 8",
      "(seq + 7) floordiv 8",
      "min(seq, 128)",
      "max(a, b) + min(a, b)",
      "2*(x floordiv 3) - (y mod 4)",
      "-(x floordiv 3)",
      "x floordiv (y*z)",
      "x floordiv (-3)",
      "-5 floordiv x",
      "(a + b)*(a - b)",
      "(x floordiv y) floordiv z",
      "x ceildiv 0",
      "min(max(a, 3), b - 1) floordiv 2",
      "a*b*c - 3*a*a + 9223372036854775807",
      "x - 9223372036854775807*y",
      "-9223372036854775808*x",
      "y + -9223372036854775808*x",
      "-9223372036854775808",
      "9223372036854775807 + 1",
      "9223372036854775807*x + 9223372036854775807*x",
  };
  for (const char* t : texts) {
    CAPTURE(t);
    SymExpr e = parse(t);
    SymExpr again = parse(e.str());
    CHECK(again == e);
    CHECK(again.str() == e.str());
    CHECK(again.hash() == e.hash());
  }
  CHECK(parse("1 + 2*3").constantValue() == 7);
  CHECK(parse("(1 + 2)*3").constantValue() == 9);
  CHECK(parse("10 - 3 - 2").constantValue() == 5);
  CHECK(parse("17 floordiv 4 mod 3").constantValue() == 1);
  CHECK(parse("- - 4").constantValue() == 4);
  CHECK(parse("  seq\t+\n1 ") == S("seq") + C(1));
}

TEST_CASE("parse errors point at the offending column") {
  CHECK(parseError("") == "t.kir:3:10: error: expected an expression, found end of input\n");
  CHECK(parseError("seq +") == "t.kir:3:15: error: expected an expression, found end of input\n");
  CHECK(parseError("seq $ 2") == "t.kir:3:14: error: unexpected '$' after expression\n");
  CHECK(parseError("(seq + 1") ==
        "t.kir:3:18: error: expected ')' to close '(', found end of input\n");
  CHECK(parseError("min(a b)") ==
        "t.kir:3:16: error: expected ',' between the operands of 'min', found 'b'\n");
  CHECK(parseError("max 3") == "t.kir:3:14: error: expected '(' after 'max', found '3'\n");
  CHECK(parseError("2 * mod") == "t.kir:3:14: error: expected an expression, found 'mod'\n");
  CHECK(parseError("9223372036854775808") ==
        "t.kir:3:10: error: integer literal does not fit in 64 bits\n");
  CHECK(parseError("x + 3y") == "t.kir:3:15: error: unexpected 'y' in integer literal\n");
  // A newline in the text moves the position to the next line.
  CHECK(parseError("a +\n  )") == "t.kir:4:3: error: expected an expression, found ')'\n");
  // -9223372036854775808 is fine, one less is not.
  CHECK(parse("-9223372036854775808").constantValue() == INT64_MIN);
  CHECK(parseError("-9223372036854775809") ==
        "t.kir:3:10: error: integer literal does not fit in 64 bits\n");
}

TEST_CASE("deep nesting is an error, not a stack overflow") {
  std::string parens(5000, '(');
  parens += "x" + std::string(5000, ')');
  CHECK(parseError(parens).find("nests too deeply") != std::string::npos);
  std::string minuses(5000, '-');
  CHECK(parseError(minuses + "x").find("nests too deeply") != std::string::npos);
  std::string chain = "x";
  for (int i = 0; i < 5000; ++i) chain += " floordiv y";
  CHECK(parseError(chain).find("nests too deeply") != std::string::npos);
  std::string ok = "x";
  for (int i = 0; i < 100; ++i) ok = "min(" + ok + ", y)";
  CHECK(parse(ok) == SymExpr::min(S("x"), S("y")));
}

TEST_CASE("evaluate computes values and reports overflow and unbound symbols") {
  SymExpr e = parse("2*seq + (seq floordiv 3) - min(seq, 4) + n mod 5");
  CHECK(e.evaluate({{"seq", 10}, {"n", -7}}) == 20 + 3 - 4 + 3);
  CHECK_FALSE(e.evaluate({{"seq", 10}}).has_value());
  CHECK(parse("x ceildiv 4").evaluate({{"x", -7}}) == -1);
  CHECK_FALSE(parse("x*x").evaluate({{"x", INT64_MAX}}).has_value());
  CHECK_FALSE(parse("x + 1").evaluate({{"x", INT64_MAX}}).has_value());
  CHECK(parse("x - 1").evaluate({{"x", INT64_MIN + 1}}) == INT64_MIN);
  CHECK_FALSE(parse("x floordiv y").evaluate({{"x", INT64_MIN}, {"y", -1}}).has_value());
  CHECK(parse("x mod y").evaluate({{"x", INT64_MIN}, {"y", -1}}) == 0);
}

TEST_CASE("int64 overflow while simplifying keeps the unsimplified node") {
  SymExpr big = C(INT64_MAX);
  SymExpr sum = big + C(1);
  CHECK_FALSE(sum.isConstant());
  CHECK_FALSE(sum.evaluate({}).has_value());
  SymExpr x = S("x");
  SymExpr twice = big * x + big * x;
  CHECK_FALSE(twice.evaluate({{"x", 1}}).has_value());
  CHECK(twice.evaluate({{"x", 0}}) == 0);
  CHECK((C(INT64_MIN) - C(1)).evaluate({}) == std::nullopt);
  CHECK((C(INT64_MIN) * C(-1)).evaluate({}) == std::nullopt);
  CHECK(SymExpr::floorDiv(C(INT64_MIN), C(-1)).evaluate({}) == std::nullopt);
  CHECK(SymExpr::ceilDiv(C(INT64_MIN), C(-1)).evaluate({}) == std::nullopt);
  // Still exact where it does not overflow.
  CHECK((big * x - big * x) == C(0));
  CHECK((x * C(INT64_MIN)).evaluate({{"x", 1}}) == INT64_MIN);
}

TEST_CASE("products of large sums stay unexpanded") {
  SymExpr p = C(1);
  for (int i = 0; i < 20; ++i) p = p * (S(("a" + std::to_string(i)).c_str()) + C(1));
  SymbolBinding b;
  for (int i = 0; i < 20; ++i) b["a" + std::to_string(i)] = 1;
  CHECK(p.evaluate(b) == int64_t{1} << 20);
  CHECK(parse(p.str()).evaluate(b) == int64_t{1} << 20);
}

TEST_CASE("substitute and collectSymbols") {
  SymExpr e = parse("2*seq + n floordiv 4");
  std::set<std::string> syms;
  e.collectSymbols(syms);
  CHECK(syms == std::set<std::string>{"n", "seq"});
  SymExpr r = e.substitute({{"seq", C(3)}, {"n", S("m") * C(8)}});
  CHECK(r == parse("6 + 2*m"));
  CHECK(e.substitute({}) == e);
}

TEST_CASE("symbol declarations are validated") {
  SymbolTable t;
  Loc l1{"m.kir", 2, 1}, l2{"m.kir", 5, 1};
  CHECK(t.declare({"seq", 1, 4096, 8, l1}).ok());
  REQUIRE(t.lookup("seq"));
  CHECK(t.lookup("seq")->hi == 4096);
  CHECK(t.lookup("nope") == nullptr);

  Status dup = t.declare({"seq", 1, 8, 1, l2});
  REQUIRE_FALSE(dup.ok());
  CHECK(dup.diags().str() == "m.kir:5:1: error: symbol 'seq' is already declared\n"
                             "m.kir:2:1: note: previous declaration of 'seq'\n");
  auto msg = [&](SymbolInfo i) {
    Status s = t.declare(i);
    REQUIRE_FALSE(s.ok());
    return s.diags().list[0].str();
  };
  CHECK(msg({"a", 5, 3, 1, l2}) == "m.kir:5:1: error: symbol 'a' has empty range [5, 3]\n");
  CHECK(msg({"a", -1, 3, 1, l2}) == "m.kir:5:1: error: symbol 'a' has range [-1, 3] with a "
                                    "negative lower bound; dims are never negative\n");
  CHECK(msg({"a", 1, 3, 0, l2}) ==
        "m.kir:5:1: error: symbol 'a' has divisor 0; it must be at least 1\n");
  CHECK(msg({"a", 9, 15, 8, l2}) ==
        "m.kir:5:1: error: symbol 'a' has no value in [9, 15] divisible by 8\n");
  CHECK(msg({"a", INT64_MAX - 1, INT64_MAX, 1 << 20, l2}).find("divisible by") !=
        std::string::npos);
  CHECK(msg({"min", 1, 3, 1, l2}).find("not a valid symbol name") != std::string::npos);
  CHECK(msg({"2x", 1, 3, 1, l2}).find("not a valid symbol name") != std::string::npos);
  CHECK(t.declare({"b", 9, 16, 8, l2}).ok());
  CHECK(t.declare({"z", 0, 0, 5, l2}).ok());
  CHECK(t.all().size() == 3);
}

TEST_CASE("bounds use ranges and divisibility") {
  SymbolTable t = table({{"seq", 1, 4096, 8, {}}, {"n", 2, 10, 1, {}}, {"k", 0, 3, 1, {}}});
  SymBounds b = bounds(parse("seq"), t);
  CHECK(b.lo == 8); // the smallest multiple of 8 in [1, 4096]
  CHECK(b.hi == 4096);
  CHECK(b.divisor == 8);
  b = bounds(parse("2*seq + 1"), t);
  CHECK(b.lo == 17);
  CHECK(b.hi == 8193);
  CHECK(b.divisor == 1);
  b = bounds(parse("3*seq + 12"), t);
  CHECK(b.divisor == 12);
  CHECK(b.lo == 36);
  b = bounds(parse("n - seq"), t);
  CHECK(b.lo == 2 - 4096);
  CHECK(b.hi == 10 - 8);
  b = bounds(parse("seq floordiv 4"), t);
  CHECK(b.lo == 2);
  CHECK(b.hi == 1024);
  CHECK(b.divisor == 2);
  b = bounds(parse("n ceildiv 4"), t);
  CHECK(b.lo == 1);
  CHECK(b.hi == 3);
  b = bounds(parse("n mod 16"), t);
  CHECK(b.lo == 2);
  CHECK(b.hi == 10);
  b = bounds(parse("seq mod 5"), t);
  CHECK(b.lo == 0);
  CHECK(b.hi == 4);
  b = bounds(parse("min(seq, n)"), t);
  CHECK(b.lo == 2);
  CHECK(b.hi == 10);
  b = bounds(parse("max(seq, n)"), t);
  CHECK(b.lo == 8);
  CHECK(b.hi == 4096);
  b = bounds(parse("n*k - n"), t);
  CHECK(b.lo == 0 - 10);
  CHECK(b.hi == 30 - 2);
  b = bounds(parse("seq floordiv n"), t);
  CHECK(b.lo == 0);
  CHECK(b.hi == 2048);
  b = bounds(parse("unknown + 1"), t);
  CHECK(b.lo == INT64_MIN + 1);
  CHECK(b.hi == INT64_MAX);
  b = bounds(parse("7"), t);
  CHECK(b.lo == 7);
  CHECK(b.hi == 7);
  CHECK(b.divisor == 7);
}

TEST_CASE("bounds saturate instead of overflowing") {
  SymbolTable t = table({{"h", 0, INT64_MAX, 1, {}}, {"g", 1, INT64_MAX, 1, {}}});
  SymBounds b = bounds(parse("h*h*h + g"), t);
  CHECK(b.lo == 1);
  CHECK(b.hi == INT64_MAX);
  b = bounds(parse("h - g*g"), t);
  CHECK(b.lo == INT64_MIN);
  CHECK(b.hi == INT64_MAX - 1);
  b = bounds(parse("9223372036854775807*g + 9223372036854775807*g"), t);
  CHECK(b.hi == INT64_MAX);
  CHECK(b.lo == INT64_MAX); // any value that exists is at least this
  // An exact constant at the edge of int64 does not turn into infinity.
  b = bounds(parse("9223372036854775807 - g"), t);
  CHECK(b.lo == 0);
  CHECK(b.hi == INT64_MAX - 1);
}

TEST_CASE("provably* are sound and use ranges") {
  SymbolTable t = table({{"seq", 1, 4096, 8, {}}, {"n", 2, 10, 1, {}}, {"k", 0, 3, 1, {}}});
  SymExpr seq = S("seq"), n = S("n");
  CHECK(provablyEqual(seq + n, n + seq, t));
  CHECK(provablyEqual(parse("2*(seq floordiv 2)"), seq, t));
  CHECK(provablyEqual(parse("min(seq, 8192)"), seq, t));
  CHECK_FALSE(provablyEqual(seq, n, t));
  CHECK(provablyLE(n, parse("10"), t));
  CHECK_FALSE(provablyLE(n, parse("9"), t));
  CHECK(provablyLT(n, parse("11"), t));
  CHECK_FALSE(provablyLT(n, parse("10"), t));
  CHECK(provablyLT(C(7), seq, t)); // seq >= 8 as a multiple of 8
  CHECK_FALSE(provablyLT(C(8), seq, t));
  CHECK(provablyLE(C(8), seq, t));
  CHECK(provablyLE(seq, seq, t));
  CHECK_FALSE(provablyLT(seq, seq, t));
  CHECK_FALSE(provablyLE(seq, n, t));
  CHECK_FALSE(provablyLE(n, seq, t)); // n = 10, seq = 8 is a counterexample
  CHECK(provablyDivisible(seq, 8, t));
  CHECK(provablyDivisible(seq, 4, t));
  CHECK_FALSE(provablyDivisible(seq, 16, t));
  CHECK(provablyDivisible(parse("3*seq + 24"), 24, t));
  CHECK_FALSE(provablyDivisible(parse("3*seq + 12"), 24, t));
  CHECK(provablyDivisible(parse("seq*n"), 8, t));
  CHECK(provablyDivisible(parse("n*k - n*k"), 0, t));
  CHECK_FALSE(provablyDivisible(n, 0, t));
  CHECK(provablyDivisible(n, 1, t));
  CHECK(provablyDivisible(n, -1, t));
  CHECK(provablyDivisible(seq, -8, t));
  // Unknown symbols prove nothing beyond identities.
  SymbolTable empty;
  CHECK(provablyEqual(S("u") * C(2), S("u") + S("u"), empty));
  CHECK_FALSE(provablyLE(C(0), S("u"), empty));
  CHECK_FALSE(provablyDivisible(S("u"), 2, empty));
}

TEST_CASE("simplifyWithRanges drops redundant min/max and folds exact divisions") {
  SymbolTable t = table({{"seq", 1, 4096, 8, {}}, {"n", 2, 10, 1, {}}, {"b", 0, 64, 4, {}}});
  auto simp = [&](const char* s) { return simplifyWithRanges(parse(s), t).str(); };
  CHECK(simp("min(seq, 5000)") == "seq");
  CHECK(simp("min(seq, 4000)") == "min(seq, 4000)");
  CHECK(simp("max(seq, 0)") == "seq");
  CHECK(simp("max(n, seq)") == "max(n, seq)");
  CHECK(simp("max(n, seq + 3)") == "seq + 3");
  CHECK(simp("min(0, seq)") == "0");
  CHECK(simp("max(0, min(seq, 5))") == "5"); // seq >= 8
  CHECK(simp("max(0, min(n, 5))") == "min(n, 5)");
  CHECK(simp("seq mod 8") == "0");
  CHECK(simp("seq mod 4") == "0");
  CHECK(simp("seq mod 16") == "seq mod 16");
  CHECK(simp("n mod 16") == "n");
  CHECK(simp("n floordiv 16") == "0");
  CHECK(simp("n ceildiv 16") == "1");
  CHECK(simp("8*(seq floordiv 8)") == "seq");
  CHECK(simp("16*(seq ceildiv 8)") == "2*seq");
  CHECK(simp("4*(seq floordiv 8)") == "4*(seq floordiv 8)");
  CHECK(simp("(seq + 2*b) floordiv 8") == "b floordiv 4 + seq floordiv 8");
  CHECK(simp("(seq + 2*b) ceildiv 8") == "b floordiv 4 + seq floordiv 8");
  CHECK(simp("(seq + b) mod 4") == "0");
  CHECK(simp("min(seq, n) floordiv 100") == "0");
  CHECK(simp("n*2 - max(n, 1)") == "n");
}

namespace {

// Random expressions built twice: as SymExpr and as a direct evaluator over the same values.
struct Gen {
  std::mt19937_64 rng{12345};
  const SymbolBinding* vals = nullptr;

  int64_t pick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }

  // Returns the expression and its directly computed value (nullopt when it would not be
  // defined in int64).
  std::pair<SymExpr, std::optional<int64_t>> make(int depth) {
    static const char* names[] = {"a", "b", "c"};
    if (depth == 0 || pick(0, 3) == 0) {
      if (pick(0, 1)) {
        int64_t v = pick(-20, 20);
        return {C(v), v};
      }
      const char* nm = names[pick(0, 2)];
      return {S(nm), vals->at(nm)};
    }
    auto [x, xv] = make(depth - 1);
    auto [y, yv] = make(depth - 1);
    int op = static_cast<int>(pick(0, 7));
    std::optional<int64_t> v;
    int64_t r = 0;
    bool both = xv && yv;
    switch (op) {
    case 0:
      if (both && !__builtin_add_overflow(*xv, *yv, &r)) v = r;
      return {x + y, v};
    case 1:
      if (both && !__builtin_sub_overflow(*xv, *yv, &r)) v = r;
      return {x - y, v};
    case 2:
      if (both && !__builtin_mul_overflow(*xv, *yv, &r)) v = r;
      return {x * y, v};
    case 3: {
      // Constant divisors most of the time, since those drive the simplifier.
      int64_t c = pick(-9, 9);
      if (c == 0) c = 4;
      if (xv) v = static_cast<int64_t>(std::floor(static_cast<long double>(*xv) / c));
      return {SymExpr::floorDiv(x, C(c)), v};
    }
    case 4: {
      int64_t c = pick(1, 9);
      if (xv) v = static_cast<int64_t>(std::ceil(static_cast<long double>(*xv) / c));
      return {SymExpr::ceilDiv(x, C(c)), v};
    }
    case 5: {
      int64_t c = pick(1, 9);
      if (xv) v = ((*xv % c) + c) % c;
      return {SymExpr::mod(x, C(c)), v};
    }
    case 6:
      if (both) v = std::min(*xv, *yv);
      return {SymExpr::min(x, y), v};
    default:
      if (both) v = std::max(*xv, *yv);
      return {SymExpr::max(x, y), v};
    }
  }
};

} // namespace

TEST_CASE("random expressions: canonical forms evaluate right, print/parse round-trips, "
          "bounds and simplifyWithRanges are sound") {
  SymbolTable t = table({{"a", 0, 12, 1, {}}, {"b", 4, 40, 4, {}}, {"c", 1, 6, 1, {}}});
  Gen g;
  int checked = 0;
  for (int iter = 0; iter < 400; ++iter) {
    SymbolBinding first{{"a", g.pick(0, 12)}, {"b", 4 * g.pick(1, 10)}, {"c", g.pick(1, 6)}};
    g.vals = &first;
    auto [e, expected] = g.make(4);
    CAPTURE(e.str());
    if (expected) {
      CHECK(e.evaluate(first) == expected);
      ++checked;
    }
    SymExpr back = parse(e.str());
    CHECK(back == e);
    // The simplified form agrees with the original everywhere in range, and the bounds
    // contain every value.
    SymExpr s = simplifyWithRanges(e, t);
    CHECK(simplifyWithRanges(s, t) == s);
    SymBounds bd = bounds(e, t);
    for (int trial = 0; trial < 8; ++trial) {
      SymbolBinding v{{"a", g.pick(0, 12)}, {"b", 4 * g.pick(1, 10)}, {"c", g.pick(1, 6)}};
      std::optional<int64_t> ev = e.evaluate(v);
      if (!ev) continue;
      CHECK(s.evaluate(v) == ev);
      CHECK(*ev >= bd.lo);
      CHECK(*ev <= bd.hi);
      CHECK(*ev % bd.divisor == 0);
    }
  }
  CHECK(checked > 300);
}
