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
//              When every user of the conv is a transpose to channels-last (perm
//              [0, 2, 3, 1], a ConvNeXt block's permute before its LayerNorm), the sum is
//              built channels-last instead (pad, slices and per-channel weights on the
//              1 x H x W x C view of x) and replaces those transposes: the kernel's column
//              loop runs along the channels, where every tap's input is contiguous, instead
//              of reading each tap KH*KW times across channel planes.
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

const std::vector<int64_t> kToChannelsLast{0, 2, 3, 1}, kToChannelsFirst{0, 3, 1, 2};

bool isTranspose(const Op* op, const std::vector<int64_t>& perm) {
  return op && op->kind() == OpKind::Transpose && op->attrs().getInts("perm") == perm;
}

// The conv's users when each is a transpose to channels-last, else none.
std::vector<Op*> channelsLastUsers(const Op& conv) {
  std::vector<Op*> users;
  for (const Use& u : conv.result(0)->uses()) {
    if (!isTranspose(u.user, kToChannelsLast)) return {};
    users.push_back(u.user);
  }
  return users;
}

// The conv as its taps' sum, built before it, or null when it is not depthwise. Built
// channels-last when every user transposes it there: those users are then replaced by the
// sum and erased, and the conv is left without users.
Result<Value*> asTaps(Func& f, Op& conv, const Conv2d& g) {
  const std::vector<int64_t>&xs = g.xs, &ws = g.ws, &ys = g.ys;
  const std::vector<int64_t>&strides = g.strides, &pads = g.pads, &dil = g.dilations;
  int64_t c = xs[1];
  if (g.group != c || ws[0] != c || ws[1] != 1 || c == 1) return nullptr;
  int64_t kh = ws[2], kw = ws[3], oh = ys[2], ow = ys[3];
  std::vector<Op*> nhwcUsers = channelsLastUsers(conv);
  bool last = !nhwcUsers.empty();
  // The spatial axes of x and of the result, and the shape of a per-channel operand.
  std::vector<int64_t> spatial = last ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{2, 3};
  std::vector<int64_t> perChannelShape =
      last ? std::vector<int64_t>{c} : std::vector<int64_t>{c, 1, 1};
  Builder b(&f, &conv);
  b.setLoc(conv.loc());
  b.setDevice(conv.device());
  auto slice = [&](Value* v, std::vector<int64_t> axes, std::vector<int64_t> starts,
                   std::vector<int64_t> ends, std::vector<int64_t> steps) -> Result<Value*> {
    Attrs a;
    a.set("starts", std::move(starts));
    a.set("ends", std::move(ends));
    a.set("axes", std::move(axes));
    a.set("steps", std::move(steps));
    KILN_TRY(Op * s, b.create(OpKind::Slice, {v}, std::move(a)));
    return s->result(0);
  };
  auto reshape = [&](Value* v, const std::vector<int64_t>& shape) -> Result<Value*> {
    KILN_TRY(Op * r, b.create(OpKind::Reshape, {v}, {}, {Type::tensor(v->type().elem(), shape)}));
    return r->result(0);
  };
  auto binary = [&](OpKind k, Value* l, Value* r) -> Result<Value*> {
    KILN_TRY(Op * o, b.create(k, {l, r}));
    return o->result(0);
  };
  Value* padded = conv.operand(0);
  if (last) { // x channels-last: the operand of a transpose to channels-first, or a view
    if (isTranspose(padded->def(), kToChannelsFirst)) {
      padded = padded->def()->operand(0);
    } else {
      Attrs ta;
      ta.set("perm", kToChannelsLast);
      KILN_TRY(Op * t, b.create(OpKind::Transpose, {padded}, std::move(ta)));
      padded = t->result(0);
    }
  }
  if (pads != std::vector<int64_t>{0, 0, 0, 0}) {
    Attrs pa;
    pa.set("pads", last ? std::vector<int64_t>{0, pads[0], pads[1], 0, 0, pads[2], pads[3], 0}
                        : std::vector<int64_t>{0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]});
    pa.set("mode", std::string("constant"));
    pa.set("value", 0.0);
    KILN_TRY(Op * p, b.create(OpKind::Pad, {padded}, std::move(pa)));
    padded = p->result(0);
  }
  // The taps' weights, [C] or [C,1,1] each. Channels-last, a tap's weights are KH*KW
  // elements apart along C in w: they are first gathered tap-major into one KH*KW x C
  // tensor (a concat, a tiny kernel of its own), so the conv kernel's column loop reads
  // them contiguously instead of with one strided gather per tap.
  std::vector<Value*> weights;
  for (int64_t i = 0; i < kh; ++i)
    for (int64_t j = 0; j < kw; ++j) {
      KILN_TRY(Value * wt, slice(conv.operand(1), {2, 3}, {i, j}, {i + 1, j + 1}, {1, 1}));
      KILN_TRY(wt, reshape(wt, last ? std::vector<int64_t>{1, c} : perChannelShape));
      weights.push_back(wt);
    }
  if (last) {
    Attrs ca;
    ca.set("axis", int64_t{0});
    KILN_TRY(Op * packed, b.create(OpKind::Concat, weights, std::move(ca)));
    for (int64_t t = 0; t < kh * kw; ++t) {
      KILN_TRY(Value * wt, slice(packed->result(0), {0}, {t}, {t + 1}, {1}));
      KILN_TRY(weights[static_cast<size_t>(t)], reshape(wt, perChannelShape));
    }
  }
  Value* sum = nullptr;
  for (int64_t i = 0; i < kh; ++i)
    for (int64_t j = 0; j < kw; ++j) {
      int64_t r0 = i * dil[0], c0 = j * dil[1];
      KILN_TRY(Value * tap,
               slice(padded, spatial, {r0, c0},
                     {r0 + (oh - 1) * strides[0] + 1, c0 + (ow - 1) * strides[1] + 1}, strides));
      KILN_TRY(Value * term, binary(OpKind::Mul, tap, weights[static_cast<size_t>(i * kw + j)]));
      if (sum) {
        KILN_TRY(sum, binary(OpKind::Add, sum, term));
      } else {
        sum = term;
      }
    }
  if (conv.numOperands() == 3) {
    KILN_TRY(Value * bias, reshape(conv.operand(2), perChannelShape));
    KILN_TRY(sum, binary(OpKind::Add, sum, bias));
  }
  for (Op* t : nhwcUsers) {
    t->result(0)->replaceAllUsesWith(sum);
    t->dropOperands();
    f.erase(t);
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
