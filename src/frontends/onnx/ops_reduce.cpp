// Converters for ONNX reductions: ReduceSum/Mean/Max/Min/Prod map to kiln reductions;
// ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp and ReduceSumSquare are compositions
// of them; ArgMax/ArgMin keep their tie rule (select_last_index).
#include "frontends/onnx/context.h"

namespace kiln::onnx {

namespace {

enum class Pre { None, Abs, Square, Exp };
enum class Post { None, Sqrt, Log };

struct ReduceSpec {
  OpKind kind;
  Pre pre = Pre::None;
  Post post = Post::None;
  int axesInputFrom = 18; // opset from which axes is an input (ReduceSum: 13)
};

Status reduceOp(Ctx& c, const ReduceSpec& spec) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(int64_t keep, c.attrInt("keepdims", 1));
  KILN_TRY(int64_t noop, c.attrInt("noop_with_empty_axes", 0));
  std::vector<int64_t> axes;
  if (c.opset() < spec.axesInputFrom) {
    KILN_TRY(axes, c.attrInts("axes"));
  } else if (c.hasInput(1)) {
    KILN_TRY(axes, c.constInts(1, "axes"));
  }
  if (axes.empty() && noop) {
    c.setOutput(0, x);
    return ok();
  }
  if (axes.empty())
    for (int64_t i = 0; i < x.rank(); ++i) axes.push_back(i);
  for (int64_t& a : axes) {
    KILN_TRY(a, normAxis(c, a, x.rank()));
  }
  Val v = x;
  if (spec.pre == Pre::Abs) {
    KILN_TRY(v, c.op(OpKind::Abs, {v}));
  } else if (spec.pre == Pre::Square) {
    KILN_TRY(v, c.op(OpKind::Mul, {v, v}));
  } else if (spec.pre == Pre::Exp) {
    KILN_TRY(v, c.op(OpKind::Exp, {v}));
  }
  Attrs a;
  a.set("axes", axes);
  a.set("keepdims", keep ? int64_t(1) : int64_t(0));
  KILN_TRY(v, c.op(spec.kind, {v}, std::move(a)));
  if (spec.post == Post::Sqrt) {
    KILN_TRY(v, c.op(OpKind::Sqrt, {v}));
  } else if (spec.post == Post::Log) {
    KILN_TRY(v, c.op(OpKind::Log, {v}));
  }
  c.setOutput(0, v);
  return ok();
}

void reduce(Registry& r, const char* name, ReduceSpec spec) {
  r[name] = {[spec](Ctx& c) { return reduceOp(c, spec); }};
}

Status argOp(Ctx& c, OpKind k) {
  KILN_TRY(Val x, c.input(0));
  KILN_TRY(int64_t axis, c.attrInt("axis", 0));
  KILN_TRY(axis, normAxis(c, axis, x.rank()));
  KILN_TRY(int64_t keep, c.attrInt("keepdims", 1));
  KILN_TRY(int64_t last, c.attrInt("select_last_index", 0));
  Attrs a;
  a.set("axis", axis);
  a.set("keepdims", keep ? int64_t(1) : int64_t(0));
  if (last) a.set("select_last_index", int64_t(1));
  KILN_TRY(Val y, c.op(k, {x}, std::move(a)));
  c.setOutput(0, y);
  return ok();
}

} // namespace

void registerReduce(Registry& r) {
  reduce(r, "ReduceSum", {OpKind::ReduceSum, Pre::None, Post::None, 13});
  reduce(r, "ReduceMean", {OpKind::ReduceMean});
  reduce(r, "ReduceMax", {OpKind::ReduceMax});
  reduce(r, "ReduceMin", {OpKind::ReduceMin});
  reduce(r, "ReduceProd", {OpKind::ReduceProd});
  reduce(r, "ReduceL1", {OpKind::ReduceSum, Pre::Abs});
  reduce(r, "ReduceL2", {OpKind::ReduceSum, Pre::Square, Post::Sqrt});
  reduce(r, "ReduceSumSquare", {OpKind::ReduceSum, Pre::Square});
  reduce(r, "ReduceLogSum", {OpKind::ReduceSum, Pre::None, Post::Log});
  reduce(r, "ReduceLogSumExp", {OpKind::ReduceSum, Pre::Exp, Post::Log});
  r["ArgMax"] = {[](Ctx& c) { return argOp(c, OpKind::ArgMax); }};
  r["ArgMin"] = {[](Ctx& c) { return argOp(c, OpKind::ArgMin); }};
}

} // namespace kiln::onnx
