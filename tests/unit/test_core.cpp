// Unit tests for the IR core: element types, host tensors, attributes, use lists, regions.
#include <cmath>
#include <doctest/doctest.h>

#include "ir/core/attrs.h"
#include "ir/core/builder.h"
#include "ir/core/host_tensor.h"
#include "ir/core/ir.h"

using namespace kiln;

TEST_CASE("element type names round-trip and sizes are right") {
  for (int i = 0; i < kNumElemTypes; ++i) {
    auto t = static_cast<ElemType>(i);
    CHECK(parseElemType(elemTypeName(t)) == t);
  }
  CHECK(elemTypeBytes(ElemType::BF16) == 2);
  CHECK(elemTypeBytes(ElemType::I64) == 8);
  CHECK_FALSE(parseElemType("f8").has_value());
  CHECK(isBool(ElemType::I1));
  CHECK_FALSE(isInteger(ElemType::I1));
  CHECK(isSignedInt(ElemType::I8));
  CHECK_FALSE(isSignedInt(ElemType::U8));
}

TEST_CASE("f16 and bf16 conversions round to nearest even") {
  CHECK(floatToHalf(1.0f) == 0x3c00);
  CHECK(halfToFloat(0x3c00) == 1.0f);
  CHECK(floatToHalf(65504.0f) == 0x7bff);
  CHECK(floatToHalf(65520.0f) == 0x7c00);              // rounds up to inf
  CHECK(halfToFloat(0x0001) == std::ldexp(1.0f, -24)); // smallest subnormal
  CHECK(floatToHalf(std::ldexp(1.0f, -25)) == 0);      // ties to even: 0
  CHECK(std::isnan(halfToFloat(floatToHalf(NAN))));
  CHECK(floatToHalf(-0.0f) == 0x8000);
  CHECK(floatToBf16(1.0f) == 0x3f80);
  CHECK(bf16ToFloat(0x3f80) == 1.0f);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even → 1.0
  CHECK(floatToBf16(1.00390625f) == 0x3f80);
  CHECK(std::isnan(bf16ToFloat(floatToBf16(NAN))));
}

TEST_CASE("roundToElem wraps integers and rounds floats") {
  CHECK(roundToElem(ElemType::I8, 130) == -126);
  CHECK(roundToElem(ElemType::U8, -1) == 255);
  CHECK(roundToElem(ElemType::I32, -2.7) == -2);
  CHECK(roundToElem(ElemType::I1, 0.5) == 1);
  CHECK(roundToElem(ElemType::I64, NAN) == 0);
  CHECK(roundToElem(ElemType::F32, 0.1) == static_cast<double>(0.1f));
}

TEST_CASE("host tensors store and load every element type") {
  for (int i = 0; i < kNumElemTypes; ++i) {
    auto et = static_cast<ElemType>(i);
    HostTensor t(et, {2, 3});
    CHECK(t.numElements() == 6);
    t.setF(4, 1.0);
    CHECK(t.getF(4) == 1.0);
    CHECK(t.getI(4) == 1);
    CHECK(t.getF(0) == 0.0);
  }
  HostTensor a(ElemType::I64, {3});
  a.setI(2, int64_t(1) << 60);
  CHECK(a.getI(2) == int64_t(1) << 60);
  HostTensor b = a.clone();
  CHECK(b.identical(a));
  b.setI(0, 5);
  CHECK_FALSE(b.identical(a));
  CHECK(a.strides() == std::vector<int64_t>{1});
  CHECK(HostTensor(ElemType::F32, {2, 3, 4}).strides() == std::vector<int64_t>{12, 4, 1});
}

TEST_CASE("attributes are sorted and compare by value") {
  Attrs a;
  a.set("keepdims", int64_t(1));
  a.set("axes", std::vector<int64_t>{0, 2});
  REQUIRE(a.entries().size() == 2);
  CHECK(a.entries()[0].first == "axes");
  CHECK(a.getInts("axes") == std::vector<int64_t>{0, 2});
  CHECK(a.getInt("keepdims") == 1);
  CHECK(a.getInt("missing", 7) == 7);
  Attrs b;
  b.set("axes", std::vector<int64_t>{0, 2});
  b.set("keepdims", int64_t(1));
  CHECK(a == b);
  CHECK(a.hash() == b.hash());
  b.set("keepdims", int64_t(0));
  CHECK_FALSE(a == b);
  Attrs n1, n2;
  n1.set("v", std::nan(""));
  n2.set("v", std::nan(""));
  CHECK(n1 == n2); // NaN attributes compare bitwise
}

TEST_CASE("use lists follow every mutation") {
  Module m;
  Func* f = m.addFunc(std::make_unique<Func>("main", Loc{}));
  Value* x = f->addArg(Type::tensor(ElemType::F32, {4}), "x");
  Value* y = f->addArg(Type::tensor(ElemType::F32, {4}), "y");
  auto add = std::make_unique<Op>(OpKind::Add, std::vector<Type>{x->type()}, Attrs{}, Loc{});
  add->addOperand(x);
  add->addOperand(x);
  Op* addOp = f->insert(std::move(add));
  CHECK(x->uses().size() == 2);
  addOp->setOperand(1, y);
  CHECK(x->uses().size() == 1);
  CHECK(y->uses().size() == 1);
  x->replaceAllUsesWith(y);
  CHECK_FALSE(x->hasUses());
  CHECK(y->uses().size() == 2);
  auto ret = std::make_unique<Op>(OpKind::Return, std::vector<Type>{}, Attrs{}, Loc{});
  ret->addOperand(addOp->result());
  Op* retOp = f->insert(std::move(ret));
  CHECK(f->terminator() == retOp);
  CHECK(addOp->result()->uses().size() == 1);
  retOp->dropOperands();
  f->erase(addOp);
  CHECK_FALSE(y->hasUses());
  CHECK(f->numOps() == 1);
}

TEST_CASE("regions: blocks own ops and arguments; walks, moves and erasure keep use lists") {
  Module m;
  Func* f = m.addFunc(std::make_unique<Func>("k", Loc{}));
  Builder b(f);
  Attrs one;
  one.set("value", int64_t(1));
  Value* c1 = b.createUnchecked(OpKind::IConst, {}, one, {Type::index()})->result();
  Value* z = b.createUnchecked(OpKind::SConst, {}, {}, {Type::scalar(ElemType::F32)})->result();
  Op* loop = b.createUnchecked(OpKind::For, {c1, c1, c1, z}, {}, {z->type()});
  Block* body = loop->addRegion();
  Value* iv = body->addArg(Type::index());
  Value* acc = body->addArg(z->type());
  CHECK(iv->isBlockArg());
  CHECK_FALSE(iv->isArg());
  CHECK(iv->def() == nullptr);
  CHECK(acc->blockArgOf() == body);
  CHECK(body->parentOp() == loop);
  Builder in(f);
  in.setInsertionBlock(body);
  Attrs add;
  add.set("fn", OpKind::Add);
  Op* sum = in.createUnchecked(OpKind::Compute, {acc, z}, add, {z->type()});
  Op* inc = in.createUnchecked(OpKind::IAdd, {iv, c1}, {}, {Type::index()});
  Op* yield = in.createUnchecked(OpKind::Yield, {sum->result()}, {}, {});
  CHECK(sum->parent() == f);
  CHECK(sum->parentOp() == loop);
  CHECK(body->terminator() == yield);
  CHECK(body->isWithin(&f->body()));
  CHECK_FALSE(f->body().isWithin(body));
  CHECK(c1->uses().size() == 4); // lo, hi, step, the iadd
  std::vector<OpKind> order;
  walkOps(*f, [&](const Op& op) { order.push_back(op.kind()); });
  CHECK(order == std::vector<OpKind>{OpKind::IConst, OpKind::SConst, OpKind::For, OpKind::Compute,
                                     OpKind::IAdd, OpKind::Yield});
  // Moving an op out of the region and back.
  f->move(inc, loop);
  CHECK(inc->block() == &f->body());
  CHECK(inc->parentOp() == nullptr);
  f->move(inc, yield);
  CHECK(inc->block() == body);
  CHECK(body->ops().size() == 3);
  // Erasing the loop drops every use its body made.
  f->erase(inc);
  f->erase(loop);
  CHECK(c1->uses().empty());
  CHECK(z->uses().empty());
  CHECK(f->numOps() == 2);
  // An op-kind attribute compares and hashes by kind.
  Attrs other;
  other.set("fn", OpKind::Mul);
  CHECK(add.getOp("fn") == OpKind::Add);
  CHECK_FALSE(add == other);
  CHECK(add.hash() != other.hash());
  CHECK(numRegionsOf(OpKind::If) == 2);
  CHECK(numRegionsOf(OpKind::Add) == 0);
}

TEST_CASE("op table is consistent") {
  for (const OpInfo& info : allOps()) {
    CHECK(lookupOp(info.name) == info.kind);
    CHECK(&opInfo(info.kind) == &info);
    CHECK_FALSE(info.meaning.empty());
    if (info.maxOperands >= 0) CHECK(info.minOperands <= info.maxOperands);
  }
  CHECK(opInfo(OpKind::Add).has(kCommutative | kElementwise));
  CHECK_FALSE(opInfo(OpKind::Sub).has(kCommutative));
  CHECK(opInfo(OpKind::ReduceSum).attrs.size() == 2);
  CHECK_FALSE(lookupOp("frobnicate").has_value());
}
