// Unit tests for the shape rules: broadcasting, and the result types of every op in
// ops.def, with static, symbolic and unknown dims and the errors for bad operands.
#include <algorithm>
#include <doctest/doctest.h>

#include "ir/core/shape_rules.h"

using namespace kiln;

namespace {

const Loc kLoc{"m.kir", 4, 7};

Dim sym(const char* name) { return Dim(SymExpr::symbol(name)); }
Dim unk() { return Dim::unknown(); }

Type T(std::initializer_list<Dim> dims, ElemType e = ElemType::F32) { return Type(e, Shape(dims)); }

SymbolTable symbols() {
  SymbolTable t;
  REQUIRE(t.declare({"seq", 1, 4096, 1, {}}).ok());
  REQUIRE(t.declare({"n", 2, 64, 1, {}}).ok());
  REQUIRE(t.declare({"b", 8, 64, 8, {}}).ok());
  REQUIRE(t.declare({"nz", 0, 64, 1, {}, true}).ok());
  return t;
}

struct Attr {
  std::string name;
  AttrValue value;
};

Attrs attrs(std::initializer_list<Attr> list) {
  Attrs a;
  for (const Attr& x : list) a.set(x.name, x.value);
  return a;
}

using Ints = std::vector<int64_t>;

Result<std::vector<Type>> run(OpKind k, std::vector<Type> ops, Attrs a = {},
                              std::vector<Type> declared = {}) {
  static const SymbolTable syms = symbols();
  return inferResultTypes(k, ops, a, declared, syms, kLoc);
}

// The single result type as text, or the first error.
std::string infer(OpKind k, std::vector<Type> ops, Attrs a = {}, std::vector<Type> declared = {}) {
  auto r = run(k, std::move(ops), std::move(a), std::move(declared));
  if (!r.ok()) return r.diags().list.at(0).str();
  std::string out;
  for (const Type& t : *r) out += (out.empty() ? "" : ", ") + t.str();
  return out;
}

std::string err(const std::string& msg) { return "m.kir:4:7: error: " + msg + "\n"; }

} // namespace

TEST_CASE("broadcastShapes follows numpy on symbolic dims") {
  SymbolTable syms = symbols();
  auto bc = [&](Shape a, Shape b) {
    auto r = broadcastShapes(a, b, syms, kLoc);
    return r.ok() ? Type(ElemType::F32, *r).str() : r.diags().list[0].str();
  };
  CHECK(bc({2, 3, 4}, {4}) == "tensor<2x3x4xf32>");
  CHECK(bc({2, 1, 4}, {3, 1}) == "tensor<2x3x4xf32>");
  CHECK(bc({}, {5}) == "tensor<5xf32>");
  CHECK(bc({}, {}) == "tensor<f32>");
  CHECK(bc({sym("seq"), 4}, {sym("seq"), 1}) == "tensor<{seq}x4xf32>");
  CHECK(bc({1, 4}, {sym("seq"), 4}) == "tensor<{seq}x4xf32>");
  // n >= 2 cannot be 1, so seq must be 1 or n.
  CHECK(bc({sym("seq")}, {sym("n")}) == "tensor<{n}xf32>");
  // Both may be 1: the result is whichever is larger.
  CHECK(bc({sym("seq")}, {sym("x")}) == "tensor<{max(seq, x)}xf32>");
  CHECK(bc({unk()}, {4}) == "tensor<4xf32>");
  CHECK(bc({unk()}, {1}) == "tensor<?xf32>");
  CHECK(bc({unk()}, {sym("seq")}) == "tensor<?xf32>");
  CHECK(bc({unk()}, {sym("n")}) == "tensor<{n}xf32>");
  CHECK(bc({unk(), 3}, {unk(), 3}) == "tensor<?x3xf32>");
  CHECK(bc({3}, {4}) == "m.kir:4:7: error: shapes [3] and [4] do not broadcast\n");
  CHECK(bc({sym("b")}, {4}) == "m.kir:4:7: error: shapes [{b}] and [4] do not broadcast\n");
  CHECK(
      bc({sym("n")}, {Dim(SymExpr::symbol("n") * SymExpr::constant(2))}).find("do not broadcast") !=
      std::string::npos);
  CHECK(bc({sym("b")}, {8}) == "tensor<{b}xf32>"); // b may be 8
}

TEST_CASE("elementwise unary ops keep the type and check element classes") {
  Type x = T({2, sym("seq")});
  CHECK(infer(OpKind::Exp, {x}) == "tensor<2x{seq}xf32>");
  CHECK(infer(OpKind::Neg, {T({3}, ElemType::I32)}) == "tensor<3xi32>");
  CHECK(infer(OpKind::IsNan, {x}) == "tensor<2x{seq}xi1>");
  CHECK(infer(OpKind::Not, {T({3}, ElemType::I1)}) == "tensor<3xi1>");
  CHECK(infer(OpKind::Exp, {T({3}, ElemType::I32)}) ==
        err("exp: operand 0 has element type i32, expected a float type"));
  CHECK(infer(OpKind::Relu, {T({3}, ElemType::I1)}) ==
        err("relu: operand 0 has element type i1, expected a numeric type"));
  CHECK(infer(OpKind::Not, {T({3})}) == err("not: operand 0 has element type f32, expected i1"));
  CHECK(infer(OpKind::Gelu, {x}, attrs({{"approximate", std::string("tanh")}})) ==
        "tensor<2x{seq}xf32>");
  CHECK(infer(OpKind::Gelu, {x}, attrs({{"approximate", std::string("fast")}})) ==
        err("gelu: approximate \"fast\" is not one of \"none\", \"tanh\""));
  CHECK(infer(OpKind::Exp, {}) == err("exp: expects 1 operands, got 0"));
  for (OpKind k : {OpKind::Abs, OpKind::Sqrt, OpKind::Rsqrt, OpKind::Reciprocal, OpKind::Tanh,
                   OpKind::Sigmoid, OpKind::Erf, OpKind::Silu, OpKind::Sin, OpKind::Cos,
                   OpKind::Floor, OpKind::Ceil, OpKind::Round, OpKind::Sign, OpKind::Log})
    CHECK(infer(k, {x}) == "tensor<2x{seq}xf32>");
  CHECK(infer(OpKind::IsInf, {T({1}, ElemType::F16)}) == "tensor<1xi1>");
}

TEST_CASE("elementwise binary ops broadcast and check element types") {
  CHECK(infer(OpKind::Add, {T({2, 1}), T({3})}) == "tensor<2x3xf32>");
  CHECK(infer(OpKind::Add, {T({3}), T({4})}) ==
        err("add: operand shapes tensor<3xf32> and tensor<4xf32> do not broadcast"));
  CHECK(infer(OpKind::Mul, {T({3}), T({3}, ElemType::F16)}) ==
        err("mul: operand element types f32 and f16 differ"));
  CHECK(infer(OpKind::Lt, {T({sym("seq"), 1}, ElemType::I64), T({1, 5}, ElemType::I64)}) ==
        "tensor<{seq}x5xi1>");
  CHECK(infer(OpKind::Eq, {T({2}, ElemType::I1), T({2}, ElemType::I1)}) == "tensor<2xi1>");
  CHECK(infer(OpKind::And, {T({2}, ElemType::I1), T({1}, ElemType::I1)}) == "tensor<2xi1>");
  CHECK(infer(OpKind::Or, {T({2}), T({2})}) ==
        err("or: operand 0 has element type f32, expected i1"));
  CHECK(infer(OpKind::Pow, {T({2}, ElemType::I1), T({2}, ElemType::I1)}) ==
        err("pow: operand 0 has element type i1, expected a numeric type"));
  for (OpKind k : {OpKind::Sub, OpKind::Div, OpKind::Max, OpKind::Min, OpKind::Mod})
    CHECK(infer(k, {T({4, 1}, ElemType::I8), T({4}, ElemType::I8)}) == "tensor<4x4xi8>");
  for (OpKind k : {OpKind::Ne, OpKind::Le, OpKind::Gt, OpKind::Ge})
    CHECK(infer(k, {T({unk()}), T({7})}) == "tensor<7xi1>");
  CHECK(infer(OpKind::Xor, {T({}, ElemType::I1), T({2, 2}, ElemType::I1)}) == "tensor<2x2xi1>");
  CHECK(infer(OpKind::Add, {T({3})}) == err("add: expects 2 operands, got 1"));
}

TEST_CASE("select, clamp and cast") {
  Type cond = T({sym("seq"), 1}, ElemType::I1);
  CHECK(infer(OpKind::Select, {cond, T({1, 4}), T({4})}) == "tensor<{seq}x4xf32>");
  CHECK(infer(OpKind::Select, {T({4}), T({4}), T({4})}) ==
        err("select: condition has element type f32, expected i1"));
  CHECK(infer(OpKind::Select, {cond, T({4}), T({4}, ElemType::I32)}) ==
        err("select: operand element types f32 and i32 differ"));
  CHECK(infer(OpKind::Select, {T({2}, ElemType::I1), T({3}), T({3})}) ==
        err("select: operand shapes tensor<2xi1>, tensor<3xf32> and tensor<3xf32> do not "
            "broadcast"));
  CHECK(infer(OpKind::Clamp, {T({2, 3}), T({}), T({3})}) == "tensor<2x3xf32>");
  CHECK(infer(OpKind::Clamp, {T({2, 3}), T({}, ElemType::F64), T({3})}) ==
        err("clamp: operand element types f32 and f64 differ"));
  CHECK(infer(OpKind::Cast, {T({2, sym("n")})}, attrs({{"to", ElemType::F16}})) ==
        "tensor<2x{n}xf16>");
  CHECK(infer(OpKind::Cast, {T({2})}) == err("cast: needs a type attribute 'to'"));
}

TEST_CASE("reductions normalize axes") {
  Type x = T({2, sym("seq"), 5}, ElemType::I32);
  auto red = [&](Ints axes, int64_t keep) {
    return infer(OpKind::ReduceSum, {x}, attrs({{"axes", axes}, {"keepdims", keep}}));
  };
  CHECK(red({1}, 0) == "tensor<2x5xi32>");
  CHECK(red({-1, 0}, 1) == "tensor<1x{seq}x1xi32>");
  CHECK(red({}, 0) == "tensor<i32>");
  CHECK(red({}, 1) == "tensor<1x1x1xi32>");
  CHECK(red({3}, 0) == err("reduce_sum: axis 3 is out of range for rank 3"));
  CHECK(red({-4}, 0) == err("reduce_sum: axis -4 is out of range for rank 3"));
  CHECK(red({1, -2}, 0) == err("reduce_sum: axis -2 is listed twice in axes"));
  CHECK(red({0}, 2) == err("reduce_sum: keepdims must be 0 or 1, got 2"));
  for (OpKind k : {OpKind::ReduceMean, OpKind::ReduceMax, OpKind::ReduceMin, OpKind::ReduceProd})
    CHECK(infer(k, {x}, attrs({{"axes", Ints{2}}, {"keepdims", int64_t{0}}})) ==
          "tensor<2x{seq}xi32>");
  CHECK(infer(OpKind::ReduceSum, {T({}, ElemType::I32)},
              attrs({{"axes", Ints{}}, {"keepdims", int64_t{0}}})) == "tensor<i32>");
  CHECK(infer(OpKind::ReduceSum, {T({2}, ElemType::I1)},
              attrs({{"axes", Ints{}}, {"keepdims", int64_t{0}}})) ==
        err("reduce_sum: operand 0 has element type i1, expected a numeric type"));

  CHECK(infer(OpKind::ArgMax, {x}, attrs({{"axis", int64_t{-2}}, {"keepdims", int64_t{0}}})) ==
        "tensor<2x5xi64>");
  CHECK(infer(OpKind::ArgMin, {x}, attrs({{"axis", int64_t{1}}, {"keepdims", int64_t{1}}})) ==
        "tensor<2x1x5xi64>");
  CHECK(infer(OpKind::ArgMax, {T({})}, attrs({{"axis", int64_t{0}}, {"keepdims", int64_t{0}}})) ==
        err("argmax: axis 0 is out of range for rank 0"));
  CHECK(infer(OpKind::Cumsum, {x}, attrs({{"axis", int64_t{2}}})) == "tensor<2x{seq}x5xi32>");
  CHECK(infer(OpKind::Cumsum, {x}, attrs({{"axis", int64_t{3}}})) ==
        err("cumsum: axis 3 is out of range for rank 3"));
  CHECK(infer(OpKind::Softmax, {T({4, 8})}, attrs({{"axis", int64_t{-1}}})) == "tensor<4x8xf32>");
  CHECK(infer(OpKind::LogSoftmax, {T({4, 8})}, attrs({{"axis", int64_t{2}}})) ==
        err("log_softmax: axis 2 is out of range for rank 2"));
  CHECK(infer(OpKind::Softmax, {x}, attrs({{"axis", int64_t{0}}})) ==
        err("softmax: operand 0 has element type i32, expected a float type"));
}

TEST_CASE("matmul follows numpy semantics") {
  CHECK(infer(OpKind::Matmul, {T({2, 3}), T({3, 4})}) == "tensor<2x4xf32>");
  CHECK(infer(OpKind::Matmul, {T({3}), T({3, 4})}) == "tensor<4xf32>");
  CHECK(infer(OpKind::Matmul, {T({2, 3}), T({3})}) == "tensor<2xf32>");
  CHECK(infer(OpKind::Matmul, {T({3}), T({3})}) == "tensor<f32>");
  CHECK(infer(OpKind::Matmul, {T({5, 1, sym("seq"), 64}), T({7, 64, 16})}) ==
        "tensor<5x7x{seq}x16xf32>");
  CHECK(infer(OpKind::Matmul, {T({sym("seq"), unk()}), T({8, 2})}) == "tensor<{seq}x2xf32>");
  CHECK(infer(OpKind::Matmul, {T({2, 3}), T({4, 5})}) ==
        err("matmul: contraction dims 3 and 4 of tensor<2x3xf32> and tensor<4x5xf32> differ"));
  CHECK(infer(OpKind::Matmul, {T({2, 2, 3}), T({4, 3, 5})}) ==
        err("matmul: batch dims of tensor<2x2x3xf32> and tensor<4x3x5xf32> do not broadcast"));
  CHECK(infer(OpKind::Matmul, {T({}), T({3})}) == err("matmul: operand 0 must have rank >= 1"));
  CHECK(infer(OpKind::Matmul, {T({2, 3}, ElemType::I32), T({3, 4})}) ==
        err("matmul: operand element types i32 and f32 differ"));
}

TEST_CASE("conv computes output sizes, checks channels, groups and bias") {
  auto convAttrs = [](Ints strides, Ints pads, Ints dil, int64_t group) {
    return attrs({{"strides", strides}, {"pads", pads}, {"dilations", dil}, {"group", group}});
  };
  // (32 + 1 + 1 - 1*(3-1) - 1)/1 + 1 = 32
  CHECK(infer(OpKind::Conv, {T({1, 3, 32, 32}), T({8, 3, 3, 3}), T({8})},
              convAttrs({1, 1}, {1, 1, 1, 1}, {1, 1}, 1)) == "tensor<1x8x32x32xf32>");
  // (10 + 0 + 1 - 2*(3-1) - 1)/2 + 1 = floor(6/2) + 1 = 4; width: (7 - 2 - 1)/1 + 1 = 5
  CHECK(infer(OpKind::Conv, {T({2, 4, 10, 7}), T({6, 2, 3, 3})},
              convAttrs({2, 1}, {0, 0, 1, 0}, {2, 1}, 2)) == "tensor<2x6x4x5xf32>");
  // Empty lists take the defaults; 1-D and 3-D work.
  CHECK(infer(OpKind::Conv, {T({1, 2, 9}), T({4, 2, 4})}, convAttrs({}, {}, {}, 1)) ==
        "tensor<1x4x6xf32>");
  CHECK(infer(OpKind::Conv, {T({1, 1, 4, 5, 6}), T({1, 1, 2, 2, 2})}, convAttrs({}, {}, {}, 1)) ==
        "tensor<1x1x3x4x5xf32>");
  // Symbolic spatial dims give expressions.
  CHECK(infer(OpKind::Conv, {T({1, 3, sym("seq"), 16}), T({8, 3, 3, 3})},
              convAttrs({2, 2}, {1, 1, 1, 1}, {1, 1}, 1)) ==
        "tensor<1x8x{(seq + 1) floordiv 2}x8xf32>");
  CHECK(infer(OpKind::Conv, {T({unk(), 3, unk(), 16}), T({8, 3, 3, 3})},
              convAttrs({}, {}, {}, 1)) == "tensor<?x8x?x14xf32>");
  CHECK(infer(OpKind::Conv, {T({1, 4, 8, 8}), T({8, 3, 3, 3})}, convAttrs({}, {}, {}, 1)) ==
        err("conv: input tensor<1x4x8x8xf32> has 4 channels but weight tensor<8x3x3x3xf32> "
            "with group 1 expects 3*1"));
  CHECK(infer(OpKind::Conv, {T({1, 4, 8, 8}), T({6, 1, 3, 3})}, convAttrs({}, {}, {}, 4)) ==
        err("conv: weight tensor<6x1x3x3xf32> has 6 output channels, not divisible by group 4"));
  CHECK(infer(OpKind::Conv, {T({1, 3, 8, 8}), T({8, 3, 3, 3}), T({7})}, convAttrs({}, {}, {}, 1)) ==
        err("conv: bias tensor<7xf32> must be 1-D of the 8 output channels"));
  CHECK(infer(OpKind::Conv, {T({1, 3, 2, 8}), T({8, 3, 3, 3})}, convAttrs({}, {}, {}, 1)) ==
        err("conv: window of 3 elements is larger than the padded input 2 along spatial dim 0"));
  CHECK(infer(OpKind::Conv, {T({1, 3, 8, 8}), T({8, 3, 3, 3})}, convAttrs({1}, {}, {}, 1)) ==
        err("conv: strides has 1 values, expected 2"));
  CHECK(infer(OpKind::Conv, {T({1, 3, 8, 8}), T({8, 3, 3, 3})}, convAttrs({0, 1}, {}, {}, 1)) ==
        err("conv: strides value 0 is below 1"));
  CHECK(infer(OpKind::Conv, {T({1, 3, 8, 8}), T({8, 3, 3, 3})},
              convAttrs({}, {0, 0, -1, 0}, {}, 1)) == err("conv: pads value -1 is below 0"));
  CHECK(infer(OpKind::Conv, {T({1, 3, 8, 8}), T({8, 3, 3, 3})}, convAttrs({}, {}, {}, 0)) ==
        err("conv: group must be at least 1, got 0"));
  CHECK(infer(OpKind::Conv, {T({3, 8}), T({8, 3})}, convAttrs({}, {}, {}, 1)) ==
        err("conv: input tensor<3x8xf32> must have rank 3 to 5 (N x C x 1 to 3 spatial dims)"));
  CHECK(infer(OpKind::Conv, {T({1, 3, 8, 8}), T({8, 3, 3})}, convAttrs({}, {}, {}, 1)) ==
        err("conv: weight tensor<8x3x3xf32> must have the input's rank 4"));
  CHECK(infer(OpKind::Conv, {T({1, 1, 8}), T({1, 1, 1})}, convAttrs({}, {INT64_MAX, 0}, {}, 1)) ==
        err("conv: output size along spatial dim 0 overflows int64"));
}

TEST_CASE("pools use kernel, strides, pads, dilations and ceil_mode") {
  auto poolAttrs = [](Ints kernel, Ints strides, Ints pads, int64_t ceil) {
    return attrs({{"kernel", kernel},
                  {"strides", strides},
                  {"pads", pads},
                  {"dilations", Ints{}},
                  {"ceil_mode", ceil},
                  {"count_include_pad", int64_t{0}}});
  };
  // floor((7 - 2)/2) + 1 = 3, ceil gives 4
  CHECK(infer(OpKind::MaxPool, {T({1, 2, 7, 7})}, poolAttrs({2, 2}, {2, 2}, {}, 0)) ==
        "tensor<1x2x3x3xf32>");
  CHECK(infer(OpKind::MaxPool, {T({1, 2, 7, 7})}, poolAttrs({2, 2}, {2, 2}, {}, 1)) ==
        "tensor<1x2x4x4xf32>");
  CHECK(infer(OpKind::AvgPool, {T({1, 2, 6})}, poolAttrs({3}, {1}, {1, 1}, 0)) ==
        "tensor<1x2x6xf32>");
  CHECK(infer(OpKind::AvgPool, {T({1, 2, 6}, ElemType::I32)}, poolAttrs({3}, {1}, {1, 1}, 0)) ==
        err("avg_pool: operand 0 has element type i32, expected a float type"));
  CHECK(infer(OpKind::MaxPool, {T({1, 2, sym("b")})}, poolAttrs({2}, {2}, {}, 0)) ==
        "tensor<1x2x{b floordiv 2}xf32>");
  CHECK(infer(OpKind::MaxPool, {T({1, 2, 7})}, poolAttrs({}, {2}, {}, 0)) ==
        err("max_pool: kernel has 0 values, expected 1"));
  CHECK(infer(OpKind::MaxPool, {T({1, 2, 7})}, poolAttrs({2}, {2}, {}, 3)) ==
        err("max_pool: ceil_mode must be 0 or 1, got 3"));
  CHECK(infer(OpKind::MaxPool, {T({1, 2, 7})}, poolAttrs({9}, {}, {}, 0)) ==
        err("max_pool: window of 9 elements is larger than the padded input 7 along spatial "
            "dim 0"));
}

TEST_CASE("reshape, broadcast and the source ops take the declared type") {
  CHECK(infer(OpKind::Reshape, {T({2, 6})}, {}, {T({3, 4})}) == "tensor<3x4xf32>");
  CHECK(infer(OpKind::Reshape, {T({sym("seq"), 4})}, {}, {T({4, sym("seq")})}) ==
        "tensor<4x{seq}xf32>");
  CHECK(infer(OpKind::Reshape, {T({unk(), 4})}, {}, {T({8})}) == "tensor<8xf32>");
  CHECK(infer(OpKind::Reshape, {T({2, 6})}, {}, {T({5})}) ==
        err("reshape: cannot reshape tensor<2x6xf32> (12 elements) to tensor<5xf32> (5 elements)"));
  CHECK(infer(OpKind::Reshape, {T({sym("seq")})}, {}, {T({sym("n")})}) ==
        err("reshape: cannot reshape tensor<{seq}xf32> (seq elements) to tensor<{n}xf32> (n "
            "elements)"));
  CHECK(infer(OpKind::Reshape, {T({2})}, {}, {T({2}, ElemType::F16)}) ==
        err("reshape: result element type f16 differs from the operand's f32"));
  CHECK(infer(OpKind::Reshape, {T({2})}) ==
        err("reshape: the result type must be given (0 result types declared, expected 1)"));

  CHECK(infer(OpKind::Broadcast, {T({1, 4})}, {}, {T({sym("seq"), 3, 4})}) ==
        "tensor<{seq}x3x4xf32>");
  CHECK(infer(OpKind::Broadcast, {T({3, 4})}, {}, {T({5, 4})}) ==
        err("broadcast: operand tensor<3x4xf32> does not broadcast to tensor<5x4xf32>"));
  CHECK(infer(OpKind::Broadcast, {T({2, 3, 4})}, {}, {T({3, 4})}) ==
        err("broadcast: operand tensor<2x3x4xf32> does not broadcast to tensor<3x4xf32>"));

  HostTensor v(ElemType::I64, {2, 2});
  CHECK(infer(OpKind::Constant, {}, attrs({{"value", v}})) == "tensor<2x2xi64>");
  CHECK(infer(OpKind::Constant, {}, attrs({{"value", v}}), {T({2, 2}, ElemType::I64)}) ==
        "tensor<2x2xi64>");
  CHECK(infer(OpKind::Constant, {}, attrs({{"value", v}}), {T({4}, ElemType::I64)}) ==
        err("constant: value has type tensor<2x2xi64> but the result type is tensor<4xi64>"));
  CHECK(infer(OpKind::Constant, {}) == err("constant: needs a dense attribute 'value'"));

  CHECK(infer(OpKind::Weight, {}, attrs({{"name", std::string("w")}}), {T({3, 3})}) ==
        "tensor<3x3xf32>");
  CHECK(infer(OpKind::Weight, {}, attrs({{"name", std::string("w")}})) ==
        err("weight: the result type must be given (0 result types declared, expected 1)"));
  CHECK(infer(OpKind::Iota, {}, attrs({{"axis", int64_t{1}}}),
              {T({2, sym("seq")}, ElemType::I64)}) == "tensor<2x{seq}xi64>");
  CHECK(infer(OpKind::Iota, {}, attrs({{"axis", int64_t{2}}}), {T({2, 3})}) ==
        err("iota: axis 2 is out of range for rank 2"));
  CHECK(infer(OpKind::Range, {}, attrs({{"start", 0.0}, {"delta", 0.5}}), {T({sym("n")})}) ==
        "tensor<{n}xf32>");
  CHECK(infer(OpKind::Range, {}, attrs({{"start", 0.0}, {"delta", 0.5}}), {T({2, 2})}) ==
        err("range: result tensor<2x2xf32> must have rank 1"));
}

TEST_CASE("transpose, concat and split") {
  CHECK(infer(OpKind::Transpose, {T({2, sym("seq"), 4})}, attrs({{"perm", Ints{2, 0, 1}}})) ==
        "tensor<4x2x{seq}xf32>");
  CHECK(infer(OpKind::Transpose, {T({})}, attrs({{"perm", Ints{}}})) == "tensor<f32>");
  CHECK(infer(OpKind::Transpose, {T({2, 3})}, attrs({{"perm", Ints{0, 0}}})) ==
        err("transpose: perm is not a permutation of 0..1"));
  CHECK(infer(OpKind::Transpose, {T({2, 3})}, attrs({{"perm", Ints{1}}})) ==
        err("transpose: perm has 1 entries for rank 2"));

  CHECK(infer(OpKind::Concat, {T({2, 3}), T({2, 5}), T({2, sym("seq")})},
              attrs({{"axis", int64_t{-1}}})) == "tensor<2x{seq + 8}xf32>");
  CHECK(infer(OpKind::Concat, {T({unk(), 3}), T({2, 5})}, attrs({{"axis", int64_t{1}}})) ==
        "tensor<2x8xf32>");
  CHECK(infer(OpKind::Concat, {T({2, unk()}), T({2, 5})}, attrs({{"axis", int64_t{1}}})) ==
        "tensor<2x?xf32>");
  CHECK(infer(OpKind::Concat, {T({2, 3}), T({4, 3})}, attrs({{"axis", int64_t{1}}})) ==
        err("concat: operand 1 tensor<4x3xf32> differs from tensor<2x3xf32> in dim 0"));
  CHECK(infer(OpKind::Concat, {T({2, 3}), T({3})}, attrs({{"axis", int64_t{0}}})) ==
        err("concat: operand 1 tensor<3xf32> has another rank than tensor<2x3xf32>"));
  CHECK(infer(OpKind::Concat, {T({2}), T({2}, ElemType::I8)}, attrs({{"axis", int64_t{0}}})) ==
        err("concat: operand element types f32 and i8 differ"));

  CHECK(infer(OpKind::Split, {T({sym("seq"), 10})},
              attrs({{"axis", int64_t{1}}, {"sizes", Ints{3, 7, 0}}})) ==
        "tensor<{seq}x3xf32>, tensor<{seq}x7xf32>, tensor<{seq}x0xf32>");
  CHECK(infer(OpKind::Split, {T({10})}, attrs({{"axis", int64_t{0}}, {"sizes", Ints{3, 6}}})) ==
        err("split: sizes sum to 9 but dim 0 of tensor<10xf32> is 10"));
  CHECK(
      infer(OpKind::Split, {T({sym("seq")})}, attrs({{"axis", int64_t{0}}, {"sizes", Ints{3}}})) ==
      err("split: sizes sum to 3 but dim 0 of tensor<{seq}xf32> is {seq}"));
  CHECK(infer(OpKind::Split, {T({unk()})}, attrs({{"axis", int64_t{0}}, {"sizes", Ints{3, 4}}})) ==
        "tensor<3xf32>, tensor<4xf32>");
  CHECK(infer(OpKind::Split, {T({10})}, attrs({{"axis", int64_t{0}}, {"sizes", Ints{11, -1}}})) ==
        err("split: size -1 is negative"));
  CHECK(infer(OpKind::Split, {T({10})}, attrs({{"axis", int64_t{0}}, {"sizes", Ints{}}})) ==
        err("split: sizes must list at least one piece"));
}

TEST_CASE("slice uses python semantics with clamping") {
  auto sl = [](Type x, Ints starts, Ints ends, Ints axes, Ints steps) {
    return infer(OpKind::Slice, {std::move(x)},
                 attrs({{"starts", starts}, {"ends", ends}, {"axes", axes}, {"steps", steps}}));
  };
  CHECK(sl(T({10}), {2}, {8}, {0}, {1}) == "tensor<6xf32>");
  CHECK(sl(T({10}), {2}, {8}, {0}, {3}) == "tensor<2xf32>");  // 2, 5
  CHECK(sl(T({10}), {-3}, {100}, {}, {}) == "tensor<3xf32>"); // 7, 8, 9
  CHECK(sl(T({10}), {-100}, {3}, {0}, {1}) == "tensor<3xf32>");
  CHECK(sl(T({10}), {8}, {2}, {0}, {1}) == "tensor<0xf32>");
  CHECK(sl(T({10}), {8}, {2}, {0}, {-2}) == "tensor<3xf32>"); // 8, 6, 4
  CHECK(sl(T({10}), {-1}, {-100}, {0}, {-1}) == "tensor<10xf32>");
  CHECK(sl(T({10}), {100}, {-100}, {0}, {-3}) == "tensor<4xf32>"); // 9, 6, 3, 0
  CHECK(sl(T({10}), {0}, {10}, {0}, {INT64_MIN}) == "tensor<0xf32>");
  CHECK(sl(T({10}), {9}, {-100}, {0}, {INT64_MIN}) == "tensor<1xf32>");
  CHECK(sl(T({10}), {0}, {INT64_MAX}, {0}, {INT64_MAX}) == "tensor<1xf32>");
  CHECK(sl(T({4, 6}), {1}, {-1}, {-1}, {1}) == "tensor<4x4xf32>");
  CHECK(sl(T({sym("seq")}), {0}, {5}, {0}, {1}) == "tensor<{min(seq, 5)}xf32>");
  CHECK(sl(T({sym("seq")}), {0}, {INT64_MAX}, {0}, {1}) == "tensor<{seq}xf32>");
  CHECK(sl(T({sym("seq")}), {1}, {INT64_MAX}, {0}, {1}) == "tensor<{seq - 1}xf32>");
  CHECK(sl(T({sym("seq")}), {0}, {-1}, {0}, {2}) == "tensor<{(seq + 1) ceildiv 2 - 1}xf32>");
  CHECK(sl(T({sym("b")}), {0}, {INT64_MAX}, {0}, {8}) == "tensor<{b floordiv 8}xf32>");
  CHECK(sl(T({unk(), 3}), {0}, {1}, {0}, {1}) == "tensor<?x3xf32>");
  CHECK(sl(T({10}), {0}, {1}, {0}, {0}) == err("slice: step for axis 0 is 0"));
  CHECK(sl(T({10, 2}), {0, 0}, {1, 1}, {0, -2}, {}) == err("slice: axis -2 is sliced twice"));
  CHECK(sl(T({10}), {0}, {1}, {1}, {1}) == err("slice: axis 1 is out of range for rank 1"));
  CHECK(sl(T({10}), {0, 1}, {1}, {}, {}) == err("slice: starts has 2 values but ends has 1"));
  CHECK(sl(T({10}), {0}, {1}, {0}, {1, 1}) ==
        err("slice: starts, ends, axes and steps must have the same length"));
}

TEST_CASE("symbolic slice lengths agree with static ones") {
  // For every small dim value, the expression evaluated at that value equals the static
  // computation.
  SymbolTable syms;
  REQUIRE(syms.declare({"d", 0, 12, 1, {}}).ok());
  const int64_t starts[] = {-15, -3, -1, 0, 1, 4, 20, INT64_MIN, INT64_MAX};
  const int64_t steps[] = {1, 2, 5, -1, -2, -7};
  for (int64_t s : starts) {
    for (int64_t e : starts) {
      for (int64_t k : steps) {
        Attrs a =
            attrs({{"starts", Ints{s}}, {"ends", Ints{e}}, {"axes", Ints{0}}, {"steps", Ints{k}}});
        auto sym =
            inferResultTypes(OpKind::Slice, {T({Dim(SymExpr::symbol("d"))})}, a, {}, syms, kLoc);
        REQUIRE(sym.ok());
        for (int64_t d = 0; d <= 12; ++d) {
          auto st = inferResultTypes(OpKind::Slice, {T({d})}, a, {}, syms, kLoc);
          REQUIRE(st.ok());
          CAPTURE(s);
          CAPTURE(e);
          CAPTURE(k);
          CAPTURE(d);
          CHECK((*sym)[0].dim(0).expr().evaluate({{"d", d}}) == (*st)[0].dim(0).value());
        }
      }
    }
  }
}

TEST_CASE("gather, gather_elements and scatter_nd") {
  Type x = T({5, sym("seq"), 3});
  CHECK(infer(OpKind::Gather, {x, T({2, 4}, ElemType::I64)}, attrs({{"axis", int64_t{1}}})) ==
        "tensor<5x2x4x3xf32>");
  CHECK(infer(OpKind::Gather, {x, T({}, ElemType::I32)}, attrs({{"axis", int64_t{-1}}})) ==
        "tensor<5x{seq}xf32>");
  CHECK(infer(OpKind::Gather, {x, T({2}, ElemType::F32)}, attrs({{"axis", int64_t{0}}})) ==
        err("gather: indices has element type f32, expected an integer type"));
  CHECK(infer(OpKind::Gather, {x, T({2}, ElemType::I64)}, attrs({{"axis", int64_t{3}}})) ==
        err("gather: axis 3 is out of range for rank 3"));
  CHECK(infer(OpKind::GatherElements, {x, T({5, 2, 3}, ElemType::I64)},
              attrs({{"axis", int64_t{1}}})) == "tensor<5x2x3xf32>");
  CHECK(
      infer(OpKind::GatherElements, {x, T({5, 2}, ElemType::I64)}, attrs({{"axis", int64_t{1}}})) ==
      err("gather_elements: indices tensor<5x2xi64> must have the rank of "
          "tensor<5x{seq}x3xf32>"));

  Type data = T({4, 5, 6});
  CHECK(infer(OpKind::ScatterNd, {data, T({7, 2}, ElemType::I64), T({7, 6})}) ==
        "tensor<4x5x6xf32>");
  CHECK(infer(OpKind::ScatterNd, {data, T({7, 3}, ElemType::I64), T({7})},
              attrs({{"reduction", std::string("add")}})) == "tensor<4x5x6xf32>");
  CHECK(infer(OpKind::ScatterNd, {data, T({7, 2}, ElemType::I64), T({7, 5})}) ==
        err("scatter_nd: updates tensor<7x5xf32> must have shape [7, 6] (indices.shape[:-1] + "
            "data.shape[2:])"));
  CHECK(infer(OpKind::ScatterNd, {data, T({7, 4}, ElemType::I64), T({7})}) ==
        err("scatter_nd: index tuples of length 4 exceed the rank 3 of data tensor<4x5x6xf32>"));
  CHECK(infer(OpKind::ScatterNd, {data, T({7, 1}, ElemType::I64), T({7, 5, 6}, ElemType::F16)}) ==
        err("scatter_nd: updates element type f16 differs from data's f32"));
  CHECK(infer(OpKind::ScatterNd, {data, T({7, 1}, ElemType::I64), T({7, 5, 6})},
              attrs({{"reduction", std::string("sub")}})) ==
        err("scatter_nd: reduction \"sub\" is not one of \"none\", \"add\", \"mul\", \"max\", "
            "\"min\""));
  CHECK(infer(OpKind::ScatterNd, {data, T({}, ElemType::I64), T({7})}) ==
        err("scatter_nd: indices tensor<i64> must have rank >= 1"));
}

TEST_CASE("pad, triu/tril, dim and return") {
  auto pd = [](Type x, Ints pads, const char* mode) {
    return infer(OpKind::Pad, {std::move(x)},
                 attrs({{"pads", pads}, {"mode", std::string(mode)}, {"value", 0.0}}));
  };
  CHECK(pd(T({3, sym("seq")}), {1, 0, 2, 3}, "constant") == "tensor<6x{seq + 3}xf32>");
  CHECK(pd(T({5}), {-2, -1}, "constant") == "tensor<2xf32>");
  CHECK(pd(T({5}), {-4, -2}, "constant") ==
        err("pad: padding crops dim 0 of tensor<5xf32> to a negative size -1"));
  CHECK(pd(T({sym("n")}), {-70, 0}, "constant") ==
        err("pad: padding crops dim 0 of tensor<{n}xf32> to a negative size n - 70"));
  CHECK(pd(T({sym("n")}), {-2, 0}, "constant") == "tensor<{n - 2}xf32>");
  CHECK(pd(T({3}), {2, 2}, "reflect") == "tensor<7xf32>");
  CHECK(pd(T({3}), {3, 0}, "reflect") ==
        err("pad: reflect padding 3 of dim 0 is too large for size 3"));
  CHECK(pd(T({3}), {5, 5}, "edge") == "tensor<13xf32>");
  CHECK(pd(T({0}), {1, 0}, "edge") == err("pad: edge padding 1 of dim 0 is too large for size 0"));
  CHECK(pd(T({3}), {1, 1}, "wrap") ==
        err("pad: mode \"wrap\" is not one of \"constant\", \"reflect\", \"edge\""));
  CHECK(pd(T({3}), {1}, "constant") == err("pad: pads has 1 values, expected 2 for tensor<3xf32>"));

  CHECK(infer(OpKind::Triu, {T({2, 3, 3})}, attrs({{"k", int64_t{1}}})) == "tensor<2x3x3xf32>");
  CHECK(infer(OpKind::Tril, {T({3})}, attrs({{"k", int64_t{0}}})) ==
        err("tril: operand tensor<3xf32> must have rank >= 2"));
  CHECK(infer(OpKind::Dim, {T({2, sym("seq")})}, attrs({{"axis", int64_t{-1}}})) == "tensor<i64>");
  CHECK(infer(OpKind::Dim, {T({2})}, attrs({{"axis", int64_t{1}}})) ==
        err("dim: axis 1 is out of range for rank 1"));
  auto r = run(OpKind::Return, {T({2}), T({3}, ElemType::I1)});
  REQUIRE(r.ok());
  CHECK(r->empty());
}

TEST_CASE("every op in ops.def has a rule that accepts a well-formed use") {
  // One valid instance per op; a new op without a rule fails here with "has no shape rule"
  // (and the switch in shape_rules.cpp warns at compile time).
  int covered = 0;
  for (const OpInfo& info : allOps()) {
    CAPTURE(info.name);
    std::vector<Type> ops;
    Type f = T({2, 2});
    ElemType e = info.has(kBoolOnly) ? ElemType::I1 : ElemType::F32;
    for (int i = 0; i < info.minOperands; ++i) ops.push_back(f.withElem(e));
    Attrs a;
    std::vector<Type> declared;
    switch (info.kind) {
    case OpKind::Select: ops[0] = ops[0].withElem(ElemType::I1); break;
    case OpKind::Cast: a.set("to", ElemType::I8); break;
    case OpKind::Conv:
      ops = {T({1, 2, 4, 4}), T({3, 2, 1, 1})};
      a = attrs(
          {{"strides", Ints{}}, {"pads", Ints{}}, {"dilations", Ints{}}, {"group", int64_t{1}}});
      break;
    case OpKind::MaxPool:
    case OpKind::AvgPool:
      ops = {T({1, 2, 4, 4})};
      a = attrs({{"kernel", Ints{2, 2}}, {"strides", Ints{}}, {"pads", Ints{}}});
      break;
    case OpKind::Reshape:
    case OpKind::Broadcast:
    case OpKind::Weight:
    case OpKind::Iota:
    case OpKind::Range:
    case OpKind::AllocBuffer:
    case OpKind::TransferTo:
    case OpKind::View:
    case OpKind::LoadConstant:
    case OpKind::LoadWeight: declared = {T({4})}; break;
    case OpKind::Transpose: a.set("perm", Ints{1, 0}); break;
    case OpKind::AllReduce: a.set("reduce", std::string("sum")); break;
    case OpKind::ReduceScatter:
      a = attrs({{"reduce", std::string("max")}, {"axis", int64_t{1}}});
      break;
    case OpKind::Split: a.set("sizes", Ints{1, 1}); break;
    case OpKind::Slice: a = attrs({{"starts", Ints{0}}, {"ends", Ints{1}}}); break;
    case OpKind::Gather:
    case OpKind::GatherElements: ops[1] = ops[1].withElem(ElemType::I64); break;
    case OpKind::ScatterNd: ops = {T({2, 2}), T({1, 2}, ElemType::I64), T({1})}; break;
    case OpKind::Pad: a = attrs({{"pads", Ints{0, 0, 1, 1}}, {"mode", std::string("edge")}}); break;
    case OpKind::Constant: a.set("value", HostTensor(ElemType::F32, {1})); break;
    case OpKind::GridSample:
      ops = {T({1, 2, 4, 4}), T({1, 3, 3, 2})};
      a = attrs({{"mode", std::string("bilinear")},
                 {"padding_mode", std::string("zeros")},
                 {"align_corners", int64_t{0}}});
      break;
    case OpKind::Attention:
      ops = {T({1, 4, 3, 8}), T({1, 2, 5, 8}), T({1, 2, 5, 6})};
      a = attrs({{"scale", 0.5}, {"causal", int64_t{1}}});
      break;
    case OpKind::RoiAlign:
      ops = {T({1, 2, 4, 4}), T({3, 4}), T({3}, ElemType::I64)};
      a = attrs({{"mode", std::string("avg")},
                 {"output_height", int64_t{2}},
                 {"output_width", int64_t{2}},
                 {"sampling_ratio", int64_t{0}},
                 {"spatial_scale", 1.0},
                 {"aligned", int64_t{1}}});
      break;
    case OpKind::Loop:
      ops = {T({}, ElemType::I64), T({}, ElemType::I1), T({2, 2})};
      a = attrs({{"body", std::string("body")}, {"carried", int64_t{1}}});
      break;
    case OpKind::NonZero: declared = {Type(ElemType::I64, {Dim(2), sym("nz")})}; break;
    case OpKind::Unique: {
      Type u(ElemType::I64, {sym("nz")});
      declared = {Type(ElemType::F32, {sym("nz")}), u, T({4}, ElemType::I64), u};
      break;
    }
    case OpKind::NonMaxSuppression:
      ops = {T({1, 5, 4}), T({1, 2, 5}), T({}, ElemType::I64), T({1}), T({})};
      declared = {Type(ElemType::I64, {sym("nz"), Dim(3)})};
      break;
    default: break;
    }
    if (info.kind == OpKind::Reshape) declared = {T({4})};
    if (info.kind == OpKind::Broadcast) declared = {T({3, 2, 2})};
    // Dispatch results are its kernel's and kernel-level ops are typed by their verifier
    // rules: the shape rule returns the declared types.
    if (info.kind == OpKind::Dispatch) declared = {T({2, 2})};
    if (info.level == OpLevel::Kernel)
      declared.assign(static_cast<size_t>(std::max(info.numResults, 0)), Type::index());
    auto r = run(info.kind, ops, a, declared);
    CHECK_MESSAGE(r.ok(), (r.ok() ? "" : r.diags().str()));
    if (r.ok() && info.numResults >= 0) CHECK(static_cast<int>(r->size()) == info.numResults);
    ++covered;
  }
  CHECK(covered == static_cast<int>(allOps().size()));
  CHECK(covered > 70);
}

TEST_CASE("collectives: one result per device; gathered and scattered dims") {
  using Strs = std::vector<std::string>;
  Attrs sum = attrs({{"reduce", std::string("sum")}, {"devices", Strs{"ref[0]", "ref[1]"}}});
  CHECK(infer(OpKind::AllReduce, {T({4, 6}), T({4, 6})}, sum) ==
        "tensor<4x6xf32>, tensor<4x6xf32>");
  CHECK(infer(OpKind::AllGather, {T({4, 6}), T({4, 6})}, attrs({{"axis", int64_t{-1}}})) ==
        "tensor<4x12xf32>, tensor<4x12xf32>");
  CHECK(infer(OpKind::AllGather, {T({sym("seq"), 6}), T({sym("seq"), 6})},
              attrs({{"axis", int64_t{0}}})) == "tensor<{2*seq}x6xf32>, tensor<{2*seq}x6xf32>");
  Attrs scatter = attrs({{"reduce", std::string("sum")}, {"axis", int64_t{1}}});
  CHECK(infer(OpKind::ReduceScatter, {T({4, 6}), T({4, 6})}, scatter) ==
        "tensor<4x3xf32>, tensor<4x3xf32>");
  CHECK(infer(OpKind::ReduceScatter, {T({4, 5}), T({4, 5})}, scatter) ==
        err("reduce_scatter: dim 1 of tensor<4x5xf32> must be a static size that divides by "
            "the 2 devices"));
  CHECK(infer(OpKind::AllReduce, {T({4, 6}), T({4, 7})}, sum) ==
        err("all_reduce: operand 1 tensor<4x7xf32> differs from operand 0 tensor<4x6xf32>; "
            "every device contributes a tensor of one type"));
  CHECK(infer(OpKind::AllReduce, {T({4}), T({4}), T({4})}, sum) ==
        err("all_reduce: devices lists 2 devices for 3 operands"));
  CHECK(infer(OpKind::AllReduce, {T({4})}, attrs({{"reduce", std::string("mean")}})) ==
        err("all_reduce: reduce \"mean\" is not one of \"sum\", \"max\""));
}
