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
//              (+ bias), tap t added to partial sum t mod 4 (sumTaps). Every other conv is left.
//              When every user of the conv is a transpose to channels-last (perm
//              [0, 2, 3, 1], a ConvNeXt block's permute before its LayerNorm), the sum is
//              built channels-last instead (pad, slices and per-channel weights on the
//              1 x H x W x C view of x) and replaces those transposes: the kernel's column
//              loop runs along the channels, where every tap's input is contiguous, instead
//              of reading each tap KH*KW times across channel planes.
//              Otherwise, a stride-1 conv on a small map (flatPays: OW of 28 or 56, not 7,
//              14 or 112, on 16 lanes) read by two or more ops is built flat ("wide
//              rows"): xf = reshape(pad(x)) : N x C x (Hp*Wp), with extra rows of padding
//              at the bottom where the last tap would run past it; tap (i, j) is
//              xf[.., i*dh*Wp + j*dw :+ OH*Wp], so the sum is one contiguous run of OH*Wp
//              per channel (OH rows of Wp columns, the first OW of each real). Its epilogue
//              (elementwise ops whose other operands are constant over H and W: batch norm,
//              SiLU, hardswish, an SE gate) is rebuilt on that grid, and every other reader
//              reads the view slice(reshape(.) : N x C x OH x Wp)[.., :OW].
//              A channels-first conv with strides [2, 2], no dilation and output rows
//              shorter than a vector (phasesPay: OW 7 or 14 on 16 lanes) reads its taps
//              from the padded input split into its four phases (even and odd rows times
//              even and odd columns): q = concat over (a, b) of pad(x)[.., a::2, b::2]
//              : N x C x 4 x Hp/2 x Wp/2 (padded to even Hp and Wp), a kernel of its own;
//              tap (i, j) is q[.., 2*(i%2) + j%2, i/2 :+ OH, j/2 :+ OW], so every tap's
//              row is contiguous (the strided taps were gathers, 4-10x slower per multiply-add).
//              Other stride-2 convs whose epilogue has transcendental math (SiLU) and that
//              two or more ops read are computed on rows of OW' >= OW columns, OW' - 1 a
//              multiple of 8 (kInterleavedLanes; the input padded on the right for them),
//              the epilogue too, and read through the view of the first OW columns.
// Invalidates: nothing (new ops have the conv's device and location).
//
//   %y = conv %x, %w {group = 8, pads = [0, 0, 0, 0]}      %t0 = mul (slice %x [0:4, 0:4]),
//     (x: 1x8x5x5, w: 8x1x2x2, y: 1x8x4x4)          =>             (reshape (slice %w ..) : 8x1x1)
//                                                        ... %y = add %t0, %t1, %t2, %t3 (chained)
//   stride 2 (x: 1x8x28x28, 5x5, pads 2):  %p = pad %x : 1x8x32x32
//     %q = concat (reshape (slice %p [0::2, 0::2]) : 1x8x1x16x16), .. [1::2, 1::2] : 1x8x4x16x16
//     tap (3, 4) = reshape (slice %q [2:3, 1:15, 2:16]) : 1x8x14x14
//   flat (x: 1x8x28x28, 3x3, pads 1):  %f = reshape (pad %x : 1x8x31x30) : 1x8x930
//     %t0 = mul (slice %f [0:840]), ..  %t8 = mul (slice %f [62:902]), ..  (sum: 1x8x840)
//     %y = slice (reshape %sum : 1x8x28x30) [.., 0:28]
#include <algorithm>
#include <map>
#include <optional>
#include <set>

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

// The ops the rewrite builds, with the conv's device and location: before the conv, or
// before the op last given to before().
class TapBuilder {
public:
  TapBuilder(Func& f, Op& conv) : b_(&f, &conv) {
    b_.setLoc(conv.loc());
    b_.setDevice(conv.device());
  }
  void before(Op& at) { b_.setInsertionPoint(&at); }
  Builder& builder() { return b_; }

  Result<Value*> slice(Value* v, std::vector<int64_t> axes, std::vector<int64_t> starts,
                       std::vector<int64_t> ends, std::vector<int64_t> steps) {
    Attrs a;
    a.set("starts", std::move(starts));
    a.set("ends", std::move(ends));
    a.set("axes", std::move(axes));
    a.set("steps", std::move(steps));
    KILN_TRY(Op * s, b_.create(OpKind::Slice, {v}, std::move(a)));
    return s->result(0);
  }
  Result<Value*> reshape(Value* v, const std::vector<int64_t>& shape) {
    KILN_TRY(Op * r, b_.create(OpKind::Reshape, {v}, {}, {Type::tensor(v->type().elem(), shape)}));
    return r->result(0);
  }
  Result<Value*> binary(OpKind k, Value* l, Value* r) {
    KILN_TRY(Op * o, b_.create(k, {l, r}));
    return o->result(0);
  }
  // Zero padding, begin values then end values per dim.
  Result<Value*> pad(Value* v, std::vector<int64_t> pads) {
    Attrs pa;
    pa.set("pads", std::move(pads));
    pa.set("mode", std::string("constant"));
    pa.set("value", 0.0);
    KILN_TRY(Op * p, b_.create(OpKind::Pad, {v}, std::move(pa)));
    return p->result(0);
  }

private:
  Builder b_;
};

// The sum of the taps' products in kTapChains interleaved partial sums, added pairwise at
// the end: one chain of KH*KW dependent adds is as many FMA latencies per output vector.
// One thread, EfficientNet-B0's kernels (x86-64-v4): the 5x5 convs 18-24% faster (672
// channels at 14x14 with SiLU 0.40 -> 0.32 ms), the 3x3 ones within noise; ConvNeXt-Tiny's
// channels-last 7x7 convs 0.71 -> 0.46 ms at 56x56x96, 2-5% slower at 28x28x192 and
// 14x14x384 (all of them 13.9 -> 13.2 ms).
constexpr size_t kTapChains = 4;
Result<Value*> sumTaps(TapBuilder& tb, const std::vector<Value*>& terms) {
  std::vector<Value*> part;
  for (size_t t = 0; t < terms.size(); ++t) {
    if (t < kTapChains) {
      part.push_back(terms[t]);
    } else {
      KILN_TRY(part[t % kTapChains], tb.binary(OpKind::Add, part[t % kTapChains], terms[t]));
    }
  }
  while (part.size() > 1) {
    std::vector<Value*> next;
    for (size_t i = 0; i + 1 < part.size(); i += 2) {
      KILN_TRY(Value * s, tb.binary(OpKind::Add, part[i], part[i + 1]));
      next.push_back(s);
    }
    if (part.size() % 2) next.push_back(part.back());
    part = std::move(next);
  }
  return part.front();
}

// The flat form pays where its column loop, one run of OH*Wp elements per channel (the
// wide grid), takes fewer vector iterations than OH runs of OW, counting a scalar remainder
// element as one iteration and a run of at most `lanes` (the target's f32 vector width) as
// one, since LLVM unrolls it into one masked vector. Measured (one thread, EfficientNet-B0's
// kernels, x86-64-v4): OW = 28 with 5x5 taps 2.6x faster, OW = 56 with 3x3 1.28x; OW = 14
// and 7 slower (0.55-0.75x: the narrow rows are already one masked vector, the wide rows
// waste 2 to 4 of every Wp lanes); OW = 112 is left by the count (784 iterations per
// channel narrow, 798 wide). Stride 2 is left: the flat slice with
// step 2 spans 2*Wp input columns per output row, so the wide grid has Wp columns of which
// about Wp/2 are real (EfficientNet-B0's 56x56 stride-2 kernel measured no faster).
bool flatPays(const Conv2d& g, int64_t lanes) {
  int64_t oh = g.ys[2], ow = g.ys[3];
  int64_t wp = g.xs[3] + g.pads[1] + g.pads[3];
  auto iterations = [&](int64_t n) { return n <= lanes ? 1 : n / lanes + n % lanes; };
  return g.strides == std::vector<int64_t>{1, 1} && iterations(oh * wp) < oh * iterations(ow);
}

// LLVM's vector width for a row of stride-2 loads (interleaved: two wide loads and a
// shuffle per vector), 8 even where the kernel prefers 512-bit vectors. It leaves at least
// one element of each row to a scalar epilogue (the last wide load would read past the
// row), so a row of OW runs floor((OW - 1) / 8) vector iterations and the rest scalar.
constexpr int64_t kInterleavedLanes = 8;

// The phase split pays where an output row is shorter than a vector: LLVM vectorizes a
// stride-2 row of at least `lanes` elements with wide loads and shuffles, but a shorter one
// with gathers. Measured (one thread, the conv and relu kernels with the split's pad and
// concat; x86-64-v4, 16 lanes): OW = 14 1.7-3.6x faster (96 channels 5x5: 0.32 -> 0.09 ms,
// 240 channels 3x3: 0.33 -> 0.18 ms), OW = 7 2.3x (672 channels 5x5), but OW = 28 0.7x and
// OW = 56 0.6x, where the concat's extra pass over the input costs more than the shuffles;
// on x86-64-v3 (8 lanes) OW = 7 1.4x faster, OW = 14 0.85x.
bool phasesPay(const Conv2d& g, int64_t lanes) {
  return g.strides == std::vector<int64_t>{2, 2} && g.dilations == std::vector<int64_t>{1, 1} &&
         g.ys[3] < lanes;
}

// An operand constant over H and W (size 1 in both, or of lower rank) as an operand of
// the wide grid: its H becomes the L axis and its W goes, [N, C, 1, 1] -> [N, C, 1],
// [C, 1, 1] -> [C, 1]; nothing when it varies over H or W.
std::optional<std::vector<int64_t>> spatialConstant(const Value* v) {
  if (!v->type().isStatic() || v->type().rank() > 4) return std::nullopt;
  std::vector<int64_t> s = v->type().staticShape();
  size_t r = s.size();
  if ((r >= 1 && s[r - 1] != 1) || (r >= 2 && s[r - 2] != 1)) return std::nullopt;
  if (r >= 2) s.pop_back();
  return s;
}

// The conv's epilogue, in program order: the elementwise ops with a float result of its
// shape over its result (or over ops of the epilogue) whose every other operand is
// constant over H and W (a batch-norm scale and shift, hardswish's constants, a
// squeeze-excite gate).
std::vector<Op*> epilogueOf(Func& f, const Op& conv) {
  const Shape& narrow = conv.result(0)->type().shape();
  std::set<const Value*> in{conv.result(0)};
  std::vector<Op*> epi;
  std::vector<Op*> ops = f.opsSnapshot();
  for (auto it = ++std::find(ops.begin(), ops.end(), &conv); it != ops.end(); ++it) {
    Op& op = **it;
    // A float result only: the wide grid's extra columns hold values of no output, which an
    // integer op could divide by.
    if (!op.has(kElementwise) || op.numResults() != 1 || op.device() != conv.device() ||
        op.result(0)->type().shape() != narrow || !isFloat(op.result(0)->type().elem()))
      continue;
    bool reads = false, fits = true;
    for (const Value* v : op.operands()) {
      reads |= in.count(v) > 0;
      fits &= in.count(v) > 0 || spatialConstant(v).has_value();
    }
    if (!reads || !fits) continue;
    in.insert(op.result(0));
    epi.push_back(&op);
  }
  return epi;
}

// The ops outside the epilogue that read the conv or its epilogue.
std::set<const Op*> readersOf(const Op& conv, const std::vector<Op*>& epi) {
  std::set<const Op*> inside(epi.begin(), epi.end()), readers;
  auto add = [&](const Value* v) {
    for (const Use& u : v->uses())
      if (!inside.count(u.user)) readers.insert(u.user);
  };
  add(conv.result(0));
  for (const Op* op : epi) add(op->result(0));
  return readers;
}

// The epilogue computed on the wide grid too, so it stays in the conv's kernel: each op is
// built on the wide values before it, the ops outside it read the narrow view of the wide
// value (N x C x OH x Wp, its first OW columns), and the narrow ops are erased. The grid is
// flat (N x C x OH*Wp: the operands constant over H and W lose their W dim) or, for wide
// stride-2 rows, N x C x OH x Wp itself. Returns the conv's replacement: its view, or the
// wide sum when nothing else reads the conv.
Result<Value*> widenEpilogue(Func& f, Op& conv, const std::vector<Op*>& epi, TapBuilder& tb,
                             Value* sum, int64_t wp, int64_t ow, bool flat) {
  std::vector<int64_t> ys = conv.result(0)->type().staticShape();
  std::map<const Value*, Value*> wide{{conv.result(0), sum}};
  for (Op* op : epi) {
    tb.before(*op);
    std::vector<Value*> operands;
    for (Value* v : op->operands()) {
      if (auto w = wide.find(v); w != wide.end()) {
        operands.push_back(w->second);
      } else if (std::vector<int64_t> s = *spatialConstant(v);
                 flat && s != v->type().staticShape()) {
        KILN_TRY(Value * r, tb.reshape(v, s));
        operands.push_back(r);
      } else {
        operands.push_back(v);
      }
    }
    KILN_TRY(Op * w, tb.builder().create(op->kind(), operands, op->attrs()));
    wide[op->result(0)] = w->result(0);
  }
  auto view = [&](Value* w, Op& at) -> Result<Value*> {
    tb.before(at);
    Value* grid = w;
    if (flat) {
      KILN_TRY(grid, tb.reshape(w, {ys[0], ys[1], ys[2], wp}));
    }
    return tb.slice(grid, {3}, {0}, {ow}, {1});
  };
  std::set<const Op*> inside(epi.begin(), epi.end());
  for (Op* op : epi) {
    Value* v = op->result(0);
    std::vector<Use> outside;
    for (const Use& u : v->uses())
      if (!inside.count(u.user)) outside.push_back(u);
    if (outside.empty()) continue;
    KILN_TRY(Value * n, view(wide[v], *op));
    for (const Use& u : outside) u.user->setOperand(u.operandIndex, n);
  }
  for (auto op = epi.rbegin(); op != epi.rend(); ++op) {
    (*op)->dropOperands();
    f.erase(*op);
  }
  if (conv.result(0)->uses().empty()) return sum;
  return view(sum, conv);
}

// The flat ("wide row") form of a channels-first stride-1 depthwise conv: the padded input
// viewed as N x C x (Hp*Wp), tap (i, j) is its slice from i*dh*Wp + j*dw, OH*Wp long: the
// wide grid's row r, column q reads padded row r + i*dh, column q + j*dw, so the first OW of
// each row's Wp columns are the conv's and the rest are dropped by the view back. The input
// is padded by extra rows at the bottom where the last tap's slice would run past it.
Result<Value*> asFlatTaps(Func& f, Op& conv, const Conv2d& g, const std::vector<Op*>& epi) {
  const std::vector<int64_t>&xs = g.xs, &ys = g.ys, &pads = g.pads, &dil = g.dilations;
  int64_t n = xs[0], c = xs[1], kh = g.ws[2], kw = g.ws[3];
  int64_t hp = xs[2] + pads[0] + pads[2], wp = xs[3] + pads[1] + pads[3];
  int64_t len = ys[2] * wp; // the wide grid: OH rows of Wp columns
  int64_t reach = (kh - 1) * dil[0] * wp + (kw - 1) * dil[1] + len;
  int64_t extra = std::max<int64_t>(0, (reach + wp - 1) / wp - hp);
  TapBuilder tb(f, conv);
  Value* padded = conv.operand(0);
  if (extra > 0 || pads != std::vector<int64_t>{0, 0, 0, 0}) {
    KILN_TRY(padded, tb.pad(padded, {0, 0, pads[0], pads[1], 0, 0, pads[2] + extra, pads[3]}));
  }
  KILN_TRY(Value * flat, tb.reshape(padded, {n, c, (hp + extra) * wp}));
  std::vector<Value*> terms;
  for (int64_t i = 0; i < kh; ++i)
    for (int64_t j = 0; j < kw; ++j) {
      KILN_TRY(Value * wt, tb.slice(conv.operand(1), {2, 3}, {i, j}, {i + 1, j + 1}, {1, 1}));
      KILN_TRY(wt, tb.reshape(wt, {c, 1}));
      int64_t start = i * dil[0] * wp + j * dil[1];
      KILN_TRY(Value * tap, tb.slice(flat, {2}, {start}, {start + len}, {1}));
      KILN_TRY(Value * term, tb.binary(OpKind::Mul, tap, wt));
      terms.push_back(term);
    }
  KILN_TRY(Value * sum, sumTaps(tb, terms));
  if (conv.numOperands() == 3) {
    KILN_TRY(Value * bias, tb.reshape(conv.operand(2), {c, 1}));
    KILN_TRY(sum, tb.binary(OpKind::Add, sum, bias));
  }
  return widenEpilogue(f, conv, epi, tb, sum, wp, ys[3], /*flat=*/true);
}

// The conv as its taps' sum, built before it, or null when it is not depthwise. Built
// channels-last when every user transposes it there: those users are then replaced by the
// sum and erased, and the conv is left without users.
Result<Value*> asTaps(Func& f, Op& conv, const Conv2d& g, int64_t lanes) {
  const std::vector<int64_t>&xs = g.xs, &ws = g.ws, &ys = g.ys;
  const std::vector<int64_t>&strides = g.strides, &pads = g.pads, &dil = g.dilations;
  int64_t c = xs[1];
  if (g.group != c || ws[0] != c || ws[1] != 1 || c == 1) return nullptr;
  int64_t kh = ws[2], kw = ws[3], oh = ys[2], ow = ys[3];
  std::vector<Op*> nhwcUsers = channelsLastUsers(conv);
  bool last = !nhwcUsers.empty();
  if (!last && flatPays(g, lanes)) {
    // Read by one op, the kernel would join that op's (fuse: elementwise-into-consumer) and
    // be computed on its narrow grid through the views: the flat form only where two or
    // more ops read it (an SE block's pool and gated 1x1 conv), so it is a kernel of its own.
    std::vector<Op*> epi = epilogueOf(f, conv);
    if (readersOf(conv, epi).size() >= 2) return asFlatTaps(f, conv, g, epi);
  }
  // The spatial axes of x and of the result, and the shape of a per-channel operand.
  std::vector<int64_t> spatial = last ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{2, 3};
  std::vector<int64_t> perChannelShape =
      last ? std::vector<int64_t>{c} : std::vector<int64_t>{c, 1, 1};
  TapBuilder tb(f, conv);
  Value* padded = conv.operand(0);
  if (last) { // x channels-last: the operand of a transpose to channels-first, or a view
    if (isTranspose(padded->def(), kToChannelsFirst)) {
      padded = padded->def()->operand(0);
    } else {
      Attrs ta;
      ta.set("perm", kToChannelsLast);
      KILN_TRY(Op * t, tb.builder().create(OpKind::Transpose, {padded}, std::move(ta)));
      padded = t->result(0);
    }
  }
  // The phase split: Hp and Wp padded to even, then the four strided views stacked.
  bool phases = !last && phasesPay(g, lanes);
  int64_t evenH = phases ? (xs[2] + pads[0] + pads[2]) % 2 : 0;
  int64_t evenW = phases ? (xs[3] + pads[1] + pads[3]) % 2 : 0;
  // Wide stride-2 rows: OW' >= OW columns with OW' - 1 a multiple of the interleaved loads'
  // vector width (kInterleavedLanes), the input padded on the right for them; the sum and
  // its epilogue are computed on N x C x OH x OW' and read through the view of the first OW
  // columns, so one column of each row is scalar code instead of up to 8. As for the flat
  // form, only where two or more ops read the conv and its epilogue (one reader's kernel
  // would compute it through the view).
  int64_t owWide = ow, extraW = 0;
  std::vector<Op*> epi;
  if (!last && !phases && strides == std::vector<int64_t>{2, 2} &&
      dil == std::vector<int64_t>{1, 1}) {
    int64_t vf = std::min(lanes, kInterleavedLanes);
    int64_t wider = (ow - 1 + vf - 1) / vf * vf + 1;
    epi = epilogueOf(f, conv);
    // Only under an epilogue of transcendental math (SiLU's sigmoid), whose scalar code is
    // what the scalar columns cost: with a relu the rows gain about what the readers lose
    // (an SE block's pool reads the view instead of one contiguous run).
    bool costly = std::any_of(epi.begin(), epi.end(),
                              [](const Op* op) { return isTranscendental(op->kind()); });
    if (wider > ow && costly && readersOf(conv, epi).size() >= 2) {
      owWide = wider;
      extraW = std::max<int64_t>(0, (kw - 1) + 2 * (owWide - 1) + 1 - (xs[3] + pads[1] + pads[3]));
    }
  }
  if (pads != std::vector<int64_t>{0, 0, 0, 0} || evenH || evenW || extraW) {
    KILN_TRY(
        padded,
        tb.pad(padded, last ? std::vector<int64_t>{0, pads[0], pads[1], 0, 0, pads[2], pads[3], 0}
                            : std::vector<int64_t>{0, 0, pads[0], pads[1], 0, 0, pads[2] + evenH,
                                                   pads[3] + evenW + extraW}));
  }
  if (phases) {
    KILN_TRY(padded, phaseSplit(tb.builder(), padded));
  }
  // The taps' weights, [C] or [C,1,1] each. Channels-last, a tap's weights are KH*KW
  // elements apart along C in w: they are first gathered tap-major into one KH*KW x C
  // tensor (a concat, a tiny kernel of its own), so the conv kernel's column loop reads
  // them contiguously instead of with one strided gather per tap.
  std::vector<Value*> weights;
  for (int64_t i = 0; i < kh; ++i)
    for (int64_t j = 0; j < kw; ++j) {
      KILN_TRY(Value * wt, tb.slice(conv.operand(1), {2, 3}, {i, j}, {i + 1, j + 1}, {1, 1}));
      KILN_TRY(wt, tb.reshape(wt, last ? std::vector<int64_t>{1, c} : perChannelShape));
      weights.push_back(wt);
    }
  if (last) {
    Attrs ca;
    ca.set("axis", int64_t{0});
    KILN_TRY(Op * packed, tb.builder().create(OpKind::Concat, weights, std::move(ca)));
    for (int64_t t = 0; t < kh * kw; ++t) {
      KILN_TRY(Value * wt, tb.slice(packed->result(0), {0}, {t}, {t + 1}, {1}));
      KILN_TRY(weights[static_cast<size_t>(t)], tb.reshape(wt, perChannelShape));
    }
  }
  std::vector<Value*> terms;
  for (int64_t i = 0; i < kh; ++i)
    for (int64_t j = 0; j < kw; ++j) {
      int64_t r0 = i * dil[0], c0 = j * dil[1];
      Value* tap = nullptr;
      if (phases) {
        int64_t phase = 2 * (i % 2) + j % 2;
        KILN_TRY(tap, tb.slice(padded, {2, 3, 4}, {phase, i / 2, j / 2},
                               {phase + 1, i / 2 + oh, j / 2 + ow}, {1, 1, 1}));
        KILN_TRY(tap, tb.reshape(tap, ys));
      } else {
        KILN_TRY(tap, tb.slice(padded, spatial, {r0, c0},
                               {r0 + (oh - 1) * strides[0] + 1, c0 + (owWide - 1) * strides[1] + 1},
                               strides));
      }
      KILN_TRY(Value * term, tb.binary(OpKind::Mul, tap, weights[static_cast<size_t>(i * kw + j)]));
      terms.push_back(term);
    }
  KILN_TRY(Value * sum, sumTaps(tb, terms));
  if (conv.numOperands() == 3) {
    KILN_TRY(Value * bias, tb.reshape(conv.operand(2), perChannelShape));
    KILN_TRY(sum, tb.binary(OpKind::Add, sum, bias));
  }
  if (owWide > ow) return widenEpilogue(f, conv, epi, tb, sum, owWide, ow, /*flat=*/false);
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

  Status run(Module& m) override {
    int64_t lanes = std::max<int64_t>(1, opts_.target.preferredVectorBits / 32);
    return rewriteConvs(
        m, opts_, [&](Func& f, Op& conv, const Conv2d& g) { return asTaps(f, conv, g, lanes); });
  }

private:
  CodegenOptions opts_;
};

} // namespace

std::unique_ptr<Pass> createConvDepthwisePass(const CodegenOptions& opts) {
  return std::make_unique<ConvDepthwisePass>(opts);
}

} // namespace kiln
