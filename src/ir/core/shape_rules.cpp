// Shape rules: result types of every op in ops.def from operand types and attributes.
//
// Dims may be static, symbolic or `?`. A rule rejects an op only when the mismatch is
// provable under the symbol ranges; a `?` dim or a relation that cannot be decided is
// accepted and left for run-time checks. Symbolic results are built with SymExpr and then
// simplified with the ranges, so `slice [0:5]` of `{seq}` gives `{min(seq, 5)}`.
#include "ir/core/shape_rules.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace kiln {

namespace {

using Types = Result<std::vector<Type>>;

std::string shapeStr(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + s[i].str();
  return out + "]";
}

bool known(const Dim& d) { return !d.isUnknown(); }

// Both known and provably unequal.
bool provablyDifferent(const Dim& a, const Dim& b, const SymbolTable& syms) {
  return known(a) && known(b) &&
         (provablyLT(a.expr(), b.expr(), syms) || provablyLT(b.expr(), a.expr(), syms));
}

bool provablyNotOne(const Dim& d, const SymbolTable& syms) {
  return known(d) && provablyDifferent(d, Dim(1), syms);
}

bool isStaticOne(const Dim& d) { return d.isStatic() && d.value() == 1; }

// One aligned pair of dims under numpy broadcasting; nullopt when provably incompatible.
std::optional<Dim> broadcastDim(const Dim& a, const Dim& b, const SymbolTable& syms) {
  if (!known(a) && !known(b)) return Dim::unknown();
  if (!known(a)) return provablyNotOne(b, syms) ? b : Dim::unknown();
  if (!known(b)) return provablyNotOne(a, syms) ? a : Dim::unknown();
  if (provablyEqual(a.expr(), b.expr(), syms)) return a;
  if (isStaticOne(a)) return b;
  if (isStaticOne(b)) return a;
  bool aNotOne = provablyNotOne(a, syms), bNotOne = provablyNotOne(b, syms);
  if (aNotOne && bNotOne) {
    if (provablyDifferent(a, b, syms)) return std::nullopt;
    return a;
  }
  // A dim that cannot be 1 is what the other stretches to (or must equal).
  if (aNotOne) return a;
  if (bNotOne) return b;
  // Both may be 1: the valid outcomes are exactly the larger of the two.
  return Dim(simplifyWithRanges(SymExpr::max(a.expr(), b.expr()), syms));
}

std::optional<Shape> broadcastPair(const Shape& a, const Shape& b, const SymbolTable& syms) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank, Dim(1));
  for (size_t i = 0; i < rank; ++i) {
    Dim da = i < a.size() ? a[a.size() - 1 - i] : Dim(1);
    Dim db = i < b.size() ? b[b.size() - 1 - i] : Dim(1);
    std::optional<Dim> d = broadcastDim(da, db, syms);
    if (!d) return std::nullopt;
    out[rank - 1 - i] = *d;
  }
  return out;
}

// Everything a rule needs, and the error helper that prefixes the op name.
struct Ctx {
  const OpInfo& info;
  const std::vector<Type>& ops;
  const Attrs& attrs;
  const std::vector<Type>& declared;
  const SymbolTable& syms;
  const Loc& loc;

  Diag err(const std::string& msg) const { return error(loc, std::string(info.name) + ": " + msg); }

  ElemType resultElem(ElemType base) const {
    if (info.has(kResultBool)) return ElemType::I1;
    if (info.has(kResultI64)) return ElemType::I64;
    return base;
  }

  Result<int64_t> axis(int64_t a, int64_t rank, std::string_view what = "axis") const {
    if (a < -rank || a >= rank)
      return err(std::string(what) + " " + std::to_string(a) + " is out of range for rank " +
                 std::to_string(rank));
    return a < 0 ? a + rank : a;
  }

  Result<Type> declaredType() const {
    if (declared.size() != 1)
      return err("the result type must be given (" + std::to_string(declared.size()) +
                 " result types declared, expected 1)");
    return declared[0];
  }

  Status sameElem(size_t first, size_t last) const {
    for (size_t i = first + 1; i <= last && i < ops.size(); ++i)
      if (ops[i].elem() != ops[first].elem())
        return err("operand element types " + std::string(elemTypeName(ops[first].elem())) +
                   " and " + std::string(elemTypeName(ops[i].elem())) + " differ");
    return ok();
  }

  Status integerOperand(size_t i, std::string_view what) const {
    if (!isInteger(ops[i].elem()))
      return err(std::string(what) + " has element type " +
                 std::string(elemTypeName(ops[i].elem())) + ", expected an integer type");
    return ok();
  }

  Status oneOf(std::string_view name, std::string value,
               std::initializer_list<std::string_view> allowed) const {
    for (std::string_view a : allowed)
      if (value == a) return ok();
    std::string list;
    for (std::string_view a : allowed)
      list += (list.empty() ? "\"" : ", \"") + std::string(a) + "\"";
    return err(std::string(name) + " \"" + value + "\" is not one of " + list);
  }
};

std::vector<Type> one(Type t) { return {std::move(t)}; }

Status checkOperands(const Ctx& c) {
  int n = static_cast<int>(c.ops.size());
  if (n < c.info.minOperands || (c.info.maxOperands >= 0 && n > c.info.maxOperands)) {
    std::string want = std::to_string(c.info.minOperands);
    if (c.info.maxOperands != c.info.minOperands)
      want += c.info.maxOperands < 0 ? " or more" : " to " + std::to_string(c.info.maxOperands);
    return c.err("expects " + want + " operands, got " + std::to_string(n));
  }
  for (size_t i = 0; i < c.ops.size(); ++i) {
    ElemType e = c.ops[i].elem();
    std::string got =
        "operand " + std::to_string(i) + " has element type " + std::string(elemTypeName(e));
    if (c.info.has(kFloatOnly) && !isFloat(e)) return c.err(got + ", expected a float type");
    if (c.info.has(kNumeric) && isBool(e)) return c.err(got + ", expected a numeric type");
    if (c.info.has(kBoolOnly) && !isBool(e)) return c.err(got + ", expected i1");
  }
  return ok();
}

// numpy broadcasting of operands [first, end) with an error naming their types.
Result<Shape> broadcastOperands(const Ctx& c, size_t first) {
  Shape s = c.ops[first].shape();
  for (size_t i = first + 1; i < c.ops.size(); ++i) {
    std::optional<Shape> b = broadcastPair(s, c.ops[i].shape(), c.syms);
    if (!b) {
      std::string names;
      for (size_t j = first; j < c.ops.size(); ++j)
        names += (j == first ? "" : (j + 1 == c.ops.size() ? " and " : ", ")) + c.ops[j].str();
      return c.err("operand shapes " + names + " do not broadcast");
    }
    s = std::move(*b);
  }
  return s;
}

Types elementwise(const Ctx& c) {
  // select's condition is i1; its two values share a type like other ops' operands.
  bool select = c.info.kind == OpKind::Select;
  size_t firstValue = select ? 1 : 0;
  if (select && !isBool(c.ops[0].elem()))
    return c.err("condition has element type " + std::string(elemTypeName(c.ops[0].elem())) +
                 ", expected i1");
  KILN_CHECK(c.sameElem(firstValue, c.ops.size() - 1));
  KILN_TRY(Shape s, broadcastOperands(c, 0));
  return one(Type(c.resultElem(c.ops[firstValue].elem()), std::move(s)));
}

Result<bool> keepDims(const Ctx& c) {
  int64_t k = c.attrs.getInt("keepdims", 0);
  if (k != 0 && k != 1) return c.err("keepdims must be 0 or 1, got " + std::to_string(k));
  return k == 1;
}

Types reduction(const Ctx& c) {
  const Type& x = c.ops[0];
  KILN_TRY(bool keep, keepDims(c));
  std::vector<bool> reduced(static_cast<size_t>(x.rank()), false);
  std::vector<int64_t> axes = c.attrs.getInts("axes");
  if (axes.empty()) std::fill(reduced.begin(), reduced.end(), true);
  for (int64_t a : axes) {
    KILN_TRY(int64_t n, c.axis(a, x.rank()));
    if (reduced[static_cast<size_t>(n)])
      return c.err("axis " + std::to_string(a) + " is listed twice in axes");
    reduced[static_cast<size_t>(n)] = true;
  }
  Shape s;
  for (size_t i = 0; i < reduced.size(); ++i) {
    if (!reduced[i])
      s.push_back(x.shape()[i]);
    else if (keep)
      s.push_back(Dim(1));
  }
  return one(Type(c.resultElem(x.elem()), std::move(s)));
}

Types argReduction(const Ctx& c) {
  const Type& x = c.ops[0];
  KILN_TRY(bool keep, keepDims(c));
  KILN_TRY(int64_t axis, c.axis(c.attrs.getInt("axis"), x.rank()));
  Shape s;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != axis)
      s.push_back(x.dim(i));
    else if (keep)
      s.push_back(Dim(1));
  }
  return one(Type(c.resultElem(x.elem()), std::move(s)));
}

// Same type as the operand after checking `axis`.
Types alongAxis(const Ctx& c) {
  KILN_CHECK(c.axis(c.attrs.getInt("axis"), c.ops[0].rank()));
  return one(c.ops[0]);
}

// Values and i64 indices with the axis dim replaced by k.
Types topK(const Ctx& c) {
  const Type& x = c.ops[0];
  KILN_TRY(int64_t axis, c.axis(c.attrs.getInt("axis"), x.rank()));
  int64_t k = c.attrs.getInt("k");
  if (k < 0) return c.err("k must be >= 0, got " + std::to_string(k));
  if (x.dim(axis).isStatic() && k > x.dim(axis).value())
    return c.err("k = " + std::to_string(k) + " exceeds dim " + x.dim(axis).str());
  Shape s = x.shape();
  s[static_cast<size_t>(axis)] = Dim(k);
  return std::vector<Type>{Type(x.elem(), s), Type(ElemType::I64, s)};
}

// The data-dependent dim of a kDataShaped op: dim `d` of declared result `r`, which must be a
// symbol declared data_dependent (the op binds it when it runs).
Result<Dim> dataDim(const Ctx& c, size_t r, int64_t d) {
  if ((c.info.numResults >= 0 && c.declared.size() != static_cast<size_t>(c.info.numResults)) ||
      r >= c.declared.size())
    return c.err("the result types must be given: a result dim is a data-dependent symbol");
  const Type& t = c.declared[r];
  if (d >= t.rank())
    return c.err("result " + std::to_string(r) + " " + t.str() + " needs rank " +
                 std::to_string(d + 1));
  const Dim& dim = t.dim(d);
  std::optional<std::string> sym = dim.isUnknown() ? std::nullopt : dim.expr().symbolName();
  const SymbolInfo* info = sym ? c.syms.lookup(*sym) : nullptr;
  if (!info || !info->dataDependent)
    return c.err("dim " + std::to_string(d) + " of result " + std::to_string(r) + " (" + t.str() +
                 ") must be a symbol declared data_dependent, got " + dim.str());
  return dim;
}

Types nonZero(const Ctx& c) {
  KILN_TRY(Dim n, dataDim(c, 0, 1));
  return one(Type(ElemType::I64, {Dim(c.ops[0].rank()), n}));
}

Types unique(const Ctx& c) {
  const Type& x = c.ops[0];
  KILN_TRY(Dim u, dataDim(c, 1, 0));
  Shape y = {u};
  Dim n = Dim::unknown();
  if (c.attrs.has("axis")) {
    KILN_TRY(int64_t axis, c.axis(c.attrs.getInt("axis"), x.rank()));
    y = x.shape();
    y[static_cast<size_t>(axis)] = u;
    n = x.dim(axis);
  } else {
    SymExpr count = SymExpr::constant(1);
    for (const Dim& d : x.shape()) {
      if (d.isUnknown()) return c.err("the operand has a `?` dim");
      count = count * d.expr();
    }
    n = Dim(count);
  }
  return std::vector<Type>{Type(x.elem(), y), Type(ElemType::I64, {u}), Type(ElemType::I64, {n}),
                           Type(ElemType::I64, {u})};
}

Types nonMaxSuppression(const Ctx& c) {
  const Type &boxes = c.ops[0], &scores = c.ops[1];
  if (!isFloat(boxes.elem()) || !isFloat(scores.elem()))
    return c.err("boxes and scores must have floating-point element types");
  if (boxes.rank() != 3 || scores.rank() != 3 || provablyDifferent(boxes.dim(2), Dim(4), c.syms))
    return c.err("boxes " + boxes.str() + " and scores " + scores.str() +
                 " must be [B, N, 4] and [B, C, N]");
  if (provablyDifferent(boxes.dim(0), scores.dim(0), c.syms) ||
      provablyDifferent(boxes.dim(1), scores.dim(2), c.syms))
    return c.err("boxes " + boxes.str() + " and scores " + scores.str() +
                 " disagree on the batch or the number of boxes");
  const char* what[] = {"the maximum of boxes per class", "the iou threshold",
                        "the score threshold"};
  for (size_t i = 2; i < 5; ++i) {
    std::optional<int64_t> n = c.ops[i].numElements();
    if (c.ops[i].rank() > 1 || (n && *n != 1))
      return c.err(std::string(what[i - 2]) + " (operand " + std::to_string(i) +
                   ") must hold one element, got " + c.ops[i].str());
  }
  if (!isInteger(c.ops[2].elem()) || !isFloat(c.ops[3].elem()) || !isFloat(c.ops[4].elem()))
    return c.err("the maximum of boxes must be an integer, the thresholds floating-point");
  KILN_TRY(Dim n, dataDim(c, 0, 0));
  return one(Type(ElemType::I64, {n, Dim(3)}));
}

// The loop's results: its carried values, whose types the body keeps.
Types loop(const Ctx& c) {
  int64_t carried = c.attrs.getInt("carried");
  if (carried < 0 || static_cast<size_t>(carried) + 2 > c.ops.size())
    return c.err("carried = " + std::to_string(carried) + " but there are " +
                 std::to_string(c.ops.size()) +
                 " operands (the most iterations, the condition, "
                 "the carried values, then the invariants)");
  if (carried == 0 && c.declared.empty())
    return c.err("the loop has neither carried values nor scan outputs: it computes nothing");
  for (size_t i = 0; i < 2; ++i) {
    std::optional<int64_t> n = c.ops[i].numElements();
    ElemType want = i == 0 ? ElemType::I64 : ElemType::I1;
    if (c.ops[i].elem() != want || c.ops[i].rank() > 1 || (n && *n != 1))
      return c.err(std::string(i == 0 ? "the most iterations" : "the condition") + " must be one " +
                   std::string(elemTypeName(want)) + ", got " + c.ops[i].str());
  }
  std::vector<Type> out(c.ops.begin() + 2, c.ops.begin() + 2 + carried);
  // Scan outputs: their types are declared, each leading dim the loop's data-dependent
  // iteration count (one symbol for all of them).
  std::optional<Dim> length;
  for (size_t r = out.size(); r < c.declared.size(); ++r) {
    KILN_TRY(Dim n, dataDim(c, r, 0));
    if (length && n != *length)
      return c.err("scan output " + std::to_string(r - static_cast<size_t>(carried)) +
                   " has length " + n.str() + ", not " + length->str() +
                   " like the first: every scan output of a loop has "
                   "its iteration count as its first dim");
    length = n;
    out.push_back(c.declared[r]);
  }
  return out;
}

// The batch dims of square matrices.
Types det(const Ctx& c) {
  const Type& x = c.ops[0];
  if (x.rank() < 2)
    return c.err("the operand must have rank >= 2, got " + std::to_string(x.rank()));
  if (provablyDifferent(x.dim(x.rank() - 2), x.dim(x.rank() - 1), c.syms))
    return c.err("the matrices must be square, got " + x.dim(x.rank() - 2).str() + "x" +
                 x.dim(x.rank() - 1).str());
  Shape s(x.shape().begin(), x.shape().end() - 2);
  return one(Type(x.elem(), s));
}

// N x C x Ho x Wo from x: N x C x H x W and grid: N x Ho x Wo x 2.
Types gridSample(const Ctx& c) {
  KILN_CHECK(c.sameElem(0, 1));
  const Type &x = c.ops[0], &g = c.ops[1];
  if (x.rank() != 4 || g.rank() != 4)
    return c.err("x and grid must have rank 4, got " + std::to_string(x.rank()) + " and " +
                 std::to_string(g.rank()));
  if (provablyDifferent(g.dim(3), Dim(2), c.syms))
    return c.err("the grid's last dim must be 2, got " + g.dim(3).str());
  if (provablyDifferent(x.dim(0), g.dim(0), c.syms))
    return c.err("batch dims " + x.dim(0).str() + " and " + g.dim(0).str() + " differ");
  KILN_CHECK(c.oneOf("mode", c.attrs.getStr("mode"), {"bilinear", "nearest", "bicubic"}));
  KILN_CHECK(
      c.oneOf("padding_mode", c.attrs.getStr("padding_mode"), {"zeros", "border", "reflection"}));
  return one(Type(x.elem(), {x.dim(0), x.dim(1), g.dim(1), g.dim(2)}));
}

// R x C x output_height x output_width from x: N x C x H x W, rois: R x 4, batch indices: R.
Types roiAlign(const Ctx& c) {
  const Type &x = c.ops[0], &rois = c.ops[1], &idx = c.ops[2];
  if (!isFloat(x.elem()))
    return c.err("x has element type " + std::string(elemTypeName(x.elem())) +
                 ", expected a float type");
  KILN_CHECK(c.sameElem(0, 1));
  KILN_CHECK(c.integerOperand(2, "the batch indices"));
  if (x.rank() != 4 || rois.rank() != 2 || idx.rank() != 1)
    return c.err("expects x of rank 4, rois of rank 2 and batch indices of rank 1");
  if (provablyDifferent(rois.dim(1), Dim(4), c.syms))
    return c.err("rois must be R x 4, got R x " + rois.dim(1).str());
  if (provablyDifferent(rois.dim(0), idx.dim(0), c.syms))
    return c.err("rois has " + rois.dim(0).str() + " rows but the batch indices " +
                 idx.dim(0).str());
  KILN_CHECK(c.oneOf("mode", c.attrs.getStr("mode"), {"avg", "max"}));
  int64_t oh = c.attrs.getInt("output_height"), ow = c.attrs.getInt("output_width");
  if (oh < 1 || ow < 1 || c.attrs.getInt("sampling_ratio") < 0)
    return c.err("output_height and output_width must be >= 1 and sampling_ratio >= 0");
  return one(Type(x.elem(), {rois.dim(0), x.dim(1), Dim(oh), Dim(ow)}));
}

Types matmul(const Ctx& c) {
  KILN_CHECK(c.sameElem(0, 1));
  const Type &a = c.ops[0], &b = c.ops[1];
  for (size_t i = 0; i < 2; ++i)
    if (c.ops[i].rank() < 1) return c.err("operand " + std::to_string(i) + " must have rank >= 1");
  Shape sa = a.shape(), sb = b.shape();
  if (a.rank() == 1) sa.insert(sa.begin(), Dim(1));
  if (b.rank() == 1) sb.push_back(Dim(1));
  const Dim &ka = sa[sa.size() - 1], &kb = sb[sb.size() - 2];
  if (provablyDifferent(ka, kb, c.syms))
    return c.err("contraction dims " + ka.str() + " and " + kb.str() + " of " + a.str() + " and " +
                 b.str() + " differ");
  Shape batchA(sa.begin(), sa.end() - 2), batchB(sb.begin(), sb.end() - 2);
  std::optional<Shape> batch = broadcastPair(batchA, batchB, c.syms);
  if (!batch) return c.err("batch dims of " + a.str() + " and " + b.str() + " do not broadcast");
  Shape s = std::move(*batch);
  if (a.rank() > 1) s.push_back(sa[sa.size() - 2]);
  if (b.rank() > 1) s.push_back(sb[sb.size() - 1]);
  return one(Type(a.elem(), std::move(s)));
}

// q: B.. x Hq x Sq x D, k: B.. x Hkv x Sk x D, v: B.. x Hkv x Sk x Dv, optional mask
// broadcasting to B.. x Hq x Sq x Sk -> B.. x Hq x Sq x Dv.
Types attention(const Ctx& c) {
  KILN_CHECK(c.sameElem(0, c.ops.size() - 1));
  const Type &q = c.ops[0], &k = c.ops[1], &v = c.ops[2];
  int64_t r = q.rank();
  if (r < 3 || k.rank() != r || v.rank() != r)
    return c.err("q, k and v must have one rank >= 3 (batch.., heads, sequence, head dim), got " +
                 q.str() + ", " + k.str() + " and " + v.str());
  for (int64_t d = 0; d < r - 3; ++d)
    if (provablyDifferent(q.dim(d), k.dim(d), c.syms) ||
        provablyDifferent(q.dim(d), v.dim(d), c.syms))
      return c.err("batch dim " + std::to_string(d) + " differs between q " + q.str() + ", k " +
                   k.str() + " and v " + v.str());
  const Dim &hq = q.dim(r - 3), &hk = k.dim(r - 3);
  if (provablyDifferent(hk, v.dim(r - 3), c.syms))
    return c.err("k and v have different head counts: " + k.str() + " and " + v.str());
  if (hq.isStatic() && hk.isStatic() ? hk.value() < 1 || hq.value() % hk.value() != 0 : !(hq == hk))
    return c.err("the kv head count " + hk.str() + " must divide the query head count " + hq.str());
  if (provablyDifferent(q.dim(r - 1), k.dim(r - 1), c.syms))
    return c.err("q and k head dims " + q.dim(r - 1).str() + " and " + k.dim(r - 1).str() +
                 " differ");
  if (provablyDifferent(k.dim(r - 2), v.dim(r - 2), c.syms))
    return c.err("k and v sequence lengths " + k.dim(r - 2).str() + " and " + v.dim(r - 2).str() +
                 " differ");
  Shape scores(q.shape().begin(), q.shape().end() - 1);
  scores.push_back(k.dim(r - 2));
  if (c.ops.size() == 4) {
    std::optional<Shape> m = broadcastPair(scores, c.ops[3].shape(), c.syms);
    if (!m || m->size() != scores.size() || !(*m == scores))
      return c.err("the mask " + c.ops[3].str() + " does not broadcast to the scores " +
                   Type(q.elem(), scores).str());
  }
  int64_t causal = c.attrs.getInt("causal");
  if (causal != 0 && causal != 1)
    return c.err("causal must be 0 or 1, got " + std::to_string(causal));
  Shape out(q.shape().begin(), q.shape().end() - 1);
  out.push_back(v.dim(r - 1));
  return one(Type(q.elem(), std::move(out)));
}

// The window attributes of conv and the pools, with defaults for empty lists.
struct Window {
  std::vector<int64_t> kernel, strides, pads, dilations;
  bool ceil = false;
};

Result<std::vector<int64_t>> listAttr(const Ctx& c, std::string_view name, size_t n,
                                      int64_t fallback, int64_t min) {
  std::vector<int64_t> v = c.attrs.getInts(name);
  if (v.empty()) v.assign(n, fallback);
  if (v.size() != n)
    return c.err(std::string(name) + " has " + std::to_string(v.size()) + " values, expected " +
                 std::to_string(n));
  for (int64_t x : v)
    if (x < min)
      return c.err(std::string(name) + " value " + std::to_string(x) + " is below " +
                   std::to_string(min));
  return v;
}

Result<Window> windowAttrs(const Ctx& c, size_t k, bool hasDilations) {
  Window w;
  KILN_TRY(w.strides, listAttr(c, "strides", k, 1, 1));
  KILN_TRY(w.pads, listAttr(c, "pads", 2 * k, 0, 0));
  if (hasDilations) {
    KILN_TRY(w.dilations, listAttr(c, "dilations", k, 1, 1));
  } else {
    w.dilations.assign(k, 1);
  }
  return w;
}

// Output size along spatial dim i: floor((D + pb + pe - dil*(K-1) - 1)/s) + 1, or ceil.
Result<Dim> windowDim(const Ctx& c, const Window& w, size_t i, const Dim& in, const Dim& kernel) {
  if (!known(in) || !known(kernel)) return Dim::unknown();
  size_t k = w.strides.size();
  using E = SymExpr;
  E span = E::constant(w.dilations[i]) * (kernel.expr() - E::constant(1)) + E::constant(1);
  E num = in.expr() + E::constant(w.pads[i]) + E::constant(w.pads[i + k]) - span;
  E stride = E::constant(w.strides[i]);
  E out = (w.ceil ? E::ceilDiv(num, stride) : E::floorDiv(num, stride)) + E::constant(1);
  out = simplifyWithRanges(out, c.syms);
  if (in.isStatic() && kernel.isStatic() && !out.isConstant())
    return c.err("output size along spatial dim " + std::to_string(i) + " overflows int64");
  if (provablyLT(num, E::constant(0), c.syms))
    return c.err(
        "window of " + simplifyWithRanges(span, c.syms).str() +
        " elements is larger than the padded input " +
        simplifyWithRanges(in.expr() + E::constant(w.pads[i]) + E::constant(w.pads[i + k]), c.syms)
            .str() +
        " along spatial dim " + std::to_string(i));
  return Dim(out);
}

Status spatialRank(const Ctx& c, const Type& x) {
  if (x.rank() < 3 || x.rank() > 5)
    return c.err("input " + x.str() + " must have rank 3 to 5 (N x C x 1 to 3 spatial dims)");
  return ok();
}

Types conv(const Ctx& c) {
  KILN_CHECK(c.sameElem(0, c.ops.size() - 1));
  const Type &x = c.ops[0], &w = c.ops[1];
  KILN_CHECK(spatialRank(c, x));
  if (w.rank() != x.rank())
    return c.err("weight " + w.str() + " must have the input's rank " + std::to_string(x.rank()));
  size_t k = static_cast<size_t>(x.rank() - 2);
  KILN_TRY(Window win, windowAttrs(c, k, true));
  int64_t group = c.attrs.getInt("group", 1);
  if (group < 1) return c.err("group must be at least 1, got " + std::to_string(group));
  const Dim &channels = x.dim(1), &m = w.dim(0), &perGroup = w.dim(1);
  if (known(perGroup) &&
      provablyDifferent(channels, Dim(perGroup.expr() * SymExpr::constant(group)), c.syms))
    return c.err("input " + x.str() + " has " + channels.str() + " channels but weight " + w.str() +
                 " with group " + std::to_string(group) + " expects " + perGroup.str() + "*" +
                 std::to_string(group));
  if (m.isStatic() && m.value() % group != 0)
    return c.err("weight " + w.str() + " has " + m.str() +
                 " output channels, not divisible by group " + std::to_string(group));
  if (c.ops.size() == 3) {
    const Type& bias = c.ops[2];
    if (bias.rank() != 1 || provablyDifferent(bias.dim(0), m, c.syms))
      return c.err("bias " + bias.str() + " must be 1-D of the " + m.str() + " output channels");
  }
  Shape s = {x.dim(0), m};
  for (size_t i = 0; i < k; ++i) {
    KILN_TRY(Dim d, windowDim(c, win, i, x.dim(static_cast<int64_t>(i) + 2),
                              w.dim(static_cast<int64_t>(i) + 2)));
    s.push_back(d);
  }
  return one(Type(x.elem(), std::move(s)));
}

Types pool(const Ctx& c) {
  const Type& x = c.ops[0];
  KILN_CHECK(spatialRank(c, x));
  size_t k = static_cast<size_t>(x.rank() - 2);
  bool dilations = c.info.kind == OpKind::MaxPool;
  KILN_TRY(Window win, windowAttrs(c, k, dilations));
  if (c.attrs.getInts("kernel").size() != k)
    return c.err("kernel has " + std::to_string(c.attrs.getInts("kernel").size()) +
                 " values, expected " + std::to_string(k));
  KILN_TRY(win.kernel, listAttr(c, "kernel", k, 1, 1));
  int64_t ceilMode = c.attrs.getInt("ceil_mode", 0);
  if (ceilMode != 0 && ceilMode != 1)
    return c.err("ceil_mode must be 0 or 1, got " + std::to_string(ceilMode));
  win.ceil = ceilMode == 1;
  Shape s = {x.dim(0), x.dim(1)};
  for (size_t i = 0; i < k; ++i) {
    KILN_TRY(Dim d, windowDim(c, win, i, x.dim(static_cast<int64_t>(i) + 2), Dim(win.kernel[i])));
    s.push_back(d);
  }
  return one(Type(x.elem(), std::move(s)));
}

// The product of the dims, or nullopt when some dim is `?`.
std::optional<SymExpr> elementCount(const Shape& s) {
  SymExpr n = SymExpr::constant(1);
  for (const Dim& d : s) {
    if (!known(d)) return std::nullopt;
    n = n * d.expr();
  }
  return n;
}

Status sameElemAsDeclared(const Ctx& c, const Type& result) {
  if (result.elem() != c.ops[0].elem())
    return c.err("result element type " + std::string(elemTypeName(result.elem())) +
                 " differs from the operand's " + std::string(elemTypeName(c.ops[0].elem())));
  return ok();
}

Types reshape(const Ctx& c) {
  KILN_TRY(Type r, c.declaredType());
  KILN_CHECK(sameElemAsDeclared(c, r));
  std::optional<SymExpr> from = elementCount(c.ops[0].shape()), to = elementCount(r.shape());
  if (from && to && !provablyEqual(*from, *to, c.syms))
    return c.err("cannot reshape " + c.ops[0].str() + " (" + from->str() + " elements) to " +
                 r.str() + " (" + to->str() + " elements)");
  return one(r);
}

Types broadcastTo(const Ctx& c) {
  KILN_TRY(Type r, c.declaredType());
  KILN_CHECK(sameElemAsDeclared(c, r));
  const Type& x = c.ops[0];
  bool fits = x.rank() <= r.rank();
  for (int64_t i = 0; fits && i < x.rank(); ++i) {
    const Dim& from = x.dim(x.rank() - 1 - i);
    const Dim& to = r.dim(r.rank() - 1 - i);
    fits = isStaticOne(from) || !provablyDifferent(from, to, c.syms);
  }
  if (!fits) return c.err("operand " + x.str() + " does not broadcast to " + r.str());
  return one(r);
}

Types constant(const Ctx& c) {
  const HostTensor* v = c.attrs.getDense("value");
  if (!v) return c.err("needs a dense attribute 'value'");
  Type t = Type::tensor(v->elem(), v->shape());
  if (!c.declared.empty()) {
    KILN_TRY(Type r, c.declaredType());
    if (r != t) return c.err("value has type " + t.str() + " but the result type is " + r.str());
  }
  return one(t);
}

Types transpose(const Ctx& c) {
  const Type& x = c.ops[0];
  std::vector<int64_t> perm = c.attrs.getInts("perm");
  if (static_cast<int64_t>(perm.size()) != x.rank())
    return c.err("perm has " + std::to_string(perm.size()) + " entries for rank " +
                 std::to_string(x.rank()));
  std::vector<bool> seen(perm.size(), false);
  Shape s;
  for (int64_t p : perm) {
    if (p < 0 || p >= x.rank() || seen[static_cast<size_t>(p)])
      return c.err("perm is not a permutation of 0.." + std::to_string(x.rank() - 1));
    seen[static_cast<size_t>(p)] = true;
    s.push_back(x.dim(p));
  }
  return one(Type(x.elem(), std::move(s)));
}

Types concat(const Ctx& c) {
  KILN_CHECK(c.sameElem(0, c.ops.size() - 1));
  const Type& first = c.ops[0];
  KILN_TRY(int64_t axis, c.axis(c.attrs.getInt("axis"), first.rank()));
  Shape s = first.shape();
  for (size_t i = 1; i < c.ops.size(); ++i) {
    const Type& t = c.ops[i];
    if (t.rank() != first.rank())
      return c.err("operand " + std::to_string(i) + " " + t.str() + " has another rank than " +
                   first.str());
    for (int64_t d = 0; d < t.rank(); ++d) {
      Dim& acc = s[static_cast<size_t>(d)];
      const Dim& next = t.dim(d);
      if (d == axis) {
        acc = known(acc) && known(next) ? Dim(acc.expr() + next.expr()) : Dim::unknown();
        continue;
      }
      if (provablyDifferent(acc, next, c.syms))
        return c.err("operand " + std::to_string(i) + " " + t.str() + " differs from " +
                     first.str() + " in dim " + std::to_string(d));
      if (!known(acc)) acc = next;
    }
  }
  if (known(s[static_cast<size_t>(axis)]))
    s[static_cast<size_t>(axis)] =
        Dim(simplifyWithRanges(s[static_cast<size_t>(axis)].expr(), c.syms));
  return one(Type(first.elem(), std::move(s)));
}

Types split(const Ctx& c) {
  const Type& x = c.ops[0];
  KILN_TRY(int64_t axis, c.axis(c.attrs.getInt("axis"), x.rank()));
  std::vector<int64_t> sizes = c.attrs.getInts("sizes");
  if (sizes.empty()) return c.err("sizes must list at least one piece");
  int64_t total = 0;
  for (int64_t n : sizes) {
    if (n < 0) return c.err("size " + std::to_string(n) + " is negative");
    if (__builtin_add_overflow(total, n, &total)) return c.err("sizes overflow int64");
  }
  const Dim& d = x.dim(axis);
  if (known(d) && !provablyEqual(d.expr(), SymExpr::constant(total), c.syms))
    return c.err("sizes sum to " + std::to_string(total) + " but dim " + std::to_string(axis) +
                 " of " + x.str() + " is " + d.str());
  std::vector<Type> out;
  for (int64_t n : sizes) {
    Shape s = x.shape();
    s[static_cast<size_t>(axis)] = Dim(n);
    out.emplace_back(x.elem(), std::move(s));
  }
  return out;
}

// A collective over N devices: N operands of one type; `devices` (when given) names one device
// per operand; the results are N types, one per device.
Types collective(const Ctx& c) {
  KILN_CHECK(c.sameElem(0, c.ops.size() - 1));
  const Type& first = c.ops[0];
  const int64_t n = static_cast<int64_t>(c.ops.size());
  for (size_t i = 1; i < c.ops.size(); ++i) {
    const Type& t = c.ops[i];
    bool same = t.rank() == first.rank();
    for (int64_t d = 0; same && d < t.rank(); ++d)
      same = !provablyDifferent(first.dim(d), t.dim(d), c.syms);
    if (!same)
      return c.err("operand " + std::to_string(i) + " " + t.str() + " differs from operand 0 " +
                   first.str() + "; every device contributes a tensor of one type");
  }
  if (c.attrs.has("devices") && static_cast<int64_t>(c.attrs.getStrs("devices").size()) != n)
    return c.err("devices lists " + std::to_string(c.attrs.getStrs("devices").size()) +
                 " devices for " + std::to_string(n) + " operands");
  if (c.info.kind != OpKind::AllGather)
    KILN_CHECK(c.oneOf("reduce", c.attrs.getStr("reduce"), {"sum", "max"}));
  Type out = first;
  if (c.info.kind != OpKind::AllReduce) {
    KILN_TRY(int64_t axis, c.axis(c.attrs.getInt("axis"), first.rank()));
    Shape s = first.shape();
    Dim& d = s[static_cast<size_t>(axis)];
    if (c.info.kind == OpKind::AllGather) {
      if (known(d)) d = Dim(simplifyWithRanges(d.expr() * SymExpr::constant(n), c.syms));
    } else {
      std::optional<int64_t> v = known(d) ? d.expr().constantValue() : std::nullopt;
      if (!v || *v % n != 0)
        return c.err("dim " + std::to_string(axis) + " of " + first.str() +
                     " must be a static size that divides by the " + std::to_string(n) +
                     " devices");
      d = Dim(*v / n);
    }
    out = Type(first.elem(), std::move(s));
  }
  return std::vector<Type>(static_cast<size_t>(n), out);
}

// Python slice length for a static dim.
int64_t sliceLen(int64_t dim, int64_t start, int64_t end, int64_t step) {
  auto clampIndex = [&](int64_t i, int64_t lo, int64_t hi) {
    if (i < 0) return std::max(i + dim, lo); // i + dim cannot overflow: i < 0 <= dim
    return std::min(i, hi);
  };
  if (step > 0) {
    int64_t s = clampIndex(start, 0, dim), e = clampIndex(end, 0, dim);
    return e > s ? (e - s - 1) / step + 1 : 0;
  }
  int64_t s = clampIndex(start, -1, dim - 1), e = clampIndex(end, -1, dim - 1);
  uint64_t mag = uint64_t{0} - static_cast<uint64_t>(step);
  return s > e ? static_cast<int64_t>(static_cast<uint64_t>(s - e - 1) / mag + 1) : 0;
}

// The same for a symbolic dim, as an expression (dims are never negative).
SymExpr sliceLenSym(const SymExpr& dim, int64_t start, int64_t end, int64_t step) {
  using E = SymExpr;
  auto clampIndex = [&](int64_t i, int64_t lo, const E& hi) {
    if (i < 0) return E::max(E::constant(i) + dim, E::constant(lo));
    if (i == 0 && lo == 0) return E::constant(0);
    return E::min(E::constant(i), hi);
  };
  if (step > 0) {
    E s = clampIndex(start, 0, dim), e = clampIndex(end, 0, dim);
    return E::max(E::constant(0), E::ceilDiv(e - s, E::constant(step)));
  }
  E last = dim - E::constant(1);
  E s = clampIndex(start, -1, last), e = clampIndex(end, -1, last);
  if (step == std::numeric_limits<int64_t>::min())
    return E::max(E::constant(0), E::min(E::constant(1), s - e));
  return E::max(E::constant(0), E::ceilDiv(s - e, E::constant(-step)));
}

Types slice(const Ctx& c) {
  const Type& x = c.ops[0];
  std::vector<int64_t> starts = c.attrs.getInts("starts"), ends = c.attrs.getInts("ends");
  std::vector<int64_t> axes = c.attrs.getInts("axes"), steps = c.attrs.getInts("steps");
  size_t n = starts.size();
  if (ends.size() != n)
    return c.err("starts has " + std::to_string(n) + " values but ends has " +
                 std::to_string(ends.size()));
  if (axes.empty()) {
    if (static_cast<int64_t>(n) > x.rank())
      return c.err(std::to_string(n) + " slices for rank " + std::to_string(x.rank()));
    for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(n, 1);
  if (axes.size() != n || steps.size() != n)
    return c.err("starts, ends, axes and steps must have the same length");
  Shape s = x.shape();
  std::vector<bool> seen(s.size(), false);
  for (size_t i = 0; i < n; ++i) {
    KILN_TRY(int64_t a, c.axis(axes[i], x.rank()));
    if (seen[static_cast<size_t>(a)])
      return c.err("axis " + std::to_string(axes[i]) + " is sliced twice");
    seen[static_cast<size_t>(a)] = true;
    if (steps[i] == 0) return c.err("step for axis " + std::to_string(axes[i]) + " is 0");
    Dim& d = s[static_cast<size_t>(a)];
    if (d.isStatic())
      d = Dim(sliceLen(d.value(), starts[i], ends[i], steps[i]));
    else if (known(d))
      d = Dim(simplifyWithRanges(sliceLenSym(d.expr(), starts[i], ends[i], steps[i]), c.syms));
  }
  return one(Type(x.elem(), std::move(s)));
}

Types gather(const Ctx& c) {
  const Type &x = c.ops[0], &idx = c.ops[1];
  KILN_CHECK(c.integerOperand(1, "indices"));
  KILN_TRY(int64_t axis, c.axis(c.attrs.getInt("axis"), x.rank()));
  Shape s(x.shape().begin(), x.shape().begin() + axis);
  s.insert(s.end(), idx.shape().begin(), idx.shape().end());
  s.insert(s.end(), x.shape().begin() + axis + 1, x.shape().end());
  return one(Type(x.elem(), std::move(s)));
}

Types gatherElements(const Ctx& c) {
  const Type &x = c.ops[0], &idx = c.ops[1];
  KILN_CHECK(c.integerOperand(1, "indices"));
  if (idx.rank() != x.rank())
    return c.err("indices " + idx.str() + " must have the rank of " + x.str());
  KILN_CHECK(c.axis(c.attrs.getInt("axis"), x.rank()));
  return one(Type(x.elem(), idx.shape()));
}

Types scatterNd(const Ctx& c) {
  const Type &data = c.ops[0], &idx = c.ops[1], &upd = c.ops[2];
  KILN_CHECK(c.integerOperand(1, "indices"));
  if (upd.elem() != data.elem())
    return c.err("updates element type " + std::string(elemTypeName(upd.elem())) +
                 " differs from data's " + std::string(elemTypeName(data.elem())));
  if (c.attrs.has("reduction"))
    KILN_CHECK(
        c.oneOf("reduction", c.attrs.getStr("reduction"), {"none", "add", "mul", "max", "min"}));
  if (idx.rank() < 1) return c.err("indices " + idx.str() + " must have rank >= 1");
  const Dim& k = idx.dim(idx.rank() - 1);
  if (!k.isStatic()) return one(data);
  if (k.value() < 0 || k.value() > data.rank())
    return c.err("index tuples of length " + std::to_string(k.value()) + " exceed the rank " +
                 std::to_string(data.rank()) + " of data " + data.str());
  Shape want(idx.shape().begin(), idx.shape().end() - 1);
  want.insert(want.end(), data.shape().begin() + k.value(), data.shape().end());
  bool fits = upd.rank() == static_cast<int64_t>(want.size());
  for (size_t i = 0; fits && i < want.size(); ++i)
    fits = !provablyDifferent(upd.shape()[i], want[i], c.syms);
  if (!fits)
    return c.err("updates " + upd.str() + " must have shape " + shapeStr(want) +
                 " (indices.shape[:-1] + data.shape[" + std::to_string(k.value()) + ":])");
  return one(data);
}

Types pad(const Ctx& c) {
  const Type& x = c.ops[0];
  std::string mode = c.attrs.getStr("mode", "constant");
  KILN_CHECK(c.oneOf("mode", mode, {"constant", "reflect", "edge"}));
  std::vector<int64_t> pads = c.attrs.getInts("pads");
  if (static_cast<int64_t>(pads.size()) != 2 * x.rank())
    return c.err("pads has " + std::to_string(pads.size()) + " values, expected " +
                 std::to_string(2 * x.rank()) + " for " + x.str());
  Shape s = x.shape();
  for (size_t i = 0; i < s.size(); ++i) {
    int64_t b = pads[i], e = pads[i + s.size()];
    Dim& d = s[i];
    if (!known(d)) continue;
    if (d.isStatic() && mode != "constant") {
      int64_t limit = mode == "reflect" ? d.value() - 1 : (d.value() == 0 ? 0 : INT64_MAX);
      if ((b > 0 && b > limit) || (e > 0 && e > limit))
        return c.err(mode + " padding " + std::to_string(std::max(b, e)) + " of dim " +
                     std::to_string(i) + " is too large for size " + d.str());
    }
    SymExpr out =
        simplifyWithRanges(d.expr() + SymExpr::constant(b) + SymExpr::constant(e), c.syms);
    if (d.isStatic() && !out.isConstant())
      return c.err("padded size of dim " + std::to_string(i) + " overflows int64");
    if (provablyLT(out, SymExpr::constant(0), c.syms))
      return c.err("padding crops dim " + std::to_string(i) + " of " + x.str() +
                   " to a negative size " + out.str());
    d = Dim(out);
  }
  return one(Type(x.elem(), std::move(s)));
}

Types triangle(const Ctx& c) {
  if (c.ops[0].rank() < 2) return c.err("operand " + c.ops[0].str() + " must have rank >= 2");
  return one(c.ops[0]);
}

Types iota(const Ctx& c) {
  KILN_TRY(Type r, c.declaredType());
  KILN_CHECK(c.axis(c.attrs.getInt("axis"), r.rank()));
  return one(r);
}

Types range(const Ctx& c) {
  KILN_TRY(Type r, c.declaredType());
  if (r.rank() != 1) return c.err("result " + r.str() + " must have rank 1");
  return one(r);
}

Types dimOp(const Ctx& c) {
  KILN_CHECK(c.axis(c.attrs.getInt("axis"), c.ops[0].rank()));
  return one(Type(ElemType::I64, {}));
}

Types cast(const Ctx& c) {
  if (!c.attrs.has("to")) return c.err("needs a type attribute 'to'");
  return one(c.ops[0].withElem(c.attrs.getType("to")));
}

Types unary(const Ctx& c) {
  if (c.info.kind == OpKind::Gelu && c.attrs.has("approximate"))
    KILN_CHECK(c.oneOf("approximate", c.attrs.getStr("approximate"), {"none", "tanh"}));
  return one(c.ops[0].withElem(c.resultElem(c.ops[0].elem())));
}

Types infer(const Ctx& c) {
  switch (c.info.kind) {
  case OpKind::Neg:
  case OpKind::Abs:
  case OpKind::Exp:
  case OpKind::Log:
  case OpKind::Sqrt:
  case OpKind::Rsqrt:
  case OpKind::Reciprocal:
  case OpKind::Tanh:
  case OpKind::Sigmoid:
  case OpKind::Erf:
  case OpKind::Relu:
  case OpKind::Gelu:
  case OpKind::Silu:
  case OpKind::Sin:
  case OpKind::Cos:
  case OpKind::Tan:
  case OpKind::Asin:
  case OpKind::Acos:
  case OpKind::Atan:
  case OpKind::Sinh:
  case OpKind::Cosh:
  case OpKind::Asinh:
  case OpKind::Acosh:
  case OpKind::Atanh:
  case OpKind::Floor:
  case OpKind::Ceil:
  case OpKind::Round:
  case OpKind::Sign:
  case OpKind::Not:
  case OpKind::IsNan:
  case OpKind::IsInf: return unary(c);
  case OpKind::Add:
  case OpKind::Sub:
  case OpKind::Mul:
  case OpKind::Div:
  case OpKind::Pow:
  case OpKind::Max:
  case OpKind::Min:
  case OpKind::Mod:
  case OpKind::And:
  case OpKind::Or:
  case OpKind::Xor:
  case OpKind::Eq:
  case OpKind::Ne:
  case OpKind::Lt:
  case OpKind::Le:
  case OpKind::Gt:
  case OpKind::Ge:
  case OpKind::Select:
  case OpKind::Clamp: return elementwise(c);
  case OpKind::Cast: return cast(c);
  case OpKind::ReduceSum:
  case OpKind::ReduceMean:
  case OpKind::ReduceMax:
  case OpKind::ReduceMin:
  case OpKind::ReduceProd: return reduction(c);
  case OpKind::ArgMax:
  case OpKind::ArgMin: return argReduction(c);
  case OpKind::TopK: return topK(c);
  case OpKind::NonZero: return nonZero(c);
  case OpKind::Unique: return unique(c);
  case OpKind::NonMaxSuppression: return nonMaxSuppression(c);
  case OpKind::Loop: return loop(c);
  case OpKind::Cumsum:
  case OpKind::Softmax:
  case OpKind::LogSoftmax: return alongAxis(c);
  case OpKind::Matmul: return matmul(c);
  case OpKind::Attention: return attention(c);
  case OpKind::Det: return det(c);
  case OpKind::GridSample: return gridSample(c);
  case OpKind::RoiAlign: return roiAlign(c);
  case OpKind::Conv: return conv(c);
  case OpKind::MaxPool:
  case OpKind::AvgPool: return pool(c);
  case OpKind::Reshape: return reshape(c);
  case OpKind::Transpose: return transpose(c);
  case OpKind::Broadcast: return broadcastTo(c);
  case OpKind::Concat: return concat(c);
  case OpKind::Split: return split(c);
  case OpKind::Slice: return slice(c);
  case OpKind::Gather: return gather(c);
  case OpKind::GatherElements: return gatherElements(c);
  case OpKind::ScatterNd: return scatterNd(c);
  case OpKind::Pad: return pad(c);
  case OpKind::Triu:
  case OpKind::Tril: return triangle(c);
  case OpKind::Transfer: return one(c.ops[0]);
  case OpKind::AllReduce:
  case OpKind::AllGather:
  case OpKind::ReduceScatter: return collective(c);
  case OpKind::Constant: return constant(c);
  case OpKind::Weight: {
    KILN_TRY(Type r, c.declaredType());
    return one(r);
  }
  case OpKind::Iota: return iota(c);
  case OpKind::Range: return range(c);
  case OpKind::Dim: return dimOp(c);
  case OpKind::Return: return std::vector<Type>{};
  // Host ops: buffers hold what their declared type says; the others produce nothing.
  case OpKind::AllocBuffer:
  case OpKind::TransferTo:
  case OpKind::View:
  case OpKind::LoadWeight:
  case OpKind::LoadConstant: {
    KILN_TRY(Type r, c.declaredType());
    return one(r);
  }
  case OpKind::Free:
  case OpKind::Launch:
  case OpKind::Collective:
  case OpKind::BindSymbol:
  case OpKind::RunLoop:
  case OpKind::Wait: return std::vector<Type>{};
  // A dispatch's results are its kernel's (the verifier compares them, it sees the module);
  // kernel-level ops are typed by the kernel verifier.
  case OpKind::Dispatch:
  case OpKind::KernelConfig:
  case OpKind::WorkgroupId:
  case OpKind::LocalId:
  case OpKind::SymbolValue:
  case OpKind::IConst:
  case OpKind::SConst:
  case OpKind::IAdd:
  case OpKind::ISub:
  case OpKind::IMul:
  case OpKind::IFloorDiv:
  case OpKind::ICeilDiv:
  case OpKind::IMod:
  case OpKind::IMin:
  case OpKind::IMax:
  case OpKind::ICmp:
  case OpKind::SSelect:
  case OpKind::ICast:
  case OpKind::Compute:
  case OpKind::Alloc:
  case OpKind::Load:
  case OpKind::MaskedLoad:
  case OpKind::Store:
  case OpKind::MaskedStore:
  case OpKind::VectorLoad:
  case OpKind::VectorStore:
  case OpKind::Prefetch:
  case OpKind::Barrier:
  case OpKind::For:
  case OpKind::If:
  case OpKind::Yield:
  case OpKind::LaneId:
  case OpKind::SubgroupReduce:
  case OpKind::SubgroupBroadcast:
  case OpKind::SubgroupShuffle: return c.declared;
  }
  return c.err("has no shape rule");
}

} // namespace

Result<std::vector<Type>> inferResultTypes(OpKind kind, const std::vector<Type>& operands,
                                           const Attrs& attrs, const std::vector<Type>& declared,
                                           const SymbolTable& syms, const Loc& loc) {
  Ctx c{opInfo(kind), operands, attrs, declared, syms, loc};
  KILN_CHECK(checkOperands(c));
  return infer(c);
}

Result<Shape> broadcastShapes(const Shape& a, const Shape& b, const SymbolTable& syms,
                              const Loc& loc) {
  if (std::optional<Shape> s = broadcastPair(a, b, syms)) return *s;
  return error(loc, "shapes " + shapeStr(a) + " and " + shapeStr(b) + " do not broadcast");
}

} // namespace kiln
