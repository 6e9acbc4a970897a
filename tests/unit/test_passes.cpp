// Unit tests for the passes (canonicalize identities and folding, cse, dce, shape-infer,
// fuse's multi-anchor pattern table, conv-depthwise's choice of the flat form), the registry
// and the pass manager.
#include <cmath>
#include <doctest/doctest.h>
#include <set>
#include <sstream>

#include "ir/core/builder.h"
#include "ir/text/parser.h"
#include "ir/text/printer.h"
#include "passes/fuse.h"
#include "passes/pass_manager.h"

using namespace kiln;

namespace {

Type f32(std::vector<int64_t> dims) { return Type::tensor(ElemType::F32, dims); }

struct Fixture {
  Module m;
  Func* f;
  Value* x;
  explicit Fixture(Type argType = f32({4})) {
    f = m.addFunc(std::make_unique<Func>("main", Loc::named("test")));
    x = f->addArg(argType, "x");
  }
  Value* op(OpKind kind, std::vector<Value*> operands, Type type, Attrs attrs = {}) {
    return Builder(f)
        .createUnchecked(kind, operands, std::move(attrs), {std::move(type)})
        ->result();
  }
  Value* splat(Type type, double v) {
    HostTensor t(type.elem(), type.staticShape());
    for (int64_t i = 0; i < t.numElements(); ++i) t.setF(i, v);
    return Builder(f).constant(t);
  }
  void ret(Value* v) {
    Builder(f).createUnchecked(OpKind::Return, {v}, {}, {});
    f->setResultTypes({v->type()});
  }
  Value* returned() const { return f->terminator()->operand(0); }
  Status run(const std::string& pass) {
    const PassInfo* info = lookupPass(pass);
    REQUIRE(info != nullptr);
    return info->create({}).take()->run(m);
  }
  // Runs canonicalize and returns what the function returns.
  Value* canonicalized() {
    REQUIRE(run("canonicalize").ok());
    return returned();
  }
  size_t count(OpKind kind) const {
    size_t n = 0;
    for (const auto& op : f->ops()) n += op->kind() == kind;
    return n;
  }
};

Attrs ints(const std::string& name, std::vector<int64_t> v) {
  Attrs a;
  a.set(name, std::move(v));
  return a;
}

} // namespace

TEST_CASE("registry: the user-visible passes and the default pipeline") {
  std::vector<std::string> names;
  for (const PassInfo& p : registeredPasses()) {
    names.push_back(p.name);
    CHECK_FALSE(p.description.empty());
    CHECK(p.create({}).take() != nullptr);
  }
  CHECK(names == std::vector<std::string>{"affinity", "attention", "canonicalize", "collapse-dims",
                                          "conv-depthwise", "conv-gemm", "cse", "dce", "fuse",
                                          "gemv-split", "lower", "pack-weights", "pad", "pad-gemm",
                                          "pool-pad", "schedule", "shape-infer", "tile"});
  CHECK(lookupPass("nope") == nullptr);
  REQUIRE(registeredPipelines().size() == 2);
  CHECK(registeredPipelines()[0].name == "default");
  CHECK(registeredPipelines()[0].passes == "shape-infer,canonicalize,cse,dce");
  CHECK(registeredPipelines()[1].name == "codegen");
  CHECK(registeredPipelines()[1].passes ==
        "shape-infer,conv-gemm,conv-depthwise,pool-pad,pad-gemm,gemv-split,pack-weights,fuse,"
        "collapse-dims,tile,pad,lower");
}

TEST_CASE("canonicalize: additive identities respect signed zero") {
  SUBCASE("x + (-0.0) -> x") {
    Fixture t;
    t.ret(t.op(OpKind::Add, {t.x, t.splat(f32({4}), -0.0)}, f32({4})));
    CHECK(t.canonicalized() == t.x);
    CHECK(t.f->numOps() == 1);
  }
  SUBCASE("x + 0.0 stays: -0.0 + 0.0 is +0.0") {
    Fixture t;
    t.ret(t.op(OpKind::Add, {t.x, t.splat(f32({4}), 0.0)}, f32({4})));
    CHECK(t.canonicalized()->def()->kind() == OpKind::Add);
  }
  SUBCASE("integer x + 0 -> x, also with the constant on the left") {
    Fixture t(Type::tensor(ElemType::I32, {4}));
    Type i32 = Type::tensor(ElemType::I32, {4});
    t.ret(t.op(OpKind::Add, {t.splat(i32, 0), t.x}, i32));
    CHECK(t.canonicalized() == t.x);
  }
  SUBCASE("x - 0.0 -> x") {
    Fixture t;
    t.ret(t.op(OpKind::Sub, {t.x, t.splat(f32({4}), 0.0)}, f32({4})));
    CHECK(t.canonicalized() == t.x);
  }
  SUBCASE("x - (-0.0) stays: -0.0 - -0.0 is +0.0") {
    Fixture t;
    t.ret(t.op(OpKind::Sub, {t.x, t.splat(f32({4}), -0.0)}, f32({4})));
    CHECK(t.canonicalized()->def()->kind() == OpKind::Sub);
  }
}

TEST_CASE("canonicalize: multiplicative identities") {
  SUBCASE("x * 1 -> x") {
    Fixture t;
    t.ret(t.op(OpKind::Mul, {t.x, t.splat(f32({4}), 1.0)}, f32({4})));
    CHECK(t.canonicalized() == t.x);
  }
  SUBCASE("1 * x -> x * 1 -> x") {
    Fixture t;
    t.ret(t.op(OpKind::Mul, {t.splat(f32({}), 1.0), t.x}, f32({4})));
    CHECK(t.canonicalized() == t.x);
  }
  SUBCASE("x * 2 keeps its op, with the constant moved to the right") {
    Fixture t;
    Value* two = t.splat(f32({4}), 2.0);
    t.ret(t.op(OpKind::Mul, {two, t.x}, f32({4})));
    Op* mul = t.canonicalized()->def();
    REQUIRE(mul->kind() == OpKind::Mul);
    CHECK(mul->operand(0) == t.x);
    CHECK(mul->operand(1) == two);
  }
  SUBCASE("x * 1 stays when the constant broadcasts x to a larger type") {
    Fixture t(f32({1}));
    t.ret(t.op(OpKind::Mul, {t.x, t.splat(f32({4}), 1.0)}, f32({4})));
    CHECK(t.canonicalized()->def()->kind() == OpKind::Mul);
  }
  SUBCASE("x / 1 -> x") {
    Fixture t;
    t.ret(t.op(OpKind::Div, {t.x, t.splat(f32({4}), 1.0)}, f32({4})));
    CHECK(t.canonicalized() == t.x);
  }
  SUBCASE("1 / x stays") {
    Fixture t;
    t.ret(t.op(OpKind::Div, {t.splat(f32({4}), 1.0), t.x}, f32({4})));
    CHECK(t.canonicalized()->def()->kind() == OpKind::Div);
  }
}

TEST_CASE("canonicalize: involutions and idempotent ops") {
  SUBCASE("-(-x) -> x") {
    Fixture t;
    t.ret(t.op(OpKind::Neg, {t.op(OpKind::Neg, {t.x}, f32({4}))}, f32({4})));
    CHECK(t.canonicalized() == t.x);
    CHECK(t.f->numOps() == 1);
  }
  SUBCASE("max(x, x) -> x and min(x, x) -> x") {
    Fixture t;
    Value* mx = t.op(OpKind::Max, {t.x, t.x}, f32({4}));
    t.ret(t.op(OpKind::Min, {mx, mx}, f32({4})));
    CHECK(t.canonicalized() == t.x);
  }
  SUBCASE("boolean: not(not(b)) and (b and true) and (b or false) -> b") {
    Type i1 = Type::tensor(ElemType::I1, {4});
    Fixture t(i1);
    Value* nn = t.op(OpKind::Not, {t.op(OpKind::Not, {t.x}, i1)}, i1);
    Value* a = t.op(OpKind::And, {nn, t.splat(i1, 1)}, i1);
    t.ret(t.op(OpKind::Or, {a, t.splat(i1, 0)}, i1));
    CHECK(t.canonicalized() == t.x);
  }
}

TEST_CASE("canonicalize: conversions and data movement that change nothing") {
  SUBCASE("cast to the same type -> x; to another type stays") {
    Fixture t;
    Attrs same;
    same.set("to", ElemType::F32);
    Attrs other;
    other.set("to", ElemType::F16);
    Value* c = t.op(OpKind::Cast, {t.x}, f32({4}), same);
    t.ret(t.op(OpKind::Cast, {c}, Type::tensor(ElemType::F16, {4}), other));
    Op* cast = t.canonicalized()->def();
    REQUIRE(cast->kind() == OpKind::Cast);
    CHECK(cast->operand(0) == t.x);
  }
  SUBCASE("transpose with the identity perm -> x") {
    Fixture t(f32({2, 3}));
    t.ret(t.op(OpKind::Transpose, {t.x}, f32({2, 3}), ints("perm", {0, 1})));
    CHECK(t.canonicalized() == t.x);
  }
  SUBCASE("transpose of transpose composes") {
    Fixture t(f32({2, 3, 5}));
    Value* a = t.op(OpKind::Transpose, {t.x}, f32({3, 5, 2}), ints("perm", {1, 2, 0}));
    t.ret(t.op(OpKind::Transpose, {a}, f32({5, 3, 2}), ints("perm", {1, 0, 2})));
    Op* tr = t.canonicalized()->def();
    REQUIRE(tr->kind() == OpKind::Transpose);
    CHECK(tr->operand(0) == t.x);
    CHECK(tr->attrs().getInts("perm") == std::vector<int64_t>{2, 1, 0});
    CHECK(tr->result()->type() == f32({5, 3, 2}));
    CHECK(t.count(OpKind::Transpose) == 1);
  }
  SUBCASE("transposes that cancel -> x") {
    Fixture t(f32({2, 3, 5}));
    Value* a = t.op(OpKind::Transpose, {t.x}, f32({3, 5, 2}), ints("perm", {1, 2, 0}));
    t.ret(t.op(OpKind::Transpose, {a}, f32({2, 3, 5}), ints("perm", {2, 0, 1})));
    CHECK(t.canonicalized() == t.x);
  }
  SUBCASE("reshape to the same type -> x; reshape of reshape -> one reshape") {
    Fixture t(f32({2, 6}));
    Value* same = t.op(OpKind::Reshape, {t.x}, f32({2, 6}));
    Value* r1 = t.op(OpKind::Reshape, {same}, f32({3, 4}));
    t.ret(t.op(OpKind::Reshape, {r1}, f32({12})));
    Op* r = t.canonicalized()->def();
    REQUIRE(r->kind() == OpKind::Reshape);
    CHECK(r->operand(0) == t.x);
    CHECK(t.count(OpKind::Reshape) == 1);
  }
  SUBCASE("broadcast to the same type -> x") {
    Fixture t;
    t.ret(t.op(OpKind::Broadcast, {t.x}, f32({4})));
    CHECK(t.canonicalized() == t.x);
  }
  SUBCASE("concat of one operand -> x") {
    Fixture t;
    Attrs a;
    a.set("axis", int64_t{0});
    t.ret(t.op(OpKind::Concat, {t.x}, f32({4}), a));
    CHECK(t.canonicalized() == t.x);
  }
}

TEST_CASE("canonicalize: slices") {
  auto slice = [](Fixture& t, int64_t start, int64_t end, int64_t step, Type type) {
    Attrs a;
    a.set("starts", std::vector<int64_t>{start});
    a.set("ends", std::vector<int64_t>{end});
    a.set("axes", std::vector<int64_t>{-1});
    a.set("steps", std::vector<int64_t>{step});
    return t.op(OpKind::Slice, {t.x}, std::move(type), a);
  };
  SUBCASE("covering the whole axis -> x") {
    Fixture t;
    t.ret(slice(t, -4, 100, 1, f32({4})));
    CHECK(t.canonicalized() == t.x);
  }
  SUBCASE("reversing keeps the shape but not the order: stays") {
    Fixture t;
    t.ret(slice(t, -1, -100, -1, f32({4})));
    CHECK(t.canonicalized()->def()->kind() == OpKind::Slice);
  }
  SUBCASE("a part stays") {
    Fixture t;
    t.ret(slice(t, 1, 4, 1, f32({3})));
    CHECK(t.canonicalized()->def()->kind() == OpKind::Slice);
  }
}

TEST_CASE("canonicalize: select with a constant condition") {
  Type i1 = Type::tensor(ElemType::I1, {4});
  SUBCASE("all true -> a") {
    Fixture t;
    Value* b = t.op(OpKind::Exp, {t.x}, f32({4}));
    t.ret(t.op(OpKind::Select, {t.splat(i1, 1), t.x, b}, f32({4})));
    CHECK(t.canonicalized() == t.x);
    CHECK(t.f->numOps() == 1); // the exp became dead and was erased
  }
  SUBCASE("all false -> b") {
    Fixture t;
    Value* b = t.op(OpKind::Exp, {t.x}, f32({4}));
    t.ret(t.op(OpKind::Select, {t.splat(i1, 0), t.x, b}, f32({4})));
    CHECK(t.canonicalized() == b);
  }
  SUBCASE("a that needs broadcasting stays") {
    Fixture t(f32({1}));
    Value* b = t.splat(f32({4}), 2.0);
    t.ret(t.op(OpKind::Select, {t.splat(i1, 1), t.x, b}, f32({4})));
    CHECK(t.canonicalized()->def()->kind() == OpKind::Select);
  }
}

TEST_CASE("canonicalize: constant folding through the interpreter") {
  SUBCASE("an op on constants becomes a constant") {
    Fixture t;
    t.ret(t.op(OpKind::Add, {t.splat(f32({4}), 1.0), t.splat(f32({4}), 2.0)}, f32({4})));
    Op* c = t.canonicalized()->def();
    REQUIRE(c->kind() == OpKind::Constant);
    const HostTensor* v = c->attrs().getDense("value");
    REQUIRE(v != nullptr);
    CHECK(v->getF(3) == 3.0);
    CHECK(t.f->numOps() == 2);
  }
  SUBCASE("results over 1024 elements are not folded") {
    Fixture t;
    t.ret(t.op(OpKind::Broadcast, {t.splat(f32({}), 1.0)}, f32({1025})));
    CHECK(t.canonicalized()->def()->kind() == OpKind::Broadcast);
  }
  SUBCASE("weights are never folded") {
    Fixture t;
    Attrs name;
    name.set("name", std::string("w"));
    Value* w = t.op(OpKind::Weight, {}, f32({4}), name);
    t.ret(t.op(OpKind::Neg, {w}, f32({4})));
    CHECK(t.canonicalized()->def()->kind() == OpKind::Neg);
  }
  SUBCASE("an op the interpreter refuses stays for run time") {
    Fixture t;
    HostTensor idx(ElemType::I64, {1});
    idx.setI(0, 7); // out of range for a dim of 4
    Attrs axis;
    axis.set("axis", int64_t{0});
    Value* g =
        t.op(OpKind::Gather, {t.splat(f32({4}), 1.0), Builder(t.f).constant(idx)}, f32({1}), axis);
    t.ret(g);
    CHECK(t.canonicalized()->def()->kind() == OpKind::Gather);
  }
}

TEST_CASE("cse merges equal computations and nothing else") {
  Fixture t;
  Value* e1 = t.op(OpKind::Exp, {t.x}, f32({4}));
  Value* e2 = t.op(OpKind::Exp, {t.x}, f32({4}));
  Value* c1 = t.splat(f32({4}), 2.0);
  Value* c2 = t.splat(f32({4}), 2.0);
  Value* c3 = t.splat(f32({4}), -2.0);
  Value* s1 = t.op(OpKind::Sub, {e1, c1}, f32({4}));
  Value* s2 = t.op(OpKind::Sub, {e2, c2}, f32({4}));
  Value* s3 = t.op(OpKind::Sub, {e2, c3}, f32({4}));
  Value* a1 = t.op(OpKind::Add, {s1, s3}, f32({4}));
  Value* a2 = t.op(OpKind::Add, {s3, s2}, f32({4})); // swapped operands: kept apart
  Value* m = t.op(OpKind::Mul, {a1, a2}, f32({4}));
  t.ret(m);
  REQUIRE(t.run("cse").ok());
  CHECK(t.count(OpKind::Exp) == 1);
  CHECK(t.count(OpKind::Constant) == 2);
  CHECK(t.count(OpKind::Sub) == 2);
  CHECK(t.count(OpKind::Add) == 2);
  Op* mul = t.returned()->def();
  CHECK(mul->operand(0)->def()->operand(0) == mul->operand(1)->def()->operand(1));
}

TEST_CASE("cse compares attributes and result types, not only operands") {
  Fixture t(f32({2, 3}));
  Value* a = t.op(OpKind::Transpose, {t.x}, f32({3, 2}), ints("perm", {1, 0}));
  Value* b = t.op(OpKind::Reshape, {t.x}, f32({6}));
  Value* c = t.op(OpKind::Reshape, {t.x}, f32({3, 2}));
  Attrs axis;
  axis.set("axis", int64_t{0});
  Value* cat = t.op(OpKind::Concat, {a, c}, f32({6, 2}), axis);
  Builder(t.f).createUnchecked(OpKind::Return, {cat, b}, {}, {});
  REQUIRE(t.run("cse").ok());
  CHECK(t.count(OpKind::Reshape) == 2);
  CHECK(t.count(OpKind::Transpose) == 1);
}

TEST_CASE("dce removes unused side-effect-free ops, chains included") {
  Fixture t;
  Value* dead = t.op(OpKind::Exp, {t.x}, f32({4}));
  t.op(OpKind::Neg, {dead}, f32({4}));
  Value* live = t.op(OpKind::Tanh, {t.x}, f32({4}));
  t.ret(live);
  REQUIRE(t.run("dce").ok());
  CHECK(t.f->numOps() == 2);
  CHECK(t.returned() == live);
}

TEST_CASE("shape-infer fills unknown dims and the function's result types") {
  Fixture t;
  Value* a = t.op(OpKind::Exp, {t.x}, Type(ElemType::F32, {Dim::unknown()}));
  t.ret(a);
  REQUIRE(t.run("shape-infer").ok());
  CHECK(a->type() == f32({4}));
  CHECK(t.f->resultTypes() == std::vector<Type>{f32({4})});
}

TEST_CASE("shape-infer reports a known dim that conflicts, naming the op") {
  Fixture t;
  Value* a = t.op(OpKind::Exp, {t.x}, f32({5}));
  t.ret(a);
  Status st = t.run("shape-infer");
  REQUIRE_FALSE(st.ok());
  CHECK(st.diags().str().find("'exp'") != std::string::npos);
}

TEST_CASE("pass manager: pipelines expand, unknown names list what exists") {
  PassManager pm;
  REQUIRE(pm.addPipeline("default, dce").ok());
  CHECK(pm.passNames() ==
        std::vector<std::string>{"shape-infer", "canonicalize", "cse", "dce", "dce"});

  PassManager bad;
  Status st = bad.addPipeline("cse,frobnicate");
  REQUIRE_FALSE(st.ok());
  std::string msg = st.diags().str();
  CHECK(msg.find("unknown pass 'frobnicate'") != std::string::npos);
  CHECK(msg.find("affinity, attention, canonicalize, collapse-dims, conv-depthwise, conv-gemm, "
                 "cse, dce, fuse, gemv-split, lower, pack-weights, pad, pad-gemm, pool-pad, "
                 "schedule, shape-infer, tile") != std::string::npos);
  CHECK(msg.find("pipelines: default") != std::string::npos);
  CHECK(bad.passNames().empty()); // nothing half-added

  CHECK_FALSE(bad.addPipeline("cse,,dce").ok());
  CHECK_FALSE(bad.addPipeline("cse{").ok());
  CHECK_FALSE(bad.addPipeline("").ok());
}

TEST_CASE("pass manager: print-after, time-passes and pass failures") {
  Fixture t;
  t.ret(t.op(OpKind::Neg, {t.op(OpKind::Neg, {t.x}, f32({4}))}, f32({4})));

  PassManagerOptions opts;
  opts.printAfter = {"canonicalize"};
  opts.timePasses = true;
  PassManager pm(opts);
  REQUIRE(pm.addPipeline("canonicalize,dce").ok());
  std::ostringstream dump;
  REQUIRE(pm.run(t.m, dump).ok());
  std::string out = dump.str();
  CHECK(out.find("// ----- IR after canonicalize -----\n") != std::string::npos);
  CHECK(out.find("IR after dce") == std::string::npos);
  CHECK(out.find("// ----- pass timings -----") != std::string::npos);
  CHECK(out.find("// dce") != std::string::npos);
  CHECK(out.find("// total") != std::string::npos);
  CHECK(t.returned() == t.x);

  PassManagerOptions unknown;
  unknown.printAfter = {"nope"};
  std::ostringstream ignored;
  CHECK_FALSE(PassManager(unknown).run(t.m, ignored).ok());

  Fixture conflict;
  conflict.ret(conflict.op(OpKind::Exp, {conflict.x}, f32({5})));
  PassManager infer;
  REQUIRE(infer.addPipeline("shape-infer").ok());
  Status st = infer.run(conflict.m, ignored);
  REQUIRE_FALSE(st.ok());
  CHECK(st.diags().str().find("in pass 'shape-infer'") != std::string::npos);
}

TEST_CASE("pass manager: options in braces, on passes and on pipelines") {
  auto fail = [](const std::string& spec) {
    PassManager pm;
    Status st = pm.addPipeline(spec);
    REQUIRE_FALSE(st.ok());
    return st.diags().str();
  };
  PassManager pm;
  REQUIRE(pm.addPipeline("fuse{target=amdgpu:gfx942}, tile{target=cpu:x86-64-v2}").ok());
  CHECK(pm.passNames() == std::vector<std::string>{"fuse", "tile"});
  // On a named pipeline the option goes to each pass that takes it (not shape-infer).
  PassManager cg;
  REQUIRE(cg.addPipeline("codegen{target=vulkan:lavapipe}").ok());
  CHECK(cg.passNames().size() == 12);
  CHECK(fail("cse{target=cpu}").find("pass 'cse' has no option 'target'; it takes no options") !=
        std::string::npos);
  CHECK(fail("tile{tiles=3}").find("it takes target, tile-config") != std::string::npos);
  CHECK(fail("tile{target=vulkan:nope}").find("unknown target 'vulkan:nope'") != std::string::npos);
  CHECK(fail("tile{target}").find("is not KEY=VALUE") != std::string::npos);
  CHECK(fail("tile{target=cpu").find("never closed") != std::string::npos);
  CHECK(fail("default{target=cpu}").find("no pass of pipeline 'default' takes the option") !=
        std::string::npos);
  CHECK(fail("schedule{device=gpu[0]}").find("gpu") != std::string::npos);

  // Defaults reach the passes that take the key; the text wins over them.
  PassManagerOptions o;
  o.defaults["target"] = "vulkan:nope";
  PassManager withDefaults(o);
  CHECK_FALSE(withDefaults.addPipeline("tile").ok());
  CHECK(withDefaults.addPipeline("cse,tile{target=cpu}").ok());
}

namespace {

// x (4x8) . w (8x8) . w, then relu: two contractions.
struct MatmulChain : Fixture {
  Value* w;
  Value* inner;
  Value* outer;
  MatmulChain() : Fixture(f32({4, 8})) {
    w = f->addArg(f32({8, 8}), "w");
    inner = op(OpKind::Matmul, {x, w}, f32({4, 8}));
    outer = op(OpKind::Matmul, {inner, w}, f32({4, 8}));
    ret(op(OpKind::Relu, {outer}, f32({4, 8})));
  }
  std::string fused(std::vector<FusionPattern> patterns) {
    REQUIRE(createFusePass(CodegenOptions{}, std::move(patterns))->run(m).ok());
    return printModule(m);
  }
};

// A matmul whose first operand is another matmul.
FusionPattern chainPattern() {
  return {"matmul-chain", [](const Op& root) -> std::vector<const Op*> {
            const Op* a = root.operand(0)->def();
            if (root.kind() != OpKind::Matmul || !a || a->kind() != OpKind::Matmul) return {};
            return {a, &root};
          }};
}

} // namespace

TEST_CASE("fuse: no pattern is registered without the lowering that emits it") {
  CHECK(fusionPatterns().empty());
}

TEST_CASE("fuse: a pattern that matches today's single-anchor group changes nothing") {
  // The outer matmul with its relu epilogue, the group fuse forms anyway.
  FusionPattern epilogue{"matmul-relu", [](const Op& root) -> std::vector<const Op*> {
                           const Op* mm = root.numOperands() ? root.operand(0)->def() : nullptr;
                           if (root.kind() != OpKind::Relu || !mm || mm->kind() != OpKind::Matmul)
                             return {};
                           return {mm, &root};
                         }};
  MatmulChain plain, patterned;
  std::string expected = plain.fused({});
  CHECK(patterned.fused({epilogue}) == expected);
  CHECK(patterned.count(OpKind::Dispatch) == 2);
}

TEST_CASE("fuse: a multi-anchor pattern forms one group; ops around it join by the rules") {
  MatmulChain plain, patterned;
  plain.fused({});
  CHECK(plain.count(OpKind::Dispatch) == 2);
  patterned.fused({chainPattern()});
  REQUIRE(patterned.count(OpKind::Dispatch) == 1);
  const Op* d = patterned.returned()->def();
  REQUIRE(d->kind() == OpKind::Dispatch);
  Func* k = patterned.m.lookupFunc(d->attrs().getStr("kernel"));
  REQUIRE(k != nullptr);
  size_t matmuls = 0, relus = 0;
  for (const auto& op : k->ops()) {
    matmuls += op->kind() == OpKind::Matmul;
    relus += op->kind() == OpKind::Relu;
  }
  CHECK(matmuls == 2);
  CHECK(relus == 1); // the epilogue joined the pattern's group
}

TEST_CASE("fuse: a pattern whose ops are not convex is not formed") {
  // outer = inner . (inner^T . inner): grouping {inner, outer} without the product between
  // them would leave a path out of the group and back in.
  Fixture t(f32({4, 8}));
  Value* w = t.f->addArg(f32({8, 8}), "w");
  Value* inner = t.op(OpKind::Matmul, {t.x, w}, f32({4, 8}));
  Value* tr = t.op(OpKind::Transpose, {inner}, f32({8, 4}), ints("perm", {1, 0}));
  Value* gram = t.op(OpKind::Matmul, {tr, inner}, f32({8, 8}));
  t.ret(t.op(OpKind::Matmul, {inner, gram}, f32({4, 8})));
  REQUIRE(createFusePass(CodegenOptions{}, {chainPattern()})->run(t.m).ok());
  CHECK(t.count(OpKind::Dispatch) == 3);
}

TEST_CASE("conv-depthwise: the flat form where its wide rows take fewer vector iterations") {
  // EfficientNet-B0's stride-1 depthwise convs (C, H = W, K, pads K/2) on x86-64-v4 (16
  // lanes), each read by two ops (an SE block's pool and its gate): flat at OW 28 and 56
  // (rows of 28 are a vector and 12 scalars), as before at OW 7 and 14 (a row is one masked
  // vector) and 112 (7 vectors a row; the wide grid's 2 more columns cost as much).
  struct Case {
    int64_t c, hw, k;
    bool flat;
  };
  for (Case t : {Case{240, 28, 5, true}, Case{144, 56, 3, true}, Case{672, 14, 5, false},
                 Case{480, 14, 3, false}, Case{1152, 7, 5, false}, Case{1152, 7, 3, false},
                 Case{32, 112, 3, false}}) {
    CAPTURE(t.c);
    CAPTURE(t.hw);
    CAPTURE(t.k);
    std::string x = "1x" + std::to_string(t.c) + "x" + std::to_string(t.hw) + "x" +
                    std::to_string(t.hw) + "xf32";
    std::string k = std::to_string(t.k), p = std::to_string(t.k / 2);
    std::string text =
        "func @main(%x: tensor<" + x + ">, %w: tensor<" + std::to_string(t.c) + "x1x" + k + "x" +
        k + "xf32>) -> (tensor<" + x + ">) {\n" +
        "  %0 = conv %x, %w {dilations = [1, 1], group = " + std::to_string(t.c) + ", pads = [" +
        p + ", " + p + ", " + p + ", " + p + "], strides = [1, 1]} : tensor<" + x + ">\n" +
        "  %1 = reduce_mean %0 {axes = [2, 3], keepdims = 1} : tensor<1x" + std::to_string(t.c) +
        "x1x1xf32>\n" + "  %2 = mul %0, %1 : tensor<" + x + ">\n" + "  return %2\n}\n";
    Result<std::unique_ptr<Module>> m = parseModule(text, "dw.kir");
    REQUIRE(m.ok());
    std::unique_ptr<Module> mod = m.take();
    PassManager pm;
    REQUIRE(pm.addPipeline("shape-infer,conv-gemm,conv-depthwise{target=cpu:x86-64-v4}").ok());
    std::ostringstream ignored;
    REQUIRE(pm.run(*mod, ignored).ok());
    // The flat sum is 1 x C x (OH*Wp); the gate's mul joins it on that grid.
    int64_t wide = t.hw * (t.hw + 2 * (t.k / 2));
    size_t flatOps = 0, convs = 0;
    for (const auto& op : mod->funcs()[0]->ops()) {
      convs += op->kind() == OpKind::Conv;
      if (op->numResults() == 1 && op->result(0)->type().isStatic() &&
          op->result(0)->type().staticShape() == std::vector<int64_t>{1, t.c, wide})
        ++flatOps;
    }
    CHECK(convs == 0);
    // K*K taps: a slice, a mul and (but the first) an add each; the mul by the gate.
    CHECK(flatOps == (t.flat ? size_t(3 * t.k * t.k) : 0));
  }
}

// pack-weights: a weight held in memory that only a packable matmul reads becomes
// `<name>.packed32` strips (v4: NR = 32) with P[s, k, j] = B[k, 32 s + j] and zeros past N;
// a weight something else reads too keeps its form, and so does one whose packed name the
// module already uses for a weight of its own.
TEST_CASE("pack-weights: strips of in-memory weights; shared weights and taken names left") {
  const char* text = R"(weight @a : tensor<8x40xf32> = "w.safetensors"["a"]
weight @b : tensor<8x64xf32> = "w.safetensors"["b"]
weight @c : tensor<8x64xf32> = "w.safetensors"["c"]
weight @c.packed32 : tensor<8x64xf32> = "w.safetensors"["cp"]
func @main(%x: tensor<12x8xf32>, %z: tensor<8x64xf32>) -> (tensor<12x40xf32>, tensor<12x64xf32>, tensor<8x64xf32>, tensor<12x64xf32>, tensor<8x64xf32>) {
  %a = weight {name = "a"} : tensor<8x40xf32>
  %b = weight {name = "b"} : tensor<8x64xf32>
  %c = weight {name = "c"} : tensor<8x64xf32>
  %cp = weight {name = "c.packed32"} : tensor<8x64xf32>
  %0 = matmul %x, %a : tensor<12x40xf32>
  %1 = matmul %x, %b : tensor<12x64xf32>
  %2 = add %z, %b : tensor<8x64xf32>
  %3 = matmul %x, %c : tensor<12x64xf32>
  %4 = add %z, %cp : tensor<8x64xf32>
  return %0, %1, %2, %3, %4
}
)";
  Result<std::unique_ptr<Module>> parsed = parseModule(text, "pw.kir");
  REQUIRE(parsed.ok());
  std::unique_ptr<Module> m = parsed.take();
  auto data = [](int64_t rows, int64_t cols, float base) {
    HostTensor t = HostTensor::uninitialized(ElemType::F32, {rows, cols});
    auto* p = reinterpret_cast<float*>(t.mutableData());
    for (int64_t i = 0; i < rows * cols; ++i) p[i] = base + static_cast<float>(i);
    return t;
  };
  m->setWeightData("a", data(8, 40, 0));
  m->setWeightData("b", data(8, 64, 1000));
  m->setWeightData("c", data(8, 64, 2000));
  m->setWeightData("c.packed32", data(8, 64, 3000));
  PassManager pm;
  REQUIRE(pm.addPipeline("shape-infer,pack-weights{target=cpu:x86-64-v4}").ok());
  std::ostringstream ignored;
  REQUIRE(pm.run(*m, ignored).ok());
  std::set<std::string> loaded;
  for (const auto& op : m->funcs()[0]->ops())
    if (op->kind() == OpKind::Weight) loaded.insert(op->attrs().getStr("name"));
  CHECK(loaded == std::set<std::string>{"a.packed32", "b", "c", "c.packed32"});
  CHECK(m->lookupWeight("a") == nullptr); // nothing loads it any more
  const HostTensor* p = m->weightData("a.packed32");
  REQUIRE(p != nullptr);
  CHECK(p->shape() == std::vector<int64_t>{2, 8, 32});
  const auto* v = reinterpret_cast<const float*>(p->data());
  CHECK(v[(0 * 8 + 3) * 32 + 5] == 3 * 40 + 5);  // strip 0, k = 3, column 5
  CHECK(v[(1 * 8 + 7) * 32 + 7] == 7 * 40 + 39); // strip 1, k = 7, column 39
  CHECK(v[(1 * 8 + 7) * 32 + 8] == 0);           // past N = 40: padding
  CHECK(m->weightData("c.packed32")->shape() == std::vector<int64_t>{8, 64}); // the user's
}
