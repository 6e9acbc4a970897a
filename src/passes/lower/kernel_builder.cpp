// The kernel builder (kernel_builder.h): construction of the kernel's frame, the
// op-construction helpers, and the per-element walker with its view, elementwise,
// concat, pad and naive-matmul lowerings.
#include "passes/lower/kernel_builder.h"

#include <algorithm>

namespace kiln {

ElemType accElem(ElemType e) { return isFloat(e) ? ElemType::F64 : ElemType::I64; }

ElemType matmulAccElem(ElemType e, const TargetDesc& t) {
  if (!t.wideAccumulation && isFloat(e) && e != ElemType::F64) return ElemType::F32;
  return accElem(e);
}

KernelBuilder::KernelBuilder(const Func& src, const KernelShape& shape,
                             const std::vector<int64_t>& workgroup, bool guarded,
                             const TargetDesc& target)
    : src_(src), shape_(shape), guarded_(guarded), target_(target) {
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
    c.set("workgroup", workgroup);
    config_ = tmp.createUnchecked(OpKind::KernelConfig, {one, one, one}, c, {});
  }
  pro_ = std::make_unique<Builder>(k_.get(), config_);
  pro_->setLoc(src_.loc());
  consts_[1] = one;
}

std::unique_ptr<Func> KernelBuilder::finish() {
  body_->createUnchecked(OpKind::Return, {}, {}, {});
  return std::move(k_);
}

void KernelBuilder::setGrid(size_t axis, Value* count) { config_->setOperand(axis, count); }
void KernelBuilder::setSubgroup(int64_t size) { config_->attrs().set("subgroup", size); }

Value* KernelBuilder::mk(Builder& b, OpKind k, std::vector<Value*> ops, Type t, Attrs a) {
  return b.createUnchecked(k, ops, std::move(a), {std::move(t)})->result();
}
// floordiv(x, d) * d + mod(x, d) is x: what a reshape's linearization of a split index
// builds (a flattened reduction, reduction.cpp, reading a 2x6x49 buffer viewed as
// 2x6x7x7), folded here since LLVM does not see through the floor division.
static Value* relinearized(Value* a, Value* b) {
  auto is = [](Value* v, OpKind k) { return v->def() && v->def()->kind() == k; };
  if (!is(a, OpKind::IMul) || !is(b, OpKind::IMod)) return nullptr;
  Value *q = a->def()->operand(0), *d = a->def()->operand(1);
  Value *x = b->def()->operand(0), *m = b->def()->operand(1);
  if (d != m || !is(q, OpKind::IFloorDiv) || q->def()->operand(0) != x || q->def()->operand(1) != d)
    return nullptr;
  return x;
}

Value* KernelBuilder::idx(OpKind k, Value* a, Value* b, Builder* where) {
  if (k == OpKind::IAdd) {
    if (Value* x = relinearized(a, b)) return x;
    if (Value* x = relinearized(b, a)) return x;
  }
  return mk(where ? *where : *body_, k, {a, b}, Type::index());
}
Value* KernelBuilder::cst(int64_t v) {
  auto it = consts_.find(v);
  if (it != consts_.end()) return it->second;
  Attrs a;
  a.set("value", v);
  consts_[v] = mk(*pro_, OpKind::IConst, {}, Type::index(), a);
  invariant_.insert(consts_[v]);
  return consts_[v];
}
Value* KernelBuilder::scst(ElemType e, double v) {
  Attrs a;
  a.set("value", v);
  return mk(*body_, OpKind::SConst, {}, Type::scalar(e), a);
}
Value* KernelBuilder::cmp(const char* pred, Value* a, Value* b) {
  Attrs at;
  at.set("pred", std::string(pred));
  return mk(*body_, OpKind::ICmp, {a, b}, Type::scalar(ElemType::I1), at);
}
Value* KernelBuilder::compute(OpKind fn, std::vector<Value*> ops, ElemType result,
                              const Attrs* extra) {
  Attrs a;
  if (extra)
    for (const auto& [n, v] : extra->entries()) a.set(n, v);
  a.set("fn", fn);
  return mk(*body_, OpKind::Compute, std::move(ops), Type::scalar(result), a);
}
Value* KernelBuilder::castTo(Value* v, ElemType e) {
  if (v->type().elem() == e) return v;
  Attrs a;
  a.set("to", e);
  return compute(OpKind::Cast, {v}, e, &a);
}
Value* KernelBuilder::andMask(Value* a, Value* b) {
  if (!a) return b;
  if (!b) return a;
  return compute(OpKind::And, {a, b}, ElemType::I1);
}

// A dim's value, computed once in the prologue.
Value* KernelBuilder::dim(const Dim& d) {
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
Value* KernelBuilder::product(const Shape& s, size_t from, size_t to) {
  Value* p = cst(1);
  for (size_t i = from; i < to; ++i)
    p = s[i].isStatic() && s[i].value() == 1 ? p : idx(OpKind::IMul, p, dim(s[i]), pro_.get());
  return p;
}

// ---- loops -------------------------------------------------------------------------------

Value* KernelBuilder::beginFor(Value* lo, Value* hi, Value* step,
                               const std::vector<Value*>& carried) {
  std::vector<Value*> ops{lo, hi, step};
  std::vector<Type> types;
  for (Value* c : carried) {
    ops.push_back(c);
    types.push_back(c->type());
  }
  Op* loop = body_->createUnchecked(OpKind::For, ops, {}, types);
  Block* region = loop->addRegion();
  Value* iv = region->addArg(Type::index());
  for (Value* c : carried) region->addArg(c->type());
  loops_.push_back({loop, body_->insertionBlock(), body_->insertionPoint()});
  body_->setInsertionBlock(region);
  return iv;
}
void KernelBuilder::unrollLoop() { loops_.back().loop->attrs().set("unroll", int64_t(1)); }
void KernelBuilder::scalarLoop(Op* loop) {
  (loop ? loop : loops_.back().loop)->attrs().set("vectorize", int64_t(0));
}
std::vector<Value*> KernelBuilder::carried() const {
  const Block* region = loops_.back().loop->region(0);
  std::vector<Value*> out;
  for (size_t a = 1; a < region->numArgs(); ++a) out.push_back(region->arg(a));
  return out;
}
std::vector<Value*> KernelBuilder::endFor(const std::vector<Value*>& next) {
  OpenLoop l = loops_.back();
  loops_.pop_back();
  body_->createUnchecked(OpKind::Yield, next, {}, {});
  body_->setInsertionBlock(l.block);
  body_->setInsertionPoint(l.before);
  std::vector<Value*> out;
  for (size_t r = 0; r < l.loop->numResults(); ++r) out.push_back(l.loop->result(r));
  return out;
}

// C-order multi-index of flat `e` in `s`.
std::vector<Value*> KernelBuilder::delinearize(Value* e, const Shape& s) {
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
Value* KernelBuilder::linearize(const std::vector<Value*>& ix, const Shape& s) {
  Value* e = cst(0);
  for (size_t i = 0; i < s.size(); ++i)
    e = idx(OpKind::IAdd, idx(OpKind::IMul, e, dim(s[i])), ix[i]);
  return e;
}

// Index into an operand of shape `in` broadcast (numpy) to an index of rank out.size().
std::vector<Value*> KernelBuilder::bcast(const std::vector<Value*>& out, const Shape& in) {
  std::vector<Value*> r;
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i)
    r.push_back(in[i].isStatic() && in[i].value() == 1 ? cst(0) : out[off + i]);
  return r;
}

// ---- values at an index ------------------------------------------------------------------

Result<Value*> KernelBuilder::load(const Value* arg, const std::vector<Value*>& ix) {
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

Value* KernelBuilder::normIndex(Value* i, const Dim& d) {
  Value* neg = cmp("lt", i, cst(0));
  return mk(*body_, OpKind::SSelect, {neg, idx(OpKind::IAdd, i, dim(d)), i}, Type::index());
}

// A private one-element accumulator initialised to `init`.
Value* KernelBuilder::accumulator(ElemType e, double init) {
  Value* acc = mk(*body_, OpKind::Alloc, {}, Type::buffer(e, {Dim(1)}, MemSpace::Private));
  body_->createUnchecked(OpKind::Store, {scst(e, init), acc, cst(0)}, {}, {});
  return acc;
}
Value* KernelBuilder::accLoad(Value* acc) {
  return mk(*body_, OpKind::Load, {acc, cst(0)}, Type::scalar(acc->type().elem()));
}
void KernelBuilder::accStore(Value* acc, Value* v) {
  body_->createUnchecked(OpKind::Store, {v, acc, cst(0)}, {}, {});
}
Status KernelBuilder::storeOutputs(const std::vector<Value*>& ix) {
  const Op& ret = *src_.terminator();
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

const SymbolTable& KernelBuilder::symbols() const {
  static const SymbolTable none;
  return src_.parent() ? src_.parent()->symbols() : none;
}

Attrs KernelBuilder::axisAttr(int64_t a) {
  Attrs at;
  at.set("axis", a);
  return at;
}

Value* KernelBuilder::st(Value* v, Value* buf, std::vector<Value*> ix) {
  std::vector<Value*> ops{v, buf};
  ops.insert(ops.end(), ix.begin(), ix.end());
  body_->createUnchecked(OpKind::Store, ops, {}, {});
  return v;
}
Result<bool> KernelBuilder::prefetchAt(const Value* v, const std::vector<Value*>& ix) {
  KILN_TRY(Value * x, emitAt(v, ix));
  Op* load = x->def();
  if (!load || load->kind() != OpKind::Load || x->hasUses()) return false;
  std::vector<Value*> ops(load->operands().begin(), load->operands().end());
  body_->createUnchecked(OpKind::Prefetch, ops, {}, {});
  load->dropOperands();
  k_->erase(load);
  return true;
}
Value* KernelBuilder::ld(Value* buf, std::vector<Value*> ix) {
  std::vector<Value*> ops{buf};
  ops.insert(ops.end(), ix.begin(), ix.end());
  return mk(*body_, OpKind::Load, ops, Type::scalar(buf->type().elem()));
}
// Index lists of a matmul's operands for output index `ix` and contraction index `k`.
std::pair<std::vector<Value*>, std::vector<Value*>>
KernelBuilder::matmulIndices(const Op& op, const std::vector<Value*>& ix, Value* k) {
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

Result<Value*> KernelBuilder::matmulNaive(const Op& op, const std::vector<Value*>& ix) {
  ElemType ae = matmulAccElem(op.result(0)->type().elem(), target_);
  Value* acc = accumulator(ae, 0);
  const Type& at = op.operand(0)->type();
  Value* k = beginFor(cst(0), dim(at.dim(at.rank() - 1)), cst(1));
  auto [ai, bi] = matmulIndices(op, ix, k);
  KILN_TRY(Value * a, emitAt(op.operand(0), ai));
  KILN_TRY(Value * b, emitAt(op.operand(1), bi));
  Value* p = compute(OpKind::Mul, {castTo(a, ae), castTo(b, ae)}, ae);
  accStore(acc, compute(OpKind::Add, {accLoad(acc), p}, ae));
  endFor();
  return castTo(accLoad(acc), op.result(0)->type().elem());
}

// Where each operand of `op` starts along `axis`, and its end: operands + 1 prologue values.
std::vector<Value*> KernelBuilder::concatOffsets(const Op& op, size_t axis) {
  std::vector<Value*> off{cst(0)};
  int64_t known = 0; // the offset while every dim before it is static
  for (const Value* x : op.operands()) {
    const Dim& d = x->type().dim(static_cast<int64_t>(axis));
    if (known >= 0 && d.isStatic()) {
      known += d.value();
      off.push_back(cst(known));
    } else {
      known = -1;
      off.push_back(idx(OpKind::IAdd, off.back(), dim(d), pro_.get()));
    }
  }
  return off;
}

std::vector<Value*> KernelBuilder::concatBounds(const Op& cat) {
  int64_t r = cat.result(0)->type().rank();
  int64_t axis = cat.attrs().getInt("axis");
  return concatOffsets(cat, static_cast<size_t>(axis < 0 ? axis + r : axis));
}

// The operand that holds index ix[axis] read there, when the copy of the column loop being
// emitted picked one (versionByConcat); else each operand's value read under "index in its
// range" (masked), then selected.
Result<Value*> KernelBuilder::concat(const Op& op, const std::vector<Value*>& ix) {
  int64_t r = op.result(0)->type().rank();
  int64_t axis = op.attrs().getInt("axis");
  auto a = static_cast<size_t>(axis < 0 ? axis + r : axis);
  ElemType e = op.result(0)->type().elem();
  std::vector<Value*> off = concatOffsets(op, a);
  auto at = [&](size_t k) {
    std::vector<Value*> xi = ix;
    if (off[k] != cst(0)) xi[a] = idx(OpKind::ISub, ix[a], off[k]);
    return xi;
  };
  auto pick = picked_.find(&op);
  if (pick != picked_.end() && pick->second.at == ix[a])
    return emitAt(op.operand(pick->second.operand), at(pick->second.operand));
  // Code hoisted before the column loop (uniform_) is not in the copies. The index only
  // has to be the same for every column: a window's mask (a pool reading the concat) stays
  // on the picked operand's loads in each copy.
  if (versioning_ && !splitConcat_ && pick == picked_.end() && colLoop_ &&
      invariant_.count(ix[a]) && !uniform_ &&
      copies_ * static_cast<int64_t>(op.numOperands()) <= kMaxColumnCopies) {
    splitConcat_ = &op;
    splitAt_ = ix[a];
  }
  Value* outer = mask_;
  std::vector<std::pair<Value*, Value*>> parts; // (in range, value)
  for (size_t k = 0; k < op.numOperands(); ++k) {
    Value* in = andMask(cmp("ge", ix[a], off[k]), cmp("lt", ix[a], off[k + 1]));
    mask_ = andMask(outer, in);
    KILN_TRY(Value * v, emitAt(op.operand(k), at(k)));
    parts.emplace_back(in, v);
  }
  mask_ = outer;
  Value* res = parts.back().second;
  for (size_t k = parts.size() - 1; k-- > 0;)
    res = mk(*body_, OpKind::SSelect, {parts[k].first, parts[k].second, res}, Type::scalar(e));
  return res;
}

Status KernelBuilder::versionByConcat(const std::function<Result<Op*>()>& loop) {
  bool was = versioning_;
  versioning_ = true;
  splitConcat_ = nullptr;
  Result<Op*> l = loop();
  versioning_ = was;
  if (!l.ok()) return l.takeDiags();
  const Op* cat = splitConcat_;
  Value* at = splitAt_;
  splitConcat_ = nullptr;
  if (!cat) return ok();
  k_->erase(*l);
  int64_t r = cat->result(0)->type().rank();
  int64_t axis = cat->attrs().getInt("axis");
  std::vector<Value*> off = concatOffsets(*cat, static_cast<size_t>(axis < 0 ? axis + r : axis));
  auto n = static_cast<int64_t>(cat->numOperands());
  copies_ *= n;
  Status s = pickTree(*cat, at, off, 0, cat->numOperands(), loop);
  copies_ /= n;
  return s;
}

// The copies of the column loop for operands [lo, hi) of `cat`: `if at < start of the middle
// one` splits the range in two.
Status KernelBuilder::pickTree(const Op& cat, Value* at, const std::vector<Value*>& offsets,
                               size_t lo, size_t hi, const std::function<Result<Op*>()>& loop) {
  if (hi - lo == 1) {
    picked_[&cat] = {at, lo};
    // Code hoisted inside this copy does not dominate the others.
    auto memo = hoistMemo_;
    Status s = versionByConcat(loop);
    hoistMemo_ = std::move(memo);
    picked_.erase(&cat);
    return s;
  }
  size_t mid = (lo + hi) / 2;
  Op* branch = body_->createUnchecked(OpKind::If, {cmp("lt", at, offsets[mid])}, {}, {});
  Block* block = body_->insertionBlock();
  Op* before = body_->insertionPoint();
  const std::pair<size_t, size_t> halves[2] = {{lo, mid}, {mid, hi}};
  for (const auto& [from, to] : halves) {
    body_->setInsertionBlock(branch->addRegion());
    KILN_CHECK(pickTree(cat, at, offsets, from, to, loop));
    body_->createUnchecked(OpKind::Yield, {}, {}, {});
  }
  body_->setInsertionBlock(block);
  body_->setInsertionPoint(before);
  return ok();
}

Result<Value*> KernelBuilder::pad(const Op& op, const std::vector<Value*>& ix) {
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
      p = mk(*body_, OpKind::SSelect, {high, idx(OpKind::ISub, cst(period), p), p}, Type::index());
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
// A reshape keeps the indices of the dims its input and result share at the front and at the
// back, and linearizes only the ones between (im2col's 1xCx1xP view of a 1xCxOHxOW slice: two
// index ops, not eight). A dim of size 1 takes index 0.
Result<Value*> KernelBuilder::reshape(const Shape& out, const Value* x,
                                      const std::vector<Value*>& ix) {
  const Shape& in = x->type().shape();
  size_t pre = 0, post = 0;
  while (pre < out.size() && pre < in.size() && out[pre] == in[pre]) ++pre;
  while (post + pre < out.size() && post + pre < in.size() &&
         out[out.size() - 1 - post] == in[in.size() - 1 - post])
    ++post;
  auto one = [](const Dim& d) { return d.isStatic() && d.value() == 1; };
  Value* e = cst(0);
  for (size_t i = pre; i + post < out.size(); ++i)
    if (!one(out[i]))
      e = e == cst(0) ? ix[i] : idx(OpKind::IAdd, idx(OpKind::IMul, e, dim(out[i])), ix[i]);
  std::vector<Value*> xi(ix.begin(), ix.begin() + static_cast<long>(pre));
  std::vector<Value*> mid;
  size_t outermost = pre; // the first dim not of size 1 takes what is left, unreduced
  while (outermost + post < in.size() && one(in[outermost])) ++outermost;
  for (size_t i = in.size() - post; i-- > pre;) {
    if (one(in[i])) {
      mid.push_back(cst(0));
    } else if (i == outermost) {
      mid.push_back(e);
    } else {
      mid.push_back(idx(OpKind::IMod, e, dim(in[i])));
      e = idx(OpKind::IFloorDiv, e, dim(in[i]));
    }
  }
  xi.insert(xi.end(), mid.rbegin(), mid.rend());
  xi.insert(xi.end(), ix.end() - static_cast<long>(post), ix.end());
  return emitAt(x, xi);
}

Result<Value*> KernelBuilder::emitAt(const Value* v, const std::vector<Value*>& ix) {
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
    return compute(op.kind(), args, re, &extra);
  }
  const Value* x = op.numOperands() ? op.operand(0) : nullptr;
  switch (op.kind()) {
  case OpKind::Broadcast: return emitAt(x, bcast(ix, x->type().shape()));
  case OpKind::Reshape: return reshape(v->type().shape(), x, ix);
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
} // namespace kiln
