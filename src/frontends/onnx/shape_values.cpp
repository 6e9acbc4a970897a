// Symbolic shape values: arithmetic, comparisons and selection over the SymExpr elements
// of shape tensors, Reshape target resolution, and Shape's run-time form.
#include "frontends/onnx/shape_values.h"

namespace kiln::onnx {

namespace {

// Both operands' symbolic elements broadcast to one length; nullopt if unknown or when
// neither side carries a symbol (then folding already produced the value).
std::optional<std::pair<std::vector<SymExpr>, std::vector<SymExpr>>> operands(const Val& a,
                                                                              const Val& b) {
  auto sa = Ctx::symOf(a), sb = Ctx::symOf(b);
  if (!sa || !sb) return std::nullopt;
  size_t n = std::max(sa->size(), sb->size());
  if ((sa->size() != n && sa->size() != 1) || (sb->size() != n && sb->size() != 1))
    return std::nullopt;
  if (sa->size() != n) sa = std::vector<SymExpr>(n, (*sa)[0]);
  if (sb->size() != n) sb = std::vector<SymExpr>(n, (*sb)[0]);
  return std::make_pair(*sa, *sb);
}

} // namespace

SymExpr simplify(const Ctx& c, const SymExpr& e) { return simplifyWithRanges(e, c.symbols()); }

std::optional<std::vector<SymExpr>> symBinary(OpKind k, const Val& a, const Val& b) {
  if (!isInteger(a.elem())) return std::nullopt;
  auto ops = operands(a, b);
  if (!ops) return std::nullopt;
  std::vector<SymExpr> out;
  for (size_t i = 0; i < ops->first.size(); ++i) {
    const SymExpr &x = ops->first[i], &y = ops->second[i];
    switch (k) {
    case OpKind::Add: out.push_back(x + y); break;
    case OpKind::Sub: out.push_back(x - y); break;
    case OpKind::Mul: out.push_back(x * y); break;
    case OpKind::Div: out.push_back(SymExpr::floorDiv(x, y)); break;
    case OpKind::Mod: out.push_back(SymExpr::mod(x, y)); break;
    case OpKind::Max: out.push_back(SymExpr::max(x, y)); break;
    case OpKind::Min: out.push_back(SymExpr::min(x, y)); break;
    default: return std::nullopt;
    }
  }
  return out;
}

std::optional<HostTensor> symCompare(OpKind k, const Val& a, const Val& b,
                                     const SymbolTable& syms) {
  if (!isInteger(a.elem())) return std::nullopt;
  auto ops = operands(a, b);
  if (!ops) return std::nullopt;
  size_t n = ops->first.size();
  HostTensor out(ElemType::I1, a.rank() == 0 && b.rank() == 0
                                   ? std::vector<int64_t>{}
                                   : std::vector<int64_t>{static_cast<int64_t>(n)});
  for (size_t i = 0; i < n; ++i) {
    const SymExpr &x = ops->first[i], &y = ops->second[i];
    std::optional<bool> r;
    auto decide = [&](bool yes, bool no) {
      if (yes)
        r = true;
      else if (no)
        r = false;
    };
    switch (k) {
    case OpKind::Eq: decide(x == y, provablyLT(x, y, syms) || provablyLT(y, x, syms)); break;
    case OpKind::Ne: decide(provablyLT(x, y, syms) || provablyLT(y, x, syms), x == y); break;
    case OpKind::Lt: decide(provablyLT(x, y, syms), provablyLE(y, x, syms)); break;
    case OpKind::Le: decide(provablyLE(x, y, syms), provablyLT(y, x, syms)); break;
    case OpKind::Gt: decide(provablyLT(y, x, syms), provablyLE(x, y, syms)); break;
    case OpKind::Ge: decide(provablyLE(y, x, syms), provablyLT(x, y, syms)); break;
    default: return std::nullopt;
    }
    if (!r) return std::nullopt;
    out.setI(static_cast<int64_t>(i), *r ? 1 : 0);
  }
  return out;
}

std::optional<std::vector<SymExpr>> symSelect(const Val& cond, const Val& a, const Val& b) {
  if (!cond.value || cond.value->rank() > 1) return std::nullopt;
  auto ops = operands(a, b);
  if (!ops) return std::nullopt;
  size_t n = ops->first.size();
  int64_t cn = cond.value->numElements();
  if (cn != 1 && cn != static_cast<int64_t>(n)) return std::nullopt;
  std::vector<SymExpr> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back(cond.value->getI(cn == 1 ? 0 : static_cast<int64_t>(i)) ? ops->first[i]
                                                                          : ops->second[i]);
  return out;
}

Result<Shape> reshapeDims(const Ctx& c, const Type& in, const std::vector<SymExpr>& target,
                          bool allowZero) {
  Shape out;
  int64_t inferAt = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    std::optional<int64_t> v = target[i].constantValue();
    if (v && *v == -1) {
      if (inferAt >= 0) return c.err("the target shape has more than one -1");
      inferAt = static_cast<int64_t>(i);
      out.push_back(Dim(0));
    } else if (v && *v == 0 && !allowZero) {
      if (static_cast<int64_t>(i) >= in.rank())
        return c.err("target dim " + std::to_string(i) + " is 0 (copy) but the input has rank " +
                     std::to_string(in.rank()));
      KILN_TRY(SymExpr d, dimExpr(c, in, static_cast<int64_t>(i)));
      out.push_back(Dim(d));
    } else if (v && *v < 0) {
      return c.err("the target shape has a negative dim " + std::to_string(*v));
    } else {
      out.push_back(Dim(simplify(c, target[i])));
    }
  }
  if (inferAt < 0) return out;
  // Cancel the known target dims against the input's dims where they match exactly; what
  // remains is the inferred dim (a floordiv when nothing cancels).
  std::vector<SymExpr> rest;
  int64_t constIn = 1, constKnown = 1;
  for (int64_t i = 0; i < in.rank(); ++i) {
    KILN_TRY(SymExpr d, dimExpr(c, in, i));
    if (auto v = d.constantValue())
      constIn *= *v;
    else
      rest.push_back(d);
  }
  SymExpr leftover = SymExpr::constant(1);
  for (size_t i = 0; i < out.size(); ++i) {
    if (static_cast<int64_t>(i) == inferAt) continue;
    const SymExpr& d = out[i].expr();
    if (auto v = d.constantValue()) {
      constKnown *= *v;
      continue;
    }
    auto it = std::find(rest.begin(), rest.end(), d);
    if (it != rest.end())
      rest.erase(it);
    else
      leftover = leftover * d;
  }
  SymExpr num = SymExpr::constant(1);
  for (const SymExpr& d : rest) num = num * d;
  if (constKnown == 0) return c.err("cannot infer the -1 dim next to a 0 dim");
  if (constIn % constKnown == 0)
    num = num * SymExpr::constant(constIn / constKnown);
  else
    num = SymExpr::floorDiv(num * SymExpr::constant(constIn), SymExpr::constant(constKnown));
  if (leftover != SymExpr::constant(1)) num = SymExpr::floorDiv(num, leftover);
  out[static_cast<size_t>(inferAt)] = Dim(simplify(c, num));
  return out;
}

Result<Val> shapeValue(Ctx& c, const Val& x, int64_t start, int64_t end) {
  std::vector<SymExpr> dims;
  bool isStatic = true;
  for (int64_t i = start; i < end; ++i) {
    KILN_TRY(SymExpr d, dimExpr(c, x.type(), i));
    isStatic = isStatic && d.isConstant();
    dims.push_back(d);
  }
  if (isStatic) {
    std::vector<int64_t> v;
    for (const SymExpr& d : dims) v.push_back(*d.constantValue());
    return c.constant(i64Tensor(v));
  }
  std::vector<Val> parts;
  for (int64_t i = start; i < end; ++i) {
    const SymExpr& d = dims[static_cast<size_t>(i - start)];
    if (auto v = d.constantValue()) {
      parts.push_back(c.constant(i64Tensor({*v})));
      continue;
    }
    Attrs a;
    a.set("axis", i);
    KILN_TRY(Val dv, c.op(OpKind::Dim, {x}, std::move(a)));
    KILN_TRY(dv, reshapeTo(c, dv, {Dim(1)}));
    parts.push_back(dv);
  }
  Val out;
  if (parts.size() == 1) {
    out = parts[0];
  } else {
    Attrs a;
    a.set("axis", int64_t(0));
    KILN_TRY(out, c.op(OpKind::Concat, parts, std::move(a)));
  }
  out.sym = dims;
  return out;
}

} // namespace kiln::onnx
