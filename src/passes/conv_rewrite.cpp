// The conv rewrites' shared geometry and pass loop (see conv_rewrite.h).
#include "passes/conv_rewrite.h"

namespace kiln {

std::optional<Conv2d> staticConv2d(const Op& conv) {
  const Value* xv = conv.operand(0);
  const Value* wv = conv.operand(1);
  if (!xv->type().isStatic() || !wv->type().isStatic() || !conv.result(0)->type().isStatic() ||
      xv->type().rank() != 4 || !isFloat(xv->type().elem()))
    return std::nullopt;
  auto list = [&](const char* name, size_t n, int64_t def) {
    std::vector<int64_t> v = conv.attrs().getInts(name);
    if (v.size() != n) v.assign(n, def);
    return v;
  };
  Conv2d c;
  c.xs = xv->type().staticShape();
  c.ws = wv->type().staticShape();
  c.ys = conv.result(0)->type().staticShape();
  c.strides = list("strides", 2, 1);
  c.pads = list("pads", 4, 0);
  c.dilations = list("dilations", 2, 1);
  c.group = conv.attrs().getInt("group", 1);
  return c;
}

Status rewriteConvs(Module& m, const CodegenOptions& opts,
                    const std::function<Result<Value*>(Func&, Op&, const Conv2d&)>& rewrite) {
  if (!opts.target.cpu) return ok();
  for (const auto& f : m.funcs()) {
    std::vector<Op*> convs;
    for (const auto& op : f->ops())
      if (op->kind() == OpKind::Conv && opts.covers(*op)) convs.push_back(op.get());
    for (Op* conv : convs) {
      std::optional<Conv2d> geometry = staticConv2d(*conv);
      if (!geometry) continue;
      KILN_TRY(Value * y, rewrite(*f, *conv, *geometry));
      if (!y) continue;
      conv->result(0)->replaceAllUsesWith(y);
      conv->dropOperands();
      f->erase(conv);
    }
  }
  return ok();
}

Result<Value*> phaseSplit(Builder& b, Value* padded) {
  std::vector<int64_t> ps = padded->type().staticShape();
  int64_t h2 = ps[2] / 2, w2 = ps[3] / 2;
  std::vector<Value*> parts;
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t c = 0; c < 2; ++c) {
      Attrs sa;
      sa.set("starts", std::vector<int64_t>{a, c});
      sa.set("ends", std::vector<int64_t>{ps[2], ps[3]});
      sa.set("axes", std::vector<int64_t>{2, 3});
      sa.set("steps", std::vector<int64_t>{2, 2});
      KILN_TRY(Op * s, b.create(OpKind::Slice, {padded}, std::move(sa)));
      KILN_TRY(Op * r, b.create(OpKind::Reshape, {s->result(0)}, {},
                                {Type::tensor(padded->type().elem(), {ps[0], ps[1], 1, h2, w2})}));
      parts.push_back(r->result(0));
    }
  Attrs ca;
  ca.set("axis", int64_t{2});
  KILN_TRY(Op * q, b.create(OpKind::Concat, parts, std::move(ca)));
  return q->result(0);
}

} // namespace kiln
