// The walker's reductions (kernel_builder.h): reduce_*, softmax / log_softmax, cumsum and
// argmax / argmin at one output element, each a loop with a wide private accumulator in
// the reference's order. On the cpu rows plan (rows.cpp) and the gpu reduce plan
// (reduction_gpu.cpp) a reduction whose indices are the same for every column of a row is
// computed once per row, before the column loop (on gpu, by all threads of the row
// together: the row reducer).
#include <algorithm>
#include <limits>

#include "passes/lower/kernel_builder.h"

namespace kiln {

std::vector<int64_t> reducedAxes(const Op& op) {
  std::vector<int64_t> axes = op.attrs().getInts("axes");
  int64_t r = op.operand(0)->type().rank();
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  for (int64_t& a : axes) a = a < 0 ? a + r : a;
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

// True when every index is the same for all columns of the current row (a row index, a
// constant or a prologue value), so a value computed from them can sit before the column
// loop.
bool KernelBuilder::rowInvariant(const std::vector<Value*>& ix) const {
  if (!colLoop_ || mask_) return false; // a mask is computed inside the column loop
  for (Value* v : ix)
    if (!invariant_.count(v)) return false;
  return true;
}

// Emits `f` before the column loop when `ix` (minus `except`) is row-invariant, memoized
// per (op, indices); otherwise at the current point.
Result<Value*> KernelBuilder::hoisted(const void* what, const std::vector<Value*>& ix,
                                      const std::function<Result<Value*>()>& f) {
  if (!rowInvariant(ix)) return f();
  auto key = std::make_pair(what, ix);
  auto it = hoistMemo_.find(key);
  if (it != hoistMemo_.end()) return it->second;
  auto pre = std::make_unique<Builder>(k_.get(), colLoop_);
  pre->setLoc(src_.loc());
  // A row-invariant reduction nested in this one (layer norm's mean inside its variance)
  // goes before this one's code: a marker op is the insertion point while `f` runs.
  Attrs a;
  a.set("value", int64_t(0));
  Op* marker = pre->createUnchecked(OpKind::IConst, {}, a, {Type::index()});
  std::swap(body_, pre);
  Op* loop = colLoop_;
  colLoop_ = marker;
  // Code before the column loop is outside every loop and `if`: all threads run it.
  bool uniform = uniform_;
  uniform_ = true;
  Result<Value*> v = f();
  uniform_ = uniform;
  colLoop_ = loop;
  std::swap(body_, pre);
  k_->erase(marker);
  if (!v.ok()) return v;
  hoistMemo_[key] = *v;
  invariant_.insert(*v);
  return *v;
}

Result<Value*> KernelBuilder::reduceRow(const RowReduction& r) {
  if (rowReducer_ && uniform_) {
    // The elements are computed inside the reducer's loop, where threads diverge.
    uniform_ = false;
    Result<Value*> v = rowReducer_(*this, r);
    uniform_ = true;
    return v;
  }
  Value* acc = accumulator(r.acc, r.init);
  // On cpu, a sum, max or min over several axes whose last is one to four vectors long (a
  // global average pool over a wide-row view: 56 of every 58 columns) keeps L partials in
  // lanes across the outer axes (element j of a row into lane j mod L, the row's last
  // n mod L elements into lanes 0 ..) and combines them once: LLVM's own vectorized
  // reduction of the inner loop ended every row with a horizontal sum and a serial chain
  // of the scalar remainder. EfficientNet-B0's 144-channel 56x56 SE pool 0.128 -> 0.036 ms.
  // Longer rows keep that form: its horizontal sum is rare there, and the lanes, whose
  // vectors only the SLP vectorizer finds, lost to it (exp + sum over rows of 1000: 0.085
  // -> 0.19 ms).
  const int64_t L = std::max<int64_t>(2, target().preferredVectorBits / 32);
  if (target().cpu && r.extents.size() >= 2 && r.extents.back().isStatic() &&
      r.extents.back().value() >= L && r.extents.back().value() <= 4 * L &&
      (r.fn == OpKind::Add || r.fn == OpKind::Max || r.fn == OpKind::Min)) {
    Value* lanes = mk(*body_, OpKind::Alloc, {}, Type::buffer(r.acc, {Dim(L)}, MemSpace::Private));
    Value* l = beginFor(cst(0), cst(L), cst(1));
    st(scst(r.acc, r.init), lanes, {l});
    endFor();
    std::vector<Value*> j;
    int64_t n = r.extents.back().value(), vec = n / L * L;
    auto add = [&](Value* lane, Value* at) -> Status {
      std::vector<Value*> ji = j;
      ji.push_back(at);
      KILN_TRY(Value * v, r.element(ji));
      st(compute(r.fn, {ld(lanes, {lane}), castTo(v, r.acc)}, r.acc), lanes, {lane});
      return ok();
    };
    // The loops over the outer axes are not vectorized (vectorize=0): with the lane loops
    // unrolled inside them, LLVM vectorized the innermost with a gather per lane; now its
    // SLP vectorizer makes the lanes vectors.
    for (size_t i = 0; i + 1 < r.extents.size(); ++i) {
      j.push_back(beginFor(cst(0), dim(r.extents[i]), cst(1)));
      scalarLoop();
    }
    Value* j0 = beginFor(cst(0), cst(vec), cst(L));
    l = beginFor(cst(0), cst(L), cst(1));
    KILN_CHECK(add(l, idx(OpKind::IAdd, j0, l)));
    endFor();
    endFor();
    if (vec < n) {
      l = beginFor(cst(0), cst(n - vec), cst(1));
      KILN_CHECK(add(l, idx(OpKind::IAdd, cst(vec), l)));
      endFor();
    }
    for (size_t i = 0; i < j.size(); ++i) endFor();
    l = beginFor(cst(0), cst(L), cst(1));
    accStore(acc, compute(r.fn, {accLoad(acc), ld(lanes, {l})}, r.acc));
    endFor();
    return accLoad(acc);
  }
  std::vector<Value*> j;
  for (const Dim& d : r.extents) j.push_back(beginFor(cst(0), dim(d), cst(1)));
  KILN_TRY(Value * v, r.element(j));
  accStore(acc, compute(r.fn, {accLoad(acc), castTo(v, r.acc)}, r.acc));
  for (size_t i = 0; i < j.size(); ++i) endFor();
  return accLoad(acc);
}

Result<Value*> KernelBuilder::reduce(const Op& op, const std::vector<Value*>& ix) {
  // With keepdims the reduced positions of `ix` are not read: they do not count.
  std::vector<Value*> used;
  std::vector<int64_t> axes = reducedAxes(op);
  bool keep = op.attrs().getInt("keepdims") != 0;
  for (size_t d = 0; d < ix.size(); ++d)
    if (!keep || !std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(d)))
      used.push_back(ix[d]);
  return hoisted(&op, used, [&] { return reduceAt(op, ix); });
}

Result<Value*> KernelBuilder::reduceAt(const Op& op, const std::vector<Value*>& ix) {
  const Value* x = op.operand(0);
  std::vector<int64_t> axes = reducedAxes(op);
  bool keep = op.attrs().getInt("keepdims") != 0;
  ElemType ae = accElem(x->type().elem());
  bool flt = isFloat(ae);
  ElemType xe = x->type().elem();
  double init = 0;
  OpKind fn = OpKind::Add;
  double inf = std::numeric_limits<double>::infinity();
  auto lowest = [&]() -> double {
    switch (xe) {
    case ElemType::I8: return INT8_MIN;
    case ElemType::I16: return INT16_MIN;
    case ElemType::I32: return INT32_MIN;
    case ElemType::I64: return static_cast<double>(INT64_MIN);
    default: return 0;
    }
  };
  auto highest = [&]() -> double {
    switch (xe) {
    case ElemType::I8: return INT8_MAX;
    case ElemType::I16: return INT16_MAX;
    case ElemType::I32: return INT32_MAX;
    case ElemType::I64: return 9.2233720368547748e18;
    case ElemType::U8: return 255;
    case ElemType::U16: return 65535;
    case ElemType::U32: return 4294967295.0;
    default: return 1;
    }
  };
  switch (op.kind()) {
  case OpKind::ReduceProd: init = 1, fn = OpKind::Mul; break;
  case OpKind::ReduceMax: init = flt ? -inf : lowest(), fn = OpKind::Max; break;
  case OpKind::ReduceMin: init = flt ? inf : highest(), fn = OpKind::Min; break;
  default: break;
  }
  const Shape& xs = x->type().shape();
  std::vector<Value*> xi(xs.size(), nullptr);
  size_t k = 0;
  RowReduction red{fn, ae, init, {}, nullptr};
  for (size_t d = 0; d < xs.size(); ++d) {
    bool reduced = std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(d));
    if (reduced) red.extents.push_back(xs[d]);
    if (!reduced)
      xi[d] = ix[k++];
    else if (keep)
      ++k;
  }
  // Adjacent static reduced axes (a global average pool's H and W) are one loop over their
  // product, its index split back per axis, when x is a buffer argument (the emitter merges
  // the split into one flat offset: KernelEmitter::address) or the last axis is shorter
  // than 16 (where a W loop of 7 or 14 iterations per H would not vectorize at all, and a
  // reshape's relinearization folds the split away: KernelBuilder::idx): one contiguous
  // run that vectorizes. Measured: EfficientNet-B0's 672x14x14 pool 0.09 -> 0.008 ms.
  Shape each = red.extents;
  bool adjacent =
      axes.size() >= 2 && axes.back() - axes.front() + 1 == static_cast<int64_t>(axes.size());
  for (const Dim& d : each) adjacent = adjacent && d.isStatic();
  adjacent = adjacent && (x->isArg() || each.back().value() < 16);
  int64_t n = 1;
  for (const Dim& d : each)
    adjacent = adjacent && !__builtin_mul_overflow(n, d.value(), &n); // fuzzed static dims
  if (adjacent) red.extents = Shape{Dim(n)};
  red.element = [&](const std::vector<Value*>& j) {
    std::vector<Value*> split = adjacent ? delinearize(j[0], each) : j;
    std::vector<Value*> at = xi;
    for (size_t d = 0, n = 0; d < at.size(); ++d)
      if (!at[d]) at[d] = split[n++];
    return emitAt(x, at);
  };
  KILN_TRY(Value * r, reduceRow(red));
  if (op.kind() == OpKind::ReduceMean) {
    Value* count = cst(1);
    for (int64_t a : axes) count = idx(OpKind::IMul, count, dim(xs[static_cast<size_t>(a)]));
    r = compute(OpKind::Div, {r, icastFromIndex(count, ae)}, ae);
  }
  return castTo(r, op.result(0)->type().elem());
}

Value* KernelBuilder::icastFromIndex(Value* i, ElemType e) {
  return mk(*body_, OpKind::ICast, {i}, Type::scalar(e));
}

Result<Value*> KernelBuilder::softmax(const Op& op, const std::vector<Value*>& ix) {
  const Value* x = op.operand(0);
  int64_t r = x->type().rank();
  int64_t axis = op.attrs().getInt("axis");
  axis = axis < 0 ? axis + r : axis;
  ElemType e = x->type().elem();
  auto at = [&](Value* j) {
    std::vector<Value*> xi = ix;
    xi[static_cast<size_t>(axis)] = j;
    return xi;
  };
  const Dim& nd = x->type().dim(axis);
  // The row's max and sum do not depend on the position along the axis.
  std::vector<Value*> row = at(cst(0));
  KILN_TRY(Value * m, hoisted(&op, row, [&]() -> Result<Value*> {
             return reduceRow({OpKind::Max,
                               ElemType::F64,
                               -std::numeric_limits<double>::infinity(),
                               {nd},
                               [&](const std::vector<Value*>& j) { return emitAt(x, at(j[0])); }});
           }));
  KILN_TRY(Value * s, hoisted(op.result(0), row, [&]() -> Result<Value*> {
             return reduceRow(
                 {OpKind::Add,
                  ElemType::F64,
                  0,
                  {nd},
                  [&](const std::vector<Value*>& j) -> Result<Value*> {
                    KILN_TRY(Value * xk, emitAt(x, at(j[0])));
                    return compute(
                        OpKind::Exp,
                        {compute(OpKind::Sub, {castTo(xk, ElemType::F64), m}, ElemType::F64)},
                        ElemType::F64);
                  }});
           }));
  KILN_TRY(Value * xi, emitAt(x, ix));
  Value* d = compute(OpKind::Sub, {castTo(xi, ElemType::F64), m}, ElemType::F64);
  Value* res =
      op.kind() == OpKind::Softmax
          ? compute(OpKind::Div, {compute(OpKind::Exp, {d}, ElemType::F64), s}, ElemType::F64)
          : compute(OpKind::Sub, {d, compute(OpKind::Log, {s}, ElemType::F64)}, ElemType::F64);
  return castTo(res, e);
}

// Sum of the elements before (exclusive) or up to this one along the axis, or from the
// end with reverse, in the order the reference adds them.
Result<Value*> KernelBuilder::cumsum(const Op& op, const std::vector<Value*>& ix) {
  const Value* x = op.operand(0);
  int64_t r = x->type().rank();
  int64_t axis = op.attrs().getInt("axis");
  auto a = static_cast<size_t>(axis < 0 ? axis + r : axis);
  bool exclusive = op.attrs().getInt("exclusive", 0) != 0;
  bool reverse = op.attrs().getInt("reverse", 0) != 0;
  ElemType e = x->type().elem();
  ElemType ae = accElem(e);
  Value* n = dim(x->type().dim(static_cast<int64_t>(a)));
  Value* acc = accumulator(ae, 0);
  // Steps 0 .. s (inclusive) or 0 .. s-1 (exclusive), s = this element's step.
  Value* stepOf = reverse ? idx(OpKind::ISub, idx(OpKind::ISub, n, cst(1)), ix[a]) : ix[a];
  Value* count = exclusive ? stepOf : idx(OpKind::IAdd, stepOf, cst(1));
  Value* st = beginFor(cst(0), count, cst(1));
  std::vector<Value*> xi = ix;
  xi[a] = reverse ? idx(OpKind::ISub, idx(OpKind::ISub, n, cst(1)), st) : st;
  KILN_TRY(Value * v, emitAt(x, xi));
  accStore(acc, compute(OpKind::Add, {accLoad(acc), castTo(v, ae)}, ae));
  endFor();
  return castTo(accLoad(acc), e);
}

// The first extreme along the axis (the last on ties with select_last_index); the first
// NaN wins — the reference's order of comparisons.
Result<Value*> KernelBuilder::argExtreme(const Op& op, const std::vector<Value*>& ix) {
  const Value* x = op.operand(0);
  int64_t r = x->type().rank();
  int64_t axis = op.attrs().getInt("axis");
  auto a = static_cast<size_t>(axis < 0 ? axis + r : axis);
  bool keep = op.attrs().getInt("keepdims", 1) != 0;
  bool last = op.attrs().getInt("select_last_index", 0) != 0;
  bool isMax = op.kind() == OpKind::ArgMax;
  ElemType ae = accElem(x->type().elem());
  bool flt = isFloat(ae);
  std::vector<Value*> xi;
  for (size_t d = 0, k = 0; d < static_cast<size_t>(r); ++d) {
    if (d == a) {
      xi.push_back(cst(0));
      if (keep) ++k;
    } else {
      xi.push_back(ix[k++]);
    }
  }
  KILN_TRY(Value * first, emitAt(x, xi));
  Value* best = accumulator(ae, 0);
  accStore(best, castTo(first, ae));
  Value* where = accumulator(ElemType::I64, 0);
  Value* j = beginFor(cst(1), dim(x->type().dim(static_cast<int64_t>(a))), cst(1));
  xi[a] = j;
  KILN_TRY(Value * yv, emitAt(x, xi));
  Value* y = castTo(yv, ae);
  Value* b = accLoad(best);
  ElemType i1 = ElemType::I1;
  Value* take = compute(isMax ? OpKind::Gt : OpKind::Lt, {y, b}, i1);
  if (last) take = compute(OpKind::Or, {take, compute(OpKind::Eq, {y, b}, i1)}, i1);
  if (flt) {
    take = compute(OpKind::Or, {take, compute(OpKind::IsNan, {y}, i1)}, i1);
    take = compute(OpKind::And, {take, compute(OpKind::Not, {compute(OpKind::IsNan, {b}, i1)}, i1)},
                   i1);
  }
  accStore(best, compute(OpKind::Select, {take, y, b}, ae));
  Value* jv = mk(*body_, OpKind::ICast, {j}, Type::scalar(ElemType::I64));
  accStore(where, compute(OpKind::Select, {take, jv, accLoad(where)}, ElemType::I64));
  endFor();
  return accLoad(where);
}
} // namespace kiln
