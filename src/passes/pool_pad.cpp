// pool-pad: on cpu targets, a float max pool whose windows reach past its input (padding,
// or ceil_mode's partial last windows) reads a copy of its input padded with -inf instead,
// with no padding of its own, so that every window is whole and `lower` emits the taps as
// plain loads: a row of taps then vectorizes (interleaved loads), where the bounds checks
// of a padded window kept LLVM's code scalar (ResNet-18's 3x3 stride-2 pool over 112x112:
// 1.5 ms on one thread, about 4x the same pool without padding).
//
// Requires:    shape-infer (static shapes); runs before fuse, on the ops of the devices it
//              covers, and only when the target is a cpu (TargetDesc::cpu).
// Guarantees:  every covered `max_pool` with a float element type and static shapes whose
//              windows read outside [0, in) along some spatial dim is max_pool(pad(x)) with
//              pads 0 and ceil_mode 0, the pad (value -inf) adding the original begin
//              padding and exactly the elements the last window reads past the end (or
//              cropping what no window reads); the result is the same, element for element
//              (a -inf never wins a max, and NaN still propagates). Every other op is left.
// Invalidates: nothing (new ops have the pool's device and location).
//
//   %y = max_pool %x {kernel = [3, 3],          %p = pad %x {pads = [0, 0, 1, 1, 0, 0, 0, 0],
//          pads = [1, 1, 1, 1], strides =  =>          value = -inf} : 1x64x113x113
//          [2, 2]} : 1x64x56x56                 %y = max_pool %p {pads = [0, 0, 0, 0]}
//     (x: 1x64x112x112)                                : 1x64x56x56
#include <limits>

#include "ir/core/builder.h"
#include "passes/codegen.h"
#include "passes/passes.h"

namespace kiln {

namespace {

// The pad's begin-then-end values over every dim of x when the pool needs one, else empty.
std::vector<int64_t> padsFor(const Op& pool) {
  const Type& xt = pool.operand(0)->type();
  const Type& yt = pool.result(0)->type();
  if (!xt.isStatic() || !yt.isStatic() || !isFloat(xt.elem()) || xt.rank() < 3) return {};
  std::vector<int64_t> xs = xt.staticShape(), ys = yt.staticShape();
  size_t sp = xs.size() - 2;
  auto list = [&](const char* name, size_t n, int64_t def) {
    std::vector<int64_t> v = pool.attrs().getInts(name);
    if (v.size() != n) v.assign(n, def);
    return v;
  };
  std::vector<int64_t> kernel = pool.attrs().getInts("kernel");
  std::vector<int64_t> strides = list("strides", sp, 1), pads = list("pads", 2 * sp, 0),
                       dil = list("dilations", sp, 1);
  if (kernel.size() != sp) return {};
  std::vector<int64_t> out(2 * xs.size(), 0);
  bool needed = false;
  for (size_t d = 0; d < sp; ++d) {
    int64_t in = xs[2 + d], o = ys[2 + d], begin = pads[d];
    if (o < 1 || begin < 0 || kernel[d] < 1 || strides[d] < 1 || dil[d] < 1) return {};
    // The input extent the windows span, counted from the first window's start.
    int64_t a = 0, b = 0, span = 0;
    if (__builtin_mul_overflow(o - 1, strides[d], &a) ||
        __builtin_mul_overflow(kernel[d] - 1, dil[d], &b) ||
        __builtin_add_overflow(a, b + 1, &span))
      return {};
    int64_t end = span - begin - in; // > 0: read past the end; < 0: never read
    if (end <= -in) return {};       // no window reads the input at all: left as it is
    if (begin > 0 || end > 0) needed = true;
    out[2 + d] = begin;
    out[xs.size() + 2 + d] = end;
  }
  return needed ? out : std::vector<int64_t>{};
}

class PoolPadPass : public Pass {
public:
  explicit PoolPadPass(CodegenOptions opts) : opts_(std::move(opts)) {}

  Status run(Module& m) override {
    if (!opts_.target.cpu) return ok();
    for (const auto& f : m.funcs()) {
      std::vector<Op*> pools;
      for (const auto& op : f->ops())
        if (op->kind() == OpKind::MaxPool && opts_.covers(*op)) pools.push_back(op.get());
      for (Op* pool : pools) {
        std::vector<int64_t> pads = padsFor(*pool);
        if (pads.empty()) continue;
        Builder b(f.get(), pool);
        b.setLoc(pool->loc());
        b.setDevice(pool->device());
        Attrs pa;
        pa.set("pads", std::move(pads));
        pa.set("mode", std::string("constant"));
        pa.set("value", -std::numeric_limits<double>::infinity());
        KILN_TRY(Op * p, b.create(OpKind::Pad, {pool->operand(0)}, std::move(pa)));
        Attrs a = pool->attrs();
        size_t sp = static_cast<size_t>(p->result(0)->type().rank()) - 2;
        a.set("pads", std::vector<int64_t>(2 * sp, 0));
        a.set("ceil_mode", int64_t(0));
        KILN_TRY(Op * q, b.create(OpKind::MaxPool, {p->result(0)}, std::move(a),
                                  {pool->result(0)->type()}));
        pool->result(0)->replaceAllUsesWith(q->result(0));
        pool->dropOperands();
        f->erase(pool);
      }
    }
    return ok();
  }

private:
  CodegenOptions opts_;
};

} // namespace

std::unique_ptr<Pass> createPoolPadPass(const CodegenOptions& opts) {
  return std::make_unique<PoolPadPass>(opts);
}

} // namespace kiln
