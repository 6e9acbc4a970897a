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
//              (zero-)padded input, concatenated to N x C x KH*KW x (OH*OW): channel-major,
//              then kernel position, the order of the weights' elements. Every other conv
//              is left as it is.
// Invalidates: nothing (new ops have the conv's device and location).
//
//   %y = conv %x, %w, %b {pads = [0, 0, 0, 0], ...}        %x2 = reshape %x : 1x64x3136
//     (x: 1x64x56x56, w: 128x64x1x1)                 =>    %w2 = reshape %w : 128x64
//                                                          %m = matmul %w2, %x2 : 1x128x3136
//                                                          %z = add %m, (reshape %b : 128x1)
//                                                          %y = reshape %z : 1x128x56x56
#include "ir/core/builder.h"
#include "passes/codegen.h"
#include "passes/conv_rewrite.h"
#include "passes/passes.h"

namespace kiln {

namespace {

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
    Value* padded = x;
    if (pads != std::vector<int64_t>{0, 0, 0, 0}) {
      Attrs pa;
      pa.set("pads", std::vector<int64_t>{0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]});
      pa.set("mode", std::string("constant"));
      pa.set("value", 0.0);
      KILN_TRY(Op * p, b.create(OpKind::Pad, {x}, std::move(pa)));
      padded = p->result(0);
    }
    std::vector<Value*> slices;
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
        KILN_TRY(Value * flat, reshape(s->result(0), {n, c, 1, positions}));
        slices.push_back(flat);
      }
    Value* patches = slices[0];
    if (slices.size() > 1) {
      Attrs ca;
      ca.set("axis", int64_t(2));
      KILN_TRY(Op * cat, b.create(OpKind::Concat, slices, std::move(ca)));
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

class ConvGemmPass : public Pass {
public:
  explicit ConvGemmPass(CodegenOptions opts) : opts_(std::move(opts)) {}

  Status run(Module& m) override { return rewriteConvs(m, opts_, asMatmul); }

private:
  CodegenOptions opts_;
};

} // namespace

std::unique_ptr<Pass> createConvGemmPass(const CodegenOptions& opts) {
  return std::make_unique<ConvGemmPass>(opts);
}

} // namespace kiln
