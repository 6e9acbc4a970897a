// pad-gemm: on cpu targets, a zero pad of a 1x1 convolution's output (the GEMM over the
// map's H*W columns and its pointwise epilogue, before a depthwise conv) is computed by
// that GEMM on the padded map's columns: the pad moves to the GEMM's input, which has K
// channels where the output has C (EfficientNet-B0's 16 -> 96 expansion on 112x112 read
// and wrote 4.8 MB in a pad kernel of its own; its input is 0.8 MB), and the epilogue
// writes the padded layout, the border selected to 0.
//
// Requires:    shape-infer (static shapes); runs after conv-gemm and conv-depthwise (which
//              make the matmuls and pads) and before fuse, on the ops of the devices it
//              covers, and only when the target is a cpu (TargetDesc::cpu).
// Guarantees:  every covered `pad` (constant 0, float, static shapes, padding only the last
//              two dims) of reshape(y) : [.., C, H, W] with y : [.., C, H*W], where y is a
//              matmul M = matmul(a, b) : [.., C, H*W] (b : [.., K, H*W] not a concat: a
//              conv's patches stay in place) followed by elementwise ops whose other
//              operands are constant along the last dim, and nothing else reads M or those
//              ops, and the padded map has at most kMaxGrowth times the columns, is
//              reshape(select(inside, y', 0)) with y' the same ops on
//              M' = matmul(a, reshape(pad(reshape(b) : [.., K, H, W]))) : [.., C, Hp*Wp]
//              and `inside` an i1 constant [Hp*Wp] that is 1 where the pad keeps an input
//              element: the same values, element for element (the border is 0 whatever
//              the epilogue makes of a 0 input). Pads read by a concat (a stride-2 conv's
//              phases, which read the unpadded map in place) are left, as is every other op.
// Invalidates: nothing (new ops have the pad's device and location).
//
//   %m = matmul %w, %b : 1x96x12544             %bp = pad (reshape %b : 1x16x112x112)
//   %e = silu(%m + %bias) : 1x96x12544    =>             : 1x16x114x115
//   %p = pad (reshape %e : 1x96x112x112)        %m' = matmul %w, (reshape %bp : 1x16x13110)
//          {pads = [0, 0, 1, 1, 0, 0, 1, 2]}    %p = reshape (select %inside,
//          : 1x96x114x115                             silu(%m' + %bias), 0) : 1x96x114x115
#include <algorithm>
#include <map>
#include <set>

#include "ir/core/builder.h"
#include "passes/codegen.h"
#include "passes/passes.h"

namespace kiln {

namespace {

// The most the padded map may grow the GEMM's columns: its extra columns cost compute and
// stores where the pad kernel cost a read and a write per element. 112x112 -> 114x115
// (1.045x) and 56x56 -> 59x58 (1.09x) pass; 14x14 -> 18x18 (1.65x) and 7x7 -> 11x11 do not.
constexpr int64_t kMaxGrowthNum = 11, kMaxGrowthDen = 10;

// The pointwise ops from a matmul to `y` (y's def and the ops it reads along the map's
// columns, back to the matmul), in function order, and the matmul; none when y is not such
// a chain or something outside it reads one of its values.
struct Chain {
  Op* matmul = nullptr;
  std::vector<Op*> ops;
};

std::optional<Chain> chainTo(Func& f, Value* y, const Op* reader) {
  const std::optional<DeviceTarget>& device = reader->device();
  const Shape& ys = y->type().shape();
  int64_t cols = ys.back().value();
  std::set<Op*> members;
  Op* mm = nullptr;
  std::vector<Value*> stack{y};
  while (!stack.empty()) {
    Value* v = stack.back();
    stack.pop_back();
    Op* d = v->def();
    if (!d) return std::nullopt; // an argument along the columns: it is not padded
    if (members.count(d) || d == mm) continue;
    if (d->device() != device) return std::nullopt;
    if (d->kind() == OpKind::Matmul) {
      if (mm || !(v->type() == y->type())) return std::nullopt;
      mm = d;
      continue;
    }
    if (!d->has(kElementwise) || d->has(kSideEffects) || d->numResults() != 1 ||
        !(v->type() == y->type()))
      return std::nullopt;
    members.insert(d);
    for (Value* o : d->operands()) {
      const Type& ot = o->type();
      if (!ot.isStatic()) return std::nullopt;
      // Constant along the columns (a per-channel bias, a scalar): read as it is.
      if (ot.rank() == 0 || ot.dim(ot.rank() - 1).value() == 1) continue;
      if (ot.dim(ot.rank() - 1).value() != cols) return std::nullopt;
      stack.push_back(o);
    }
  }
  if (!mm) return std::nullopt;
  // Nothing outside the chain reads its values.
  auto inside = [&](const Op* u) { return u == reader || members.count(const_cast<Op*>(u)); };
  for (const Use& u : mm->result(0)->uses())
    if (!inside(u.user)) return std::nullopt;
  for (Op* op : members)
    for (const Use& u : op->result(0)->uses())
      if (!inside(u.user)) return std::nullopt;
  Chain c{mm, {}};
  for (const auto& op : f.ops())
    if (members.count(op.get())) c.ops.push_back(op.get());
  return c;
}

bool isConcatView(const Value* v) {
  while (const Op* d = v->def()) {
    if (d->kind() == OpKind::Concat) return true;
    if (d->kind() != OpKind::Reshape) return false;
    v = d->operand(0);
  }
  return false;
}

Status rewrite(Func& f, Op& pad) {
  const Type& pt = pad.result(0)->type();
  Value* x = pad.operand(0);
  const Type& xt = x->type();
  if (!pt.isStatic() || !xt.isStatic() || !isFloat(xt.elem()) || xt.rank() < 3) return ok();
  if (pad.attrs().getStr("mode", "constant") != "constant" || pad.attrs().getFloat("value") != 0.0)
    return ok();
  int64_t r = xt.rank();
  std::vector<int64_t> pads = pad.attrs().getInts("pads");
  if (static_cast<int64_t>(pads.size()) != 2 * r) return ok();
  for (int64_t d = 0; d < r; ++d) {
    int64_t b = pads[static_cast<size_t>(d)], e = pads[static_cast<size_t>(r + d)];
    if (b < 0 || e < 0 || (d < r - 2 && (b != 0 || e != 0))) return ok();
  }
  for (const Use& u : pad.result(0)->uses())
    if (u.user->kind() == OpKind::Concat) return ok();
  Op* reshape = x->def();
  if (!reshape || reshape->kind() != OpKind::Reshape || x->uses().size() != 1) return ok();
  Value* y = reshape->operand(0);
  const Type& yt = y->type();
  int64_t h = xt.dim(r - 2).value(), w = xt.dim(r - 1).value();
  int64_t hp = pt.dim(r - 2).value(), wp = pt.dim(r - 1).value();
  if (!yt.isStatic() || yt.rank() != r - 1 || yt.dim(r - 2).value() != h * w) return ok();
  for (int64_t d = 0; d < r - 2; ++d)
    if (!(yt.dim(d) == xt.dim(d))) return ok();
  if (hp * wp * kMaxGrowthDen > h * w * kMaxGrowthNum) return ok();
  std::optional<Chain> chain = chainTo(f, y, reshape);
  if (!chain) return ok();
  Op& mm = *chain->matmul;
  Value* bIn = mm.operand(1);
  const Type& bt = bIn->type();
  if (!bt.isStatic() || bt.rank() < 2 || bt.dim(bt.rank() - 1).value() != h * w ||
      isConcatView(bIn))
    return ok();

  Builder b(&f, &pad);
  b.setLoc(pad.loc());
  b.setDevice(pad.device());
  std::vector<int64_t> bs = bt.staticShape();
  std::vector<int64_t> b4(bs.begin(), bs.end() - 1);
  b4.push_back(h);
  b4.push_back(w);
  KILN_TRY(Op * bMap, b.create(OpKind::Reshape, {bIn}, {}, {Type::tensor(bt.elem(), b4)}));
  auto rb = static_cast<int64_t>(b4.size());
  std::vector<int64_t> bPads(2 * static_cast<size_t>(rb), 0);
  for (int64_t d : {int64_t(0), int64_t(1)}) {
    bPads[static_cast<size_t>(rb - 2 + d)] = pads[static_cast<size_t>(r - 2 + d)];
    bPads[static_cast<size_t>(2 * rb - 2 + d)] = pads[static_cast<size_t>(2 * r - 2 + d)];
  }
  Attrs pa = pad.attrs();
  pa.set("pads", std::move(bPads));
  KILN_TRY(Op * bPad, b.create(OpKind::Pad, {bMap->result(0)}, std::move(pa)));
  std::vector<int64_t> bFlat(bs.begin(), bs.end() - 1);
  bFlat.push_back(hp * wp);
  KILN_TRY(Op * bNew,
           b.create(OpKind::Reshape, {bPad->result(0)}, {}, {Type::tensor(bt.elem(), bFlat)}));
  KILN_TRY(Op * mNew, b.create(OpKind::Matmul, {mm.operand(0), bNew->result(0)}, mm.attrs()));
  std::map<Value*, Value*> map{{mm.result(0), mNew->result(0)}};
  for (Op* op : chain->ops) {
    std::vector<Value*> operands;
    for (Value* o : op->operands()) {
      auto it = map.find(o);
      operands.push_back(it == map.end() ? o : it->second);
    }
    KILN_TRY(Op * c, b.create(op->kind(), operands, op->attrs()));
    map[op->result(0)] = c->result(0);
  }
  // 1 where the padded map holds an input element, 0 on the border.
  HostTensor in(ElemType::I1, {hp * wp});
  int64_t top = pads[static_cast<size_t>(r - 2)], left = pads[static_cast<size_t>(r - 1)];
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < w; ++j) in.setI((i + top) * wp + j + left, 1);
  Value* inside = b.constant(std::move(in));
  Value* zero = b.scalar(xt.elem(), 0.0);
  KILN_TRY(Op * sel, b.create(OpKind::Select, {inside, map.at(y), zero}));
  KILN_TRY(Op * out, b.create(OpKind::Reshape, {sel->result(0)}, {}, {pt}));
  pad.result(0)->replaceAllUsesWith(out->result(0));
  std::vector<Op*> dead{&pad, reshape};
  dead.insert(dead.end(), chain->ops.rbegin(), chain->ops.rend());
  dead.push_back(&mm);
  for (Op* op : dead) {
    op->dropOperands();
    f.erase(op);
  }
  return ok();
}

class PadGemmPass : public Pass {
public:
  explicit PadGemmPass(CodegenOptions opts) : opts_(std::move(opts)) {}

  Status run(Module& m) override {
    if (!opts_.target.cpu) return ok();
    for (const auto& f : m.funcs()) {
      std::vector<Op*> pads;
      for (const auto& op : f->ops())
        if (op->kind() == OpKind::Pad && opts_.covers(*op)) pads.push_back(op.get());
      for (Op* p : pads) KILN_CHECK(rewrite(*f, *p));
    }
    return ok();
  }

private:
  CodegenOptions opts_;
};

} // namespace

std::unique_ptr<Pass> createPadGemmPass(const CodegenOptions& opts) {
  return std::make_unique<PadGemmPass>(opts);
}

} // namespace kiln
