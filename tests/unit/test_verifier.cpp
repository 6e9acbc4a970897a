// Unit tests for the verifier: one test per invariant group of verifier.cpp's header.
#include <doctest/doctest.h>

#include "ir/core/builder.h"
#include "ir/text/parser.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"

using namespace kiln;

namespace {

std::unique_ptr<Module> parse(const std::string& text) {
  auto r = parseModule(text, "v.kir");
  INFO(text);
  REQUIRE_MESSAGE(r.ok(), r.diags().str());
  return r.take();
}

// All diagnostics of a module that must fail verification.
std::string verifyErrors(const Module& m) {
  Status s = verifyModule(m);
  REQUIRE_FALSE(s.ok());
  return s.diags().str();
}

bool contains(const std::string& haystack, const std::string& needle) {
  INFO(haystack);
  return haystack.find(needle) != std::string::npos;
}

const Type kF32 = Type::tensor(ElemType::F32, {});
const Type k2F32 = Type::tensor(ElemType::F32, {2});

} // namespace

TEST_CASE("a well-formed module verifies") {
  auto m = parse(R"(symbol n in [1, 64] divisible_by 2
weight @w : tensor<2x3xf32> = "w.safetensors"["w"]
func @main(%x: tensor<{n}x2xf32>, %y: tensor<2x3xf32>) -> (tensor<{n}x3xf32>, tensor<2xf32>) {
  %0 = weight {name = "w"} : tensor<2x3xf32>
  %1 = add %0, %y : tensor<2x3xf32>
  %2 = matmul %x, %1 : tensor<{n}x3xf32>
  %3 = constant {value = dense<[1.0, 2.0]> : tensor<2xf32>} : tensor<2xf32>
  %4, %5 = split %3 {axis = 0, sizes = [1, 1]} : tensor<1xf32>, tensor<1xf32>
  %6 = concat %5, %4 {axis = 0} : tensor<2xf32>
  %7 = reduce_sum %2 {axes = [1], keepdims = 0} : tensor<{n}xf32>
  %8 = cast %7 {to = f16} : tensor<{n}xf16>
  %9 = neg %x : tensor<?x2xf32>
  return %2, %6
}
)");
  Status s = verifyModule(*m);
  std::string diags = s.ok() ? "" : s.diags().str();
  CHECK_MESSAGE(s.ok(), diags);
  CHECK(verifyFunc(*m->funcs()[0]).ok());
}

TEST_CASE("F1: functions end with exactly one terminator") {
  auto empty = parse("func @f() -> () {\n}\n");
  CHECK(verifyErrors(*empty) == "v.kir:1:6: error: function @f has no return\n");

  auto early = parse(R"(func @f(%x: tensor<f32>) -> () {
  return
  %0 = neg %x : tensor<f32>
}
)");
  std::string e = verifyErrors(*early);
  CHECK(contains(e, "v.kir:2:3: error: 'return' must be the last op of @f\n"
                    "v.kir:2:3: note: in: return\n"));
  CHECK(contains(e, "v.kir:3:3: error: function @f must end with return\n"
                    "v.kir:3:3: note: in: %0 = neg %x : tensor<f32>\n"));
}

TEST_CASE("F2: return matches the declared results") {
  auto count = parse("func @f(%x: tensor<f32>) -> (tensor<f32>, tensor<f32>) {\n  return %x\n}\n");
  CHECK(verifyErrors(*count) ==
        "v.kir:2:3: error: return has 1 operands but @f declares 2 results\n"
        "v.kir:2:3: note: in: return %x\n");
  auto type = parse("func @f(%x: tensor<2xf32>) -> (tensor<3xf32>) {\n  return %x\n}\n");
  CHECK(verifyErrors(*type) ==
        "v.kir:2:3: error: return operand 0 has type tensor<2xf32> but @f declares "
        "tensor<3xf32>\nv.kir:2:3: note: in: return %x\n");
  // `?` is compatible with any dim, and symbolic dims compare under the symbol ranges.
  auto unknown = parse(R"(symbol n in [4, 4]
func @f(%x: tensor<?xf32>, %y: tensor<{n}xf32>) -> (tensor<3xf32>, tensor<4xf32>) {
  return %x, %y
}
)");
  CHECK(verifyModule(*unknown).ok());
}

TEST_CASE("F3, O4, M3: every symbol in a type is declared") {
  Module m;
  Type sym(ElemType::F32, {Dim(SymExpr::symbol("ghost"))});
  m.addFunc(std::make_unique<Func>("f", Loc{"x.kir", 1, 1}));
  Func* f = m.funcs()[0].get();
  f->addArg(sym, "a");
  Builder b(f);
  b.setLoc(Loc{"x.kir", 2, 3});
  Value* n = b.createUnchecked(OpKind::Neg, {f->arg(0)}, {}, {sym})->result();
  b.createUnchecked(OpKind::Return, {n}, {}, {});
  f->setResultTypes({sym});
  REQUIRE(m.addWeight(WeightDecl{"w", sym, "f", "t", Loc{"x.kir", 9, 1}, std::nullopt}).ok());
  std::string e = verifyErrors(m);
  CHECK(contains(e, "x.kir:1:1: error: argument 0 of @f uses undeclared symbol 'ghost'\n"));
  CHECK(contains(e, "x.kir:1:1: error: declared result of @f uses undeclared symbol 'ghost'\n"));
  CHECK(contains(e, "x.kir:2:3: error: result 0 uses undeclared symbol 'ghost'\n"
                    "x.kir:2:3: note: in: %0 = neg %a : tensor<{ghost}xf32>\n"));
  CHECK(contains(e, "x.kir:9:1: error: weight @w uses undeclared symbol 'ghost'\n"));
}

TEST_CASE("O1, F4: operands are defined earlier in the same function; use lists are exact") {
  Module m;
  Func* f = m.addFunc(std::make_unique<Func>("f", Loc{"x.kir", 1, 1}));
  Func* g = m.addFunc(std::make_unique<Func>("g", Loc{"x.kir", 5, 1}));
  Value* x = f->addArg(kF32, "x");
  Builder bf(f);
  bf.setLoc(Loc{"x.kir", 2, 3});
  bf.createUnchecked(OpKind::Return, {}, {}, {});
  // g uses f's argument: an operand from another function and a use f does not own.
  Builder bg(g);
  bg.setLoc(Loc{"x.kir", 6, 3});
  Op* stray = bg.createUnchecked(OpKind::Neg, {x}, {}, {kF32});
  bg.createUnchecked(OpKind::Return, {}, {}, {});
  std::string e = verifyErrors(m);
  CHECK(contains(e, "x.kir:1:1: error: a value's use list names an op outside @f (stale use)\n"));
  CHECK(contains(e, "x.kir:6:3: error: operand 0 is not defined before its use in @g\n"
                    "x.kir:6:3: note: in: %0 = neg %<undefined> : tensor<f32>\n"));
  stray->dropOperands(); // f may be destroyed before g

  // A use of a value defined later in the same function.
  Module m2;
  Func* h = m2.addFunc(std::make_unique<Func>("h", Loc{"y.kir", 1, 1}));
  Builder bh(h);
  bh.setLoc(Loc{"y.kir", 2, 3});
  Op* first = bh.createUnchecked(OpKind::Neg, {}, {}, {kF32});
  bh.setLoc(Loc{"y.kir", 3, 3});
  Op* second = bh.createUnchecked(OpKind::Abs, {first->result()}, {}, {kF32});
  bh.createUnchecked(OpKind::Return, {}, {}, {});
  first->addOperand(second->result());
  CHECK(contains(verifyErrors(m2), "y.kir:2:3: error: operand 0 is not defined before its use "
                                   "in @h\ny.kir:2:3: note: in: %0 = neg %1 : tensor<f32>\n"));
  first->dropOperands(); // undo the invalid forward use before the module is destroyed
}

TEST_CASE("O2: operand and result counts follow the op table") {
  Module m;
  Func* f = m.addFunc(std::make_unique<Func>("f", Loc{}));
  Value* x = f->addArg(kF32, "x");
  Builder b(f);
  b.setLoc(Loc{"c.kir", 3, 3});
  b.createUnchecked(OpKind::Add, {x}, {}, {kF32});
  b.setLoc(Loc{"c.kir", 4, 3});
  b.createUnchecked(OpKind::Neg, {x}, {}, {kF32, kF32});
  b.setLoc(Loc{"c.kir", 5, 3});
  Attrs a;
  a.set("axis", int64_t{0});
  a.set("sizes", std::vector<int64_t>{});
  b.createUnchecked(OpKind::Split, {x}, a, {});
  b.createUnchecked(OpKind::Return, {}, {}, {});
  std::string e = verifyErrors(m);
  CHECK(contains(e, "c.kir:3:3: error: 'add' has 1 operands; the op table allows 2 to 2\n"
                    "c.kir:3:3: note: in: %0 = add %x : tensor<f32>\n"));
  CHECK(contains(e, "c.kir:4:3: error: 'neg' has 2 results; the op table says 1\n"));
  CHECK(contains(e, "c.kir:5:3: error: 'split' has 0 results; the op table says at least 1\n"));
}

TEST_CASE("O3: attributes are present, known and of the right kind") {
  Module m;
  Func* f = m.addFunc(std::make_unique<Func>("f", Loc{}));
  Value* x = f->addArg(k2F32, "x");
  Builder b(f);
  b.setLoc(Loc{"a.kir", 2, 3});
  Attrs wrong;
  wrong.set("axes", int64_t{0});
  wrong.set("keepdims", int64_t{0});
  wrong.set("bogus", std::string("x"));
  b.createUnchecked(OpKind::ReduceSum, {x}, wrong, {kF32});
  b.setLoc(Loc{"a.kir", 3, 3});
  b.createUnchecked(OpKind::Softmax, {x}, {}, {k2F32});
  b.createUnchecked(OpKind::Return, {}, {}, {});
  std::string e = verifyErrors(m);
  CHECK(contains(e, "a.kir:2:3: error: 'reduce_sum' has no attribute 'bogus'\n"));
  CHECK(contains(e, "a.kir:2:3: error: attribute 'axes' of 'reduce_sum' must be ints, found int\n"
                    "a.kir:2:3: note: in: %0 = reduce_sum %x {axes = 0, bogus = \"x\", "
                    "keepdims = 0} : tensor<f32>\n"));
  CHECK(contains(e, "a.kir:3:3: error: 'softmax' needs attribute 'axis'\n"));
}

TEST_CASE("T1: declared result types must match the shape rules") {
  auto m = parse(R"(func @f(%x: tensor<2x3xf32>) -> () {
  %0 = add %x, %x : tensor<3x2xf32>
  %1 = cast %x {to = i32} : tensor<2x3xf32>
  %2 = reduce_sum %x {axes = [0], keepdims = 1} : tensor<1x?xf32>
  return
}
)");
  std::string e = verifyErrors(*m);
  CHECK(contains(e, "v.kir:2:3: error: 'add' result 0 is declared tensor<3x2xf32> but its "
                    "operands give tensor<2x3xf32>\n"));
  CHECK(contains(e, "v.kir:3:3: error: 'cast' result 0 is declared tensor<2x3xf32> but its "
                    "operands give tensor<2x3xi32>\n"));
  CHECK_FALSE(contains(e, "v.kir:4:3"));
}

TEST_CASE("T2, T3: weights and constants have the result's type") {
  auto m = parse(R"(weight @w : tensor<4xf16> = "m.safetensors"["w"]
func @f() -> () {
  %0 = weight {name = "w"} : tensor<4xf32>
  %1 = constant {value = dense<1> : tensor<2xi32>} : tensor<3xi32>
  return
}
)");
  std::string e = verifyErrors(*m);
  CHECK(contains(e, "v.kir:3:3: error: weight @w is declared tensor<4xf16> but used as "
                    "tensor<4xf32>\n"));
  CHECK(contains(e, "v.kir:4:3: error: constant value has type tensor<2xi32> but the result is "
                    "tensor<3xi32>\nv.kir:4:3: note: in: %1 = constant {value = dense<1> : "
                    "tensor<2xi32>} : tensor<3xi32>\n"));

  // A weight op built in C++ can name a weight the module lacks.
  Module m2;
  Func* f = m2.addFunc(std::make_unique<Func>("f", Loc{}));
  Builder b(f);
  b.setLoc(Loc{"w.kir", 2, 3});
  Attrs a;
  a.set("name", std::string("missing"));
  b.createUnchecked(OpKind::Weight, {}, a, {kF32});
  b.createUnchecked(OpKind::Return, {}, {}, {});
  CHECK(contains(verifyErrors(m2), "w.kir:2:3: error: weight 'missing' is not declared in the "
                                   "module\n"));
}

TEST_CASE("M1: function names are unique") {
  Module m;
  for (uint32_t line : {1u, 5u}) {
    Func* f = m.addFunc(std::make_unique<Func>("dup", Loc{"d.kir", line, 1}));
    Builder(f).createUnchecked(OpKind::Return, {}, {}, {});
  }
  CHECK(verifyErrors(m) ==
        "d.kir:5:1: error: function @dup is defined twice\nd.kir:1:1: note: first defined here\n");
}
