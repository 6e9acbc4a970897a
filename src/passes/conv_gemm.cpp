// conv-gemm: group-1 2-D convolutions on cpu targets become matmuls, so that the
// register-blocked GEMM strategy (lower/matmul_cpu.cpp) computes them instead of the
// walker's scalar window loop (lower/window.cpp), one output element at a time.
//
// Requires:    shape-infer (static shapes); runs before fuse, on the ops of the devices it
//              covers, and only when the target is a cpu (TargetDesc::cpu).
// Guarantees:  every covered `conv` with group 1, 2 spatial dims, a float element type and
//              static shapes is a matmul of the weights viewed as M x (C*KH*KW) by the
//              patches (im2col), with the bias added to the matmul's result (the epilogue
//              fuse puts in the matmul's kernel). A 1x1 convolution with stride 1 and no
//              padding needs no patches: its input viewed as N x C x (H*W) is the matmul's
//              right operand. Otherwise the patches are KH*KW strided slices of the
//              (zero-)padded input, concatenated to N x C x KH*KW x OH x OW (N x C x KH*KW
//              x (OH*OW) when OW < 8) and viewed as N x (C*KH*KW) x (OH*OW): channel-major,
//              then kernel position, the order of the weights' elements. A stride-2 conv
//              (batch 1, no dilation, OW >= 8) whose output rows the GEMM can compute on
//              its padded input's phases (wideRowsPay, strategy.h) instead has the padded
//              input (padded to even Hp, Wp) split into its four phases, a concat of the
//              strided views [2a::2, 2b::2] to N x C x 4 x Hp/2 x Wp/2, and tap (i, j) is
//              the unit-step window of phase 2 (i mod 2) + j mod 2 from row i / 2, column
//              j / 2: the GEMM reads it in place (matmul_cpu_conv.cpp), and only the
//              phases, no larger than the input, are materialized. Every other conv is
//              left as it is. The elementwise ops that consume the result (all users
//              elementwise over its shape, on its device; transitively) compute on the
//              matmul's N x M x (OH*OW) result instead, before the reshape back to NCHW
//              (sinkView), so that fuse makes them the GEMM kernel's epilogue.
// Invalidates: nothing (new ops have the conv's device, and the location of the conv or
//              of the elementwise op they replace).
//
//   %y = conv %x, %w, %b {pads = [0, 0, 0, 0], ...}        %x2 = reshape %x : 1x64x3136
//     (x: 1x64x56x56, w: 128x64x1x1)                 =>    %w2 = reshape %w : 128x64
//                                                          %m = matmul %w2, %x2 : 1x128x3136
//                                                          %z = add %m, (reshape %b : 128x1)
//                                                          %y = reshape %z : 1x128x56x56
#include <algorithm>
#include <optional>
#include <set>

#include "ir/core/builder.h"
#include "passes/codegen.h"
#include "passes/conv_rewrite.h"
#include "passes/lower/strategy.h"
#include "passes/passes.h"

namespace kiln {

namespace {

// The shortest output row the patches keep as a dim of their own (AVX2's f32 lanes).
constexpr int64_t kMinPatchRow = 8;

Type withDims(const Value* like, std::vector<int64_t> dims) {
  return Type::tensor(like->type().elem(), dims);
}

// The conv as a matmul, built before it, or null when it is not one this pass rewrites.
Result<Value*> asMatmul(Func& f, Op& conv, const Conv2d& g) {
  if (g.group != 1) return nullptr;
  const std::vector<int64_t>&xs = g.xs, &ws = g.ws, &ys = g.ys;
  const std::vector<int64_t>&strides = g.strides, &pads = g.pads, &dil = g.dilations;
  int64_t n = xs[0], c = xs[1], m = ws[0], kh = ws[2], kw = ws[3], oh = ys[2], ow = ys[3];
  int64_t taps = kh * kw, positions = oh * ow;
  Builder b(&f, &conv);
  b.setLoc(conv.loc());
  b.setDevice(conv.device());
  auto reshape = [&](Value* v, std::vector<int64_t> dims) -> Result<Value*> {
    KILN_TRY(Op * r, b.create(OpKind::Reshape, {v}, {}, {withDims(v, std::move(dims))}));
    return r->result(0);
  };
  Value* x = conv.operand(0);
  Value* cols = nullptr;
  bool pointwise = taps == 1 && strides == std::vector<int64_t>{1, 1} &&
                   pads == std::vector<int64_t>{0, 0, 0, 0};
  if (pointwise) {
    KILN_TRY(cols, reshape(x, {n, c, positions}));
  } else {
    // A stride-2 conv (batch 1, no dilation) whose GEMM can read its patches in place on
    // the padded input's phases (wideRowsPay over rows half the padded width): the phases
    // are materialized instead of the patches, and each tap is a unit-step window of one.
    int64_t hp = xs[2] + pads[0] + pads[2], wp = xs[3] + pads[1] + pads[3];
    bool phases = n == 1 && taps > 1 && strides == std::vector<int64_t>{2, 2} &&
                  dil == std::vector<int64_t>{1, 1} && ow >= kMinPatchRow &&
                  wideRowsPay(ow, (wp + 1) / 2);
    int64_t evenH = phases ? hp % 2 : 0, evenW = phases ? wp % 2 : 0;
    Value* padded = x;
    if (pads != std::vector<int64_t>{0, 0, 0, 0} || evenH || evenW) {
      Attrs pa;
      pa.set("pads",
             std::vector<int64_t>{0, 0, pads[0], pads[1], 0, 0, pads[2] + evenH, pads[3] + evenW});
      pa.set("mode", std::string("constant"));
      pa.set("value", 0.0);
      KILN_TRY(Op * p, b.create(OpKind::Pad, {x}, std::move(pa)));
      padded = p->result(0);
    }
    // One N x C x 1 x .. value per tap, concatenated along axis 2.
    std::vector<Value*> perTap;
    if (phases) {
      KILN_TRY(Value * q, phaseSplit(b, padded));
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j) {
          int64_t phase = 2 * (i % 2) + j % 2;
          Attrs sa;
          sa.set("starts", std::vector<int64_t>{phase, i / 2, j / 2});
          sa.set("ends", std::vector<int64_t>{phase + 1, i / 2 + oh, j / 2 + ow});
          sa.set("axes", std::vector<int64_t>{2, 3, 4});
          sa.set("steps", std::vector<int64_t>{1, 1, 1});
          KILN_TRY(Op * s, b.create(OpKind::Slice, {q}, std::move(sa)));
          perTap.push_back(s->result(0));
        }
    } else {
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j) {
          Attrs sa;
          int64_t r0 = i * dil[0], c0 = j * dil[1];
          sa.set("starts", std::vector<int64_t>{r0, c0});
          sa.set("ends", std::vector<int64_t>{r0 + (oh - 1) * strides[0] + 1,
                                              c0 + (ow - 1) * strides[1] + 1});
          sa.set("axes", std::vector<int64_t>{2, 3});
          sa.set("steps", strides);
          KILN_TRY(Op * s, b.create(OpKind::Slice, {padded}, std::move(sa)));
          // Patch rows of OW elements (the kernel's column loop: contiguous or strided
          // loads LLVM vectorizes) when OW fills a vector, else of OH*OW, where each
          // element costs a division and a remainder to find its input row and column.
          KILN_TRY(Value * flat, ow >= kMinPatchRow ? reshape(s->result(0), {n, c, 1, oh, ow})
                                                    : reshape(s->result(0), {n, c, 1, positions}));
          perTap.push_back(flat);
        }
    }
    Value* patches = perTap[0];
    if (perTap.size() > 1) {
      Attrs ca;
      ca.set("axis", int64_t(2));
      KILN_TRY(Op * cat, b.create(OpKind::Concat, perTap, std::move(ca)));
      patches = cat->result(0);
    }
    KILN_TRY(cols, reshape(patches, {n, c * taps, positions}));
  }
  KILN_TRY(Value * w2, reshape(conv.operand(1), {m, c * taps}));
  KILN_TRY(Op * mm, b.create(OpKind::Matmul, {w2, cols}));
  Value* out = mm->result(0);
  if (conv.numOperands() == 3) {
    KILN_TRY(Value * bias, reshape(conv.operand(2), {m, 1}));
    KILN_TRY(Op * add, b.create(OpKind::Add, {out, bias}));
    out = add->result(0);
  }
  return reshape(out, ys);
}

// The shape with which `v`, which broadcasts to the conv's N x M x OH x OW result `ys`,
// broadcasts the same way to the matmul's N x M x (OH*OW); none when no view can say it (v
// is not static, or varies along one of OH, OW but not the other).
std::optional<std::vector<int64_t>> flatShape(const Value* v, const std::vector<int64_t>& ys) {
  if (!v->type().isStatic() || v->type().rank() > 4) return std::nullopt;
  std::vector<int64_t> s = v->type().staticShape();
  s.insert(s.begin(), 4 - s.size(), 1);
  if (s[2] == 1 && s[3] == 1) return std::vector<int64_t>{s[0], s[1], 1};
  if (s[2] == ys[2] && s[3] == ys[3]) return std::vector<int64_t>{s[0], s[1], ys[2] * ys[3]};
  return std::nullopt;
}

// `v` with flatShape (sinkable checked that it has one). A reshape of such a value is undone,
// not stacked.
Result<Value*> flat(Builder& b, Value* v, const std::vector<int64_t>& ys, const Loc& at) {
  std::optional<std::vector<int64_t>> s = flatShape(v, ys);
  if (!s) return error(at, "internal error: conv-gemm moved an epilogue it cannot view");
  Type want = withDims(v, *s);
  if (v->type() == want) return v;
  if (const Op* d = v->def(); d && d->kind() == OpKind::Reshape && d->operand(0)->type() == want)
    return d->operand(0);
  KILN_TRY(Op * r, b.create(OpKind::Reshape, {v}, {}, {want}));
  return r->result(0);
}

// True when every user of the reshape `r` (the conv's result in NCHW) is an elementwise op
// over exactly that shape on r's device whose other operands `flat` can express.
bool sinkable(const Op& r) {
  const Value* y = r.result(0);
  std::vector<int64_t> ys = y->type().staticShape();
  for (const Use& u : y->uses()) {
    const Op& op = *u.user;
    if (!op.has(kElementwise) || op.numResults() != 1 ||
        op.result(0)->type().shape() != y->type().shape() || op.device() != r.device())
      return false;
    for (const Value* v : op.operands())
      if (v != y && !flatShape(v, ys)) return false;
  }
  return y->hasUses();
}

// The elementwise ops that consume a conv's result (bias, batch-norm scale and shift,
// residual add, activations) move before the view back to NCHW, onto the matmul's
// N x M x (OH*OW) result, so that fuse makes them the GEMM kernel's epilogue instead of a
// kernel of their own (its "elementwise-into-producer" rule needs outputs of the matmul's
// shape). `r` = reshape(z) whose users are all elementwise:
//   %y = reshape %z : 1x64x56x56          %a = add %z, (reshape %res : 1x64x3136)
//   %a = add %y, %res             =>      %r = relu %a : 1x64x3136
//   %r = relu %a                          %y = reshape %r : 1x64x56x56
// repeated on each new reshape; each final reshape gets one copy per user, so that it
// stays a view in every consumer's kernel instead of a copy of its own.
Status sinkView(Func& f, Op* r) {
  std::vector<Op*> work{r}, done;
  while (!work.empty()) {
    Op* v = work.back();
    work.pop_back();
    if (!sinkable(*v)) {
      if (v->result(0)->hasUses())
        done.push_back(v);
      else
        f.erase(v);
      continue;
    }
    Value* z = v->operand(0);
    std::vector<int64_t> ys = v->result(0)->type().staticShape();
    std::vector<Op*> users;
    for (const Use& u : v->result(0)->uses())
      if (std::find(users.begin(), users.end(), u.user) == users.end()) users.push_back(u.user);
    for (Op* op : users) {
      Builder b(&f, op);
      b.setLoc(op->loc());
      b.setDevice(op->device());
      std::vector<Value*> operands;
      for (Value* x : op->operands()) {
        if (x == v->result(0)) {
          operands.push_back(z);
          continue;
        }
        KILN_TRY(Value * fx, flat(b, x, ys, op->loc()));
        operands.push_back(fx);
      }
      KILN_TRY(Op * flatOp, b.create(op->kind(), operands, op->attrs()));
      KILN_TRY(Op * back,
               b.create(OpKind::Reshape, {flatOp->result(0)}, {}, {op->result(0)->type()}));
      op->result(0)->replaceAllUsesWith(back->result(0));
      op->dropOperands();
      f.erase(op);
      work.push_back(back);
    }
    v->dropOperands();
    f.erase(v);
  }
  for (Op* v : done) {
    std::vector<Use> uses = v->result(0)->uses();
    if (uses.empty()) { // another conv's chain read its source directly
      v->dropOperands();
      f.erase(v);
      continue;
    }
    for (size_t i = 1; i < uses.size(); ++i) {
      Builder b(&f, uses[i].user);
      b.setLoc(v->loc());
      b.setDevice(v->device());
      KILN_TRY(Op * copy, b.create(OpKind::Reshape, {v->operand(0)}, {}, {v->result(0)->type()}));
      uses[i].user->setOperand(uses[i].operandIndex, copy->result(0));
    }
  }
  return ok();
}

// reshape(reshape(x)) -> reshape(x), and x where that is x's type: the views sinkView
// stacks when an op reads two of its chain's values (x * sigmoid(x)).
void foldReshapes(Func& f) {
  for (Op* op : f.opsSnapshot()) {
    if (op->kind() != OpKind::Reshape) continue;
    const Op* d = op->operand(0)->def();
    if (!d || d->kind() != OpKind::Reshape) continue;
    Value* x = d->operand(0);
    if (x->type() == op->result(0)->type()) {
      op->result(0)->replaceAllUsesWith(x);
    } else {
      op->setOperand(0, x);
    }
  }
  std::vector<Op*> ops = f.opsSnapshot();
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) // users before the views they read
    if (Op* op = *it; op->kind() == OpKind::Reshape && !op->result(0)->hasUses()) {
      op->dropOperands();
      f.erase(op);
    }
}

class ConvGemmPass : public Pass {
public:
  explicit ConvGemmPass(CodegenOptions opts) : opts_(std::move(opts)) {}

  Status run(Module& m) override {
    std::vector<Op*> views; // each conv's result: the reshape of its matmul back to NCHW
    KILN_CHECK(rewriteConvs(m, opts_, [&](Func& f, Op& conv, const Conv2d& g) -> Result<Value*> {
      KILN_TRY(Value * y, asMatmul(f, conv, g));
      if (y) views.push_back(y->def());
      return y;
    }));
    std::set<Func*> funcs;
    for (Op* r : views) funcs.insert(r->parent());
    for (Op* r : views) KILN_CHECK(sinkView(*r->parent(), r));
    for (Func* f : funcs) foldReshapes(*f);
    return ok();
  }

private:
  CodegenOptions opts_;
};

} // namespace

std::unique_ptr<Pass> createConvGemmPass(const CodegenOptions& opts) {
  return std::make_unique<ConvGemmPass>(opts);
}

} // namespace kiln
