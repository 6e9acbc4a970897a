// The random program generator behind kiln-graphgen and the property test (graphgen.h).
//
// One draw = pick an op kind, then build its operands from the pool of values made so far
// (or from fresh small constants), choose attributes, and call Builder::create. Whatever
// the draw added is rolled back when the shape rules reject it or the result is too big,
// and another kind is drawn.
#include "graphgen.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <optional>
#include <random>
#include <set>

#include "ir/core/builder.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"

namespace kiln::graphgen {
namespace {

// Largest tensor the generator makes, counting symbols at their upper bounds.
constexpr int64_t kMaxElements = 256;
constexpr int kDrawsPerOp = 64;

// Portable randomness: mt19937_64's sequence is fixed by the standard, the std::
// distributions are not, so these are written out.
class Rng {
public:
  explicit Rng(uint64_t seed) : eng_(seed) {}
  // Uniform in [lo, hi]; the modulo bias is negligible for the small spans used here.
  int64_t range(int64_t lo, int64_t hi) {
    auto span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(eng_() % span);
  }
  bool chance(int percent) { return range(0, 99) < percent; }
  template <typename T> const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(range(0, static_cast<int64_t>(v.size()) - 1))];
  }
  template <typename T> void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i)
      std::swap(v[i - 1], v[static_cast<size_t>(range(0, static_cast<int64_t>(i) - 1))]);
  }

private:
  std::mt19937_64 eng_;
};

bool broadcastable(const Shape& a, const Shape& b) {
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 1; i <= n; ++i) {
    const Dim& x = a[a.size() - i];
    const Dim& y = b[b.size() - i];
    bool one = (x.isStatic() && x.value() == 1) || (y.isStatic() && y.value() == 1);
    if (!(x == y) && !one) return false;
  }
  return true;
}

bool allStatic(const Shape& s) {
  return std::all_of(s.begin(), s.end(), [](const Dim& d) { return d.isStatic(); });
}

std::vector<int64_t> staticDims(const Shape& s) {
  std::vector<int64_t> out;
  for (const Dim& d : s) out.push_back(d.value());
  return out;
}

bool elemFits(const OpInfo& info, ElemType e) {
  if (info.has(kFloatOnly)) return isFloat(e);
  if (info.has(kNumeric)) return isFloat(e) || isInteger(e);
  if (info.has(kBoolOnly)) return isBool(e);
  return true;
}

// Python's slice length for one axis (start and end clamp, step != 0).
int64_t sliceLength(int64_t d, int64_t start, int64_t end, int64_t step) {
  int64_t lower = step > 0 ? 0 : -1;
  int64_t upper = step > 0 ? d : d - 1;
  auto clampIndex = [&](int64_t i) {
    if (i < 0) i += d;
    return std::clamp(i, lower, upper);
  };
  start = clampIndex(start);
  end = clampIndex(end);
  if (step > 0) return start < end ? (end - start - 1) / step + 1 : 0;
  return end < start ? (start - end - 1) / (-step) + 1 : 0;
}

class Generator {
public:
  explicit Generator(const Options& opts) : opts_(opts), rng_(opts.seed) {}

  Result<Program> run() {
    module_ = std::make_unique<Module>();
    func_ = module_->addFunc(std::make_unique<Func>("main", Loc{}));
    builder_.emplace(func_);
    if (opts_.symbolic) KILN_CHECK(makeArguments());
    int numConstants =
        opts_.symbolic ? static_cast<int>(rng_.range(1, 2)) : static_cast<int>(rng_.range(2, 4));
    for (int i = 0; i < numConstants; ++i) pool_.push_back(randomInputConstant());
    for (int i = 0; i < opts_.numOps; ++i) drawOp();
    finish();
    KILN_CHECK(verifyModule(*module_));
    return Program{std::move(module_), std::move(literals_)};
  }

private:
  Options opts_;
  Rng rng_;
  std::unique_ptr<Module> module_;
  Func* func_ = nullptr;
  std::optional<Builder> builder_;
  std::vector<Value*> pool_;
  // Values computed through an attention (exp and sums in f32 on cpu and GPUs, in f64 by
  // the reference): see make().
  std::set<const Value*> inexact_;
  SymbolBinding maxBinding_;
  std::vector<std::string> literals_;

  // ---- sizes and values -------------------------------------------------------------------

  std::optional<int64_t> maxSize(const Dim& d) const {
    if (d.isUnknown()) return std::nullopt;
    if (d.isStatic()) return d.value();
    return d.expr().evaluate(maxBinding_);
  }

  bool small(const Type& t) const {
    int64_t n = 1;
    for (const Dim& d : t.shape()) {
      auto s = maxSize(d);
      if (!s || *s < 1 || *s > kMaxElements) return false;
      n *= *s;
      if (n > kMaxElements) return false;
    }
    return true;
  }

  // Floats are multiples of 1/4 in [-4, 4] (exact in every float type); integers in
  // [-10, 10] (u8: [0, 20]); i1 is 0 or 1.
  double randomValue(ElemType e) {
    if (isFloat(e)) return static_cast<double>(rng_.range(-16, 16)) / 4.0;
    if (isBool(e)) return static_cast<double>(rng_.range(0, 1));
    if (e == ElemType::U8) return static_cast<double>(rng_.range(0, 20));
    return static_cast<double>(rng_.range(-10, 10));
  }

  HostTensor randomTensor(ElemType e, const std::vector<int64_t>& shape) {
    HostTensor t(e, shape);
    for (int64_t i = 0; i < t.numElements(); ++i) t.setF(i, randomValue(e));
    return t;
  }

  Value* constant(ElemType e, const std::vector<int64_t>& shape) {
    return builder_->constant(randomTensor(e, shape));
  }

  Value* indexConstant(ElemType e, const std::vector<int64_t>& shape, int64_t lo, int64_t hi) {
    HostTensor t(e, shape);
    for (int64_t i = 0; i < t.numElements(); ++i) t.setI(i, rng_.range(lo, hi));
    return builder_->constant(std::move(t));
  }

  ElemType randomDataElem() {
    int64_t r = rng_.range(0, 99);
    if (r < 70) return ElemType::F32;
    if (r < 80) return ElemType::I32;
    if (r < 90) return ElemType::I64;
    return ElemType::I1;
  }

  Value* randomInputConstant() {
    std::vector<int64_t> shape(static_cast<size_t>(rng_.range(0, 4)));
    for (auto& d : shape) d = rng_.range(1, 4);
    return constant(randomDataElem(), shape);
  }

  // ---- symbolic mode ----------------------------------------------------------------------

  Status makeArguments() {
    KILN_CHECK(module_->symbols().declare(SymbolInfo{"n", 1, 16, 1, Loc{}}));
    KILN_CHECK(module_->symbols().declare(SymbolInfo{"m", 2, 8, 2, Loc{}}));
    maxBinding_ = {{"n", 16}, {"m", 8}};
    SymbolBinding actual{{"n", rng_.range(1, 6)}, {"m", 2 * rng_.range(1, 2)}};
    const SymExpr n = SymExpr::symbol("n"), m = SymExpr::symbol("m");
    std::vector<Type> types;
    while (true) {
      types.clear();
      bool hasN = false, hasM = false;
      auto numArgs = rng_.range(1, 3);
      for (int64_t a = 0; a < numArgs; ++a) {
        Shape shape;
        auto rank = rng_.range(1, 3);
        for (int64_t i = 0; i < rank; ++i) {
          int64_t r = rng_.range(0, 99);
          if (r < 40) {
            shape.push_back(n);
            hasN = true;
          } else if (r < 60) {
            shape.push_back(m);
            hasM = true;
          } else {
            shape.push_back(rng_.range(1, 4));
          }
        }
        ElemType e = rng_.chance(80)
                         ? ElemType::F32
                         : rng_.pick(std::vector<ElemType>{ElemType::I32, ElemType::I64});
        types.emplace_back(e, std::move(shape));
      }
      bool fits = std::all_of(types.begin(), types.end(), [&](const Type& t) { return small(t); });
      if (hasN && hasM && fits) break;
    }
    for (size_t a = 0; a < types.size(); ++a) {
      std::vector<int64_t> concrete;
      for (const Dim& d : types[a].shape()) concrete.push_back(*d.expr().evaluate(actual));
      literals_.push_back(tensorLiteral(randomTensor(types[a].elem(), concrete)));
      pool_.push_back(func_->addArg(types[a], "in" + std::to_string(a)));
    }
    return ok();
  }

  // ---- drawing ----------------------------------------------------------------------------

  void drawOp() {
    static const std::vector<OpKind> kinds = [] {
      std::vector<OpKind> out;
      for (const OpInfo& info : allOps())
        // Transfers need declared devices; kiln-property-devices adds them to programs.
        if (info.level == OpLevel::Tensor && info.kind != OpKind::Return &&
            info.kind != OpKind::Constant && info.kind != OpKind::Weight &&
            info.kind != OpKind::Transfer)
          out.push_back(info.kind);
      return out;
    }();
    for (int attempt = 0; attempt < kDrawsPerOp; ++attempt) {
      size_t opsMark = func_->numOps();
      size_t poolMark = pool_.size();
      if (build(rng_.pick(kinds))) return;
      // Roll back what the failed draw added (helper constants, taming ops, the op).
      pool_.resize(poolMark);
      while (func_->numOps() > opsMark) func_->erase(func_->opsSnapshot().back());
    }
  }

  // Picks from the pool, preferring recent values so that programs grow deep chains.
  Value* pick(const std::function<bool(const Value*)>& pred) {
    std::vector<Value*> c;
    for (Value* v : pool_)
      if (pred(v)) c.push_back(v);
    if (c.empty()) return nullptr;
    if (rng_.chance(50)) {
      auto recent = std::min<int64_t>(3, static_cast<int64_t>(c.size()));
      return c[c.size() - static_cast<size_t>(rng_.range(1, recent))];
    }
    return rng_.pick(c);
  }

  Value* pickFor(const OpInfo& info, int64_t minRank = 0) {
    return pick([&](const Value* v) {
      return elemFits(info, v->type().elem()) && v->type().rank() >= minRank;
    });
  }

  // An op whose result jumps where a float operand crosses a step (floor, a comparison, a
  // cast to an integer, an index of the largest element, ...), or that makes it an f64.
  static bool discontinuous(OpKind kind, const Attrs& attrs) {
    switch (kind) {
    case OpKind::Floor:
    case OpKind::Ceil:
    case OpKind::Round:
    case OpKind::Sign:
    case OpKind::Eq:
    case OpKind::Ne:
    case OpKind::Lt:
    case OpKind::Le:
    case OpKind::Gt:
    case OpKind::Ge:
    case OpKind::Mod:
    case OpKind::ArgMax:
    case OpKind::ArgMin:
    case OpKind::TopK: return true;
    // To an integer; or to f64, which the tests compare at f64's precision (1e-9), far
    // below the f32 rounding the value already carries.
    case OpKind::Cast: return !isFloat(attrs.getType("to")) || attrs.getType("to") == ElemType::F64;
    default: return false;
    }
  }

  // Creates the op; null when the shape rules reject it or a result is too big, or when it
  // is discontinuous in a value that compiled code rounds differently from the reference
  // (`inexact_`): where the two roundings straddle a step, the results would differ by a
  // whole step, which no tolerance can tell from a bug.
  Op* make(OpKind kind, const std::vector<Value*>& operands, Attrs attrs = {},
           std::vector<Type> types = {}) {
    bool inexact = kind == OpKind::Attention;
    for (Value* v : operands) {
      if (!v) return nullptr;
      inexact = inexact || inexact_.count(v) > 0;
    }
    if (inexact && discontinuous(kind, attrs)) return nullptr;
    auto op = builder_->create(kind, operands, std::move(attrs), std::move(types));
    if (!op.ok()) return nullptr;
    for (size_t i = 0; i < (*op)->numResults(); ++i)
      if (!small((*op)->result(i)->type())) return nullptr;
    if (inexact)
      for (size_t i = 0; i < (*op)->numResults(); ++i) inexact_.insert((*op)->result(i));
    return *op;
  }

  Value* make1(OpKind kind, const std::vector<Value*>& operands, Attrs attrs = {},
               std::vector<Type> types = {}) {
    Op* op = make(kind, operands, std::move(attrs), std::move(types));
    return op ? op->result() : nullptr;
  }

  // abs(x) + 1: keeps log, sqrt, reciprocal and divisors away from 0 and negatives.
  Value* positive(Value* x) {
    return make1(OpKind::Add, {make1(OpKind::Abs, {x}), builder_->scalar(x->type().elem(), 1)});
  }

  // A shape that broadcasts against `s`: a suffix of it with symbolic dims (and some
  // static ones) replaced by 1, so that a constant can have it.
  std::vector<int64_t> compatibleShape(const Shape& s) {
    auto keep = rng_.chance(60) ? static_cast<int64_t>(s.size())
                                : rng_.range(0, static_cast<int64_t>(s.size()));
    std::vector<int64_t> out;
    for (size_t i = s.size() - static_cast<size_t>(keep); i < s.size(); ++i)
      out.push_back(s[i].isStatic() && rng_.chance(85) ? s[i].value() : 1);
    return out;
  }

  // A second operand of element type `e` that broadcasts with x.
  Value* partner(const Value* x, ElemType e) {
    if (rng_.chance(50)) {
      Value* y = pick([&](const Value* v) {
        return v->type().elem() == e && broadcastable(v->type().shape(), x->type().shape());
      });
      if (y) return y;
    }
    return constant(e, compatibleShape(x->type().shape()));
  }

  int64_t randomAxis(int64_t rank, bool allowNegative = true) {
    int64_t a = rng_.range(0, rank - 1);
    return allowNegative && rng_.chance(30) ? a - rank : a;
  }

  bool push(Value* v) {
    if (!v) return false;
    pool_.push_back(v);
    return true;
  }

  bool build(OpKind kind) {
    const OpInfo& info = opInfo(kind);
    if (info.has(kElementwise) && info.minOperands == 1 && kind != OpKind::Cast)
      return buildUnary(kind, info);
    if (info.has(kElementwise) && info.minOperands == 2) return buildBinary(kind, info);
    switch (kind) {
    case OpKind::Select: return buildSelect();
    case OpKind::Cast: return buildCast();
    case OpKind::Clamp: return buildClamp(info);
    case OpKind::ReduceSum:
    case OpKind::ReduceMean:
    case OpKind::ReduceMax:
    case OpKind::ReduceMin:
    case OpKind::ReduceProd: return buildReduce(kind, info);
    case OpKind::ArgMax:
    case OpKind::ArgMin: return buildArg(kind, info);
    case OpKind::Cumsum: return buildCumsum(info);
    case OpKind::Matmul: return buildMatmul(info);
    case OpKind::Attention: return buildAttention(info);
    case OpKind::Conv: return buildConv(info);
    case OpKind::MaxPool:
    case OpKind::AvgPool: return buildPool(kind, info);
    case OpKind::Softmax:
    case OpKind::LogSoftmax: return buildSoftmax(kind, info);
    case OpKind::Reshape: return buildReshape();
    case OpKind::Transpose: return buildTranspose();
    case OpKind::Broadcast: return buildBroadcast();
    case OpKind::Concat: return buildConcat();
    case OpKind::Split: return buildSplit();
    case OpKind::Slice: return buildSlice();
    case OpKind::Gather: return buildGather();
    case OpKind::GatherElements: return buildGatherElements();
    case OpKind::ScatterNd: return buildScatterNd();
    case OpKind::Pad: return buildPad();
    case OpKind::Triu:
    case OpKind::Tril: return buildTriangle(kind);
    case OpKind::Iota: return buildIota();
    case OpKind::Range: return buildRange();
    case OpKind::Dim: return buildDim();
    default: return false;
    }
  }

  // ---- elementwise ------------------------------------------------------------------------

  bool buildUnary(OpKind kind, const OpInfo& info) {
    Value* x = pickFor(info);
    if (!x) return false;
    Attrs attrs;
    switch (kind) {
    case OpKind::Log:
    case OpKind::Sqrt:
    case OpKind::Rsqrt:
    case OpKind::Reciprocal: x = positive(x); break;
    case OpKind::Exp: x = make1(OpKind::Tanh, {x}); break;
    case OpKind::Gelu:
      if (rng_.chance(30)) attrs.set("approximate", std::string("tanh"));
      break;
    default: break;
    }
    return push(make1(kind, {x}, std::move(attrs)));
  }

  bool buildBinary(OpKind kind, const OpInfo& info) {
    Value* x = pickFor(info);
    if (!x) return false;
    ElemType e = x->type().elem();
    Value* y = partner(x, e);
    Attrs attrs;
    bool floating = isFloat(e);
    if ((kind == OpKind::Div || kind == OpKind::Mod) && floating) y = positive(y);
    if (kind == OpKind::Mod && rng_.chance(30)) attrs.set("fmod", int64_t{1});
    if (kind == OpKind::Pow) {
      if (floating) {
        x = positive(x);
        y = make1(OpKind::Tanh, {y});
      } else {
        // Small integer exponents keep the interpreter's repeated multiplication cheap.
        y = make1(OpKind::Clamp, {y, builder_->scalar(e, -2), builder_->scalar(e, 4)});
      }
    }
    // Swapping puts the broadcast operand on the left, except where the tamed operand's
    // position matters.
    bool tamedRight =
        kind == OpKind::Pow || ((kind == OpKind::Div || kind == OpKind::Mod) && floating);
    if (!tamedRight && rng_.chance(50)) std::swap(x, y);
    return push(make1(kind, {x, y}, std::move(attrs)));
  }

  bool buildSelect() {
    Value* a = pick([](const Value*) { return true; });
    if (!a) return false;
    Value* cond = partner(a, ElemType::I1);
    Value* b = partner(a, a->type().elem());
    if (rng_.chance(50)) std::swap(a, b);
    return push(make1(OpKind::Select, {cond, a, b}));
  }

  bool buildCast() {
    Value* x = pick([](const Value*) { return true; });
    if (!x) return false;
    static const std::vector<ElemType> targets = {
        ElemType::F64, ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::I1,
        ElemType::I8,  ElemType::I16, ElemType::I32, ElemType::I64,  ElemType::U8};
    Attrs attrs;
    attrs.set("to", rng_.pick(targets));
    return push(make1(OpKind::Cast, {x}, std::move(attrs)));
  }

  bool buildClamp(const OpInfo& info) {
    Value* x = pickFor(info);
    if (!x) return false;
    ElemType e = x->type().elem();
    double lo = e == ElemType::U8 ? 0 : static_cast<double>(rng_.range(-3, 0));
    double hi = lo + static_cast<double>(rng_.range(0, 4));
    Value* loV = rng_.chance(70) ? builder_->scalar(e, lo) : partner(x, e);
    return push(make1(OpKind::Clamp, {x, loV, builder_->scalar(e, hi)}));
  }

  // ---- reductions -------------------------------------------------------------------------

  void setKeepdims(Attrs& attrs) { attrs.set("keepdims", int64_t{rng_.range(0, 1)}); }

  bool buildReduce(OpKind kind, const OpInfo& info) {
    Value* x = pickFor(info);
    if (!x) return false;
    std::vector<int64_t> axes;
    int64_t rank = x->type().rank();
    for (int64_t a = 0; a < rank; ++a)
      if (rng_.chance(40)) axes.push_back(rng_.chance(25) ? a - rank : a);
    Attrs attrs;
    attrs.set("axes", axes);
    setKeepdims(attrs);
    return push(make1(kind, {x}, std::move(attrs)));
  }

  bool buildArg(OpKind kind, const OpInfo& info) {
    Value* x = pickFor(info, 1);
    if (!x) return false;
    Attrs attrs;
    attrs.set("axis", randomAxis(x->type().rank()));
    setKeepdims(attrs);
    if (rng_.chance(30)) attrs.set("select_last_index", int64_t{rng_.range(0, 1)});
    return push(make1(kind, {x}, std::move(attrs)));
  }

  bool buildCumsum(const OpInfo& info) {
    Value* x = pickFor(info, 1);
    if (!x) return false;
    Attrs attrs;
    attrs.set("axis", randomAxis(x->type().rank()));
    if (rng_.chance(40)) attrs.set("exclusive", int64_t{rng_.range(0, 1)});
    if (rng_.chance(40)) attrs.set("reverse", int64_t{rng_.range(0, 1)});
    return push(make1(OpKind::Cumsum, {x}, std::move(attrs)));
  }

  // ---- contractions and windows -----------------------------------------------------------

  bool buildMatmul(const OpInfo& info) {
    Value* a = pickFor(info, 1);
    if (!a) return false;
    ElemType e = a->type().elem();
    const Shape& s = a->type().shape();
    const Dim& k = s.back();
    Value* b = nullptr;
    if (!k.isStatic()) {
      // The contracted dim is symbolic: the other operand must come from the program.
      b = pick([&](const Value* v) {
        return v->type().elem() == e && v->type().rank() >= 1 &&
               v->type().dim(v->type().rank() >= 2 ? v->type().rank() - 2 : 0) == k;
      });
    } else {
      std::vector<int64_t> shape{k.value()};
      if (rng_.chance(80)) shape.push_back(rng_.range(1, 4));
      if (s.size() >= 3 && shape.size() == 2 && s[s.size() - 3].isStatic() && rng_.chance(50))
        shape.insert(shape.begin(), s[s.size() - 3].value());
      b = constant(e, shape);
    }
    if (!b) return false;
    return push(make1(OpKind::Matmul, {a, b}));
  }

  struct Window {
    std::vector<int64_t> kernel, strides, pads, dilations;
    int64_t ceilMode = 0;
  };

  // A window per spatial dim that always covers at least one real element. Symbolic
  // spatial dims get a 1-wide window so that the output is never empty.
  Window randomWindow(const Shape& s, bool pool, bool withDilation) {
    Window w;
    size_t spatial = s.size() - 2;
    std::vector<int64_t> begins(spatial), ends(spatial);
    w.ceilMode = pool && rng_.chance(30) ? 1 : 0;
    for (size_t i = 0; i < spatial; ++i) {
      const Dim& d = s[i + 2];
      int64_t k = 1, dil = 1, stride = 1, pb = 0, pe = 0;
      if (d.isStatic()) {
        int64_t size = d.value();
        dil = withDilation && rng_.chance(20) ? 2 : 1;
        k = rng_.range(1, 3);
        while (k > 1 && dil * (k - 1) + 1 > size) --k;
        int64_t extent = dil * (k - 1) + 1;
        // Padding at most half the window keeps every window on real data.
        pb = rng_.range(0, (extent - 1) / 2);
        pe = rng_.range(0, (extent - 1) / 2);
        stride = rng_.range(1, 2);
        if (w.ceilMode && pe + stride > extent) stride = 1, pe = 0;
      }
      w.kernel.push_back(k);
      w.dilations.push_back(dil);
      w.strides.push_back(stride);
      begins[i] = pb;
      ends[i] = pe;
    }
    w.pads = begins;
    w.pads.insert(w.pads.end(), ends.begin(), ends.end());
    return w;
  }

  Value* pickWindowed(const OpInfo& info) {
    return pick([&](const Value* v) {
      return elemFits(info, v->type().elem()) && (v->type().rank() == 3 || v->type().rank() == 4) &&
             v->type().dim(1).isStatic();
    });
  }

  bool buildConv(const OpInfo& info) {
    Value* x = pickWindowed(info);
    if (!x) return false;
    ElemType e = x->type().elem();
    int64_t channels = x->type().dim(1).value();
    std::vector<int64_t> groups;
    for (int64_t g = 1; g <= channels; ++g)
      if (channels % g == 0) groups.push_back(g);
    int64_t group = rng_.pick(groups);
    int64_t outChannels = group * rng_.range(1, 2);
    Window w = randomWindow(x->type().shape(), false, true);
    std::vector<int64_t> wshape{outChannels, channels / group};
    wshape.insert(wshape.end(), w.kernel.begin(), w.kernel.end());
    std::vector<Value*> operands{x, constant(e, wshape)};
    if (rng_.chance(40)) operands.push_back(constant(e, {outChannels}));
    Attrs attrs;
    attrs.set("strides", w.strides);
    attrs.set("pads", w.pads);
    attrs.set("dilations", w.dilations);
    attrs.set("group", group);
    return push(make1(OpKind::Conv, operands, std::move(attrs)));
  }

  bool buildPool(OpKind kind, const OpInfo& info) {
    Value* x = pickWindowed(info);
    if (!x) return false;
    bool isMax = kind == OpKind::MaxPool;
    Window w = randomWindow(x->type().shape(), true, isMax);
    Attrs attrs;
    attrs.set("kernel", w.kernel);
    attrs.set("strides", w.strides);
    attrs.set("pads", w.pads);
    attrs.set("ceil_mode", w.ceilMode);
    if (isMax)
      attrs.set("dilations", w.dilations);
    else
      attrs.set("count_include_pad", int64_t{rng_.range(0, 1)});
    return push(make1(kind, {x}, std::move(attrs)));
  }

  // q from the program (its batch dims, heads and head dim static; the query length may be
  // symbolic), k and v constants with kv heads dividing the query heads, a mask over the
  // keys or none, causal or not: the attention strategy's grouped heads, causal offsets
  // of both signs and masked rows.
  bool buildAttention(const OpInfo& info) {
    Value* q = pick([&](const Value* v) {
      const Type& t = v->type();
      if (!elemFits(info, t.elem()) || t.rank() < 3 || t.rank() > 4) return false;
      for (int64_t d = 0; d < t.rank(); ++d)
        if (d != t.rank() - 2 && !t.dim(d).isStatic()) return false;
      return true;
    });
    if (!q) return false;
    ElemType e = q->type().elem();
    const Shape& s = q->type().shape();
    size_t r = s.size();
    int64_t hq = s[r - 3].value();
    int64_t hk = hq;
    for (int64_t g = rng_.range(1, 4); g >= 1; --g)
      if (hq % g == 0) {
        hk = hq / g;
        break;
      }
    int64_t sk = rng_.range(1, 6), dv = rng_.range(1, 4);
    std::vector<int64_t> kShape, vShape;
    for (size_t d = 0; d + 3 < r; ++d) kShape.push_back(s[d].value());
    kShape.push_back(hk);
    kShape.push_back(sk);
    vShape = kShape;
    kShape.push_back(s[r - 1].value());
    vShape.push_back(dv);
    std::vector<Value*> ops{q, constant(e, kShape), constant(e, vShape)};
    if (rng_.chance(40)) ops.push_back(constant(e, {rng_.chance(50) ? sk : 1}));
    Attrs attrs;
    attrs.set("scale", rng_.chance(50) ? 1.0 : 0.35);
    attrs.set("causal", int64_t{rng_.range(0, 1)});
    return push(make1(OpKind::Attention, ops, std::move(attrs)));
  }

  bool buildSoftmax(OpKind kind, const OpInfo& info) {
    Value* x = pickFor(info, 1);
    if (!x) return false;
    Attrs attrs;
    attrs.set("axis", randomAxis(x->type().rank()));
    return push(make1(kind, {x}, std::move(attrs)));
  }

  // ---- data movement ----------------------------------------------------------------------

  // Regroups the static dims into new factors; symbolic dims keep their relative order.
  bool buildReshape() {
    Value* x = pick([](const Value*) { return true; });
    if (!x) return false;
    int64_t product = 1;
    Shape symbolic;
    for (const Dim& d : x->type().shape()) {
      if (d.isStatic())
        product *= d.value();
      else
        symbolic.push_back(d);
    }
    std::vector<int64_t> factors;
    auto parts = rng_.range(0, 3);
    for (int64_t i = 0; i + 1 < parts; ++i) {
      std::vector<int64_t> divisors;
      for (int64_t f = 1; f <= product; ++f)
        if (product % f == 0) divisors.push_back(f);
      int64_t f = rng_.pick(divisors);
      factors.push_back(f);
      product /= f;
    }
    if (parts > 0 || product != 1) factors.push_back(product);
    Shape shape(factors.begin(), factors.end());
    for (const Dim& d : symbolic)
      shape.insert(shape.begin() + rng_.range(0, static_cast<int64_t>(shape.size())), d);
    return push(make1(OpKind::Reshape, {x}, {}, {Type(x->type().elem(), shape)}));
  }

  bool buildTranspose() {
    Value* x = pick([](const Value* v) { return v->type().rank() >= 1; });
    if (!x) return false;
    std::vector<int64_t> perm(static_cast<size_t>(x->type().rank()));
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
    rng_.shuffle(perm);
    Attrs attrs;
    attrs.set("perm", perm);
    return push(make1(OpKind::Transpose, {x}, std::move(attrs)));
  }

  bool buildBroadcast() {
    Value* x = pick([](const Value*) { return true; });
    if (!x) return false;
    Shape shape;
    for (int64_t i = rng_.range(0, 2); i > 0; --i) shape.push_back(rng_.range(1, 3));
    for (const Dim& d : x->type().shape()) {
      bool one = d.isStatic() && d.value() == 1;
      shape.push_back(one && rng_.chance(60) ? Dim(rng_.range(2, 4)) : d);
    }
    return push(make1(OpKind::Broadcast, {x}, {}, {Type(x->type().elem(), shape)}));
  }

  bool buildConcat() {
    Value* x = pick([](const Value* v) { return v->type().rank() >= 1; });
    if (!x) return false;
    const Type& t = x->type();
    int64_t axis = rng_.range(0, t.rank() - 1);
    auto fits = [&](const Value* v) {
      if (v->type().elem() != t.elem() || v->type().rank() != t.rank()) return false;
      for (int64_t i = 0; i < t.rank(); ++i)
        if (i != axis && v->type().dim(i) != t.dim(i)) return false;
      return true;
    };
    bool otherDimsStatic = true;
    for (int64_t i = 0; i < t.rank(); ++i)
      if (i != axis && !t.dim(i).isStatic()) otherDimsStatic = false;
    std::vector<Value*> operands{x};
    for (int64_t i = rng_.range(0, 2); i > 0; --i) {
      if (otherDimsStatic && rng_.chance(50)) {
        std::vector<int64_t> shape;
        for (int64_t j = 0; j < t.rank(); ++j)
          shape.push_back(j == axis ? rng_.range(1, 3) : t.dim(j).value());
        operands.push_back(constant(t.elem(), shape));
      } else {
        operands.push_back(pick(fits));
      }
    }
    rng_.shuffle(operands);
    Attrs attrs;
    attrs.set("axis", rng_.chance(30) ? axis - t.rank() : axis);
    return push(make1(OpKind::Concat, operands, std::move(attrs)));
  }

  // Static axes of v with at least `minSize` elements.
  std::vector<int64_t> staticAxes(const Value* v, int64_t minSize) {
    std::vector<int64_t> out;
    for (int64_t i = 0; i < v->type().rank(); ++i)
      if (v->type().dim(i).isStatic() && v->type().dim(i).value() >= minSize) out.push_back(i);
    return out;
  }

  bool buildSplit() {
    Value* x = pick([&](const Value* v) { return !staticAxes(v, 2).empty(); });
    if (!x) return false;
    int64_t axis = rng_.pick(staticAxes(x, 2));
    int64_t size = x->type().dim(axis).value();
    std::vector<int64_t> sizes;
    int64_t left = size;
    for (int64_t parts = rng_.range(2, std::min<int64_t>(3, size)); parts > 1; --parts) {
      int64_t s = rng_.range(1, left - (parts - 1));
      sizes.push_back(s);
      left -= s;
    }
    sizes.push_back(left);
    Attrs attrs;
    attrs.set("axis", rng_.chance(30) ? axis - x->type().rank() : axis);
    attrs.set("sizes", sizes);
    Op* op = make(OpKind::Split, {x}, std::move(attrs));
    if (!op) return false;
    for (size_t i = 0; i < op->numResults(); ++i) pool_.push_back(op->result(i));
    return true;
  }

  bool buildSlice() {
    Value* x = pick([&](const Value* v) { return !staticAxes(v, 1).empty(); });
    if (!x) return false;
    std::vector<int64_t> axes = staticAxes(x, 1);
    rng_.shuffle(axes);
    axes.resize(static_cast<size_t>(rng_.range(1, std::min<int64_t>(2, axes.size()))));
    std::vector<int64_t> starts, ends, steps, attrAxes;
    for (int64_t axis : axes) {
      int64_t d = x->type().dim(axis).value();
      int64_t start = 0, end = d, step = 1;
      for (int tries = 0; tries < 8; ++tries) {
        start = rng_.range(-d - 1, d + 1);
        end = rng_.chance(10) ? d + 100 : rng_.range(-d - 1, d + 1);
        step = rng_.pick(std::vector<int64_t>{1, 1, 2, -1, -2});
        if (sliceLength(d, start, end, step) > 0) break;
        start = 0, end = d, step = 1;
      }
      starts.push_back(start);
      ends.push_back(end);
      steps.push_back(step);
      attrAxes.push_back(rng_.chance(30) ? axis - x->type().rank() : axis);
    }
    Attrs attrs;
    attrs.set("starts", starts);
    attrs.set("ends", ends);
    attrs.set("axes", attrAxes);
    attrs.set("steps", steps);
    return push(make1(OpKind::Slice, {x}, std::move(attrs)));
  }

  ElemType indexElem() { return rng_.chance(70) ? ElemType::I64 : ElemType::I32; }

  bool buildGather() {
    Value* x = pick([](const Value* v) { return v->type().rank() >= 1; });
    if (!x) return false;
    int64_t axis = rng_.range(0, x->type().rank() - 1);
    const Dim& d = x->type().dim(axis);
    // A symbolic dim is at least 1, so 0 and -1 are its only indices known in range.
    int64_t lo = d.isStatic() ? -d.value() : -1;
    int64_t hi = d.isStatic() ? d.value() - 1 : 0;
    std::vector<int64_t> shape(static_cast<size_t>(rng_.range(0, 2)));
    for (auto& s : shape) s = rng_.range(1, 3);
    Value* idx = indexConstant(indexElem(), shape, lo, hi);
    Attrs attrs;
    attrs.set("axis", rng_.chance(30) ? axis - x->type().rank() : axis);
    return push(make1(OpKind::Gather, {x, idx}, std::move(attrs)));
  }

  bool buildGatherElements() {
    Value* x =
        pick([](const Value* v) { return v->type().rank() >= 1 && allStatic(v->type().shape()); });
    if (!x) return false;
    std::vector<int64_t> dims = staticDims(x->type().shape());
    int64_t axis = rng_.range(0, x->type().rank() - 1);
    std::vector<int64_t> shape = dims;
    if (rng_.chance(50)) {
      shape[static_cast<size_t>(axis)] = rng_.range(1, 3);
      if (rng_.chance(50))
        for (size_t i = 0; i < shape.size(); ++i)
          if (static_cast<int64_t>(i) != axis) shape[i] = rng_.range(1, dims[i]);
    }
    int64_t d = dims[static_cast<size_t>(axis)];
    Value* idx = indexConstant(indexElem(), shape, -d, d - 1);
    Attrs attrs;
    attrs.set("axis", axis);
    return push(make1(OpKind::GatherElements, {x, idx}, std::move(attrs)));
  }

  bool buildScatterNd() {
    Value* data =
        pick([](const Value* v) { return v->type().rank() >= 1 && allStatic(v->type().shape()); });
    if (!data) return false;
    ElemType e = data->type().elem();
    std::vector<int64_t> dims = staticDims(data->type().shape());
    auto depth = static_cast<size_t>(rng_.range(1, static_cast<int64_t>(dims.size())));
    int64_t count = rng_.range(1, 3);
    HostTensor idx(ElemType::I64, {count, static_cast<int64_t>(depth)});
    for (int64_t i = 0; i < count; ++i)
      for (size_t j = 0; j < depth; ++j)
        idx.setI(i * static_cast<int64_t>(depth) + static_cast<int64_t>(j),
                 rng_.range(0, dims[j] - 1));
    std::vector<int64_t> ushape{count};
    ushape.insert(ushape.end(), dims.begin() + static_cast<std::ptrdiff_t>(depth), dims.end());
    Value* indices = builder_->constant(std::move(idx));
    Value* updates = constant(e, ushape);
    Attrs attrs;
    if (rng_.chance(60)) {
      static const std::vector<std::string> numeric = {"none", "add", "mul", "max", "min"};
      attrs.set("reduction", isBool(e) ? std::string("none") : rng_.pick(numeric));
    }
    return push(make1(OpKind::ScatterNd, {data, indices, updates}, std::move(attrs)));
  }

  bool buildPad() {
    Value* x = pick([](const Value* v) { return v->type().rank() >= 1; });
    if (!x) return false;
    static const std::vector<std::string> modes = {"constant", "reflect", "edge"};
    std::string mode = rng_.pick(modes);
    int64_t rank = x->type().rank();
    std::vector<int64_t> begins, ends;
    for (int64_t i = 0; i < rank; ++i) {
      const Dim& d = x->type().dim(i);
      int64_t b = 0, e = 0;
      if (mode == "reflect") {
        // Mirroring without the edge needs the pad to be smaller than the dim.
        int64_t most = d.isStatic() ? std::min<int64_t>(2, d.value() - 1) : 0;
        b = rng_.range(0, most);
        e = rng_.range(0, most);
      } else {
        // Negative pads crop, so only static dims with room for them get one.
        int64_t least = mode == "constant" && d.isStatic() && d.value() >= 3 ? -1 : 0;
        b = rng_.range(least, 2);
        e = rng_.range(least, 2);
      }
      begins.push_back(b);
      ends.push_back(e);
    }
    begins.insert(begins.end(), ends.begin(), ends.end());
    Attrs attrs;
    attrs.set("pads", begins);
    attrs.set("mode", mode);
    if (mode == "constant" && rng_.chance(50))
      attrs.set("value", randomValue(isFloat(x->type().elem()) ? ElemType::F32 : ElemType::I8));
    return push(make1(OpKind::Pad, {x}, std::move(attrs)));
  }

  bool buildTriangle(OpKind kind) {
    Value* x = pick([](const Value* v) { return v->type().rank() >= 2; });
    if (!x) return false;
    Attrs attrs;
    attrs.set("k", rng_.range(-2, 2));
    return push(make1(kind, {x}, std::move(attrs)));
  }

  ElemType sourceElem() {
    return rng_.pick(std::vector<ElemType>{ElemType::F32, ElemType::I32, ElemType::I64});
  }

  // In symbolic mode a source's shape may use a symbol: the arguments bind every symbol.
  Dim sourceDim() {
    if (opts_.symbolic && rng_.chance(30)) return SymExpr::symbol(rng_.chance(50) ? "n" : "m");
    return rng_.range(1, 4);
  }

  bool buildIota() {
    Shape shape;
    for (int64_t i = rng_.range(1, 3); i > 0; --i) shape.push_back(sourceDim());
    Attrs attrs;
    attrs.set("axis", rng_.range(0, static_cast<int64_t>(shape.size()) - 1));
    return push(make1(OpKind::Iota, {}, std::move(attrs), {Type(sourceElem(), shape)}));
  }

  bool buildRange() {
    ElemType e = sourceElem();
    double start = 0, delta = 1;
    if (isFloat(e)) {
      start = static_cast<double>(rng_.range(-16, 16)) / 4.0;
      delta = rng_.pick(std::vector<double>{-1, -0.5, 0.25, 0.5, 1, 2});
    } else {
      start = static_cast<double>(rng_.range(-5, 5));
      delta = rng_.pick(std::vector<double>{-2, -1, 1, 3});
    }
    Attrs attrs;
    attrs.set("start", start);
    attrs.set("delta", delta);
    return push(make1(OpKind::Range, {}, std::move(attrs), {Type(e, {sourceDim()})}));
  }

  bool buildDim() {
    Value* x = pick([](const Value* v) { return v->type().rank() >= 1; });
    if (!x) return false;
    Attrs attrs;
    attrs.set("axis", rng_.range(0, x->type().rank() - 1));
    return push(make1(OpKind::Dim, {x}, std::move(attrs)));
  }

  // Returns the last value made and up to two others.
  void finish() {
    std::vector<Value*> results{pool_.back()};
    for (int64_t i = rng_.range(0, 2); i > 0; --i) {
      Value* v = rng_.pick(pool_);
      if (std::find(results.begin(), results.end(), v) == results.end()) results.push_back(v);
    }
    std::vector<Type> types;
    for (Value* v : results) types.push_back(v->type());
    func_->setResultTypes(types);
    builder_->createUnchecked(OpKind::Return, results, {}, {});
  }
};

} // namespace

Result<Program> generate(const Options& opts) { return Generator(opts).run(); }

std::string tensorLiteral(const HostTensor& t) {
  std::string out;
  for (int64_t d : t.shape()) out += std::to_string(d) + "x";
  out += elemTypeName(t.elem());
  out += "=";
  for (int64_t i = 0; i < t.numElements(); ++i) {
    if (i) out += ",";
    char buf[64];
    if (isFloat(t.elem()))
      std::snprintf(buf, sizeof buf, "%.17g", t.getF(i));
    else
      std::snprintf(buf, sizeof buf, "%" PRId64, t.getI(i));
    out += buf;
  }
  return out;
}

std::string programText(const Program& p) {
  std::string out;
  if (!p.inputLiterals.empty()) {
    out += "// kiln-inputs:";
    for (const std::string& lit : p.inputLiterals) out += " " + lit;
    out += "\n";
  }
  return out + printModule(*p.module);
}

} // namespace kiln::graphgen
