// conv-depthwise: depthwise 2-D convolutions on cpu targets become a sum of KH*KW shifted
// views of the input, each times its channel's weight: elementwise ops that fuse into one
// kernel, which the `rows` strategy runs as a vector loop along the output's columns
// instead of the walker's scalar window loop (lower/window.cpp) per output element.
//
// Requires:    shape-infer (static shapes); runs before fuse, on the ops of the devices it
//              covers, and only when the target is a cpu (TargetDesc::cpu).
// Guarantees:  every covered `conv` with group = input channels = output channels, 2
//              spatial dims, a float element type and static shapes is
//              sum over taps (i, j) of slice(pad(x))[.., i*dh :: sh, j*dw :: sw] * w[c, 0, i, j]
//              (+ bias), the taps in the weights' order. Every other conv is left.
// Invalidates: nothing (new ops have the conv's device and location).
//
//   %y = conv %x, %w {group = 8, pads = [0, 0, 0, 0]}      %t0 = mul (slice %x [0:4, 0:4]),
//     (x: 1x8x5x5, w: 8x1x2x2, y: 1x8x4x4)          =>             (reshape (slice %w ..) : 8x1x1)
//                                                        ... %y = add %t0, %t1, %t2, %t3 (chained)
#include "ir/core/builder.h"
#include "passes/codegen.h"
#include "passes/conv_rewrite.h"
#include "passes/passes.h"

namespace kiln {

namespace {

// The conv as its taps' sum, built before it, or null when it is not depthwise.
Result<Value*> asTaps(Func& f, Op& conv, const Conv2d& g) {
  const std::vector<int64_t>&xs = g.xs, &ws = g.ws, &ys = g.ys;
  const std::vector<int64_t>&strides = g.strides, &pads = g.pads, &dil = g.dilations;
  int64_t c = xs[1];
  if (g.group != c || ws[0] != c || ws[1] != 1 || c == 1) return nullptr;
  int64_t kh = ws[2], kw = ws[3], oh = ys[2], ow = ys[3];
  Builder b(&f, &conv);
  b.setLoc(conv.loc());
  b.setDevice(conv.device());
  auto slice = [&](Value* v, std::vector<int64_t> starts, std::vector<int64_t> ends,
                   std::vector<int64_t> steps) -> Result<Value*> {
    Attrs a;
    a.set("starts", std::move(starts));
    a.set("ends", std::move(ends));
    a.set("axes", std::vector<int64_t>{2, 3});
    a.set("steps", std::move(steps));
    KILN_TRY(Op * s, b.create(OpKind::Slice, {v}, std::move(a)));
    return s->result(0);
  };
  auto perChannel = [&](Value* v) -> Result<Value*> { // [C] or [C,1,1,1] -> [C,1,1]
    KILN_TRY(Op * r,
             b.create(OpKind::Reshape, {v}, {}, {Type::tensor(v->type().elem(), {c, 1, 1})}));
    return r->result(0);
  };
  auto binary = [&](OpKind k, Value* l, Value* r) -> Result<Value*> {
    KILN_TRY(Op * o, b.create(k, {l, r}));
    return o->result(0);
  };
  Value* padded = conv.operand(0);
  if (pads != std::vector<int64_t>{0, 0, 0, 0}) {
    Attrs pa;
    pa.set("pads", std::vector<int64_t>{0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]});
    pa.set("mode", std::string("constant"));
    pa.set("value", 0.0);
    KILN_TRY(Op * p, b.create(OpKind::Pad, {padded}, std::move(pa)));
    padded = p->result(0);
  }
  Value* sum = nullptr;
  for (int64_t i = 0; i < kh; ++i)
    for (int64_t j = 0; j < kw; ++j) {
      int64_t r0 = i * dil[0], c0 = j * dil[1];
      KILN_TRY(Value * tap,
               slice(padded, {r0, c0},
                     {r0 + (oh - 1) * strides[0] + 1, c0 + (ow - 1) * strides[1] + 1}, strides));
      KILN_TRY(Value * wt, slice(conv.operand(1), {i, j}, {i + 1, j + 1}, {1, 1}));
      KILN_TRY(wt, perChannel(wt));
      KILN_TRY(Value * term, binary(OpKind::Mul, tap, wt));
      if (sum) {
        KILN_TRY(sum, binary(OpKind::Add, sum, term));
      } else {
        sum = term;
      }
    }
  if (conv.numOperands() == 3) {
    KILN_TRY(Value * bias, perChannel(conv.operand(2)));
    KILN_TRY(sum, binary(OpKind::Add, sum, bias));
  }
  return sum;
}

class ConvDepthwisePass : public Pass {
public:
  explicit ConvDepthwisePass(CodegenOptions opts) : opts_(std::move(opts)) {}

  Status run(Module& m) override { return rewriteConvs(m, opts_, asTaps); }

private:
  CodegenOptions opts_;
};

} // namespace

std::unique_ptr<Pass> createConvDepthwisePass(const CodegenOptions& opts) {
  return std::make_unique<ConvDepthwisePass>(opts);
}

} // namespace kiln
