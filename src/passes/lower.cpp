// lower: tensor-level kernels -> kernel IR, plus the final resource check.
//
// Requires:    fuse (dispatches with tensor-level kernels); tile and pad are optional (their
//              decisions are read from the dispatch: tile, workgroup, guarded).
// Guarantees:  every kernel whose ops `lower` supports (codegen.h) is kernel IR: global
//              buffer arguments (inputs, then outputs), a uniform prologue, kernel_config,
//              one thread's program; no kernel exceeds the target's shared memory or
//              workgroup limits (a violation is an error naming the kernel, the bytes and
//              the limit); unsupported kernels stay tensor-level and run on the host side.
// Invalidates: the kernels' tensor-level bodies.
//
//   func @k(%a: tensor<{n}xf32>) -> (tensor<{n}xf32>)    func @k(%a: buffer<{n}xf32>, %o:
//   buffer<{n}xf32>)
//     %0 = exp %a                                  =>    ... %i = (wg * 64 + lid); %m = icmp lt %i,
//     n return %0                                          %v = masked_load %a, %m, %i; exp;
//     masked_store
//
// Each output element is computed by walking the tensor-level body backwards from it
// (emitAt): views become index arithmetic on the loads (never copies), elementwise ops
// become `compute`, reductions, softmax and naive matmuls become loops with a private f64 /
// i64 accumulator, exactly like the reference interpreter's wide accumulation. A matmul
// anchor with a pointwise epilogue uses workgroup tiles with its operand tiles staged in
// shared memory (barriers between the load and compute phases). CPU plans (tile.cpp, one
// thread per workgroup) get CPU-shaped code instead: a register-blocked matmul micro-kernel
// with f32 accumulation (TargetDesc::wideAccumulation) and contiguous row loops with row
// reductions hoisted before the column loop; both use exact loop bounds, never masks.
// A dispatch marked `in_place` whose kernel is one scatter_nd (a donated argument, see
// passes/donate.h) writes only the updates: its output buffer already holds the data.
#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "ir/builder.h"
#include "ir/printer.h"
#include "passes/codegen.h"
#include "passes/passes.h"

namespace kiln {

namespace {

ElemType accElem(ElemType e) { return isFloat(e) ? ElemType::F64 : ElemType::I64; }

// A matmul's accumulator: wide (f64 / i64) like the reference, or f32 for f32/f16/bf16
// results on targets without wideAccumulation (cpu).
ElemType matmulAccElem(ElemType e, const TargetDesc& t) {
  if (!t.wideAccumulation && isFloat(e) && e != ElemType::F64) return ElemType::F32;
  return accElem(e);
}

class Emitter {
public:
  Emitter(const Func& src, const KernelShape& shape, const TilePlan& plan, bool guarded,
          const TargetDesc& target, bool scatterInPlace = false)
      : src_(src), shape_(shape), plan_(plan), guarded_(guarded), target_(target),
        scatterInPlace_(scatterInPlace) {}

  Result<std::unique_ptr<Func>> run() {
    k_ = std::make_unique<Func>(src_.name(), src_.loc());
    const Op* ret = src_.terminator();
    for (size_t i = 0; i < src_.numArgs(); ++i) {
      const Type& t = src_.arg(i)->type();
      buf_[src_.arg(i)] = k_->addArg(Type::buffer(t.elem(), t.shape()));
    }
    for (const Value* v : ret->operands())
      outs_.push_back(k_->addArg(Type::buffer(v->type().elem(), v->type().shape())));
    body_ = std::make_unique<Builder>(k_.get());
    body_->setLoc(src_.loc());
    Value* one = nullptr;
    {
      Builder tmp(k_.get());
      tmp.setLoc(src_.loc());
      Attrs a;
      a.set("value", int64_t(1));
      one = tmp.createUnchecked(OpKind::IConst, {}, a, {Type::index()})->result();
      Attrs c;
      c.set("workgroup", plan_.workgroup);
      config_ = tmp.createUnchecked(OpKind::KernelConfig, {one, one, one}, c, {});
    }
    pro_ = std::make_unique<Builder>(k_.get(), config_);
    pro_->setLoc(src_.loc());
    consts_[1] = one;
    if (scatterInPlace_) {
      KILN_CHECK(emitScatterInPlace(*ret));
    } else if (shape_.strategy == Strategy::Matmul) {
      KILN_CHECK(emitMatmul(*ret));
    } else {
      KILN_CHECK(emitPointwise(*ret));
    }
    body_->createUnchecked(OpKind::Return, {}, {}, {});
    return std::move(k_);
  }

private:
  // ---- op construction ---------------------------------------------------------------------

  Value* mk(Builder& b, OpKind k, std::vector<Value*> ops, Type t, Attrs a = {}) {
    return b.createUnchecked(k, ops, std::move(a), {std::move(t)})->result();
  }
  Value* idx(OpKind k, Value* a, Value* b, Builder* where = nullptr) {
    return mk(where ? *where : *body_, k, {a, b}, Type::index());
  }
  Value* cst(int64_t v) {
    auto it = consts_.find(v);
    if (it != consts_.end()) return it->second;
    Attrs a;
    a.set("value", v);
    consts_[v] = mk(*pro_, OpKind::IConst, {}, Type::index(), a);
    invariant_.insert(consts_[v]);
    return consts_[v];
  }
  Value* scst(ElemType e, double v) {
    Attrs a;
    a.set("value", v);
    return mk(*body_, OpKind::SConst, {}, Type::scalar(e), a);
  }
  Value* cmp(const char* pred, Value* a, Value* b) {
    Attrs at;
    at.set("pred", std::string(pred));
    return mk(*body_, OpKind::ICmp, {a, b}, Type::scalar(ElemType::I1), at);
  }
  Value* compute(const std::string& fn, std::vector<Value*> ops, ElemType result,
                 const Attrs* extra = nullptr) {
    Attrs a;
    if (extra)
      for (const auto& [n, v] : extra->entries()) a.set(n, v);
    a.set("fn", fn);
    return mk(*body_, OpKind::Compute, std::move(ops), Type::scalar(result), a);
  }
  Value* castTo(Value* v, ElemType e) {
    if (v->type().elem() == e) return v;
    Attrs a;
    a.set("to", e);
    return compute("cast", {v}, e, &a);
  }
  Value* andMask(Value* a, Value* b) {
    if (!a) return b;
    if (!b) return a;
    return compute("and", {a, b}, ElemType::I1);
  }

  // A dim's value, computed once in the prologue.
  Value* dim(const Dim& d) {
    if (d.isStatic()) return cst(d.value());
    auto it = dims_.find(d.expr());
    if (it != dims_.end()) return it->second;
    SymLowering l;
    l.constant = [&](int64_t c) -> void* { return cst(c); };
    l.symbol = [&](const std::string& name) -> void* {
      auto s = syms_.find(name);
      if (s != syms_.end()) return s->second;
      Attrs a;
      a.set("name", name);
      return syms_[name] = mk(*pro_, OpKind::SymbolValue, {}, Type::index(), a);
    };
    l.binary = [&](std::string_view op, void* x, void* y) -> void* {
      static const std::map<std::string_view, OpKind> kinds = {
          {"add", OpKind::IAdd},         {"mul", OpKind::IMul}, {"floordiv", OpKind::IFloorDiv},
          {"ceildiv", OpKind::ICeilDiv}, {"mod", OpKind::IMod}, {"min", OpKind::IMin},
          {"max", OpKind::IMax}};
      return idx(kinds.at(op), static_cast<Value*>(x), static_cast<Value*>(y), pro_.get());
    };
    dims_[d.expr()] = static_cast<Value*>(lowerSymExpr(d.expr(), l));
    invariant_.insert(dims_[d.expr()]);
    return dims_[d.expr()];
  }
  Value* product(const Shape& s, size_t from, size_t to) {
    Value* p = cst(1);
    for (size_t i = from; i < to; ++i)
      p = s[i].isStatic() && s[i].value() == 1 ? p : idx(OpKind::IMul, p, dim(s[i]), pro_.get());
    return p;
  }

  // ---- loops -------------------------------------------------------------------------------

  Value* beginFor(Value* lo, Value* hi, Value* step) {
    return mk(*body_, OpKind::For, {lo, hi, step}, Type::index());
  }
  void endFor() { body_->createUnchecked(OpKind::EndFor, {}, {}, {}); }

  // C-order multi-index of flat `e` in `s`.
  std::vector<Value*> delinearize(Value* e, const Shape& s) {
    std::vector<Value*> out(s.size());
    for (size_t i = s.size(); i-- > 0;) {
      if (i == 0) {
        out[i] = e;
        break;
      }
      Value* d = dim(s[i]);
      out[i] = idx(OpKind::IMod, e, d);
      e = idx(OpKind::IFloorDiv, e, d);
    }
    return out;
  }
  Value* linearize(const std::vector<Value*>& ix, const Shape& s) {
    Value* e = cst(0);
    for (size_t i = 0; i < s.size(); ++i)
      e = idx(OpKind::IAdd, idx(OpKind::IMul, e, dim(s[i])), ix[i]);
    return e;
  }

  // Index into an operand of shape `in` broadcast (numpy) to an index of rank out.size().
  std::vector<Value*> bcast(const std::vector<Value*>& out, const Shape& in) {
    std::vector<Value*> r;
    size_t off = out.size() - in.size();
    for (size_t i = 0; i < in.size(); ++i)
      r.push_back(in[i].isStatic() && in[i].value() == 1 ? cst(0) : out[off + i]);
    return r;
  }

  // ---- values at an index ------------------------------------------------------------------

  Result<Value*> load(const Value* arg, const std::vector<Value*>& ix) {
    std::vector<Value*> ops{buf_.at(arg)};
    ElemType e = arg->type().elem();
    if (mask_) {
      ops.push_back(mask_);
      ops.insert(ops.end(), ix.begin(), ix.end());
      Attrs a;
      a.set("other", 0.0);
      return mk(*body_, OpKind::MaskedLoad, ops, Type::scalar(e), a);
    }
    ops.insert(ops.end(), ix.begin(), ix.end());
    return mk(*body_, OpKind::Load, ops, Type::scalar(e));
  }

  Value* normIndex(Value* i, const Dim& d) {
    Value* neg = cmp("lt", i, cst(0));
    return mk(*body_, OpKind::SSelect, {neg, idx(OpKind::IAdd, i, dim(d)), i}, Type::index());
  }

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

  // A private one-element accumulator initialised to `init`.
  Value* accumulator(ElemType e, double init) {
    Value* acc = mk(*body_, OpKind::Alloc, {}, Type::buffer(e, {Dim(1)}, MemSpace::Private));
    body_->createUnchecked(OpKind::Store, {scst(e, init), acc, cst(0)}, {}, {});
    return acc;
  }
  Value* accLoad(Value* acc) {
    return mk(*body_, OpKind::Load, {acc, cst(0)}, Type::scalar(acc->type().elem()));
  }
  void accStore(Value* acc, Value* v) {
    body_->createUnchecked(OpKind::Store, {v, acc, cst(0)}, {}, {});
  }

  // ---- cpu rows: reductions hoisted out of the column loop ----------------------------------

  // True when every index is the same for all columns of the current row (a row index, a
  // constant or a prologue value), so a value computed from them can sit before the column
  // loop.
  bool rowInvariant(const std::vector<Value*>& ix) const {
    if (!colLoop_ || mask_) return false; // a mask is computed inside the column loop
    for (Value* v : ix)
      if (!invariant_.count(v)) return false;
    return true;
  }

  // Emits `f` before the column loop when `ix` (minus `except`) is row-invariant, memoized
  // per (op, indices); otherwise at the current point.
  Result<Value*> hoisted(const void* what, const std::vector<Value*>& ix,
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
    Result<Value*> v = f();
    colLoop_ = loop;
    std::swap(body_, pre);
    k_->erase(marker);
    if (!v.ok()) return v;
    hoistMemo_[key] = *v;
    invariant_.insert(*v);
    return *v;
  }

  Result<Value*> reduce(const Op& op, const std::vector<Value*>& ix) {
    // With keepdims the reduced positions of `ix` are not read: they do not count.
    std::vector<Value*> used;
    std::vector<int64_t> axes = reducedAxes(op);
    bool keep = op.attrs().getInt("keepdims") != 0;
    for (size_t d = 0; d < ix.size(); ++d)
      if (!keep || !std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(d)))
        used.push_back(ix[d]);
    return hoisted(&op, used, [&] { return reduceAt(op, ix); });
  }

  Result<Value*> reduceAt(const Op& op, const std::vector<Value*>& ix) {
    const Value* x = op.operand(0);
    std::vector<int64_t> axes = reducedAxes(op);
    bool keep = op.attrs().getInt("keepdims") != 0;
    ElemType ae = accElem(x->type().elem());
    bool flt = isFloat(ae);
    ElemType xe = x->type().elem();
    double init = 0;
    std::string fn = "add";
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
      default: return 1;
      }
    };
    switch (op.kind()) {
    case OpKind::ReduceProd: init = 1, fn = "mul"; break;
    case OpKind::ReduceMax: init = flt ? -inf : lowest(), fn = "max"; break;
    case OpKind::ReduceMin: init = flt ? inf : highest(), fn = "min"; break;
    default: break;
    }
    Value* acc = accumulator(ae, init);
    const Shape& xs = x->type().shape();
    std::vector<Value*> xi(xs.size(), nullptr);
    size_t k = 0;
    for (size_t d = 0; d < xs.size(); ++d) {
      bool reduced = std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(d));
      if (!reduced)
        xi[d] = ix[k++];
      else if (keep)
        ++k;
    }
    for (size_t d = 0; d < xs.size(); ++d)
      if (!xi[d]) xi[d] = beginFor(cst(0), dim(xs[d]), cst(1));
    KILN_TRY(Value * v, emitAt(x, xi));
    accStore(acc, compute(fn, {accLoad(acc), castTo(v, ae)}, ae));
    for (size_t i = 0; i < axes.size(); ++i) endFor();
    Value* r = accLoad(acc);
    if (op.kind() == OpKind::ReduceMean) {
      Value* count = cst(1);
      for (int64_t a : axes) count = idx(OpKind::IMul, count, dim(xs[static_cast<size_t>(a)]));
      r = compute("div", {r, icastFromIndex(count, ae)}, ae);
    }
    return castTo(r, op.result(0)->type().elem());
  }

  Value* icastFromIndex(Value* i, ElemType e) {
    return mk(*body_, OpKind::ICast, {i}, Type::scalar(e));
  }

  Result<Value*> softmax(const Op& op, const std::vector<Value*>& ix) {
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
    Value* n = dim(x->type().dim(axis));
    // The row's max and sum do not depend on the position along the axis.
    std::vector<Value*> row = at(cst(0));
    KILN_TRY(
        Value * m, hoisted(&op, row, [&]() -> Result<Value*> {
          Value* mx = accumulator(ElemType::F64, -std::numeric_limits<double>::infinity());
          Value* j = beginFor(cst(0), n, cst(1));
          KILN_TRY(Value * xj, emitAt(x, at(j)));
          accStore(mx, compute("max", {accLoad(mx), castTo(xj, ElemType::F64)}, ElemType::F64));
          endFor();
          return accLoad(mx);
        }));
    KILN_TRY(Value * s, hoisted(op.result(0), row, [&]() -> Result<Value*> {
               Value* sum = accumulator(ElemType::F64, 0);
               Value* j = beginFor(cst(0), n, cst(1));
               KILN_TRY(Value * xk, emitAt(x, at(j)));
               Value* ex =
                   compute("exp", {compute("sub", {castTo(xk, ElemType::F64), m}, ElemType::F64)},
                           ElemType::F64);
               accStore(sum, compute("add", {accLoad(sum), ex}, ElemType::F64));
               endFor();
               return accLoad(sum);
             }));
    KILN_TRY(Value * xi, emitAt(x, ix));
    Value* d = compute("sub", {castTo(xi, ElemType::F64), m}, ElemType::F64);
    Value* res = op.kind() == OpKind::Softmax
                     ? compute("div", {compute("exp", {d}, ElemType::F64), s}, ElemType::F64)
                     : compute("sub", {d, compute("log", {s}, ElemType::F64)}, ElemType::F64);
    return castTo(res, e);
  }

  // Index lists of a matmul's operands for output index `ix` and contraction index `k`.
  std::pair<std::vector<Value*>, std::vector<Value*>>
  matmulIndices(const Op& op, const std::vector<Value*>& ix, Value* k) {
    const Shape& as = op.operand(0)->type().shape();
    const Shape& bs = op.operand(1)->type().shape();
    size_t ro = ix.size();
    std::vector<Value*> ai, bi;
    if (as.size() == 1) {
      ai = {k};
    } else {
      size_t nb = as.size() - 2;
      std::vector<Value*> batch(ix.begin(),
                                ix.begin() + static_cast<long>(ro - (bs.size() == 1 ? 1 : 2)));
      Shape ab(as.begin(), as.begin() + static_cast<long>(nb));
      ai = bcast(batch, ab);
      ai.push_back(ix[ro - (bs.size() == 1 ? 1 : 2)]);
      ai.push_back(k);
    }
    if (bs.size() == 1) {
      bi = {k};
    } else {
      size_t nb = bs.size() - 2;
      std::vector<Value*> batch(ix.begin(),
                                ix.begin() + static_cast<long>(ro - (as.size() == 1 ? 1 : 2)));
      Shape bb(bs.begin(), bs.begin() + static_cast<long>(nb));
      bi = bcast(batch, bb);
      bi.push_back(k);
      bi.push_back(ix[ro - 1]);
    }
    return {ai, bi};
  }

  Result<Value*> matmulNaive(const Op& op, const std::vector<Value*>& ix) {
    ElemType ae = matmulAccElem(op.result(0)->type().elem(), target_);
    Value* acc = accumulator(ae, 0);
    const Type& at = op.operand(0)->type();
    Value* k = beginFor(cst(0), dim(at.dim(at.rank() - 1)), cst(1));
    auto [ai, bi] = matmulIndices(op, ix, k);
    KILN_TRY(Value * a, emitAt(op.operand(0), ai));
    KILN_TRY(Value * b, emitAt(op.operand(1), bi));
    Value* p = compute("mul", {castTo(a, ae), castTo(b, ae)}, ae);
    accStore(acc, compute("add", {accLoad(acc), p}, ae));
    endFor();
    return castTo(accLoad(acc), op.result(0)->type().elem());
  }

  // Each operand's value read under "index in its range" (masked), then selected.
  Result<Value*> concat(const Op& op, const std::vector<Value*>& ix) {
    int64_t r = op.result(0)->type().rank();
    int64_t axis = op.attrs().getInt("axis");
    auto a = static_cast<size_t>(axis < 0 ? axis + r : axis);
    ElemType e = op.result(0)->type().elem();
    Value* outer = mask_;
    Value* offset = cst(0);
    std::vector<std::pair<Value*, Value*>> parts; // (in range, value)
    for (const Value* x : op.operands()) {
      Value* end = idx(OpKind::IAdd, offset, dim(x->type().dim(static_cast<int64_t>(a))));
      Value* in = andMask(cmp("ge", ix[a], offset), cmp("lt", ix[a], end));
      std::vector<Value*> xi = ix;
      xi[a] = idx(OpKind::ISub, ix[a], offset);
      mask_ = andMask(outer, in);
      KILN_TRY(Value * v, emitAt(x, xi));
      parts.emplace_back(in, v);
      offset = end;
    }
    mask_ = outer;
    Value* res = parts.back().second;
    for (size_t k = parts.size() - 1; k-- > 0;)
      res = mk(*body_, OpKind::SSelect, {parts[k].first, parts[k].second, res}, Type::scalar(e));
    return res;
  }

  Result<Value*> pad(const Op& op, const std::vector<Value*>& ix) {
    const Value* x = op.operand(0);
    std::vector<int64_t> pads = op.attrs().getInts("pads");
    std::string mode = op.attrs().getStr("mode", "constant");
    ElemType e = x->type().elem();
    size_t r = ix.size();
    std::vector<Value*> xi(r);
    Value* inside = nullptr;
    for (size_t d = 0; d < r; ++d) {
      Value* p = idx(OpKind::ISub, ix[d], cst(pads[d]));
      const Dim& nd = x->type().dim(static_cast<int64_t>(d));
      Value* n = dim(nd);
      if (mode == "constant") {
        if (pads[d] != 0 || pads[d + r] != 0)
          inside = andMask(inside, andMask(cmp("ge", p, cst(0)), cmp("lt", p, n)));
      } else if (mode == "edge" || (nd.isStatic() && nd.value() == 1)) {
        p = idx(OpKind::IMax, idx(OpKind::IMin, p, idx(OpKind::ISub, n, cst(1))), cst(0));
      } else if (nd.isStatic()) {
        int64_t period = 2 * (nd.value() - 1);
        p = idx(OpKind::IMod, p, cst(period));
        Value* high = cmp("ge", p, n);
        p = mk(*body_, OpKind::SSelect, {high, idx(OpKind::ISub, cst(period), p), p},
               Type::index());
      }
      xi[d] = p;
    }
    if (!inside) return emitAt(x, xi);
    Value* outer = mask_;
    mask_ = andMask(outer, inside);
    KILN_TRY(Value * v, emitAt(x, xi));
    mask_ = outer;
    return mk(*body_, OpKind::SSelect, {inside, v, scst(e, op.attrs().getFloat("value", 0))},
              Type::scalar(e));
  }

  // Sum of the elements before (exclusive) or up to this one along the axis, or from the
  // end with reverse, in the order the reference adds them.
  Result<Value*> cumsum(const Op& op, const std::vector<Value*>& ix) {
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
    accStore(acc, compute("add", {accLoad(acc), castTo(v, ae)}, ae));
    endFor();
    return castTo(accLoad(acc), e);
  }

  // Convolution and pooling at one output position [n, c, o...]: loops over the window in
  // the reference's order (channels of the group, then window positions in C order);
  // positions in the padding are skipped (max: never win; avg: counted only with
  // count_include_pad).
  Result<Value*> window(const Op& op, const std::vector<Value*>& ix) {
    const Value* x = op.operand(0);
    std::vector<int64_t> xs = x->type().staticShape();
    size_t sp = xs.size() - 2;
    bool conv = op.kind() == OpKind::Conv;
    bool isMax = op.kind() == OpKind::MaxPool;
    std::vector<int64_t> kernel = op.attrs().getInts("kernel");
    if (conv) {
      std::vector<int64_t> ws = op.operand(1)->type().staticShape();
      kernel.assign(ws.begin() + 2, ws.end());
    }
    auto list = [&](const char* name, size_t n, int64_t def) {
      std::vector<int64_t> v = op.attrs().getInts(name);
      if (v.size() != n) v.assign(n, def);
      return v;
    };
    std::vector<int64_t> strides = list("strides", sp, 1), pads = list("pads", 2 * sp, 0),
                         dil = list("dilations", sp, 1);
    ElemType e = op.result(0)->type().elem();
    ElemType ae = accElem(e);
    bool flt = isFloat(ae);
    Value* outer = mask_;
    Value* acc;
    Value* real = nullptr;
    Value* padded = nullptr;
    Value* ch = ix[1];
    if (conv) {
      acc = accumulator(ae, 0);
      if (op.numOperands() == 3) {
        KILN_TRY(Value * bias, emitAt(op.operand(2), {ix[1]}));
        accStore(acc, castTo(bias, ae));
      }
    } else if (isMax) {
      double lowest = 0;
      switch (e) {
      case ElemType::I8: lowest = INT8_MIN; break;
      case ElemType::I16: lowest = INT16_MIN; break;
      case ElemType::I32: lowest = INT32_MIN; break;
      case ElemType::I64: lowest = static_cast<double>(INT64_MIN); break;
      default: break;
      }
      acc = accumulator(ae, flt ? -std::numeric_limits<double>::infinity() : lowest);
    } else {
      acc = accumulator(ae, 0);
      real = accumulator(ElemType::F64, 0);
      padded = accumulator(ElemType::F64, 0);
    }
    int64_t cg = 1, mg = 1;
    size_t loops = 0;
    Value* cc = nullptr;
    if (conv) {
      int64_t group = op.attrs().getInt("group", 1);
      cg = xs[1] / group;
      mg = op.operand(1)->type().staticShape()[0] / group;
      cc = beginFor(cst(0), cst(cg), cst(1));
      ++loops;
      ch =
          idx(OpKind::IAdd, idx(OpKind::IMul, idx(OpKind::IFloorDiv, ix[1], cst(mg)), cst(cg)), cc);
    }
    std::vector<Value*> xi{ix[0], ch}, wi;
    if (conv) wi = {ix[1], cc};
    Value* inside = nullptr;
    Value* insidePadded = nullptr;
    for (size_t d = 0; d < sp; ++d) {
      Value* k = beginFor(cst(0), cst(kernel[d]), cst(1));
      ++loops;
      Value* p = idx(OpKind::IAdd,
                     idx(OpKind::ISub, idx(OpKind::IMul, ix[2 + d], cst(strides[d])), cst(pads[d])),
                     idx(OpKind::IMul, k, cst(dil[d])));
      inside = andMask(inside, andMask(cmp("ge", p, cst(0)), cmp("lt", p, cst(xs[2 + d]))));
      if (padded)
        insidePadded = andMask(insidePadded, andMask(cmp("ge", p, cst(-pads[d])),
                                                     cmp("lt", p, cst(xs[2 + d] + pads[sp + d]))));
      xi.push_back(p);
      if (conv) wi.push_back(k);
    }
    mask_ = andMask(outer, inside);
    KILN_TRY(Value * xv, emitAt(x, xi));
    mask_ = outer;
    Value* v = castTo(xv, ae);
    Value* old = accLoad(acc);
    Value* next;
    if (conv) {
      KILN_TRY(Value * wv, emitAt(op.operand(1), wi));
      next = compute("add", {old, compute("mul", {v, castTo(wv, ae)}, ae)}, ae);
    } else {
      next = compute(isMax ? "max" : "add", {old, v}, ae);
    }
    accStore(acc, compute("select", {inside, next, old}, ae));
    if (real) {
      Value* one = scst(ElemType::F64, 1);
      Value* r0 = accLoad(real);
      accStore(real, compute("select", {inside, compute("add", {r0, one}, ElemType::F64), r0},
                             ElemType::F64));
      Value* p0 = accLoad(padded);
      accStore(padded,
               compute("select", {insidePadded, compute("add", {p0, one}, ElemType::F64), p0},
                       ElemType::F64));
    }
    for (size_t i = 0; i < loops; ++i) endFor();
    Value* res = accLoad(acc);
    if (real) {
      bool includePad = op.attrs().getInt("count_include_pad", 0) != 0;
      res = compute("div", {res, accLoad(includePad ? padded : real)}, ae);
    }
    return castTo(res, e);
  }

  // The first extreme along the axis (the last on ties with select_last_index); the first
  // NaN wins — the reference's order of comparisons.
  Result<Value*> argExtreme(const Op& op, const std::vector<Value*>& ix) {
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
    Value* take = compute(isMax ? "gt" : "lt", {y, b}, i1);
    if (last) take = compute("or", {take, compute("eq", {y, b}, i1)}, i1);
    if (flt) {
      take = compute("or", {take, compute("isnan", {y}, i1)}, i1);
      take = compute("and", {take, compute("not", {compute("isnan", {b}, i1)}, i1)}, i1);
    }
    accStore(best, compute("select", {take, y, b}, ae));
    Value* jv = mk(*body_, OpKind::ICast, {j}, Type::scalar(ElemType::I64));
    accStore(where, compute("select", {take, jv, accLoad(where)}, ElemType::I64));
    endFor();
    return accLoad(where);
  }

  Result<Value*> emitAt(const Value* v, const std::vector<Value*>& ix) {
    auto sub = subst_.find(v);
    if (sub != subst_.end()) return sub->second;
    if (v->isArg()) return load(v, ix);
    const Op& op = *v->def();
    ElemType re = v->type().elem();
    if (op.has(kElementwise)) {
      std::vector<Value*> args;
      for (const Value* o : op.operands()) {
        KILN_TRY(Value * a, emitAt(o, bcast(ix, o->type().shape())));
        args.push_back(a);
      }
      Attrs extra = op.attrs();
      return compute(std::string(op.name()), args, re, &extra);
    }
    const Value* x = op.numOperands() ? op.operand(0) : nullptr;
    switch (op.kind()) {
    case OpKind::Broadcast: return emitAt(x, bcast(ix, x->type().shape()));
    case OpKind::Reshape:
      return emitAt(x, delinearize(linearize(ix, v->type().shape()), x->type().shape()));
    case OpKind::Transpose: {
      std::vector<int64_t> perm = op.attrs().getInts("perm");
      std::vector<Value*> xi(ix.size());
      for (size_t i = 0; i < perm.size(); ++i) xi[static_cast<size_t>(perm[i])] = ix[i];
      return emitAt(x, xi);
    }
    case OpKind::Slice: {
      std::vector<Value*> xi = ix;
      std::vector<int64_t> starts = op.attrs().getInts("starts"), axes = op.attrs().getInts("axes"),
                           steps = op.attrs().getInts("steps");
      for (size_t i = 0; i < axes.size(); ++i) {
        int64_t a = axes[i] < 0 ? axes[i] + x->type().rank() : axes[i];
        int64_t st = i < steps.size() ? steps[i] : 1;
        int64_t s0 = starts[i];
        Value* d = dim(x->type().dim(a));
        Value* start;
        if (st > 0)
          start = s0 < 0 ? idx(OpKind::IMax, idx(OpKind::IAdd, d, cst(s0)), cst(0))
                         : idx(OpKind::IMin, cst(s0), d);
        else
          start = s0 < 0 ? idx(OpKind::IMax, idx(OpKind::IAdd, d, cst(s0)), cst(-1))
                         : idx(OpKind::IMin, cst(s0), idx(OpKind::ISub, d, cst(1)));
        auto ua = static_cast<size_t>(a);
        xi[ua] = idx(OpKind::IAdd, start, idx(OpKind::IMul, ix[ua], cst(st)));
      }
      return emitAt(x, xi);
    }
    case OpKind::Gather: {
      const Value* ind = op.operand(1);
      int64_t axis = op.attrs().getInt("axis");
      axis = axis < 0 ? axis + x->type().rank() : axis;
      auto ua = static_cast<size_t>(axis);
      auto ri = static_cast<size_t>(ind->type().rank());
      std::vector<Value*> ii(ix.begin() + static_cast<long>(ua),
                             ix.begin() + static_cast<long>(ua + ri));
      KILN_TRY(Value * iv, emitAt(ind, ii));
      Value* j = normIndex(mk(*body_, OpKind::ICast, {castTo(iv, ElemType::I64)}, Type::index()),
                           x->type().dim(axis));
      std::vector<Value*> xi(ix.begin(), ix.begin() + static_cast<long>(ua));
      xi.push_back(j);
      xi.insert(xi.end(), ix.begin() + static_cast<long>(ua + ri), ix.end());
      return emitAt(x, xi);
    }
    case OpKind::GatherElements: {
      int64_t axis = op.attrs().getInt("axis");
      axis = axis < 0 ? axis + x->type().rank() : axis;
      KILN_TRY(Value * iv, emitAt(op.operand(1), ix));
      Value* j = normIndex(mk(*body_, OpKind::ICast, {castTo(iv, ElemType::I64)}, Type::index()),
                           x->type().dim(axis));
      std::vector<Value*> xi = ix;
      xi[static_cast<size_t>(axis)] = j;
      return emitAt(x, xi);
    }
    case OpKind::Triu:
    case OpKind::Tril: {
      KILN_TRY(Value * xv, emitAt(x, ix));
      size_t r = ix.size();
      Value* diag = idx(OpKind::IAdd, ix[r - 2], cst(op.attrs().getInt("k")));
      Value* keep =
          op.kind() == OpKind::Triu ? cmp("ge", ix[r - 1], diag) : cmp("le", ix[r - 1], diag);
      return mk(*body_, OpKind::SSelect, {keep, xv, scst(re, 0)}, Type::scalar(re));
    }
    case OpKind::ReduceSum:
    case OpKind::ReduceMean:
    case OpKind::ReduceMax:
    case OpKind::ReduceMin:
    case OpKind::ReduceProd: return reduce(op, ix);
    case OpKind::Softmax:
    case OpKind::LogSoftmax: return softmax(op, ix);
    case OpKind::Matmul: return matmulNaive(op, ix);
    case OpKind::Concat: return concat(op, ix);
    case OpKind::Pad: return pad(op, ix);
    case OpKind::Cumsum: return cumsum(op, ix);
    case OpKind::ArgMax:
    case OpKind::ArgMin: return argExtreme(op, ix);
    case OpKind::Conv:
    case OpKind::MaxPool:
    case OpKind::AvgPool: return window(op, ix);
    default: break;
    }
    return error(op.loc(), "lower: internal: no lowering for '" + std::string(op.name()) + "'");
  }

  // ---- strategies --------------------------------------------------------------------------

  Status storeOutputs(const Op& ret, const std::vector<Value*>& ix) {
    for (size_t o = 0; o < ret.numOperands(); ++o) {
      KILN_TRY(Value * v, emitAt(ret.operand(o), ix));
      std::vector<Value*> ops;
      if (mask_) ops.push_back(mask_);
      ops.push_back(v);
      ops.push_back(outs_[o]);
      ops.insert(ops.end(), ix.begin(), ix.end());
      body_->createUnchecked(mask_ ? OpKind::MaskedStore : OpKind::Store, ops, {}, {});
    }
    return ok();
  }

  const SymbolTable& symbols() const {
    static const SymbolTable none;
    return src_.parent() ? src_.parent()->symbols() : none;
  }

  // cpu rows: workgroup (x, y) takes columns [x*C, min(x*C + C, L)) of rows
  // [y*R, min(y*R + R, rows)); the column loop runs along the contiguous innermost dim, with
  // exact bounds (no masks), and row reductions are hoisted before it.
  Status emitRows(const Op& ret) {
    const Shape& s = shape_.outShape;
    int64_t R = plan_.tile[0], C = plan_.tile[1];
    Shape outer = s.empty() ? Shape{} : Shape(s.begin(), s.end() - 1);
    Value* rows = product(outer, 0, outer.size());
    Value* L = s.empty() ? cst(1) : dim(s.back());
    config_->setOperand(0, idx(OpKind::ICeilDiv, L, cst(C), pro_.get()));
    config_->setOperand(1, idx(OpKind::ICeilDiv, rows, cst(R), pro_.get()));
    Value* wx = mk(*body_, OpKind::WorkgroupId, {}, Type::index(), axisAttr(0));
    Value* wy = mk(*body_, OpKind::WorkgroupId, {}, Type::index(), axisAttr(1));
    Value* r0 = idx(OpKind::IMul, wy, cst(R));
    Value* c0 = idx(OpKind::IMul, wx, cst(C));
    Value* rEnd = idx(OpKind::IMin, idx(OpKind::IAdd, r0, cst(R)), rows);
    Value* cEnd = idx(OpKind::IMin, idx(OpKind::IAdd, c0, cst(C)), L);
    invariant_.insert(c0);
    invariant_.insert(cEnd);
    Value* row = beginFor(r0, rEnd, cst(1));
    std::vector<Value*> ix = outer.empty() ? std::vector<Value*>{} : delinearize(row, outer);
    for (Value* v : ix) invariant_.insert(v);
    Value* c = beginFor(c0, cEnd, cst(1));
    colLoop_ = c->def();
    if (!s.empty()) ix.push_back(c);
    KILN_CHECK(storeOutputs(ret, ix));
    endFor();
    colLoop_ = nullptr;
    endFor();
    return ok();
  }

  // scatter_nd over its own data (the output buffer is the data's): each thread owns
  // elements of the update slice and walks the index tuples in order, so duplicate indices
  // apply in order as in the interpreter. Workgroup x takes slice elements
  // [x*C, min(x*C + C, S)), its threads every workgroup-size-th of them.
  Status emitScatterInPlace(const Op& ret) {
    const Op& sc = *ret.operand(0)->def();
    const Value* data = sc.operand(0);
    const Value* ind = sc.operand(1);
    const Value* upd = sc.operand(2);
    const Shape& ds = data->type().shape();
    const Shape& is = ind->type().shape();
    if (is.empty() || !is.back().isStatic() || is.back().value() > static_cast<int64_t>(ds.size()))
      return error(sc.loc(), "lower: scatter_nd in place needs a static index-tuple length");
    auto q = static_cast<size_t>(is.back().value());
    Shape tupleShape(is.begin(), is.end() - 1),
        sliceShape(ds.begin() + static_cast<long>(q), ds.end());
    int64_t threads = plan_.workgroup[0];
    int64_t chunk = target_.cpu ? 4096 : threads;
    Value* S = product(sliceShape, 0, sliceShape.size());
    Value* T = product(tupleShape, 0, tupleShape.size());
    config_->setOperand(
        0, idx(OpKind::IMax, idx(OpKind::ICeilDiv, S, cst(chunk), pro_.get()), cst(1), pro_.get()));
    Value* wx = mk(*body_, OpKind::WorkgroupId, {}, Type::index(), axisAttr(0));
    Value* lid = mk(*body_, OpKind::LocalId, {}, Type::index(), axisAttr(0));
    Value* e0 = idx(OpKind::IMul, wx, cst(chunk));
    Value* e1 = idx(OpKind::IMin, idx(OpKind::IAdd, e0, cst(chunk)), S);
    std::string red = sc.attrs().getStr("reduction", "none");
    ElemType e = data->type().elem();
    Value* t = beginFor(cst(0), T, cst(1));
    std::vector<Value*> tix = delinearize(t, tupleShape);
    std::vector<Value*> at;
    for (size_t j = 0; j < q; ++j) {
      std::vector<Value*> ii = tix;
      ii.push_back(cst(static_cast<int64_t>(j)));
      KILN_TRY(Value * iv, load(ind, ii));
      at.push_back(
          normIndex(mk(*body_, OpKind::ICast, {castTo(iv, ElemType::I64)}, Type::index()), ds[j]));
    }
    Value* el = beginFor(idx(OpKind::IAdd, e0, lid), e1, cst(threads));
    std::vector<Value*> six = delinearize(el, sliceShape);
    std::vector<Value*> uix = tix, oix = at;
    uix.insert(uix.end(), six.begin(), six.end());
    oix.insert(oix.end(), six.begin(), six.end());
    KILN_TRY(Value * v, load(upd, uix));
    if (red != "none") {
      std::vector<Value*> ops{outs_[0]};
      ops.insert(ops.end(), oix.begin(), oix.end());
      Value* old = mk(*body_, OpKind::Load, ops, Type::scalar(e));
      v = compute(red, {old, v}, e);
    }
    std::vector<Value*> ops{v, outs_[0]};
    ops.insert(ops.end(), oix.begin(), oix.end());
    body_->createUnchecked(OpKind::Store, ops, {}, {});
    endFor();
    endFor();
    return ok();
  }

  Status emitPointwise(const Op& ret) {
    if (plan_.cpuRows()) return emitRows(ret);
    const Shape& s = shape_.outShape;
    int64_t wg = plan_.workgroup[0];
    Value* total = product(s, 0, s.size());
    Value* groups = idx(OpKind::ICeilDiv, total, cst(wg), pro_.get());
    int64_t cap = std::min<int64_t>(target_.maxWorkgroupCount[0], 65535);
    Value* gx =
        idx(OpKind::IMax, idx(OpKind::IMin, groups, cst(cap), pro_.get()), cst(1), pro_.get());
    Value* gy = idx(OpKind::ICeilDiv, groups, gx, pro_.get());
    config_->setOperand(0, gx);
    config_->setOperand(1, gy);
    SymExpr totalExpr = SymExpr::constant(1);
    for (const Dim& d : s) totalExpr = totalExpr * d.expr();
    SymBounds tb = bounds(totalExpr, symbols());
    bool exact = provablyDivisible(totalExpr, wg, symbols()) && tb.hi / wg <= cap;
    Value* wx = mk(*body_, OpKind::WorkgroupId, {}, Type::index(), axisAttr(0));
    Value* wy = mk(*body_, OpKind::WorkgroupId, {}, Type::index(), axisAttr(1));
    Value* lid = mk(*body_, OpKind::LocalId, {}, Type::index(), axisAttr(0));
    Value* e =
        idx(OpKind::IAdd,
            idx(OpKind::IMul, idx(OpKind::IAdd, idx(OpKind::IMul, wy, gx), wx), cst(wg)), lid);
    if (guarded_ || !exact) mask_ = cmp("lt", e, total);
    return storeOutputs(ret, delinearize(e, s));
  }

  Attrs axisAttr(int64_t a) {
    Attrs at;
    at.set("axis", a);
    return at;
  }

  Value* st(Value* v, Value* buf, std::vector<Value*> ix) {
    std::vector<Value*> ops{v, buf};
    ops.insert(ops.end(), ix.begin(), ix.end());
    body_->createUnchecked(OpKind::Store, ops, {}, {});
    return v;
  }
  Value* ld(Value* buf, std::vector<Value*> ix) {
    std::vector<Value*> ops{buf};
    ops.insert(ops.end(), ix.begin(), ix.end());
    return mk(*body_, OpKind::Load, ops, Type::scalar(buf->type().elem()));
  }

  // True when B's K dim is the innermost dim of the value B is read from, through
  // transposes and one-operand elementwise ops (a cast): a `[N, K]` weight under
  // `transpose`, or attention's keys under `transpose {perm = [1, 2, 0]}`. B is then
  // contiguous along k, not n.
  static bool transposedB(const Value* b) {
    int64_t r = b->type().rank();
    int64_t kd = r - 2;
    while (const Op* d = b->def()) {
      if (d->has(kElementwise) && d->numOperands() == 1) {
        b = d->operand(0);
      } else if (d->kind() == OpKind::Transpose) {
        std::vector<int64_t> perm = d->attrs().getInts("perm");
        if (kd < 0 || kd >= static_cast<int64_t>(perm.size())) return false;
        kd = perm[static_cast<size_t>(kd)];
        b = d->operand(0);
      } else {
        break;
      }
    }
    return kd == b->type().rank() - 1;
  }

  // cpu matmul: one thread per workgroup computes an MC x NC block of C into a private
  // block accumulator `cb`, K in steps of KC. Inside a K step, NR-column strips of the block
  // (the KC x NR slice of B stays in L1) and MR-row micro-tiles: the micro-kernel keeps
  // MR x NR accumulators in a private buffer with static loop bounds (LLVM unrolls it into
  // registers), runs k outermost, loads NR contiguous elements of B's row k and broadcasts
  // one element of A per row. Rows past the last multiple of MR use a 1-row micro-kernel
  // and the last partial column strip clamps its columns to N - 1, so no access is masked
  // and no work is wasted on rows; the epilogue stores exactly the block's valid part.
  Status emitMatmulCpu(const Op& ret) {
    const Op& mm = *shape_.anchor;
    const Shape& s = shape_.outShape;
    size_t r = s.size();
    const Type& at = mm.operand(0)->type();
    int64_t MC = plan_.tile[0], NC = plan_.tile[1], KC = plan_.tile[2];
    int64_t MR = plan_.tile[3], NR = plan_.tile[4];
    Value* M = dim(s[r - 2]);
    Value* N = dim(s[r - 1]);
    Value* K = dim(at.dim(at.rank() - 1));
    Shape batchShape(s.begin(), s.end() - 2);
    config_->setOperand(0, idx(OpKind::ICeilDiv, N, cst(NC), pro_.get()));
    config_->setOperand(1, idx(OpKind::ICeilDiv, M, cst(MC), pro_.get()));
    config_->setOperand(2, product(batchShape, 0, batchShape.size()));
    Value* bx = mk(*body_, OpKind::WorkgroupId, {}, Type::index(), axisAttr(0));
    Value* by = mk(*body_, OpKind::WorkgroupId, {}, Type::index(), axisAttr(1));
    Value* bz = mk(*body_, OpKind::WorkgroupId, {}, Type::index(), axisAttr(2));
    std::vector<Value*> batch =
        batchShape.empty() ? std::vector<Value*>{} : delinearize(bz, batchShape);
    Value* m0 = idx(OpKind::IMul, by, cst(MC));
    Value* n0 = idx(OpKind::IMul, bx, cst(NC));
    Value* rowsV = idx(OpKind::IMin, idx(OpKind::ISub, M, m0), cst(MC));
    Value* colsV = idx(OpKind::IMin, idx(OpKind::ISub, N, n0), cst(NC));
    Value* rowsFull = idx(OpKind::IMul, idx(OpKind::IFloorDiv, rowsV, cst(MR)), cst(MR));
    Value* colsFull = idx(OpKind::IMul, idx(OpKind::IFloorDiv, colsV, cst(NR)), cst(NR));
    Value* lastCol = idx(OpKind::ISub, N, cst(1));
    ElemType ae = matmulAccElem(mm.result(0)->type().elem(), target_);
    auto priv = [&](std::vector<Dim> dims) {
      return mk(*body_, OpKind::Alloc, {}, Type::buffer(ae, Shape(dims), MemSpace::Private));
    };
    Value* cb = priv({Dim(MC), Dim(NC)});
    Value* reg = priv({Dim(MR), Dim(NR)});
    Value* bv = priv({Dim(NR)});
    const Value* A = mm.operand(0);
    const Value* B = mm.operand(1);
    // B's KC x NC panel packed per K step as NC/NR micro-panels of KC x NR contiguous
    // elements (k-major), cast to the accumulator type once: the micro-kernel streams one
    // contiguous micro-panel (no cache-set aliasing from B's row stride, no gathers for a
    // transposed B). Columns past the block's valid ones are never written: they read 0.
    Value* pack = priv({Dim(NC / NR), Dim(KC), Dim(NR)});
    bool transposed = transposedB(B);

    // The micro-kernel on rows [rb, rb + mr) and columns [cb0, cb0 + NR) of the block,
    // reading B from the packed panel or in place.
    auto micro = [&](Value* rb, Value* cb0, int64_t mr, bool edge, bool packed, Value* k0,
                     Value* kEnd) -> Status {
      Value* a = beginFor(cst(0), cst(mr), cst(1));
      Value* b = beginFor(cst(0), cst(NR), cst(1));
      st(ld(cb, {idx(OpKind::IAdd, rb, a), idx(OpKind::IAdd, cb0, b)}), reg, {a, b});
      endFor();
      endFor();
      Value* strip = packed ? idx(OpKind::IFloorDiv, cb0, cst(NR)) : nullptr;
      Value* k = beginFor(k0, kEnd, cst(1));
      b = beginFor(cst(0), cst(NR), cst(1));
      std::vector<Value*> oix;
      if (packed) {
        st(ld(pack, {strip, idx(OpKind::ISub, k, k0), b}), bv, {b});
      } else {
        Value* col = idx(OpKind::IAdd, n0, idx(OpKind::IAdd, cb0, b));
        if (edge) col = idx(OpKind::IMin, col, lastCol);
        oix = batch;
        oix.push_back(m0);
        oix.push_back(col);
        KILN_TRY(Value * bval, emitAt(B, matmulIndices(mm, oix, k).second));
        st(castTo(bval, ae), bv, {b});
      }
      endFor();
      // The rows are unrolled here (MR copies): the innermost loop is the NR columns, so
      // no vectorizer runs across rows (gathers of A and scatters of the accumulators).
      for (int64_t r = 0; r < mr; ++r) {
        a = cst(r);
        oix = batch;
        oix.push_back(idx(OpKind::IAdd, m0, idx(OpKind::IAdd, rb, a)));
        oix.push_back(n0);
        KILN_TRY(Value * aval, emitAt(A, matmulIndices(mm, oix, k).first));
        Value* av = castTo(aval, ae);
        b = beginFor(cst(0), cst(NR), cst(1));
        Value* p = compute("mul", {av, ld(bv, {b})}, ae);
        st(compute("add", {ld(reg, {a, b}), p}, ae), reg, {a, b});
        endFor();
      }
      endFor();
      a = beginFor(cst(0), cst(mr), cst(1));
      b = beginFor(cst(0), cst(NR), cst(1));
      st(ld(reg, {a, b}), cb, {idx(OpKind::IAdd, rb, a), idx(OpKind::IAdd, cb0, b)});
      endFor();
      endFor();
      return ok();
    };
    // The NR-column strips of the block: full ones, then the partial last one.
    auto strips = [&](bool packed, Value* k0, Value* kEnd) -> Status {
      for (bool edge : {false, true}) {
        Value* j0 = edge ? beginFor(colsFull, colsV, cst(NR)) : beginFor(cst(0), colsFull, cst(NR));
        Value* i0 = beginFor(cst(0), rowsFull, cst(MR));
        KILN_CHECK(micro(i0, j0, MR, edge, packed, k0, kEnd));
        endFor();
        if (MR > 1) {
          Value* i = beginFor(rowsFull, rowsV, cst(1));
          KILN_CHECK(micro(i, j0, 1, edge, packed, k0, kEnd));
          endFor();
        }
        endFor();
      }
      return ok();
    };

    // Packing pays when the panel is reused by several micro-tile rows, or when B is
    // transposed (strided along N otherwise): `packs` is 1 or 0 (a loop taken once or not).
    Value* packs = cst(1);
    if (!transposed)
      packs =
          mk(*body_, OpKind::SSelect, {cmp("gt", rowsV, cst(MR)), cst(1), cst(0)}, Type::index());
    Value* k0 = beginFor(cst(0), K, cst(KC));
    Value* kEnd = idx(OpKind::IMin, idx(OpKind::IAdd, k0, cst(KC)), K);
    beginFor(cst(0), packs, cst(1));
    {
      auto packOne = [&](Value* n, Value* k, Value* s, Value* b) -> Status {
        std::vector<Value*> oix = batch;
        oix.push_back(m0);
        oix.push_back(idx(OpKind::IAdd, n0, n));
        KILN_TRY(Value * bval, emitAt(B, matmulIndices(mm, oix, k).second));
        st(castTo(bval, ae), pack, {s, idx(OpKind::ISub, k, k0), b});
        return ok();
      };
      if (transposed) {
        // Read along k (contiguous in the [N, K] weight).
        Value* n = beginFor(cst(0), colsV, cst(1));
        Value* k = beginFor(k0, kEnd, cst(1));
        KILN_CHECK(
            packOne(n, k, idx(OpKind::IFloorDiv, n, cst(NR)), idx(OpKind::IMod, n, cst(NR))));
        endFor();
        endFor();
      } else {
        // Row k of each full strip: NR contiguous elements in, NR contiguous out (static
        // bounds); the partial last strip clamps its columns to the last valid one.
        for (bool edge : {false, true}) {
          Value* sEnd =
              edge ? idx(OpKind::ICeilDiv, colsV, cst(NR)) : idx(OpKind::IFloorDiv, colsV, cst(NR));
          Value* s0 = edge ? idx(OpKind::IFloorDiv, colsV, cst(NR)) : cst(0);
          Value* sv = beginFor(s0, sEnd, cst(1));
          Value* k = beginFor(k0, kEnd, cst(1));
          Value* b = beginFor(cst(0), cst(NR), cst(1));
          Value* n = idx(OpKind::IAdd, idx(OpKind::IMul, sv, cst(NR)), b);
          if (edge) n = idx(OpKind::IMin, n, idx(OpKind::ISub, colsV, cst(1)));
          KILN_CHECK(packOne(n, k, sv, b));
          endFor();
          endFor();
          endFor();
        }
      }
    }
    KILN_CHECK(strips(true, k0, kEnd));
    endFor();
    if (!transposed) {
      // A block of at most MR rows (a decode step): B's rows streamed in place, each k
      // adding a[i, k] * B[k, n0 .. n0 + cols) to the block accumulator's row i (a
      // contiguous, vectorizable column loop; every element of B is used once).
      beginFor(packs, cst(1), cst(1));
      Value* k = beginFor(k0, kEnd, cst(1));
      Value* i = beginFor(cst(0), rowsV, cst(1));
      std::vector<Value*> oix = batch;
      oix.push_back(idx(OpKind::IAdd, m0, i));
      oix.push_back(n0);
      KILN_TRY(Value * aval, emitAt(A, matmulIndices(mm, oix, k).first));
      Value* av = castTo(aval, ae);
      Value* n = beginFor(cst(0), colsV, cst(1));
      oix = batch;
      oix.push_back(m0);
      oix.push_back(idx(OpKind::IAdd, n0, n));
      KILN_TRY(Value * bval, emitAt(B, matmulIndices(mm, oix, k).second));
      Value* p = compute("mul", {av, castTo(bval, ae)}, ae);
      st(compute("add", {ld(cb, {i, n}), p}, ae), cb, {i, n});
      endFor();
      endFor();
      endFor();
      endFor();
    }
    endFor();

    // Epilogue: the block's valid outputs, the matmul's value taken from the accumulator.
    Value* i = beginFor(cst(0), rowsV, cst(1));
    Value* j = beginFor(cst(0), colsV, cst(1));
    subst_[mm.result(0)] = castTo(ld(cb, {i, j}), mm.result(0)->type().elem());
    std::vector<Value*> ix = batch;
    ix.push_back(idx(OpKind::IAdd, m0, i));
    ix.push_back(idx(OpKind::IAdd, n0, j));
    KILN_CHECK(storeOutputs(ret, ix));
    endFor();
    endFor();
    return ok();
  }

  Status emitMatmul(const Op& ret) {
    if (plan_.cpuMatmul()) return emitMatmulCpu(ret);
    const Op& mm = *shape_.anchor;
    const Shape& s = shape_.outShape;
    size_t r = s.size();
    const Type& at = mm.operand(0)->type();
    int64_t TM = plan_.tile[0], TN = plan_.tile[1], TK = plan_.tile[2];
    int64_t WX = plan_.workgroup[0], WY = plan_.workgroup[1];
    int64_t RM = TM / WY, RN = TN / WX;
    const Dim& dM = s[r - 2];
    const Dim& dN = s[r - 1];
    const Dim& dK = at.dim(at.rank() - 1);
    Value* M = dim(dM);
    Value* N = dim(dN);
    Value* K = dim(dK);
    Shape batchShape(s.begin(), s.end() - 2);
    config_->setOperand(0, idx(OpKind::ICeilDiv, N, cst(TN), pro_.get()));
    config_->setOperand(1, idx(OpKind::ICeilDiv, M, cst(TM), pro_.get()));
    config_->setOperand(2, product(batchShape, 0, batchShape.size()));
    const SymbolTable& syms = symbols();
    bool gM = guarded_ || !provablyDivisible(dM.expr(), TM, syms);
    bool gN = guarded_ || !provablyDivisible(dN.expr(), TN, syms);
    bool gK = guarded_ || !provablyDivisible(dK.expr(), TK, syms);

    Value* bx = mk(*body_, OpKind::WorkgroupId, {}, Type::index(), axisAttr(0));
    Value* by = mk(*body_, OpKind::WorkgroupId, {}, Type::index(), axisAttr(1));
    Value* bz = mk(*body_, OpKind::WorkgroupId, {}, Type::index(), axisAttr(2));
    Value* tx = mk(*body_, OpKind::LocalId, {}, Type::index(), axisAttr(0));
    Value* ty = mk(*body_, OpKind::LocalId, {}, Type::index(), axisAttr(1));
    Value* tid = idx(OpKind::IAdd, idx(OpKind::IMul, ty, cst(WX)), tx);
    std::vector<Value*> batch =
        batchShape.empty() ? std::vector<Value*>{} : delinearize(bz, batchShape);
    Value* m0 = idx(OpKind::IMul, by, cst(TM));
    Value* n0 = idx(OpKind::IMul, bx, cst(TN));
    std::vector<SharedBuffer> sb = sharedBuffersFor(shape_, plan_);
    Value* As = mk(*body_, OpKind::Alloc, {},
                   Type::buffer(sb[0].elem, {Dim(TM), Dim(TK)}, MemSpace::Shared));
    Value* Bs = mk(*body_, OpKind::Alloc, {},
                   Type::buffer(sb[1].elem, {Dim(TK), Dim(TN)}, MemSpace::Shared));
    ElemType ae = matmulAccElem(mm.result(0)->type().elem(), target_);
    Value* acc =
        mk(*body_, OpKind::Alloc, {}, Type::buffer(ae, {Dim(RM), Dim(RN)}, MemSpace::Private));
    int64_t T = WX * WY;

    Value* k0 = beginFor(cst(0), K, cst(TK));
    // Stage one operand tile: rows x cols elements of `operand` (A: m x k, B: k x n).
    auto stage = [&](bool isA, Value* tileBuf, int64_t rows, int64_t cols) -> Status {
      Value* e = beginFor(tid, cst(rows * cols), cst(T));
      Value* rr = idx(OpKind::IFloorDiv, e, cst(cols));
      Value* cc = idx(OpKind::IMod, e, cst(cols));
      Value* mask = nullptr;
      std::vector<Value*> oix = batch;
      Value* kk;
      if (isA) {
        Value* gm = idx(OpKind::IAdd, m0, rr);
        kk = idx(OpKind::IAdd, k0, cc);
        if (gM) mask = andMask(mask, cmp("lt", gm, M));
        oix.push_back(gm);
        oix.push_back(n0); // placeholder for N, unused by A
      } else {
        Value* gn = idx(OpKind::IAdd, n0, cc);
        kk = idx(OpKind::IAdd, k0, rr);
        if (gN) mask = andMask(mask, cmp("lt", gn, N));
        oix.push_back(m0);
        oix.push_back(gn);
      }
      if (gK) mask = andMask(mask, cmp("lt", kk, K));
      auto [ai, bi] = matmulIndices(mm, oix, kk);
      mask_ = mask;
      const Value* operand = mm.operand(isA ? 0 : 1);
      KILN_TRY(Value * v, emitAt(operand, isA ? ai : bi));
      mask_ = nullptr;
      ElemType oe = operand->type().elem();
      if (mask) v = mk(*body_, OpKind::SSelect, {mask, v, scst(oe, 0)}, Type::scalar(oe));
      body_->createUnchecked(OpKind::Store, {v, tileBuf, rr, cc}, {}, {});
      endFor();
      return ok();
    };
    KILN_CHECK(stage(true, As, TM, TK));
    KILN_CHECK(stage(false, Bs, TK, TN));
    body_->createUnchecked(OpKind::Barrier, {}, {}, {});
    Value* i = beginFor(cst(0), cst(RM), cst(1));
    Value* j = beginFor(cst(0), cst(RN), cst(1));
    Value* row = idx(OpKind::IAdd, ty, idx(OpKind::IMul, i, cst(WY)));
    Value* col = idx(OpKind::IAdd, tx, idx(OpKind::IMul, j, cst(WX)));
    Value* kk = beginFor(cst(0), cst(TK), cst(1));
    Value* a = mk(*body_, OpKind::Load, {As, row, kk}, Type::scalar(sb[0].elem));
    Value* b = mk(*body_, OpKind::Load, {Bs, kk, col}, Type::scalar(sb[1].elem));
    Value* p = compute("mul", {castTo(a, ae), castTo(b, ae)}, ae);
    Value* old = mk(*body_, OpKind::Load, {acc, i, j}, Type::scalar(ae));
    body_->createUnchecked(OpKind::Store, {compute("add", {old, p}, ae), acc, i, j}, {}, {});
    endFor();
    endFor();
    endFor();
    body_->createUnchecked(OpKind::Barrier, {}, {}, {});
    endFor();

    // Epilogue: each thread's outputs, with the matmul's value taken from the accumulator.
    i = beginFor(cst(0), cst(RM), cst(1));
    j = beginFor(cst(0), cst(RN), cst(1));
    Value* gm = idx(OpKind::IAdd, m0, idx(OpKind::IAdd, ty, idx(OpKind::IMul, i, cst(WY))));
    Value* gn = idx(OpKind::IAdd, n0, idx(OpKind::IAdd, tx, idx(OpKind::IMul, j, cst(WX))));
    Value* mask = nullptr;
    if (gM) mask = andMask(mask, cmp("lt", gm, M));
    if (gN) mask = andMask(mask, cmp("lt", gn, N));
    mask_ = mask;
    Value* accv = mk(*body_, OpKind::Load, {acc, i, j}, Type::scalar(ae));
    subst_[mm.result(0)] = castTo(accv, mm.result(0)->type().elem());
    std::vector<Value*> ix = batch;
    ix.push_back(gm);
    ix.push_back(gn);
    KILN_CHECK(storeOutputs(ret, ix));
    endFor();
    endFor();
    return ok();
  }

  const Func& src_;
  KernelShape shape_;
  TilePlan plan_;
  bool guarded_;
  const TargetDesc& target_;
  bool scatterInPlace_ = false;
  std::unique_ptr<Func> k_;
  std::unique_ptr<Builder> pro_, body_;
  Op* config_ = nullptr;
  std::map<const Value*, Value*> buf_;
  std::vector<Value*> outs_;
  std::map<int64_t, Value*> consts_;
  std::map<std::string, Value*> syms_;
  std::map<SymExpr, Value*> dims_;
  std::map<const Value*, Value*> subst_;
  Value* mask_ = nullptr;
  // cpu rows: the column loop's `for` (hoisted code goes before it), the values that are
  // the same for every column of a row, and the hoisted values by (op, indices).
  Op* colLoop_ = nullptr;
  std::set<const Value*> invariant_;
  std::map<std::pair<const void*, std::vector<Value*>>, Value*> hoistMemo_;
};

Status checkElemTypes(const Func& k, const TargetDesc& t) {
  for (const auto& op : k.ops())
    for (size_t r = 0; r < op->numResults(); ++r)
      if (!t.supports(op->result(r)->type().elem()))
        return error(op->loc(), "kernel @" + k.name() + " uses element type " +
                                    std::string(elemTypeName(op->result(r)->type().elem())) +
                                    ", which target " + t.name + " does not support");
  return ok();
}

// The final resource check on a lowered kernel, with the same footprint function as `tile`.
Status checkResources(const Func& k, const TargetDesc& t) {
  uint64_t bytes = sharedFootprint(sharedBuffersOf(k));
  if (bytes > t.sharedMemoryBytes)
    return error(k.loc(), "kernel @" + k.name() + " needs " + std::to_string(bytes) +
                              " bytes of shared memory, more than the " +
                              std::to_string(t.sharedMemoryBytes) + "-byte limit of " + t.name);
  for (const auto& op : k.ops())
    if (op->kind() == OpKind::KernelConfig) {
      std::vector<int64_t> w = op->attrs().getInts("workgroup");
      int64_t threads = w.size() == 3 ? w[0] * w[1] * w[2] : 0;
      if (threads > t.maxWorkgroupInvocations || threads < 1)
        return error(k.loc(), "kernel @" + k.name() + " has " + std::to_string(threads) +
                                  " threads per workgroup, more than the " +
                                  std::to_string(t.maxWorkgroupInvocations) + " of " + t.name);
    }
  return ok();
}

// A dispatch whose kernel is one scatter_nd written over its data operand (in_place).
bool isScatterInPlace(const Op& d, const Func& k) {
  std::vector<int64_t> ip = d.attrs().getInts("in_place");
  if (ip.size() != 2 || k.numOps() != 2) return false;
  const Op& op = *k.ops().front();
  return op.kind() == OpKind::ScatterNd && op.operand(0)->isArg() &&
         static_cast<int64_t>(op.operand(0)->index()) == ip[0] && ip[1] == 0 &&
         k.terminator()->operand(0) == op.result();
}

class LowerPass : public Pass {
public:
  explicit LowerPass(CodegenOptions opts) : opts_(std::move(opts)) {}

  Status run(Module& m) override {
    const TargetDesc& target = opts_.target;
    std::vector<std::pair<Op*, Func*>> work;
    for (const auto& f : m.funcs())
      for (const auto& op : f->ops())
        if (op->kind() == OpKind::Dispatch && opts_.covers(*op))
          if (Func* k = dispatchKernel(m, *op)) work.emplace_back(op.get(), k);
    std::set<const Func*> done;
    for (auto [d, k] : work) {
      if (!done.insert(k).second || isLoweredKernel(*k)) continue;
      KernelShape s = analyzeKernel(*k);
      bool scatter = isScatterInPlace(*d, *k);
      if (s.strategy == Strategy::Host && !scatter) continue;
      KILN_CHECK(checkElemTypes(*k, target));
      TilePlan p;
      if (scatter) {
        p.workgroup = {target.cpu ? 1 : 64, 1, 1};
      } else {
        p = planOf(*d, s);
        if (std::optional<std::string> why = planProblem(s, p, target, false))
          return error(d->loc(), "kernel @" + k->name() + ": " + *why);
      }
      bool guarded = d->attrs().getInt("guarded", 1) != 0;
      Emitter e(*k, s, p, guarded, target, scatter);
      KILN_TRY(std::unique_ptr<Func> lowered, e.run());
      KILN_CHECK(checkResources(*lowered, target));
      recordPlan(*d, p);
      m.replaceFunc(k, std::move(lowered));
    }
    return ok();
  }

private:
  CodegenOptions opts_;
};

} // namespace

Status checkKernelResources(const Func& k, const TargetDesc& t) { return checkResources(k, t); }

std::unique_ptr<Pass> createLowerPass(const CodegenOptions& opts) {
  return std::make_unique<LowerPass>(opts);
}

} // namespace kiln
