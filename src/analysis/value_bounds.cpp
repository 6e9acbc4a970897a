// Interval and divisibility propagation for index values (see value_bounds.h). Every
// operation saturates to "unknown" on overflow instead of wrapping.
#include "analysis/value_bounds.h"

#include <algorithm>
#include <array>
#include <numeric>

namespace kiln {

namespace {

const Range kUnknown{};
// The divisor of the constant 0 (a multiple of every power of two up to 2^62).
constexpr int64_t kZeroDivisor = int64_t(1) << 62;

bool add(int64_t a, int64_t b, int64_t& r) { return !__builtin_add_overflow(a, b, &r); }
bool mul(int64_t a, int64_t b, int64_t& r) { return !__builtin_mul_overflow(a, b, &r); }

int64_t gcd(int64_t a, int64_t b) { return std::gcd(a, b) ? std::gcd(a, b) : 1; }

Range make(int64_t lo, int64_t hi, int64_t div) {
  if (lo > hi) return kUnknown;
  if (lo == hi) div = lo == 0 ? kZeroDivisor : lo == INT64_MIN ? 1 : std::abs(lo);
  return Range{lo, hi, std::max<int64_t>(div, 1)};
}

Range rAdd(const Range& a, const Range& b) {
  int64_t lo, hi;
  if (!a.known() || !b.known() || !add(a.lo, b.lo, lo) || !add(a.hi, b.hi, hi)) return kUnknown;
  return make(lo, hi, gcd(a.divisor, b.divisor));
}
Range rNeg(const Range& a) {
  if (!a.known() || a.lo == INT64_MIN) return kUnknown;
  return make(-a.hi, -a.lo, a.divisor);
}
Range rMul(const Range& a, const Range& b) {
  if (!a.known() || !b.known()) return kUnknown;
  int64_t c[4];
  if (!mul(a.lo, b.lo, c[0]) || !mul(a.lo, b.hi, c[1]) || !mul(a.hi, b.lo, c[2]) ||
      !mul(a.hi, b.hi, c[3]))
    return kUnknown;
  int64_t d;
  if (!mul(a.divisor, b.divisor, d)) d = 1;
  return make(*std::min_element(c, c + 4), *std::max_element(c, c + 4), d);
}
int64_t floorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
Range rDiv(const Range& a, const Range& b, bool ceil) {
  if (!a.known() || !b.known() || b.lo <= 0) return kUnknown; // positive divisors only
  auto f = [&](int64_t x, int64_t y) { return ceil ? -floorDiv(-x, y) : floorDiv(x, y); };
  int64_t c[4] = {f(a.lo, b.lo), f(a.lo, b.hi), f(a.hi, b.lo), f(a.hi, b.hi)};
  return make(*std::min_element(c, c + 4), *std::max_element(c, c + 4), 1);
}
Range rMod(const Range& a, const Range& b) {
  if (!b.known() || b.lo <= 0) return kUnknown;
  if (a.known() && a.lo >= 0 && a.hi < b.lo) return a; // already reduced
  int64_t d = b.lo == b.hi ? gcd(a.divisor, b.lo) : 1;
  return make(0, b.hi - 1, d);
}
Range rMinMax(const Range& a, const Range& b, bool isMax) {
  if (!a.known() || !b.known()) return kUnknown;
  int64_t lo = isMax ? std::max(a.lo, b.lo) : std::min(a.lo, b.lo);
  int64_t hi = isMax ? std::max(a.hi, b.hi) : std::min(a.hi, b.hi);
  return make(lo, hi, gcd(a.divisor, b.divisor));
}
Range rUnion(const Range& a, const Range& b) {
  if (!a.known() || !b.known()) return kUnknown;
  return make(std::min(a.lo, b.lo), std::max(a.hi, b.hi), gcd(a.divisor, b.divisor));
}

} // namespace

Range dimBounds(const Dim& d, const SymbolTable& syms) {
  if (d.isUnknown()) return kUnknown;
  SymBounds b = bounds(d.expr(), syms);
  return make(b.lo, b.hi, b.divisor);
}

bool dimDivisibleBy(const Dim& d, int64_t tile, const SymbolTable& syms) {
  return !d.isUnknown() && provablyDivisible(d.expr(), tile, syms);
}

ValueBounds::ValueBounds(const Func& f, const SymbolTable& syms, int64_t maxGrid) {
  std::vector<int64_t> wg{1, 1, 1};
  int64_t subgroup = 1;
  for (const auto& op : f.ops())
    if (op->kind() == OpKind::KernelConfig) {
      wg = op->attrs().getInts("workgroup");
      subgroup = op->attrs().getInt("subgroup", 1);
    }
  auto r = [&](const Value* v) { return of(v); };
  // The grid a kernel launches with is its kernel_config's operands (kernelGrid), computed
  // before the ids are read: workgroup ids lie below them.
  std::array<int64_t, 3> gridHi = {INT64_MAX, INT64_MAX, INT64_MAX};
  walkOps(f, [&](const Op& o) {
    const Op* op = &o;
    if (op->kind() == OpKind::KernelConfig) {
      for (size_t a = 0; a < 3 && a < op->numOperands(); ++a)
        if (Range g = r(op->operand(a)); g.known()) gridHi[a] = g.hi;
      return;
    }
    if (op->kind() == OpKind::For) {
      // The counter; carried values and results stay unknown.
      Range lo = r(op->operand(0)), hi = r(op->operand(1)), st = r(op->operand(2));
      if (lo.known() && hi.known())
        ranges_[op->region(0)->arg(0)] =
            make(lo.lo, std::max(lo.lo, hi.hi - 1), gcd(lo.divisor, st.divisor));
      return;
    }
    if (op->numResults() != 1) return;
    Range out = kUnknown;
    auto in = [&](size_t i) { return r(op->operand(i)); };
    switch (op->kind()) {
    case OpKind::IConst: {
      int64_t v = op->attrs().getInt("value");
      out = make(v, v, 1);
      break;
    }
    case OpKind::SymbolValue:
      if (const SymbolInfo* s = syms.lookup(op->attrs().getStr("name")))
        out = make(s->lo, s->hi, s->divisor);
      break;
    case OpKind::WorkgroupId: {
      auto a = static_cast<size_t>(op->attrs().getInt("axis"));
      int64_t n = maxGrid > 0 ? maxGrid : int64_t(INT32_MAX) + 1;
      if (a < gridHi.size()) n = std::min(n, gridHi[a]);
      out = make(0, std::max<int64_t>(n, 1) - 1, 1);
      break;
    }
    case OpKind::LocalId: {
      auto a = static_cast<size_t>(op->attrs().getInt("axis"));
      out = make(0, (a < wg.size() ? wg[a] : 1) - 1, 1);
      break;
    }
    case OpKind::LaneId: out = make(0, std::max<int64_t>(subgroup, 1) - 1, 1); break;
    case OpKind::SubgroupBroadcast:
    case OpKind::SubgroupShuffle: out = in(0); break;
    case OpKind::IAdd: out = rAdd(in(0), in(1)); break;
    case OpKind::ISub: out = rAdd(in(0), rNeg(in(1))); break;
    case OpKind::IMul: out = rMul(in(0), in(1)); break;
    case OpKind::IFloorDiv: out = rDiv(in(0), in(1), false); break;
    case OpKind::ICeilDiv: out = rDiv(in(0), in(1), true); break;
    case OpKind::IMod: out = rMod(in(0), in(1)); break;
    case OpKind::IMin: out = rMinMax(in(0), in(1), false); break;
    case OpKind::IMax: out = rMinMax(in(0), in(1), true); break;
    case OpKind::SSelect: out = rUnion(in(1), in(2)); break;
    case OpKind::ICmp: {
      Range a = in(0), b = in(1);
      std::string p = op->attrs().getStr("pred");
      bool yes = a.known() && b.known() &&
                 ((p == "lt" && a.hi < b.lo) || (p == "le" && a.hi <= b.lo) ||
                  (p == "gt" && a.lo > b.hi) || (p == "ge" && a.lo >= b.hi));
      bool no = a.known() && b.known() &&
                ((p == "lt" && a.lo >= b.hi) || (p == "le" && a.lo > b.hi) ||
                 (p == "gt" && a.hi <= b.lo) || (p == "ge" && a.hi < b.lo));
      out = yes ? make(1, 1, 1) : no ? make(0, 0, 1) : make(0, 1, 1);
      break;
    }
    case OpKind::Dim: {
      int64_t axis = op->attrs().getInt("axis");
      const Type& t = op->operand(0)->type();
      axis = axis < 0 ? axis + t.rank() : axis;
      if (axis >= 0 && axis < t.rank()) out = dimBounds(t.dim(axis), syms);
      break;
    }
    case OpKind::ICast:
      if (op->result(0)->type().isIndex()) break;
      out = in(0);
      break;
    default: break;
    }
    ranges_[op->result(0)] = out;
  });
}

Range ValueBounds::of(const Value* v) const {
  auto it = ranges_.find(v);
  return it == ranges_.end() ? kUnknown : it->second;
}

bool ValueBounds::provablyTrue(const Value* cond) const {
  Range r = of(cond);
  return r.lo == 1 && r.hi == 1;
}

} // namespace kiln
