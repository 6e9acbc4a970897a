// Unit tests for the reference interpreter: every op on small hand-computed cases, the
// edge cases ops.def promises (NaN, ±0, integer wrap, empty reductions), input binding
// and its errors, run-time errors, and the size guard.
#include <cmath>
#include <cstdint>
#include <doctest/doctest.h>
#include <filesystem>
#include <limits>

#include "ir/core/builder.h"
#include "ir/interp/interp.h"
#include "ir/io/safetensors.h"

using namespace kiln;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

HostTensor T(ElemType e, std::vector<int64_t> shape, const std::vector<double>& vals) {
  HostTensor t(e, std::move(shape));
  REQUIRE(static_cast<int64_t>(vals.size()) == t.numElements());
  for (size_t i = 0; i < vals.size(); ++i) t.setF(static_cast<int64_t>(i), vals[i]);
  return t;
}
HostTensor F32(std::vector<int64_t> shape, const std::vector<double>& vals) {
  return T(ElemType::F32, std::move(shape), vals);
}
HostTensor I64s(std::vector<int64_t> shape, const std::vector<int64_t>& vals) {
  HostTensor t(ElemType::I64, std::move(shape));
  for (size_t i = 0; i < vals.size(); ++i) t.setI(static_cast<int64_t>(i), vals[i]);
  return t;
}

std::vector<double> vals(const HostTensor& t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.numElements(); ++i) out.push_back(t.getF(i));
  return out;
}
std::vector<int64_t> ivals(const HostTensor& t) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < t.numElements(); ++i) out.push_back(t.getI(i));
  return out;
}

// Exact comparison where NaN equals NaN and -0.0 differs from +0.0.
bool sameBits(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return false;
    if (std::isnan(got[i])) continue;
    if (got[i] != want[i] || std::signbit(got[i]) != std::signbit(want[i])) return false;
  }
  return true;
}

std::string errorText(const Result<std::vector<HostTensor>>& r) {
  return r.ok() ? std::string() : r.diags().str();
}

// Evaluates one op, outside any function, with a declared result type.
Result<std::vector<HostTensor>> evalAll(OpKind kind, const std::vector<HostTensor>& in,
                                        std::vector<Type> results, Attrs attrs = {}) {
  Op op(kind, std::move(results), std::move(attrs), Loc{"t.kir", 3, 7});
  return evalOp(op, in, {}, nullptr);
}
Result<std::vector<HostTensor>> evalAll(OpKind kind, const std::vector<HostTensor>& in, Type result,
                                        Attrs attrs = {}) {
  return evalAll(kind, in, std::vector<Type>{std::move(result)}, std::move(attrs));
}

// The single result, failing the test on an error.
HostTensor eval(OpKind kind, const std::vector<HostTensor>& in, ElemType e,
                std::vector<int64_t> shape, Attrs attrs = {}) {
  auto r = evalAll(kind, in, Type::tensor(e, shape), std::move(attrs));
  INFO(errorText(r));
  REQUIRE(r.ok());
  REQUIRE(r->size() == 1);
  CHECK((*r)[0].shape() == shape);
  return (*r)[0];
}

// The error message of a failing evaluation.
std::string evalError(OpKind kind, const std::vector<HostTensor>& in, Type result,
                      Attrs attrs = {}) {
  auto r = evalAll(kind, in, std::move(result), std::move(attrs));
  REQUIRE_FALSE(r.ok());
  return r.diags().str();
}

std::vector<double> unaryF32(OpKind kind, const std::vector<double>& x, Attrs attrs = {}) {
  auto n = static_cast<int64_t>(x.size());
  return vals(eval(kind, {F32({n}, x)}, ElemType::F32, {n}, std::move(attrs)));
}
std::vector<double> binaryF32(OpKind kind, const std::vector<double>& x,
                              const std::vector<double>& y, Attrs attrs = {}) {
  auto n = static_cast<int64_t>(x.size());
  return vals(eval(kind, {F32({n}, x), F32({n}, y)}, ElemType::F32, {n}, std::move(attrs)));
}
std::vector<double> binaryI(OpKind kind, ElemType e, const std::vector<double>& x,
                            const std::vector<double>& y, Attrs attrs = {}) {
  auto n = static_cast<int64_t>(x.size());
  return vals(eval(kind, {T(e, {n}, x), T(e, {n}, y)}, e, {n}, std::move(attrs)));
}
std::vector<double> predF32(OpKind kind, const std::vector<double>& x,
                            const std::vector<double>& y) {
  auto n = static_cast<int64_t>(x.size());
  return vals(eval(kind, {F32({n}, x), F32({n}, y)}, ElemType::I1, {n}));
}

Attrs attrs(std::initializer_list<std::pair<const char*, AttrValue>> list) {
  Attrs a;
  for (const auto& [k, v] : list) a.set(k, v);
  return a;
}
using Ints = std::vector<int64_t>;

double f32(double v) { return static_cast<double>(static_cast<float>(v)); }

} // namespace

TEST_CASE("every op either evaluates or rejects bad operands with a located error") {
  // With no operands and no attributes every kernel must fail cleanly (or produce a
  // value, for sources): this walks the whole table, so an op without a kernel or with
  // a kernel that trusts its attributes shows up here.
  for (const OpInfo& info : allOps()) {
    CAPTURE(info.name);
    auto r = evalAll(info.kind, {},
                     std::vector<Type>(info.numResults < 0 ? 1 : info.numResults,
                                       Type::tensor(ElemType::F32, {1})));
    if (!r.ok()) {
      CHECK(r.diags().list[0].loc == Loc{"t.kir", 3, 7});
      CHECK(r.diags().list[0].message.rfind(std::string(info.name) + ":", 0) == 0);
    }
  }
  // Wrong operand counts are refused before any kernel runs.
  CHECK(evalError(OpKind::Add, {F32({1}, {1})}, Type::tensor(ElemType::F32, {1}))
            .find("add: got 1 operands") != std::string::npos);
}

TEST_CASE("unary float math and its IEEE edge cases") {
  CHECK(sameBits(unaryF32(OpKind::Exp, {0, 1, -kInf, 1000}), {1, f32(std::exp(1.0)), 0, kInf}));
  CHECK(sameBits(unaryF32(OpKind::Log, {1, 0, -1}), {0, -kInf, kNaN}));
  CHECK(sameBits(unaryF32(OpKind::Sqrt, {4, -0.0, -1}), {2, -0.0, kNaN}));
  CHECK(sameBits(unaryF32(OpKind::Rsqrt, {4, 0, -1}), {0.5, kInf, kNaN}));
  CHECK(sameBits(unaryF32(OpKind::Reciprocal, {2, 0, -0.0}), {0.5, kInf, -kInf}));
  CHECK(sameBits(unaryF32(OpKind::Tanh, {0, kInf, -kInf}), {0, 1, -1}));
  CHECK(sameBits(unaryF32(OpKind::Sigmoid, {0, 1000, -1000}), {0.5, 1, 0}));
  CHECK(sameBits(unaryF32(OpKind::Erf, {0, kInf, -kInf}), {0, 1, -1}));
  CHECK(sameBits(unaryF32(OpKind::Sin, {0, kInf, -kInf}), {0, kNaN, kNaN}));
  CHECK(sameBits(unaryF32(OpKind::Cos, {0, kInf, -kInf}), {1, kNaN, kNaN}));
  CHECK(
      sameBits(unaryF32(OpKind::Floor, {1.5, -1.5, -0.0, kInf, kNaN}), {1, -2, -0.0, kInf, kNaN}));
  CHECK(sameBits(unaryF32(OpKind::Ceil, {1.5, -0.5, -1.5}), {2, -0.0, -1}));
  CHECK(sameBits(unaryF32(OpKind::Round, {2.5, -0.5, 1.5, 0.4, -2.5}), {2, -0.0, 2, 0, -2}));
  HostTensor x = F32({4}, {kNaN, kInf, -kInf, 1});
  CHECK(vals(eval(OpKind::IsNan, {x}, ElemType::I1, {4})) == std::vector<double>{1, 0, 0, 0});
  CHECK(vals(eval(OpKind::IsInf, {x}, ElemType::I1, {4})) == std::vector<double>{0, 1, 1, 0});
  // Integer operands are refused by float-only ops.
  CHECK(evalError(OpKind::Exp, {I64s({1}, {1})}, Type::tensor(ElemType::I64, {1}))
            .find("floating-point") != std::string::npos);
}

TEST_CASE("gelu (erf and tanh forms) and silu") {
  HostTensor x = T(ElemType::F64, {2}, {1, -1});
  auto exact = vals(eval(OpKind::Gelu, {x}, ElemType::F64, {2}));
  CHECK(exact[0] == doctest::Approx(0.8413447460685429).epsilon(1e-15));
  CHECK(exact[1] == doctest::Approx(-0.15865525393145707).epsilon(1e-15));
  auto approx = vals(eval(OpKind::Gelu, {x}, ElemType::F64, {2}, attrs({{"approximate", "tanh"}})));
  CHECK(approx[0] == doctest::Approx(0.8411919906082768).epsilon(1e-15));
  CHECK(evalError(OpKind::Gelu, {x}, Type::tensor(ElemType::F64, {2}),
                  attrs({{"approximate", "fast"}}))
            .find("approximate") != std::string::npos);
  auto silu = vals(eval(OpKind::Silu, {x}, ElemType::F64, {2}));
  CHECK(silu[0] == doctest::Approx(0.7310585786300049).epsilon(1e-15));
  CHECK(silu[1] == doctest::Approx(-1 + 0.7310585786300049).epsilon(1e-15));
}

TEST_CASE("numeric unary ops on floats and wrapping integers") {
  CHECK(sameBits(unaryF32(OpKind::Neg, {0, -0.0, 3}), {-0.0, 0, -3}));
  CHECK(vals(eval(OpKind::Neg, {T(ElemType::I8, {2}, {-128, 5})}, ElemType::I8, {2})) ==
        std::vector<double>{-128, -5});
  CHECK(sameBits(unaryF32(OpKind::Abs, {-0.0, -2, kNaN}), {0.0, 2, kNaN}));
  CHECK(vals(eval(OpKind::Abs, {T(ElemType::I32, {2}, {INT32_MIN, -7})}, ElemType::I32, {2})) ==
        std::vector<double>{INT32_MIN, 7});
  CHECK(sameBits(unaryF32(OpKind::Relu, {-1, -0.0, kNaN, 2}), {0, -0.0, kNaN, 2}));
  CHECK(vals(eval(OpKind::Relu, {T(ElemType::I32, {2}, {-3, 4})}, ElemType::I32, {2})) ==
        std::vector<double>{0, 4});
  CHECK(sameBits(unaryF32(OpKind::Sign, {-3, 0, -0.0, kNaN, 2}), {-1, 0, 0, kNaN, 1}));
  CHECK(vals(eval(OpKind::Sign, {T(ElemType::I8, {3}, {-5, 0, 7})}, ElemType::I8, {3})) ==
        std::vector<double>{-1, 0, 1});
  CHECK(vals(eval(OpKind::Not, {T(ElemType::I1, {2}, {0, 1})}, ElemType::I1, {2})) ==
        std::vector<double>{1, 0});
  CHECK(evalError(OpKind::Not, {F32({1}, {1})}, Type::tensor(ElemType::I1, {1})).find("i1") !=
        std::string::npos);
  CHECK(evalError(OpKind::Neg, {T(ElemType::I1, {1}, {1})}, Type::tensor(ElemType::I1, {1}))
            .find("numeric") != std::string::npos);
}

TEST_CASE("add, sub, mul wrap integers and broadcast") {
  CHECK(binaryI(OpKind::Add, ElemType::I8, {100, -100}, {100, -100}) ==
        std::vector<double>{-56, 56});
  CHECK(binaryI(OpKind::Sub, ElemType::U8, {3}, {5}) == std::vector<double>{254});
  CHECK(binaryI(OpKind::Mul, ElemType::I32, {65536, -3}, {65536, 4}) ==
        std::vector<double>{0, -12});
  CHECK(sameBits(binaryF32(OpKind::Mul, {0, -2}, {kInf, 0}), {kNaN, -0.0}));
  CHECK(binaryF32(OpKind::Sub, {1.5}, {2}) == std::vector<double>{-0.5});
  HostTensor col = F32({2, 1}, {1, 2}), row = F32({3}, {10, 20, 30});
  CHECK(vals(eval(OpKind::Add, {col, row}, ElemType::F32, {2, 3})) ==
        std::vector<double>{11, 21, 31, 12, 22, 32});
  // i64 stays exact beyond 2^53 (computed in int64, not f64).
  HostTensor big = I64s({1}, {(int64_t(1) << 60) + 1});
  CHECK(ivals(eval(OpKind::Add, {big, I64s({1}, {INT64_MAX})}, ElemType::I64, {1})) ==
        Ints{(int64_t(1) << 60) + 1 + INT64_MIN - 1});
  CHECK(evalError(OpKind::Add, {F32({2}, {1, 2}), F32({3}, {1, 2, 3})},
                  Type::tensor(ElemType::F32, {3}))
            .find("do not broadcast") != std::string::npos);
  CHECK(evalError(OpKind::Add, {F32({1}, {1}), I64s({1}, {1})}, Type::tensor(ElemType::F32, {1}))
            .find("element type") != std::string::npos);
}

TEST_CASE("div: IEEE for floats, truncation and x/0 = 0 for integers") {
  CHECK(sameBits(binaryF32(OpKind::Div, {1, -1, 0, 7}, {0, 0, 0, -2}), {kInf, -kInf, kNaN, -3.5}));
  CHECK(binaryI(OpKind::Div, ElemType::I32, {7, -7, 7, INT32_MIN, 5}, {2, 2, -2, -1, 0}) ==
        std::vector<double>{3, -3, -3, INT32_MIN, 0});
  CHECK(ivals(eval(OpKind::Div, {I64s({1}, {INT64_MIN}), I64s({1}, {-1})}, ElemType::I64, {1})) ==
        Ints{INT64_MIN});
}

TEST_CASE("pow: C pow for floats, integer rules for negative exponents") {
  CHECK(binaryF32(OpKind::Pow, {kNaN, 2, 4}, {0, 3, 0.5}) == std::vector<double>{1, 8, 2});
  CHECK(binaryI(OpKind::Pow, ElemType::I32, {2, 2, -1, -1, 1, 3, 0}, {10, -1, -3, -2, -5, 0, -1}) ==
        std::vector<double>{1024, 0, -1, 1, 1, 1, 0});
  CHECK(binaryI(OpKind::Pow, ElemType::I8, {2}, {7}) == std::vector<double>{-128});
}

TEST_CASE("max and min propagate NaN and order signed zeros") {
  CHECK(sameBits(binaryF32(OpKind::Max, {-0.0, 0.0, 1, kNaN, 1}, {0.0, -0.0, 2, 1, kNaN}),
                 {0.0, 0.0, 2, kNaN, kNaN}));
  CHECK(sameBits(binaryF32(OpKind::Min, {-0.0, 0.0, 1, kNaN}, {0.0, -0.0, 2, 1}),
                 {-0.0, -0.0, 1, kNaN}));
  CHECK(binaryI(OpKind::Max, ElemType::I16, {-5, 3}, {2, -9}) == std::vector<double>{2, 3});
  CHECK(binaryI(OpKind::Min, ElemType::I16, {-5, 3}, {2, -9}) == std::vector<double>{-5, -9});
}

TEST_CASE("mod: floor mod by default, C fmod with fmod=1, mod 0") {
  CHECK(sameBits(binaryF32(OpKind::Mod, {5, -5, 5, -5, 5, -6}, {3, 3, -3, -3, 0, 3}),
                 {2, 1, -1, -2, kNaN, 0}));
  CHECK(sameBits(
      binaryF32(OpKind::Mod, {5, -5, 5, -5, 5}, {3, 3, -3, -3, 0}, attrs({{"fmod", int64_t(1)}})),
      {2, -2, 2, -2, kNaN}));
  CHECK(binaryI(OpKind::Mod, ElemType::I32, {7, -7, 7, -7, 7}, {3, 3, -3, -3, 0}) ==
        std::vector<double>{1, 2, -2, -1, 0});
  CHECK(binaryI(OpKind::Mod, ElemType::I32, {7, -7, 7, -7, 7}, {3, 3, -3, -3, 0},
                attrs({{"fmod", int64_t(1)}})) == std::vector<double>{1, -1, 1, -1, 0});
  CHECK(ivals(eval(OpKind::Mod, {I64s({1}, {INT64_MIN}), I64s({1}, {-1})}, ElemType::I64, {1})) ==
        Ints{0});
}

TEST_CASE("logical ops and comparisons with NaN and signed zeros") {
  std::vector<double> a = {0, 0, 1, 1}, b = {0, 1, 0, 1};
  CHECK(binaryI(OpKind::And, ElemType::I1, a, b) == std::vector<double>{0, 0, 0, 1});
  CHECK(binaryI(OpKind::Or, ElemType::I1, a, b) == std::vector<double>{0, 1, 1, 1});
  CHECK(binaryI(OpKind::Xor, ElemType::I1, a, b) == std::vector<double>{0, 1, 1, 0});
  std::vector<double> x = {1, kNaN, -0.0, 2}, y = {1, kNaN, 0.0, 1};
  CHECK(predF32(OpKind::Eq, x, y) == std::vector<double>{1, 0, 1, 0});
  CHECK(predF32(OpKind::Ne, x, y) == std::vector<double>{0, 1, 0, 1});
  CHECK(predF32(OpKind::Lt, x, y) == std::vector<double>{0, 0, 0, 0});
  CHECK(predF32(OpKind::Le, x, y) == std::vector<double>{1, 0, 1, 0});
  CHECK(predF32(OpKind::Gt, x, y) == std::vector<double>{0, 0, 0, 1});
  CHECK(predF32(OpKind::Ge, x, y) == std::vector<double>{1, 0, 1, 1});
  // Integers compare exactly, even where f64 could not tell them apart.
  HostTensor p = I64s({1}, {(int64_t(1) << 60) + 1}), q = I64s({1}, {int64_t(1) << 60});
  CHECK(vals(eval(OpKind::Eq, {p, q}, ElemType::I1, {1})) == std::vector<double>{0});
  CHECK(vals(eval(OpKind::Gt, {p, q}, ElemType::I1, {1})) == std::vector<double>{1});
}

TEST_CASE("select broadcasts all three operands") {
  HostTensor cond = T(ElemType::I1, {2, 1}, {1, 0});
  HostTensor a = I64s({3}, {1, 2, INT64_MAX}), b = I64s({}, {9});
  CHECK(ivals(eval(OpKind::Select, {cond, a, b}, ElemType::I64, {2, 3})) ==
        Ints{1, 2, INT64_MAX, 9, 9, 9});
  CHECK(evalError(OpKind::Select, {F32({1}, {1}), a, b}, Type::tensor(ElemType::I64, {3}))
            .find("condition") != std::string::npos);
}

TEST_CASE("cast truncates, saturates then wraps, and maps to i1 as x != 0") {
  HostTensor x = F32({5}, {2.7, -2.7, kNaN, 1e20, -1e20});
  CHECK(ivals(eval(OpKind::Cast, {x}, ElemType::I64, {5}, attrs({{"to", ElemType::I64}}))) ==
        Ints{2, -2, 0, INT64_MAX, INT64_MIN});
  // INT64_MAX wraps to i32 -1 (low 32 bits all ones); INT64_MIN to 0.
  CHECK(ivals(eval(OpKind::Cast, {x}, ElemType::I32, {5}, attrs({{"to", ElemType::I32}}))) ==
        Ints{2, -2, 0, -1, 0});
  CHECK(vals(eval(OpKind::Cast, {F32({4}, {0.5, 0, kNaN, -0.0})}, ElemType::I1, {4},
                  attrs({{"to", ElemType::I1}}))) == std::vector<double>{1, 0, 1, 0});
  CHECK(vals(eval(OpKind::Cast, {T(ElemType::I32, {1}, {300})}, ElemType::U8, {1},
                  attrs({{"to", ElemType::U8}}))) == std::vector<double>{44});
  // f16 has 11 significant bits: 2049 is a tie between 2048 and 2050 and rounds to even.
  CHECK(vals(eval(OpKind::Cast, {T(ElemType::I32, {1}, {2049})}, ElemType::F16, {1},
                  attrs({{"to", ElemType::F16}}))) == std::vector<double>{2048});
  CHECK(vals(eval(OpKind::Cast, {T(ElemType::F64, {1}, {0.1})}, ElemType::F32, {1},
                  attrs({{"to", ElemType::F32}}))) == std::vector<double>{f32(0.1)});
  CHECK(vals(eval(OpKind::Cast, {I64s({1}, {16777217})}, ElemType::F32, {1},
                  attrs({{"to", ElemType::F32}}))) == std::vector<double>{16777216});
}

TEST_CASE("clamp keeps NaN and gives hi when lo > hi") {
  HostTensor x = F32({4}, {-5, 0.5, 5, kNaN});
  CHECK(sameBits(vals(eval(OpKind::Clamp, {x, F32({}, {0}), F32({}, {1})}, ElemType::F32, {4})),
                 {0, 0.5, 1, kNaN}));
  CHECK(vals(eval(OpKind::Clamp, {F32({1}, {3}), F32({1}, {2}), F32({1}, {1})}, ElemType::F32,
                  {1})) == std::vector<double>{1});
  CHECK(vals(eval(OpKind::Clamp,
                  {T(ElemType::I32, {3}, {-9, 4, 9}), T(ElemType::I32, {}, {0}),
                   T(ElemType::I32, {}, {5})},
                  ElemType::I32, {3})) == std::vector<double>{0, 4, 5});
}

TEST_CASE("reductions over listed, negative and all axes") {
  HostTensor x = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto red = [&](OpKind k, Ints axes, int64_t keep, std::vector<int64_t> shape) {
    return vals(
        eval(k, {x}, ElemType::F32, std::move(shape), attrs({{"axes", axes}, {"keepdims", keep}})));
  };
  CHECK(red(OpKind::ReduceSum, {1}, 0, {2}) == std::vector<double>{6, 15});
  CHECK(red(OpKind::ReduceSum, {}, 1, {1, 1}) == std::vector<double>{21});
  CHECK(red(OpKind::ReduceSum, {-2}, 1, {1, 3}) == std::vector<double>{5, 7, 9});
  CHECK(red(OpKind::ReduceMean, {1}, 0, {2}) == std::vector<double>{2, 5});
  CHECK(red(OpKind::ReduceMax, {0}, 0, {3}) == std::vector<double>{4, 5, 6});
  CHECK(red(OpKind::ReduceMin, {0, 1}, 0, {}) == std::vector<double>{1});
  CHECK(red(OpKind::ReduceProd, {1}, 0, {2}) == std::vector<double>{6, 120});
  CHECK(sameBits(vals(eval(OpKind::ReduceMax, {F32({3}, {1, kNaN, 3})}, ElemType::F32, {},
                           attrs({{"axes", Ints{}}, {"keepdims", int64_t(0)}}))),
                 {kNaN}));
  // Integer mean truncates toward zero; integer sums wrap on store.
  CHECK(vals(eval(OpKind::ReduceMean, {T(ElemType::I32, {2, 3}, {1, 2, 4, -1, -2, -4})},
                  ElemType::I32, {2}, attrs({{"axes", Ints{1}}, {"keepdims", int64_t(0)}}))) ==
        std::vector<double>{2, -2});
  CHECK(vals(eval(OpKind::ReduceSum, {T(ElemType::I8, {2}, {100, 100})}, ElemType::I8, {},
                  attrs({{"axes", Ints{}}, {"keepdims", int64_t(0)}}))) ==
        std::vector<double>{-56});
  CHECK(evalError(OpKind::ReduceSum, {x}, Type::tensor(ElemType::F32, {2}),
                  attrs({{"axes", Ints{1, -1}}, {"keepdims", int64_t(0)}}))
            .find("listed twice") != std::string::npos);
  CHECK(evalError(OpKind::ReduceSum, {x}, Type::tensor(ElemType::F32, {2}),
                  attrs({{"axes", Ints{2}}, {"keepdims", int64_t(0)}}))
            .find("out of range") != std::string::npos);
}

TEST_CASE("empty reductions give their identities") {
  Attrs a = attrs({{"axes", Ints{1}}, {"keepdims", int64_t(0)}});
  HostTensor ef = F32({2, 0}, {}), ei = T(ElemType::I8, {2, 0}, {});
  auto f = [&](OpKind k) { return vals(eval(k, {ef}, ElemType::F32, {2}, a)); };
  auto i = [&](OpKind k) { return vals(eval(k, {ei}, ElemType::I8, {2}, a)); };
  CHECK(f(OpKind::ReduceSum) == std::vector<double>{0, 0});
  CHECK(sameBits(f(OpKind::ReduceMean), {kNaN, kNaN}));
  CHECK(f(OpKind::ReduceMax) == std::vector<double>{-kInf, -kInf});
  CHECK(f(OpKind::ReduceMin) == std::vector<double>{kInf, kInf});
  CHECK(f(OpKind::ReduceProd) == std::vector<double>{1, 1});
  CHECK(i(OpKind::ReduceMean) == std::vector<double>{0, 0});
  CHECK(i(OpKind::ReduceMax) == std::vector<double>{-128, -128});
  CHECK(i(OpKind::ReduceMin) == std::vector<double>{127, 127});
}

TEST_CASE("argmax and argmin: first NaN wins, ties by select_last_index") {
  HostTensor x = F32({2, 3}, {1, 3, 3, kNaN, 2, kNaN});
  auto arg = [&](OpKind k, const HostTensor& t, int64_t axis, int64_t last, Ints shape) {
    return ivals(
        eval(k, {t}, ElemType::I64, shape,
             attrs({{"axis", axis}, {"keepdims", int64_t(0)}, {"select_last_index", last}})));
  };
  CHECK(arg(OpKind::ArgMax, x, 1, 0, {2}) == Ints{1, 0});
  CHECK(arg(OpKind::ArgMax, x, 1, 1, {2}) == Ints{2, 0});
  CHECK(arg(OpKind::ArgMax, x, 0, 0, {3}) == Ints{1, 0, 1});
  HostTensor y = F32({2, 3}, {1, 3, 3, 5, 2, 2});
  CHECK(arg(OpKind::ArgMin, y, 1, 0, {2}) == Ints{0, 1});
  CHECK(arg(OpKind::ArgMin, y, 1, 1, {2}) == Ints{0, 2});
  CHECK(arg(OpKind::ArgMin, y, -1, 0, {2}) == Ints{0, 1});
  CHECK(ivals(eval(OpKind::ArgMax, {T(ElemType::I32, {3}, {4, 9, 9})}, ElemType::I64, {1},
                   attrs({{"axis", int64_t(0)}, {"keepdims", int64_t(1)}}))) == Ints{1});
  CHECK(evalError(OpKind::ArgMax, {F32({0}, {})}, Type::tensor(ElemType::I64, {}),
                  attrs({{"axis", int64_t(0)}, {"keepdims", int64_t(0)}}))
            .find("empty") != std::string::npos);
}

TEST_CASE("cumsum: inclusive, exclusive, reverse") {
  HostTensor x = F32({4}, {1, 2, 3, 4});
  auto cs = [&](int64_t ex, int64_t rev) {
    return vals(eval(OpKind::Cumsum, {x}, ElemType::F32, {4},
                     attrs({{"axis", int64_t(0)}, {"exclusive", ex}, {"reverse", rev}})));
  };
  CHECK(cs(0, 0) == std::vector<double>{1, 3, 6, 10});
  CHECK(cs(1, 0) == std::vector<double>{0, 1, 3, 6});
  CHECK(cs(0, 1) == std::vector<double>{10, 9, 7, 4});
  CHECK(cs(1, 1) == std::vector<double>{9, 7, 4, 0});
  CHECK(vals(eval(OpKind::Cumsum, {T(ElemType::I32, {2, 2}, {1, 2, 3, 4})}, ElemType::I32, {2, 2},
                  attrs({{"axis", int64_t(0)}}))) == std::vector<double>{1, 2, 4, 6});
}

TEST_CASE("matmul: 2-D, 1-D operands, batch broadcast, integer wrap") {
  HostTensor a = F32({2, 3}, {1, 2, 3, 4, 5, 6}), b = F32({3, 2}, {1, 0, 0, 1, 1, 1});
  CHECK(vals(eval(OpKind::Matmul, {a, b}, ElemType::F32, {2, 2})) ==
        std::vector<double>{4, 5, 10, 11});
  HostTensor v = F32({3}, {1, 1, 2});
  CHECK(vals(eval(OpKind::Matmul, {v, b}, ElemType::F32, {2})) == std::vector<double>{3, 3});
  CHECK(vals(eval(OpKind::Matmul, {a, v}, ElemType::F32, {2})) == std::vector<double>{9, 21});
  CHECK(vals(eval(OpKind::Matmul, {v, v}, ElemType::F32, {})) == std::vector<double>{6});
  // [2,1,1,2] x [3,2,1]: batch dims [2,1] and [3] broadcast to [2,3].
  HostTensor p = F32({2, 1, 1, 2}, {1, 2, 3, 4}), q = F32({3, 2, 1}, {1, 0, 0, 1, 1, 1});
  CHECK(vals(eval(OpKind::Matmul, {p, q}, ElemType::F32, {2, 3, 1, 1})) ==
        std::vector<double>{1, 2, 3, 3, 4, 7});
  CHECK(vals(eval(OpKind::Matmul,
                  {T(ElemType::I8, {1, 2}, {100, 100}), T(ElemType::I8, {2, 1}, {1, 1})},
                  ElemType::I8, {1, 1})) == std::vector<double>{-56});
  CHECK(
      evalError(OpKind::Matmul, {a, a}, Type::tensor(ElemType::F32, {2, 3})).find("contraction") !=
      std::string::npos);
}

TEST_CASE("conv 2-D with groups, stride, pads and dilation") {
  // x: 1 x 2 x 4 x 4; channel 0 holds r*4+c, channel 1 is all ones.
  std::vector<double> xs;
  for (int i = 0; i < 16; ++i) xs.push_back(i);
  for (int i = 0; i < 16; ++i) xs.push_back(1);
  HostTensor x = F32({1, 2, 4, 4}, xs);
  // Two groups of one channel: filter 0 is the 2x2 diagonal, filter 1 all ones.
  HostTensor w = F32({2, 1, 2, 2}, {1, 0, 0, 1, 1, 1, 1, 1});
  HostTensor bias = F32({2}, {10, 100});
  Attrs a = attrs({{"strides", Ints{2, 2}},
                   {"pads", Ints{1, 1, 0, 0}},
                   {"dilations", Ints{2, 2}},
                   {"group", int64_t(2)}});
  // Output (4 + 1 - 2 - 1) / 2 + 1 = 2 per dim; taps read rows/cols {2o-1, 2o+1}.
  // Filter 0 at (0,0): only (1,1)=5 is inside -> 15; (0,1): (1,3)=7 -> 17;
  // (1,0): (3,1)=13 -> 23; (1,1): (1,1)+(3,3) = 5+15 -> 30.
  // Filter 1 counts the taps inside: 1, 2, 2, 4.
  CHECK(vals(eval(OpKind::Conv, {x, w, bias}, ElemType::F32, {1, 2, 2, 2}, a)) ==
        std::vector<double>{15, 17, 23, 30, 101, 102, 102, 104});
  HostTensor x1 = F32({1, 1, 5}, {1, 2, 3, 4, 5}), w1 = F32({1, 1, 3}, {1, 0, -1});
  CHECK(vals(eval(OpKind::Conv, {x1, w1}, ElemType::F32, {1, 1, 3},
                  attrs({{"group", int64_t(1)}}))) == std::vector<double>{-2, -2, -2});
  CHECK(evalError(OpKind::Conv, {x, w}, Type::tensor(ElemType::F32, {1, 2, 2, 2}),
                  attrs({{"group", int64_t(1)}}))
            .find("group 1") != std::string::npos);
  CHECK(evalError(OpKind::Conv, {x1, F32({1, 1, 9}, std::vector<double>(9, 1))},
                  Type::tensor(ElemType::F32, {1, 1, 1}))
            .find("larger") != std::string::npos);
}

TEST_CASE("max_pool: padding never wins, ceil_mode, dilation, NaN") {
  auto mp = [](const std::vector<double>& xs, Attrs a, int64_t n) {
    auto len = static_cast<int64_t>(xs.size());
    return vals(eval(OpKind::MaxPool, {F32({1, 1, len}, xs)}, ElemType::F32, {1, 1, n}, a));
  };
  std::vector<double> x = {1, 3, 2, 5, 4};
  CHECK(mp(x, attrs({{"kernel", Ints{2}}, {"strides", Ints{2}}}), 2) == std::vector<double>{3, 5});
  CHECK(mp(x, attrs({{"kernel", Ints{2}}, {"strides", Ints{2}}, {"ceil_mode", int64_t(1)}}), 3) ==
        std::vector<double>{3, 5, 4});
  std::vector<double> neg = {-1, -3, -2, -5, -4};
  CHECK(mp(neg, attrs({{"kernel", Ints{2}}, {"strides", Ints{2}}, {"pads", Ints{1, 1}}}), 3) ==
        std::vector<double>{-1, -2, -4});
  // ceil would give 4 windows, but the last would start inside the end padding.
  CHECK(mp(neg,
           attrs({{"kernel", Ints{2}},
                  {"strides", Ints{2}},
                  {"pads", Ints{1, 1}},
                  {"ceil_mode", int64_t(1)}}),
           3) == std::vector<double>{-1, -2, -4});
  CHECK(mp(x, attrs({{"kernel", Ints{2}}, {"dilations", Ints{2}}}), 3) ==
        std::vector<double>{2, 5, 4});
  CHECK(sameBits(mp({1, kNaN, 2, 3}, attrs({{"kernel", Ints{2}}, {"strides", Ints{2}}}), 2),
                 {kNaN, 3}));
  std::vector<double> nine = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  CHECK(vals(eval(OpKind::MaxPool, {F32({1, 1, 3, 3}, nine)}, ElemType::F32, {1, 1, 2, 2},
                  attrs({{"kernel", Ints{2, 2}}}))) == std::vector<double>{5, 6, 8, 9});
  CHECK(vals(eval(OpKind::MaxPool, {T(ElemType::I8, {1, 1, 2}, {-100, -90})}, ElemType::I8,
                  {1, 1, 2}, attrs({{"kernel", Ints{2}}, {"pads", Ints{1, 0}}}))) ==
        std::vector<double>{-100, -90});
}

TEST_CASE("avg_pool: count_include_pad and ceil_mode") {
  auto ap = [](const std::vector<double>& xs, Attrs a, int64_t n) {
    auto len = static_cast<int64_t>(xs.size());
    return vals(eval(OpKind::AvgPool, {F32({1, 1, len}, xs)}, ElemType::F32, {1, 1, n}, a));
  };
  Ints k2 = {2}, s2 = {2}, p11 = {1, 1};
  CHECK(ap({1, 2, 3, 4}, attrs({{"kernel", k2}, {"strides", s2}, {"pads", p11}}), 3) ==
        std::vector<double>{1, 2.5, 4});
  CHECK(
      ap({1, 2, 3, 4},
         attrs({{"kernel", k2}, {"strides", s2}, {"pads", p11}, {"count_include_pad", int64_t(1)}}),
         3) == std::vector<double>{0.5, 2.5, 2});
  // The ceil_mode window [4, 6) holds one real element and no padding.
  for (int64_t include : {0, 1})
    CHECK(ap({1, 2, 3, 4, 5},
             attrs({{"kernel", k2},
                    {"strides", s2},
                    {"ceil_mode", int64_t(1)},
                    {"count_include_pad", include}}),
             3) == std::vector<double>{1.5, 3.5, 5});
}

TEST_CASE("softmax and log_softmax are stable and NaN on all -inf rows") {
  HostTensor x = T(ElemType::F64, {2, 3}, {1, 2, 3, -kInf, -kInf, -kInf});
  auto s = vals(eval(OpKind::Softmax, {x}, ElemType::F64, {2, 3}, attrs({{"axis", int64_t(-1)}})));
  CHECK(s[0] == doctest::Approx(0.09003057317038046).epsilon(1e-15));
  CHECK(s[1] == doctest::Approx(0.24472847105479764).epsilon(1e-15));
  CHECK(s[2] == doctest::Approx(0.6652409557748218).epsilon(1e-15));
  CHECK(std::isnan(s[3]));
  CHECK(std::isnan(s[5]));
  CHECK(vals(eval(OpKind::Softmax, {F32({2}, {1000, 1000})}, ElemType::F32, {2},
                  attrs({{"axis", int64_t(0)}}))) == std::vector<double>{0.5, 0.5});
  auto l =
      vals(eval(OpKind::LogSoftmax, {x}, ElemType::F64, {2, 3}, attrs({{"axis", int64_t(1)}})));
  CHECK(l[0] == doctest::Approx(-2.4076059644443806).epsilon(1e-15));
  CHECK(l[2] == doctest::Approx(-0.4076059644443804).epsilon(1e-15));
  // Softmax down the columns of [[1, 1], [1, 1]] is 0.5 everywhere.
  CHECK(vals(eval(OpKind::Softmax, {F32({2, 2}, {1, 1, 1, 1})}, ElemType::F32, {2, 2},
                  attrs({{"axis", int64_t(0)}}))) == std::vector<double>{0.5, 0.5, 0.5, 0.5});
}

TEST_CASE("reshape, transpose and broadcast") {
  HostTensor x = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(vals(eval(OpKind::Reshape, {x}, ElemType::F32, {3, 2})) ==
        std::vector<double>{1, 2, 3, 4, 5, 6});
  auto r = evalAll(OpKind::Reshape, {x}, Type(ElemType::F32, Shape{Dim::unknown(), Dim(2)}));
  REQUIRE(r.ok());
  CHECK((*r)[0].shape() == Ints{3, 2});
  CHECK(evalError(OpKind::Reshape, {x}, Type::tensor(ElemType::F32, {4, 2})).find("6 elements") !=
        std::string::npos);
  CHECK(vals(eval(OpKind::Transpose, {x}, ElemType::F32, {3, 2}, attrs({{"perm", Ints{1, 0}}}))) ==
        std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(evalError(OpKind::Transpose, {x}, Type::tensor(ElemType::F32, {3, 2}),
                  attrs({{"perm", Ints{1, 1}}}))
            .find("permutation") != std::string::npos);
  CHECK(vals(eval(OpKind::Broadcast, {F32({3}, {1, 2, 3})}, ElemType::F32, {2, 3})) ==
        std::vector<double>{1, 2, 3, 1, 2, 3});
  CHECK(vals(eval(OpKind::Broadcast, {F32({2, 1}, {1, 2})}, ElemType::F32, {2, 2})) ==
        std::vector<double>{1, 1, 2, 2});
  CHECK(evalError(OpKind::Broadcast, {F32({2}, {1, 2})}, Type::tensor(ElemType::F32, {3}))
            .find("cannot broadcast") != std::string::npos);
}

TEST_CASE("concat and split") {
  HostTensor a = F32({2, 1}, {1, 2}), b = F32({2, 2}, {3, 4, 5, 6});
  CHECK(vals(eval(OpKind::Concat, {a, b}, ElemType::F32, {2, 3}, attrs({{"axis", int64_t(1)}}))) ==
        std::vector<double>{1, 3, 4, 2, 5, 6});
  CHECK(evalError(OpKind::Concat, {a, b}, Type::tensor(ElemType::F32, {4, 2}),
                  attrs({{"axis", int64_t(0)}}))
            .find("does not match") != std::string::npos);
  HostTensor x = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto r = evalAll(OpKind::Split, {x},
                   {Type::tensor(ElemType::F32, {2, 1}), Type::tensor(ElemType::F32, {2, 2})},
                   attrs({{"axis", int64_t(1)}, {"sizes", Ints{1, 2}}}));
  REQUIRE(r.ok());
  CHECK(vals((*r)[0]) == std::vector<double>{1, 4});
  CHECK(vals((*r)[1]) == std::vector<double>{2, 3, 5, 6});
  CHECK(evalError(OpKind::Split, {x}, Type::tensor(ElemType::F32, {2, 2}),
                  attrs({{"axis", int64_t(1)}, {"sizes", Ints{2}}}))
            .find("sum") != std::string::npos);
}

TEST_CASE("slice follows python slicing, negative steps included") {
  std::vector<double> ten;
  for (int i = 0; i < 10; ++i) ten.push_back(i);
  HostTensor x = F32({10}, ten);
  auto sl = [&](int64_t s, int64_t e, int64_t st, int64_t n) {
    return vals(eval(
        OpKind::Slice, {x}, ElemType::F32, {n},
        attrs({{"starts", Ints{s}}, {"ends", Ints{e}}, {"axes", Ints{0}}, {"steps", Ints{st}}})));
  };
  CHECK(sl(-1, INT64_MIN, -1, 10) == std::vector<double>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
  CHECK(sl(8, 1, -3, 3) == std::vector<double>{8, 5, 2});
  CHECK(sl(2, 100, 3, 3) == std::vector<double>{2, 5, 8});
  CHECK(sl(-3, INT64_MAX, 1, 3) == std::vector<double>{7, 8, 9});
  CHECK(sl(5, 2, 1, 0).empty());
  CHECK(sl(100, -100, INT64_MIN, 1) == std::vector<double>{9});
  HostTensor m = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(vals(eval(OpKind::Slice, {m}, ElemType::F32, {2, 2},
                  attrs({{"starts", Ints{1}},
                         {"ends", Ints{3}},
                         {"axes", Ints{-1}},
                         {"steps", Ints{1}}}))) == std::vector<double>{2, 3, 5, 6});
  CHECK(evalError(
            OpKind::Slice, {x}, Type::tensor(ElemType::F32, {1}),
            attrs({{"starts", Ints{0}}, {"ends", Ints{1}}, {"axes", Ints{0}}, {"steps", Ints{0}}}))
            .find("step 0") != std::string::npos);
}

TEST_CASE("gather and gather_elements, with out-of-range indices as located errors") {
  HostTensor x = F32({3, 2}, {1, 2, 3, 4, 5, 6});
  CHECK(vals(eval(OpKind::Gather, {x, I64s({2}, {2, -3})}, ElemType::F32, {2, 2},
                  attrs({{"axis", int64_t(0)}}))) == std::vector<double>{5, 6, 1, 2});
  CHECK(vals(eval(OpKind::Gather, {x, T(ElemType::I32, {}, {1})}, ElemType::F32, {3},
                  attrs({{"axis", int64_t(1)}}))) == std::vector<double>{2, 4, 6});
  auto r = evalAll(OpKind::Gather, {x, I64s({2}, {0, 3})}, Type::tensor(ElemType::F32, {2, 2}),
                   attrs({{"axis", int64_t(0)}}));
  REQUIRE_FALSE(r.ok());
  CHECK(r.diags().list[0].loc == Loc{"t.kir", 3, 7});
  CHECK(r.diags().list[0].message == "gather: index 3 is out of range [-3, 3)");
  CHECK(evalError(OpKind::Gather, {x, F32({1}, {0})}, Type::tensor(ElemType::F32, {1, 2}),
                  attrs({{"axis", int64_t(0)}}))
            .find("integer") != std::string::npos);
  HostTensor y = F32({2, 2}, {1, 2, 3, 4});
  CHECK(vals(eval(OpKind::GatherElements, {y, I64s({2, 2}, {0, 0, 1, 0})}, ElemType::F32, {2, 2},
                  attrs({{"axis", int64_t(1)}}))) == std::vector<double>{1, 1, 4, 3});
  CHECK(vals(eval(OpKind::GatherElements, {y, I64s({1, 2}, {1, -2})}, ElemType::F32, {1, 2},
                  attrs({{"axis", int64_t(0)}}))) == std::vector<double>{3, 2});
  CHECK(evalError(OpKind::GatherElements, {y, I64s({1, 1}, {-3})},
                  Type::tensor(ElemType::F32, {1, 1}), attrs({{"axis", int64_t(1)}}))
            .find("index -3 is out of range [-2, 2)") != std::string::npos);
}

TEST_CASE("scatter_nd: overwrite in order, reductions, slices, range errors") {
  HostTensor data = F32({4}, {1, 2, 3, 4});
  auto sc = [&](const Ints& idx, const std::vector<double>& upd, const char* red) {
    auto n = static_cast<int64_t>(idx.size());
    return vals(eval(OpKind::ScatterNd, {data, I64s({n, 1}, idx), F32({n}, upd)}, ElemType::F32,
                     {4}, attrs({{"reduction", red}})));
  };
  CHECK(sc({1, 3}, {10, 20}, "none") == std::vector<double>{1, 10, 3, 20});
  CHECK(sc({1, 1}, {10, 20}, "none") == std::vector<double>{1, 20, 3, 4});
  CHECK(sc({1, 1, 3}, {10, 20, 30}, "add") == std::vector<double>{1, 32, 3, 34});
  CHECK(sc({1, 1, 3}, {10, 20, 30}, "mul") == std::vector<double>{1, 400, 3, 120});
  CHECK(sc({0, 0}, {5, -1}, "max") == std::vector<double>{5, 2, 3, 4});
  CHECK(sc({0, 0}, {5, -1}, "min") == std::vector<double>{-1, 2, 3, 4});
  CHECK(sc({-1}, {7}, "none") == std::vector<double>{1, 2, 3, 7});
  HostTensor m = F32({2, 2}, {0, 0, 0, 0});
  CHECK(vals(eval(OpKind::ScatterNd, {m, I64s({1, 1}, {1}), F32({1, 2}, {7, 8})}, ElemType::F32,
                  {2, 2})) == std::vector<double>{0, 0, 7, 8});
  CHECK(evalError(OpKind::ScatterNd, {data, I64s({1, 1}, {4}), F32({1}, {0})},
                  Type::tensor(ElemType::F32, {4}))
            .find("index 4 is out of range [-4, 4)") != std::string::npos);
  CHECK(evalError(OpKind::ScatterNd, {data, I64s({1, 1}, {0}), F32({2}, {0, 0})},
                  Type::tensor(ElemType::F32, {4}))
            .find("updates have shape") != std::string::npos);
}

TEST_CASE("pad: constant, reflect, edge, negative pads crop") {
  HostTensor x = F32({3}, {1, 2, 3});
  auto pad = [&](Ints pads, const char* mode, int64_t n, double v = 0) {
    return vals(eval(OpKind::Pad, {x}, ElemType::F32, {n},
                     attrs({{"pads", pads}, {"mode", mode}, {"value", v}})));
  };
  CHECK(pad({1, 2}, "constant", 6, 9) == std::vector<double>{9, 1, 2, 3, 9, 9});
  CHECK(pad({2, 2}, "reflect", 7) == std::vector<double>{3, 2, 1, 2, 3, 2, 1});
  CHECK(pad({2, 1}, "edge", 6) == std::vector<double>{1, 1, 1, 2, 3, 3});
  CHECK(pad({-1, 1}, "constant", 3) == std::vector<double>{2, 3, 0});
  CHECK(pad({0, -3}, "reflect", 0).empty());
  HostTensor m = T(ElemType::I32, {2, 2}, {1, 2, 3, 4});
  CHECK(vals(eval(OpKind::Pad, {m}, ElemType::I32, {3, 3},
                  attrs({{"pads", Ints{1, 0, 0, 1}}, {"mode", "constant"}, {"value", 7.0}}))) ==
        std::vector<double>{7, 7, 7, 1, 2, 7, 3, 4, 7});
  CHECK(evalError(OpKind::Pad, {x}, Type::tensor(ElemType::F32, {3}),
                  attrs({{"pads", Ints{-2, -2}}, {"mode", "constant"}}))
            .find("do not fit") != std::string::npos);
  CHECK(evalError(OpKind::Pad, {x}, Type::tensor(ElemType::F32, {3}),
                  attrs({{"pads", Ints{0, 0}}, {"mode", "wrap"}}))
            .find("mode") != std::string::npos);
}

TEST_CASE("triu and tril") {
  HostTensor x = F32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto tri = [&](OpKind k, int64_t d) {
    return vals(eval(k, {x}, ElemType::F32, {3, 3}, attrs({{"k", d}})));
  };
  CHECK(tri(OpKind::Triu, 0) == std::vector<double>{1, 2, 3, 0, 5, 6, 0, 0, 9});
  CHECK(tri(OpKind::Triu, 1) == std::vector<double>{0, 2, 3, 0, 0, 6, 0, 0, 0});
  CHECK(tri(OpKind::Tril, 0) == std::vector<double>{1, 0, 0, 4, 5, 0, 7, 8, 9});
  CHECK(tri(OpKind::Tril, -1) == std::vector<double>{0, 0, 0, 4, 0, 0, 7, 8, 0});
  CHECK(evalError(OpKind::Triu, {F32({2}, {1, 2})}, Type::tensor(ElemType::F32, {2}))
            .find("rank 2") != std::string::npos);
}

TEST_CASE("sources: constant, iota, range, dim") {
  HostTensor c = F32({2}, {1.5, -2});
  CHECK(vals(eval(OpKind::Constant, {}, ElemType::F32, {2}, attrs({{"value", c}}))) ==
        std::vector<double>{1.5, -2});
  CHECK(evalError(OpKind::Constant, {}, Type::tensor(ElemType::F32, {3}), attrs({{"value", c}}))
            .find("internal") != std::string::npos);
  CHECK(ivals(eval(OpKind::Iota, {}, ElemType::I32, {2, 3}, attrs({{"axis", int64_t(1)}}))) ==
        Ints{0, 1, 2, 0, 1, 2});
  CHECK(vals(eval(OpKind::Iota, {}, ElemType::F32, {2, 2}, attrs({{"axis", int64_t(0)}}))) ==
        std::vector<double>{0, 0, 1, 1});
  CHECK(vals(eval(OpKind::Range, {}, ElemType::F32, {4},
                  attrs({{"start", 1.0}, {"delta", 0.5}}))) == std::vector<double>{1, 1.5, 2, 2.5});
  CHECK(vals(eval(OpKind::Range, {}, ElemType::I32, {4},
                  attrs({{"start", 0.0}, {"delta", 2.5}}))) == std::vector<double>{0, 2, 5, 7});
  CHECK(ivals(eval(OpKind::Dim, {F32({2, 3}, {0, 0, 0, 0, 0, 0})}, ElemType::I64, {},
                   attrs({{"axis", int64_t(1)}}))) == Ints{3});
}

TEST_CASE("weight reads the store, and needs one") {
  CHECK(evalError(OpKind::Weight, {}, Type::tensor(ElemType::F32, {2}), attrs({{"name", "w"}}))
            .find("weight store") != std::string::npos);
  std::string path =
      (std::filesystem::temp_directory_path() / "kiln_interp_weight.safetensors").string();
  REQUIRE(writeSafetensors(path, {{"w", F32({2}, {3, 4})}}).ok());
  Module m;
  REQUIRE(
      m.addWeight(WeightDecl{"w", Type::tensor(ElemType::F32, {2}), path, "w", Loc{}, std::nullopt})
          .ok());
  auto f = std::make_unique<Func>("main", Loc{});
  Func* fn = m.addFunc(std::move(f));
  Builder b(fn);
  Value* w = b.createUnchecked(OpKind::Weight, {}, attrs({{"name", "w"}}),
                               {Type::tensor(ElemType::F32, {2})})
                 ->result();
  b.createUnchecked(OpKind::Return, {w}, {}, {});
  WeightStore store(m);
  auto r = interpret(*fn, {}, store);
  INFO(errorText(r));
  REQUIRE(r.ok());
  CHECK(vals((*r)[0]) == std::vector<double>{3, 4});
  Builder before(fn, fn->terminator());
  before.setLoc(Loc{"w.kir", 5, 1});
  before.createUnchecked(OpKind::Weight, {}, attrs({{"name", "nope"}}),
                         {Type::tensor(ElemType::F32, {2})});
  auto missing = interpret(*fn, {}, store);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.diags().list[0].message.find("nope") != std::string::npos);
  CHECK(missing.diags().list[0].loc == Loc{"w.kir", 5, 1});
  std::filesystem::remove(path);
}

TEST_CASE("results over 2^31 elements are refused before allocating") {
  CHECK(evalError(OpKind::Broadcast, {F32({1}, {1})}, Type::tensor(ElemType::F32, {65536, 65536}))
            .find("2^31") != std::string::npos);
  CHECK(evalError(OpKind::Iota, {}, Type::tensor(ElemType::I8, {INT64_MAX, 4}),
                  attrs({{"axis", int64_t(0)}}))
            .find("2^31") != std::string::npos);
  CHECK(evalError(OpKind::Pad, {F32({1}, {1})}, Type::tensor(ElemType::F32, {1}),
                  attrs({{"pads", Ints{int64_t(1) << 40, 0}}, {"mode", "constant"}}))
            .find("2^31") != std::string::npos);
  // An empty operand whose other dims multiply past 2^31 is refused too, so no kernel
  // loops over them.
  HostTensor wide = F32({int64_t(1) << 40, 0}, {});
  CHECK(evalError(OpKind::Neg, {wide}, Type::tensor(ElemType::F32, {int64_t(1) << 40, 0}))
            .find("too large") != std::string::npos);
  CHECK(evalError(OpKind::Conv, {F32({1, 2, 1}, {1, 1}), F32({1, 1, 1}, {1})},
                  Type::tensor(ElemType::F32, {1, 1, 1}), attrs({{"group", INT64_MAX}}))
            .find("does not fit") != std::string::npos);
}

namespace {

// @main(%x: tensor<{n}xf32>, %y: tensor<{n}xf32>) -> %x + %y, with `n in [2, 8]
// divisible_by 2`, built directly (independent of the parser).
struct SymbolicAdd {
  Module m;
  Func* fn = nullptr;
  SymbolicAdd() {
    REQUIRE(m.symbols().declare(SymbolInfo{"n", 2, 8, 2, Loc{}}).ok());
    fn = m.addFunc(std::make_unique<Func>("main", Loc{"sym.kir", 1, 1}));
    Type t(ElemType::F32, Shape{Dim(SymExpr::symbol("n"))});
    Value* x = fn->addArg(t, "x");
    Value* y = fn->addArg(t, "y");
    Builder b(fn);
    Value* s = b.createUnchecked(OpKind::Add, {x, y}, {}, {t})->result();
    b.createUnchecked(OpKind::Return, {s}, {}, {});
  }
  Result<std::vector<HostTensor>> run(const std::vector<HostTensor>& in) {
    WeightStore store(m);
    return interpret(*fn, in, store);
  }
};

std::string firstError(const Result<std::vector<HostTensor>>& r) {
  REQUIRE_FALSE(r.ok());
  return r.diags().list[0].message;
}

} // namespace

TEST_CASE("interpret binds symbols and checks inputs") {
  SymbolicAdd f;
  auto r = f.run({F32({4}, {1, 2, 3, 4}), F32({4}, {10, 20, 30, 40})});
  INFO(errorText(r));
  REQUIRE(r.ok());
  CHECK(vals((*r)[0]) == std::vector<double>{11, 22, 33, 44});
  CHECK(firstError(f.run({F32({4}, {1, 2, 3, 4})})) == "@main takes 2 inputs, got 1");
  CHECK(firstError(f.run({F32({2}, {1, 2}), T(ElemType::F64, {2}, {1, 2})}))
            .find("input 1 (%y) has element type f64") != std::string::npos);
  CHECK(firstError(f.run({F32({2}, {1, 2}), F32({1, 2}, {1, 2})})).find("has shape [1, 2]") !=
        std::string::npos);
  CHECK(firstError(f.run({F32({2}, {1, 2}), F32({4}, {1, 2, 3, 4})})) ==
        "input 1 (%y) binds symbol 'n' to 4, but an earlier input bound it to 2");
  std::string range =
      firstError(f.run({F32({10}, std::vector<double>(10)), F32({10}, std::vector<double>(10))}));
  CHECK(range == "input 0 (%x) binds symbol 'n' to 10, outside its range [2, 8]");
  std::string div = firstError(f.run({F32({3}, {1, 2, 3}), F32({3}, {1, 2, 3})}));
  CHECK(div.find("'n' to 3, which is not divisible by 2") != std::string::npos);
}

TEST_CASE("interpret evaluates symbolic dims and checks results against their types") {
  Module m;
  REQUIRE(m.symbols().declare(SymbolInfo{"n", 1, 16, 1, Loc{}}).ok());
  Func* fn = m.addFunc(std::make_unique<Func>("main", Loc{}));
  SymExpr n = SymExpr::symbol("n");
  // %x: tensor<{n}x2xf32>, %y: tensor<{2*n}xf32> (checked after n is bound).
  Value* x = fn->addArg(Type(ElemType::F32, Shape{Dim(n), Dim(2)}), "x");
  Value* y = fn->addArg(Type(ElemType::F32, Shape{Dim(SymExpr::constant(2) * n)}), "y");
  Builder b(fn);
  Type flat(ElemType::F32, Shape{Dim(SymExpr::constant(2) * n)});
  Value* r = b.createUnchecked(OpKind::Reshape, {x}, {}, {flat})->result();
  Value* s = b.createUnchecked(OpKind::Add, {r, y}, {}, {flat})->result();
  Value* d = b.createUnchecked(OpKind::Dim, {x}, attrs({{"axis", int64_t(0)}}),
                               {Type::tensor(ElemType::I64, {})})
                 ->result();
  b.createUnchecked(OpKind::Return, {s, d}, {}, {});
  WeightStore store(m);
  auto out = interpret(*fn, {F32({3, 2}, {1, 2, 3, 4, 5, 6}), F32({6}, {1, 1, 1, 1, 1, 1})}, store);
  INFO(errorText(out));
  REQUIRE(out.ok());
  CHECK(vals((*out)[0]) == std::vector<double>{2, 3, 4, 5, 6, 7});
  CHECK(ivals((*out)[1]) == Ints{3});
  auto bad = interpret(*fn, {F32({3, 2}, {1, 2, 3, 4, 5, 6}), F32({5}, {1, 1, 1, 1, 1})}, store);
  CHECK(firstError(bad).find("dim {2*n} evaluates to 6") != std::string::npos);

  // An op whose declared type disagrees with what it computes is an internal error.
  Module m2;
  Func* g = m2.addFunc(std::make_unique<Func>("g", Loc{}));
  Value* a = g->addArg(Type::tensor(ElemType::F32, {2}), "a");
  Builder gb(g);
  gb.setLoc(Loc{"g.kir", 4, 3});
  Value* neg =
      gb.createUnchecked(OpKind::Neg, {a}, {}, {Type::tensor(ElemType::F32, {3})})->result();
  gb.createUnchecked(OpKind::Return, {neg}, {}, {});
  WeightStore store2(m2);
  auto lie = interpret(*g, {F32({2}, {1, 2})}, store2);
  REQUIRE_FALSE(lie.ok());
  CHECK(lie.diags().list[0].loc == Loc{"g.kir", 4, 3});
  CHECK(lie.diags().list[0].message.find("neg: internal") == 0);
}

TEST_CASE("an input without data is refused, not read") {
  Module m;
  Func* fn = m.addFunc(std::make_unique<Func>("main", Loc{}));
  Value* x = fn->addArg(Type::tensor(ElemType::F32, {}), "x");
  Builder b(fn);
  Value* y = b.createUnchecked(OpKind::Neg, {x}, {}, {Type::tensor(ElemType::F32, {})})->result();
  b.createUnchecked(OpKind::Return, {y}, {}, {});
  WeightStore store(m);
  CHECK(firstError(interpret(*fn, {HostTensor()}, store)) == "neg: operand 0 has no data");
  auto ok = interpret(*fn, {F32({}, {2})}, store);
  REQUIRE(ok.ok());
  CHECK(vals((*ok)[0]) == std::vector<double>{-2});
}

TEST_CASE("collectives: all_reduce in f64 in operand order, all_gather, reduce_scatter") {
  HostTensor a = F32({2, 2}, {1, 2, 3, 4}), b = F32({2, 2}, {10, 20, 30, 40});
  Type t = Type::tensor(ElemType::F32, {2, 2});
  Attrs sum;
  sum.set("reduce", std::string("sum"));
  auto r = evalAll(OpKind::AllReduce, {a, b}, std::vector<Type>{t, t}, sum);
  REQUIRE(r.ok());
  REQUIRE(r->size() == 2);
  CHECK(vals((*r)[0]) == std::vector<double>{11, 22, 33, 44});
  CHECK(vals((*r)[1]) == vals((*r)[0]));
  // The sum is rounded once: 1 + 2^-24 + 2^-24 in f32 steps would stay 1.
  HostTensor one = F32({1}, {1}), tiny = F32({1}, {std::ldexp(1.0, -24)});
  Type t1 = Type::tensor(ElemType::F32, {1});
  auto r3 = evalAll(OpKind::AllReduce, {one, tiny, tiny}, std::vector<Type>{t1, t1, t1}, sum);
  REQUIRE(r3.ok());
  CHECK((*r3)[2].getF(0) == 1 + std::ldexp(1.0, -23));
  Attrs max;
  max.set("reduce", std::string("max"));
  auto m = evalAll(
      OpKind::AllReduce, {F32({2}, {1, kNaN}), F32({2}, {5, 0})},
      std::vector<Type>{Type::tensor(ElemType::F32, {2}), Type::tensor(ElemType::F32, {2})}, max);
  REQUIRE(m.ok());
  CHECK(sameBits(vals((*m)[0]), {5, kNaN}));
  Attrs axis1;
  axis1.set("axis", int64_t{1});
  Type g = Type::tensor(ElemType::F32, {2, 4});
  auto gathered = evalAll(OpKind::AllGather, {a, b}, std::vector<Type>{g, g}, axis1);
  REQUIRE(gathered.ok());
  CHECK(vals((*gathered)[1]) == std::vector<double>{1, 2, 10, 20, 3, 4, 30, 40});
  Attrs scatter = sum;
  scatter.set("axis", int64_t{1});
  Type s = Type::tensor(ElemType::F32, {2, 1});
  auto scattered = evalAll(OpKind::ReduceScatter, {a, b}, std::vector<Type>{s, s}, scatter);
  REQUIRE(scattered.ok());
  CHECK(vals((*scattered)[0]) == std::vector<double>{11, 33});
  CHECK(vals((*scattered)[1]) == std::vector<double>{22, 44});
  // Integers wrap in their type.
  HostTensor i8a(ElemType::I8, {1}), i8b(ElemType::I8, {1});
  i8a.setI(0, 100);
  i8b.setI(0, 100);
  Type ti = Type::tensor(ElemType::I8, {1});
  auto wrapped = evalAll(OpKind::AllReduce, {i8a, i8b}, std::vector<Type>{ti, ti}, sum);
  REQUIRE(wrapped.ok());
  CHECK((*wrapped)[0].getI(0) == -56);
  auto bad = evalAll(OpKind::AllReduce, {a, F32({4}, {1, 2, 3, 4})}, std::vector<Type>{t, t}, sum);
  CHECK(!bad.ok());
}
