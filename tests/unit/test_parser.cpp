// Unit tests for the text format: printer, lexer, parser, and their round trip.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "ir/core/builder.h"
#include "ir/text/lexer.h"
#include "ir/text/parser.h"
#include "ir/text/printer.h"

using namespace kiln;

namespace {

std::unique_ptr<Module> parseOk(const std::string& text) {
  auto r = parseModule(text, "t.kir");
  INFO(text);
  REQUIRE_MESSAGE(r.ok(), r.diags().str());
  return r.take();
}

// The first error's text for text that must fail to parse.
std::string parseErr(const std::string& text) {
  auto r = parseModule(text, "t.kir");
  INFO(text);
  REQUIRE_FALSE(r.ok());
  return r.diags().list.at(0).str();
}

// print → parse → print must be byte-identical; returns the first print.
std::string checkRoundTrip(const Module& m, PrintOptions opts = {}) {
  std::string once = printModule(m, opts);
  auto again = parseModule(once, "rt.kir");
  INFO(once);
  REQUIRE_MESSAGE(again.ok(), again.diags().str());
  CHECK(printModule(**again, opts) == once);
  return once;
}

const Op& onlyOp(const Module& m, size_t i = 0) { return *m.funcs().at(0)->opsSnapshot().at(i); }

// Wraps one op line in a function so attribute tests stay short.
std::string inFunc(const std::string& line, const std::string& ret = "%0",
                   const std::string& resultType = "tensor<f32>") {
  return "func @f() -> (" + resultType + ") {\n  " + line + "\n  return " + ret + "\n}\n";
}

AttrValue attrOf(const std::string& line, const char* name) {
  auto m = parseOk(inFunc(line));
  const AttrValue* v = onlyOp(*m).attrs().find(name);
  REQUIRE(v != nullptr);
  return *v;
}

} // namespace

// ---- attribute values ----------------------------------------------------------------------

TEST_CASE("printAttrValue writes every kind canonically") {
  CHECK(printAttrValue(int64_t{3}) == "3");
  CHECK(printAttrValue(int64_t{-3}) == "-3");
  CHECK(printAttrValue(std::numeric_limits<int64_t>::min()) == "-9223372036854775808");
  CHECK(printAttrValue(1.0) == "1.0");
  CHECK(printAttrValue(0.1) == "0.1");
  CHECK(printAttrValue(-2.5) == "-2.5");
  CHECK(printAttrValue(-0.0) == "-0.0");
  CHECK(printAttrValue(1e300) == "1e+300");
  CHECK(printAttrValue(1e21) == "1e+21");
  CHECK(printAttrValue(100.0) == "100.0");
  CHECK(printAttrValue(std::numeric_limits<double>::infinity()) == "inf");
  CHECK(printAttrValue(-std::numeric_limits<double>::infinity()) == "-inf");
  CHECK(printAttrValue(std::numeric_limits<double>::quiet_NaN()) == "nan");
  CHECK(printAttrValue(std::bit_cast<double>(uint64_t{0x7ff8000000000001})) ==
        "nan(0x7ff8000000000001)");
  CHECK(printAttrValue(std::string("a\"b\\c\nd\te\x01\xff")) == "\"a\\\"b\\\\c\\nd\\te\\01\\ff\"");
  CHECK(printAttrValue(std::vector<int64_t>{1, -2, 3}) == "[1, -2, 3]");
  CHECK(printAttrValue(std::vector<int64_t>{}) == "[]");
  CHECK(printAttrValue(std::vector<double>{1.0, 2.5, -0.125}) == "[1.0, 2.5, -0.125]");
  CHECK(printAttrValue(ElemType::BF16) == "bf16");
  CHECK(printAttrValue(std::vector<std::string>{"n ceildiv 64", "a\"b"}) ==
        "[\"n ceildiv 64\", \"a\\\"b\"]");
}

TEST_CASE("string lists (a launch's workgroups and push) parse, print and round-trip") {
  auto launch = [](const std::string& attrs) {
    return "symbol n in [1, 8]\n\nfunc @f(%x: tensor<{n}xf32>) -> (tensor<{n}xf32>) {\n"
           "  %0 = transfer_to %x {device = \"ref[0]\"} : tensor<{n}xf32>\n"
           "  launch %0, %0 {device = \"ref[0]\", kernel = \"k\", outputs = 1" +
           attrs + "}\n  return %0\n}\n";
  };
  std::string text = launch(", push = [\"n\"], workgroups = [\"n ceildiv 4\", \"1\", \"1\"]");
  auto m = parseOk(text);
  const Op& op = onlyOp(*m, 1);
  CHECK(op.attrs().getStrs("workgroups") == std::vector<std::string>{"n ceildiv 4", "1", "1"});
  CHECK(op.attrs().getStrs("push") == std::vector<std::string>{"n"});
  CHECK(printModule(*m) == text);
  // `[]` is an empty string list where the op wants one.
  auto empty = parseOk(launch(", push = []"));
  const AttrValue* push = onlyOp(*empty, 1).attrs().find("push");
  REQUIRE(push != nullptr);
  CHECK(std::get<std::vector<std::string>>(*push).empty());
  CHECK(parseErr(launch(", push = [\"n\", 1]")).find("expected a string (a list holds one kind)") !=
        std::string::npos);
  CHECK(parseErr(launch(", push = [1]"))
            .find("attribute 'push' of 'launch' must be strs, found ints") != std::string::npos);
}

TEST_CASE("dense values print as splats or nested lists") {
  HostTensor splat(ElemType::F32, {2, 3});
  for (int i = 0; i < 6; ++i) splat.setF(i, 7.0);
  CHECK(printAttrValue(splat) == "dense<7.0> : tensor<2x3xf32>");

  HostTensor m(ElemType::I64, {2, 2});
  for (int i = 0; i < 4; ++i) m.setI(i, i + 1);
  CHECK(printAttrValue(m) == "dense<[[1, 2], [3, 4]]> : tensor<2x2xi64>");

  HostTensor b(ElemType::I1, {3});
  b.setI(0, 1);
  CHECK(printAttrValue(b) == "dense<[1, 0, 0]> : tensor<3xi1>");

  HostTensor scalar(ElemType::U8, {});
  scalar.setI(0, 255);
  CHECK(printAttrValue(scalar) == "dense<255> : tensor<u8>");

  HostTensor empty(ElemType::F32, {2, 0});
  CHECK(printAttrValue(empty) == "dense<[[], []]> : tensor<2x0xf32>");

  // +0.0 and -0.0 differ in bits, so this is not a splat.
  HostTensor zeros(ElemType::F64, {2});
  zeros.setF(1, -0.0);
  CHECK(printAttrValue(zeros) == "dense<[0.0, -0.0]> : tensor<2xf64>");
}

TEST_CASE("f16 and bf16 elements print shortest text that keeps their bits") {
  HostTensor h(ElemType::F16, {4});
  h.setF(0, 0.1);             // f16 0.0999755859375
  h.setF(1, 65504);           // largest finite f16
  uint16_t smallest = 0x0001; // 2^-24, the smallest subnormal
  std::memcpy(h.mutableData() + 4, &smallest, 2);
  h.setF(3, -1.5);
  CHECK(printAttrValue(h) == "dense<[0.1, 65500.0, 6e-08, -1.5]> : tensor<4xf16>");
  HostTensor bf(ElemType::BF16, {2});
  bf.setF(0, 3.140625); // bf16 nearest to pi
  bf.setF(1, 1e30);
  CHECK(printAttrValue(bf) == "dense<[3.14, 1e+30]> : tensor<2xbf16>");

  // Every finite f16 bit pattern survives print → parse.
  HostTensor all(ElemType::F16, {65536});
  for (uint32_t i = 0; i < 65536; ++i) {
    auto bits = static_cast<uint16_t>(i);
    std::memcpy(all.mutableData() + 2 * i, &bits, 2);
  }
  Module mod;
  Func* f = mod.addFunc(std::make_unique<Func>("f", Loc{}));
  Builder bld(f);
  Value* c = bld.constant(all);
  bld.createUnchecked(OpKind::Return, {c}, {}, {});
  f->setResultTypes({c->type()});
  auto again = parseModule(printModule(mod), "x.kir");
  REQUIRE(again.ok());
  const HostTensor* back = onlyOp(**again).attrs().getDense("value");
  REQUIRE(back != nullptr);
  CHECK(back->identical(all));
}

TEST_CASE("attributes of every kind parse to the right values") {
  CHECK(std::get<int64_t>(attrOf("%0 = iota {axis = -3} : tensor<f32>", "axis")) == -3);
  CHECK(std::get<int64_t>(attrOf("%0 = iota {axis = 0x10} : tensor<f32>", "axis")) == 16);
  CHECK(std::get<double>(attrOf("%0 = range {delta = 2.5, start = 1} : tensor<f32>", "delta")) ==
        2.5);
  // An int where the op wants a float is converted.
  auto start = attrOf("%0 = range {delta = 2.5, start = 1} : tensor<f32>", "start");
  REQUIRE(std::holds_alternative<double>(start));
  CHECK(std::get<double>(start) == 1.0);
  CHECK(std::get<double>(attrOf("%0 = range {delta = -inf, start = 1e-3} : tensor<f32>",
                                "delta")) == -std::numeric_limits<double>::infinity());
  CHECK(std::isnan(
      std::get<double>(attrOf("%0 = range {delta = nan, start = 0} : tensor<f32>", "delta"))));
  auto m = parseOk("weight @\"a\\\"A\\n\" : tensor<f32> = \"x\"[\"y\"]\n" +
                   inFunc("%0 = weight {name = \"a\\\"\\41\\n\"} : tensor<f32>"));
  CHECK(m->weights().at(0).name == "a\"A\n");
  CHECK(onlyOp(*m).attrs().getStr("name") == "a\"A\n");
}

TEST_CASE("list, type and dense attributes parse") {
  auto m = parseOk(R"(func @f(%x: tensor<2x3xf32>) -> (tensor<3x2xf32>) {
  %0 = transpose %x {perm = [1, 0]} : tensor<3x2xf32>
  %1 = reduce_sum %0 {axes = [], keepdims = 0} : tensor<f32>
  %2 = cast %0 {to = f16} : tensor<3x2xf16>
  %3 = constant {value = dense<[[1.5, 2.0], [nan, -inf]]> : tensor<2x2xf32>} : tensor<2x2xf32>
  %4 = constant {value = dense<-3> : tensor<2xi8>} : tensor<2xi8>
  %5 = pad %x {mode = "constant", pads = [0, 0, 1, 1], value = 0.5} : tensor<3x4xf32>
  return %0
}
)");
  auto ops = m->funcs()[0]->opsSnapshot();
  CHECK(ops[0]->attrs().getInts("perm") == std::vector<int64_t>{1, 0});
  CHECK(ops[1]->attrs().getInts("axes").empty());
  CHECK(ops[2]->attrs().getType("to") == ElemType::F16);
  const HostTensor* d = ops[3]->attrs().getDense("value");
  REQUIRE(d != nullptr);
  CHECK(d->shape() == std::vector<int64_t>{2, 2});
  CHECK(d->getF(0) == 1.5);
  CHECK(d->getF(1) == 2.0);
  CHECK(std::isnan(d->getF(2)));
  CHECK(d->getF(3) == -std::numeric_limits<double>::infinity());
  const HostTensor* s = ops[4]->attrs().getDense("value");
  REQUIRE(s != nullptr);
  CHECK(s->getI(0) == -3);
  CHECK(s->getI(1) == -3);
  CHECK(ops[5]->attrs().getStr("mode") == "constant");
  CHECK(ops[5]->attrs().getFloat("value") == 0.5);
}

TEST_CASE("non-canonical NaNs keep their bits through the text form") {
  auto m = parseOk(inFunc("%0 = constant {value = dense<[nan(0x7e01), nan, nan(0xfe00)]> : "
                          "tensor<3xf16>} : tensor<3xf16>",
                          "%0", "tensor<3xf16>"));
  const HostTensor* d = onlyOp(*m).attrs().getDense("value");
  REQUIRE(d != nullptr);
  uint16_t bits[3];
  std::memcpy(bits, d->data(), 6);
  CHECK(bits[0] == 0x7e01);
  CHECK(bits[1] == 0x7e00);
  CHECK(bits[2] == 0xfe00);
  std::string text = checkRoundTrip(*m);
  CHECK(text.find("dense<[nan(0x7e01), nan, nan(0xfe00)]>") != std::string::npos);
}

// ---- types ----------------------------------------------------------------------------------

TEST_CASE("tensor types of every static form parse and print") {
  auto m = parseOk(
      R"(func @f(%a: tensor<f32>, %b: tensor<2x3xi8>, %c: tensor<?x4xbf16>, %d: tensor<0xu8>, %e: tensor<1x1x1x1x1xi1>) -> () {
  return
}
)");
  const Func& f = *m->funcs()[0];
  CHECK(f.arg(0)->type() == Type::tensor(ElemType::F32, {}));
  CHECK(f.arg(1)->type() == Type::tensor(ElemType::I8, {2, 3}));
  CHECK(f.arg(2)->type().dim(0).isUnknown());
  CHECK(f.arg(2)->type().dim(1) == Dim(4));
  CHECK(f.arg(2)->type().elem() == ElemType::BF16);
  CHECK(f.arg(3)->type() == Type::tensor(ElemType::U8, {0}));
  CHECK(f.arg(4)->type().rank() == 5);
  CHECK(checkRoundTrip(*m) ==
        "func @f(%a: tensor<f32>, %b: tensor<2x3xi8>, %c: tensor<?x4xbf16>, %d: tensor<0xu8>, "
        "%e: tensor<1x1x1x1x1xi1>) -> () {\n  return\n}\n");
}

TEST_CASE("symbolic dims parse through parseSymExpr and must be declared") {
  auto m = parseOk(R"(symbol seq in [1, 4096] divisible_by 8
symbol b in [1, 16]
func @f(%x: tensor<{seq}x{2*b + 1}xf32>) -> (tensor<{seq}x{2*b + 1}xf32>) {
  return %x
}
)");
  const SymbolInfo* seq = m->symbols().lookup("seq");
  REQUIRE(seq != nullptr);
  CHECK(seq->lo == 1);
  CHECK(seq->hi == 4096);
  CHECK(seq->divisor == 8);
  CHECK(m->symbols().lookup("b")->divisor == 1);
  const Type& t = m->funcs()[0]->arg(0)->type();
  CHECK(t.dim(0).expr() == SymExpr::symbol("seq"));
  CHECK(t.dim(1).expr() == SymExpr::constant(2) * SymExpr::symbol("b") + SymExpr::constant(1));
  CHECK(checkRoundTrip(*m).starts_with(
      "symbol b in [1, 16]\nsymbol seq in [1, 4096] divisible_by 8\n\n"));
  CHECK(parseErr("func @f(%x: tensor<{n}xf32>) -> () {\n  return\n}\n") ==
        "t.kir:1:21: error: undeclared symbol 'n' (declare it with `symbol n in [lo, hi]`)\n");
}

// ---- whole modules --------------------------------------------------------------------------

const char* kBigModule = R"(// A module that uses most ops and every attribute kind.
weight @wq : tensor<4x4xf16> = "model.safetensors"["layers.0.wq"]
weight @"odd name/0" : tensor<4xf32> = "w dir/m.safetensors"["t\"0"]

func @main(%x: tensor<2x4xf32>, %y: tensor<f32>, %idx: tensor<3xi64>) -> (tensor<2x4xf32>, tensor<2x1xf32>, tensor<4x4xf16>) {
  %0 = add %x, %x : tensor<2x4xf32>
  %1 = neg %0 : tensor<2x4xf32>
  %2 = exp %1 : tensor<2x4xf32>
  %3 = mul %2, %y : tensor<2x4xf32>
  %4 = reduce_sum %3 {axes = [1], keepdims = 1} : tensor<2x1xf32>
  %5, %6 = split %3 {axis = 1, sizes = [1, 3]} : tensor<2x1xf32>, tensor<2x3xf32>
  %7 = concat %5, %6 {axis = 1} : tensor<2x4xf32>
  %8 = constant {value = dense<[[1.5, 2.0], [nan, -inf]]> : tensor<2x2xf32>} : tensor<2x2xf32>
  %9 = cast %8 {to = f16} : tensor<2x2xf16>
  %10 = weight {name = "wq"} : tensor<4x4xf16>
  %11 = weight {name = "odd name/0"} : tensor<4xf32>
  %12 = gelu %7 {approximate = "tanh"} : tensor<2x4xf32>
  %13 = softmax %12 {axis = -1} : tensor<2x4xf32>
  %14 = transpose %13 {perm = [1, 0]} : tensor<4x2xf32>
  %15 = matmul %13, %14 : tensor<2x2xf32>
  %16 = gather %11, %idx {axis = 0} : tensor<3xf32>
  %17 = slice %13 {axes = [1], ends = [3], starts = [0], steps = [1]} : tensor<2x3xf32>
  %18 = pad %17 {mode = "constant", pads = [0, 0, 0, 1], value = -0.5} : tensor<2x4xf32>
  %19 = range {delta = 0.25, start = -1.0} : tensor<8xf32>
  %20 = iota {axis = 0} : tensor<4xi32>
  %21 = constant {value = dense<[1, 0, 1]> : tensor<3xi1>} : tensor<3xi1>
  %22 = constant {value = dense<0.1> : tensor<2x3xbf16>} : tensor<2x3xbf16>
  %23 = argmax %13 {axis = 1, keepdims = 0, select_last_index = 1} : tensor<2xi64>
  %24 = lt %13, %18 : tensor<2x4xi1>
  %25 = select %24, %13, %18 : tensor<2x4xf32>
  %26 = clamp %25, %y, %y : tensor<2x4xf32>
  %27 = dim %x {axis = 0} : tensor<i64>
  %28 = reshape %26 : tensor<8xf32>
  %29 = broadcast %y : tensor<3x8xf32>
  %30 = cumsum %28 {axis = 0, exclusive = 1} : tensor<8xf32>
  %31 = mod %28, %30 {fmod = 1} : tensor<8xf32>
  %32 = conv %x, %x {dilations = [1], group = 1, pads = [0, 0], strides = [1]} : tensor<2x2x1xf32>
  %33 = scatter_nd %28, %idx, %16 {reduction = "add"} : tensor<8xf32>
  %34 = constant {value = dense<[-1e-05, 6.25e+20, 3.0, -0.0]> : tensor<4xf64>} : tensor<4xf64>
  return %26, %4, %10
}

func @second() -> () {
  return
}
)";

TEST_CASE("a large module round-trips byte-identically") {
  auto m = parseOk(kBigModule);
  REQUIRE(m->funcs().size() == 2);
  CHECK(m->funcs()[0]->numOps() == 35);
  CHECK(m->weights().size() == 2);
  CHECK(m->weights()[1].name == "odd name/0");
  CHECK(m->weights()[1].tensor == "t\"0");
  std::string printed = checkRoundTrip(*m);
  // The canonical form drops the comment and the blank line stays between sections.
  CHECK(printed.starts_with(
      "weight @wq : tensor<4x4xf16> = \"model.safetensors\"[\"layers.0.wq\"]\n"
      "weight @\"odd name/0\" : tensor<4xf32> = \"w dir/m.safetensors\"[\"t\\\"0\"]\n"
      "\nfunc @main("));
  CHECK(printed.find("  %5, %6 = split %3 {axis = 1, sizes = [1, 3]} : tensor<2x1xf32>, "
                     "tensor<2x3xf32>\n") != std::string::npos);
  CHECK(printed.find("  return %26, %4, %10\n}\n\nfunc @second() -> () {\n  return\n}\n") !=
        std::string::npos);
  // The input was already canonical apart from its first comment line.
  std::string body(kBigModule);
  body = body.substr(body.find('\n') + 1);
  CHECK(printed == body);
  // With locations, the round trip still holds and keeps the original positions.
  std::string withLocs = checkRoundTrip(*m, {.locs = true});
  CHECK(withLocs.find("  %0 = add %x, %x : tensor<2x4xf32> loc(\"t.kir\":6:3)\n") !=
        std::string::npos);
}

TEST_CASE("result names are renumbered and argument names sanitized") {
  auto m =
      parseOk(R"(func @f(%0: tensor<f32>, %arg1: tensor<f32>, %a: tensor<f32>) -> (tensor<f32>) {
  %sum = add %0, %arg1 : tensor<f32>
  %x.y = add %sum, %a : tensor<f32>
  return %x.y
}
)");
  CHECK(printModule(*m) == "func @f(%v0: tensor<f32>, %arg1: tensor<f32>, %a: tensor<f32>) -> "
                           "(tensor<f32>) {\n  %0 = add %v0, %arg1 : tensor<f32>\n"
                           "  %1 = add %0, %a : tensor<f32>\n  return %1\n}\n");

  // Built in C++: names with odd characters, clashes with argN, and none at all.
  Module mod;
  Func* f = mod.addFunc(std::make_unique<Func>("g", Loc{}));
  Type t = Type::tensor(ElemType::F32, {});
  f->addArg(t, "arg1");
  f->addArg(t);
  f->addArg(t, "a-b c");
  f->addArg(t, "a_b_c");
  Builder(f).createUnchecked(OpKind::Return, {}, {}, {});
  CHECK(checkRoundTrip(mod) == "func @g(%arg1: tensor<f32>, %arg1_1: tensor<f32>, %a_b_c: "
                               "tensor<f32>, %a_b_c_1: tensor<f32>) -> () {\n  return\n}\n");
}

TEST_CASE("explicit locations parse and print") {
  auto m = parseOk(R"(func @f(%x: tensor<f32>) -> (tensor<f32>) {
  %0 = neg %x : tensor<f32> loc("model.onnx":12:7)
  %1 = abs %0 : tensor<f32> loc("node \"Abs_3\"")
  return %1
}
)");
  auto ops = m->funcs()[0]->opsSnapshot();
  CHECK(ops[0]->loc() == Loc{"model.onnx", 12, 7});
  CHECK(ops[1]->loc() == Loc::named("node \"Abs_3\""));
  CHECK(ops[2]->loc() == Loc{"t.kir", 4, 3});
  CHECK(printOp(*ops[1]) == "%1 = abs %0 : tensor<f32>");
  std::string printed = checkRoundTrip(*m, {.locs = true});
  CHECK(printed.find("  return %1 loc(\"t.kir\":4:3)\n") != std::string::npos);
  // An op without a location prints as loc(""), which reads back as no location.
  ops[0]->setLoc(Loc{});
  CHECK(checkRoundTrip(*m, {.locs = true}).find("neg %x : tensor<f32> loc(\"\")") !=
        std::string::npos);
}

TEST_CASE("printOp numbers values as the function does") {
  auto m = parseOk(kBigModule);
  auto ops = m->funcs()[0]->opsSnapshot();
  CHECK(printOp(*ops[5]) == "%5, %6 = split %3 {axis = 1, sizes = [1, 3]} : tensor<2x1xf32>, "
                            "tensor<2x3xf32>");
  CHECK(printOp(*ops.back()) == "return %26, %4, %10");
}

// ---- errors ---------------------------------------------------------------------------------

TEST_CASE("parse errors carry exact positions and clear messages") {
  CHECK(parseErr("func @f() -> () {\n  %0 = frobnicate : tensor<f32>\n}\n") ==
        "t.kir:2:8: error: unknown op 'frobnicate'\n");
  CHECK(parseErr("func @f(%x: tensor<f32>) -> () {\n  %0 = ad %x, %x : tensor<f32>\n}\n") ==
        "t.kir:2:8: error: unknown op 'ad'; did you mean 'add', 'and' or 'pad'?\n");
  CHECK(parseErr("func @f(%x: tensor<f32>) -> () {\n  %0 = add %x, %7 : tensor<f32>\n}\n") ==
        "t.kir:2:16: error: use of undefined value %7\n");
  CHECK(parseErr("func @f(%x: tensor<f32>) -> () {\n  %x = neg %x : tensor<f32>\n}\n") ==
        "t.kir:2:3: error: redefinition of %x\nt.kir:1:9: note: previous definition here\n");
  CHECK(parseErr("func @f(%x: tensor<f32>) -> () {\n  %0, %1 = neg %x : tensor<f32>, "
                 "tensor<f32>\n}\n") ==
        "t.kir:2:12: error: 'neg' has 1 result, but 2 names are given\n");
  CHECK(parseErr("func @f(%x: tensor<f32>) -> () {\n  %0 = neg %x, %x : tensor<f32>\n}\n") ==
        "t.kir:2:8: error: 'neg' takes 1 operand, found 2\n");
  CHECK(parseErr("func @f(%x: tensor<f32>) -> () {\n  %0 = neg %x\n}\n") ==
        "t.kir:3:1: error: expected ':' and the result types, found '}'\n");
  CHECK(parseErr("func @f(%x: tensor<f32>) -> () {\n  %0 = reduce_sum %x {axes = 1, keepdims = "
                 "0} : tensor<f32>\n}\n") ==
        "t.kir:2:30: error: attribute 'axes' of 'reduce_sum' must be ints, found int\n");
  CHECK(parseErr("func @f(%x: tensor<f32>) -> () {\n  %0 = reduce_sum %x {axis = [1]} : "
                 "tensor<f32>\n}\n") ==
        "t.kir:2:23: error: 'reduce_sum' has no attribute 'axis' (it takes axes, keepdims)\n");
  CHECK(parseErr("func @f(%x: tensor<f32>) -> () {\n  %0 = reduce_sum %x {axes = [1]} : "
                 "tensor<f32>\n}\n") ==
        "t.kir:2:8: error: 'reduce_sum' needs attribute 'keepdims' (int)\n");
  CHECK(parseErr("func @f(%x: tensor<f32>) -> () {\n  %0 = neg %x {k = 1} : tensor<f32>\n}\n") ==
        "t.kir:2:16: error: 'neg' has no attribute 'k' (it takes none)\n");
  CHECK(parseErr("func @f() -> () {\n  %0 = weight {name = \"nope\"} : tensor<f32>\n}\n") ==
        "t.kir:2:23: error: undeclared weight @nope\n");
  CHECK(parseErr("func @f() -> () {\n  return\n}\nfunc @f() -> () {\n  return\n}\n") ==
        "t.kir:4:6: error: function @f is defined twice\nt.kir:1:6: note: first defined here\n");
  CHECK(parseErr("symbol s in [1, 2]\nsymbol s in [1, 3]\n") ==
        "t.kir:2:8: error: symbol 's' is declared twice\nt.kir:1:8: note: first declared here\n");
  CHECK(parseErr("func @f(%x: tensor<2x3yf32>) -> ()") ==
        "t.kir:1:23: error: expected 'x' after the dimension\n");
  CHECK(parseErr("func @f(%x: tensor<2xf31>) -> ()") ==
        "t.kir:1:22: error: unknown element type 'f31'\n");
  CHECK(parseErr("func @f(%x: tensor<99999999999999999999xf32>) -> ()") ==
        "t.kir:1:20: error: dimension 99999999999999999999 is out of range\n");
  CHECK(parseErr(inFunc("%0 = iota {axis = 9223372036854775808} : tensor<f32>")) ==
        "t.kir:2:21: error: integer 9223372036854775808 is out of range\n");
  CHECK(parseErr(inFunc("%0 = range {delta = 1e999, start = 0} : tensor<f32>")) ==
        "t.kir:2:23: error: float 1e999 is out of range for f64\n");
  CHECK(parseErr(inFunc("%0 = constant {value = dense<[1, 2]> : tensor<3xi32>} : tensor<3xi32>")) ==
        "t.kir:2:32: error: expected 3 elements in dimension 0, found 2\n");
  CHECK(parseErr(inFunc("%0 = constant {value = dense<300> : tensor<i8>} : tensor<i8>")) ==
        "t.kir:2:32: error: 300 is out of range for i8\n");
  CHECK(parseErr(inFunc("%0 = constant {value = dense<1.5> : tensor<i32>} : tensor<i32>")) ==
        "t.kir:2:32: error: expected an integer for i32\n");
  CHECK(parseErr(inFunc("%0 = constant {value = dense<0> : tensor<?xf32>} : tensor<2xf32>")) ==
        "t.kir:2:37: error: a dense value needs a static type\n");
  CHECK(parseErr(inFunc("%0 = constant {value = dense<0> : tensor<99999x99999x99999xf32>} : "
                        "tensor<2xf32>")) ==
        "t.kir:2:37: error: dense value too large for inline text (limit 256 MiB; use a weight)\n");
  CHECK(parseErr("func @f() -> () {\n  %0 = iota {axis = \"abc} : tensor<f32>\n}\n") ==
        "t.kir:2:21: error: unterminated string\n");
  CHECK(parseErr("func @f() -> () {\n  return\n") ==
        "t.kir:3:1: error: expected '}' to end function @f\nt.kir:1:17: note: the function body "
        "starts here\n");
  CHECK(parseErr("fn @f") ==
        "t.kir:1:1: error: expected 'symbol', 'weight', 'device' or 'func', found 'fn'\n");
  CHECK(parseErr("func @f(%x: tensor<f32>) -> () {\n  return %x $\n}\n") ==
        "t.kir:2:13: error: unexpected character '$'\n");
  CHECK(parseErr("func @f() -> () {\n  return loc(\"a\":0:1)\n}\n") ==
        "t.kir:2:18: error: location line/column out of range\n");
}

TEST_CASE("an unreadable file is an error naming the path") {
  auto r = parseModuleFile("/nonexistent/dir/x.kir");
  REQUIRE_FALSE(r.ok());
  CHECK(r.diags().str() ==
        "/nonexistent/dir/x.kir: error: cannot read file: No such file or directory\n");

  auto dir = std::filesystem::temp_directory_path() / "kiln-parser-test";
  std::filesystem::create_directories(dir);
  std::string path = (dir / "m.kir").string();
  std::ofstream(path) << "func @f() -> () {\n  return\n}\n";
  auto m = parseModuleFile(path);
  REQUIRE_MESSAGE(m.ok(), m.diags().str());
  CHECK((*m)->baseDir() == dir.string());
  auto bad = parseModuleFile(dir.string());
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.diags().str() == dir.string() + ": error: cannot read file: Is a directory\n");
  std::filesystem::remove_all(dir);
}

// ---- robustness -----------------------------------------------------------------------------

TEST_CASE("truncated and mutated inputs fail cleanly, never crash") {
  std::string base = kBigModule;
  // Every prefix: each either parses (a prefix ending at a function boundary) or errors.
  size_t parsed = 0;
  for (size_t n = 0; n < base.size(); n += 3) {
    auto r = parseModule(std::string_view(base).substr(0, n), "p.kir");
    if (r.ok()) {
      ++parsed;
    } else {
      CHECK(r.diags().list.at(0).str().starts_with("p.kir:"));
    }
  }
  CHECK(parsed >= 1); // the empty prefix is an empty module

  std::mt19937 rng(1234);
  const char interesting[] = "%@{}[]<>(),:=-x?\"\\0123456789.e \n";
  int ok = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s = base;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng() % s.size();
      switch (rng() % 4) {
      case 0: s[pos] = static_cast<char>(rng() % 256); break;
      case 1: s[pos] = interesting[rng() % (sizeof interesting - 1)]; break;
      case 2: s.erase(pos, 1 + rng() % 8); break;
      default: s.insert(pos, s.substr(rng() % s.size(), 1 + rng() % 16)); break;
      }
      if (s.empty()) s = "x";
    }
    auto r = parseModule(s, "m.kir");
    if (r.ok()) {
      ++ok;
      // Whatever parsed must print and reparse to the same text.
      std::string once = printModule(**r);
      auto again = parseModule(once, "m.kir");
      REQUIRE_MESSAGE(again.ok(), once);
      CHECK(printModule(**again) == once);
    } else {
      CHECK_FALSE(r.diags().list.empty());
    }
  }
  MESSAGE(ok << " of 3000 mutants still parsed");

  for (int iter = 0; iter < 2000; ++iter) {
    std::string s(rng() % 200, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    // Random bytes parse only when they hold nothing (empty, blanks or a comment).
    auto r = parseModule(s, "r.kir");
    if (r.ok()) CHECK(printModule(**r).empty());
  }

  // Deep nesting is refused, not recursed into.
  std::string deep = inFunc("%0 = constant {value = dense<" + std::string(100000, '[') +
                            "> : tensor<f32>} : tensor<f32>");
  CHECK(parseErr(deep) == "t.kir:2:97: error: dense literal is nested too deeply\n");
}

TEST_CASE("lexer literal helpers") {
  CHECK(parseIntLiteral("-9223372036854775808") == std::numeric_limits<int64_t>::min());
  CHECK_FALSE(parseIntLiteral("9223372036854775808").has_value());
  CHECK(parseIntLiteral("0xff") == 255);
  CHECK_FALSE(parseIntLiteral("0xffffffffffffffff").has_value());
  CHECK(parseFloatLiteral("0.1", ElemType::F64) == 0.1);
  CHECK(parseFloatLiteral("0.1", ElemType::F32) == static_cast<double>(0.1f));
  CHECK(parseFloatLiteral("0.1", ElemType::F16) == static_cast<double>(halfToFloat(0x2e66)));
  CHECK_FALSE(parseFloatLiteral("1e39", ElemType::F32).has_value());
  CHECK(parseFloatLiteral("5e-324", ElemType::F64) == std::numeric_limits<double>::denorm_min());
  CHECK(quoteString("a\"\\\x7f") == "\"a\\\"\\\\\\7f\"");
  CHECK(unescapeString("\\41\\t") == "A\t");
  CHECK_FALSE(unescapeString("\\q").has_value());
  CHECK_FALSE(unescapeString("\\4").has_value());
  CHECK(isBareName("layers.0_w"));
  CHECK_FALSE(isBareName("a/b"));
  CHECK_FALSE(isBareName(""));
}
