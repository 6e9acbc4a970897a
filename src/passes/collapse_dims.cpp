// collapse-dims: merges adjacent iteration dims of a dispatch into one.
//
// Requires:    fuse (dispatches with tensor-level kernels); runs before tile.
// Guarantees:  a pair of adjacent output dims is merged only when it is contiguous in every
//              value of the kernel (each value has both dims at full extent, both of size 1,
//              or neither), both are parallel (a matmul's K, reductions and softmax axes are
//              never merged: kernels with reductions, softmax or index-changing views are
//              left alone, and so are dispatches that write a donated argument in place),
//              the target can still express the result (a merged batch dim
//              fits the grid), and the shared-memory footprint that `tile` would choose
//              (the one footprint function) does not grow. The caller reshapes operands
//              and results (views: no copies).
// Invalidates: the kernel's types; tile plans (run tile after).
//
//   %0 = dispatch %q, %k : tensor<2x8x16x64xf32>     %q2 = reshape %q : tensor<16x16x64xf32>
//   (batch dims 2 and 8 contiguous everywhere)  =>   %0 = dispatch %q2, %k2 : tensor<16x16x64xf32>
//                                                   %1 = reshape %0 : tensor<2x8x16x64xf32>
// A multi-query attention score kernel, whose K operand broadcasts over heads, could also
// merge heads into M; that is refused when it would grow the tile (and shared memory).
#include <map>

#include "ir/core/builder.h"
#include "passes/codegen.h"
#include "passes/lower/strategy.h"
#include "passes/passes.h"

namespace kiln {

namespace {

enum class Role { Out, A, B };

// Which values feed the matmul's operands (A-like, B-like) and which follow its output.
std::optional<std::map<const Value*, Role>> roles(const Func& k, const KernelShape& s) {
  std::map<const Value*, Role> r;
  for (size_t i = 0; i < k.numArgs(); ++i) r[k.arg(i)] = Role::Out;
  for (const auto& op : k.ops())
    for (size_t j = 0; j < op->numResults(); ++j) r[op->result(j)] = Role::Out;
  if (s.strategy != Strategy::Matmul) return r;
  for (int side = 0; side < 2; ++side) {
    std::vector<const Value*> stack{s.anchor->operand(static_cast<size_t>(side))};
    while (!stack.empty()) {
      const Value* v = stack.back();
      stack.pop_back();
      Role want = side == 0 ? Role::A : Role::B;
      if (r[v] == want) continue;
      if (r[v] != Role::Out) return std::nullopt; // feeds both operands
      r[v] = want;
      if (v->def())
        for (const Value* o : v->def()->operands()) stack.push_back(o);
    }
  }
  // A value that feeds an operand must not also feed the epilogue.
  for (const auto& op : k.ops()) {
    if (op.get() == s.anchor || op->has(kTerminator)) continue;
    for (const Value* o : op->operands())
      if (r[o] != r[op->result(0)]) return std::nullopt;
  }
  return r;
}

// Position of output dim `d` (of rank R) in a value of `role` and rank n, or -1.
int64_t position(Role role, int64_t d, int64_t R, int64_t n) {
  if (role == Role::Out) return d - (R - n);
  // Matmul operands: batch dims right-aligned before their last two dims.
  if (d < R - 2) {
    int64_t p = d - (R - 2) + (n - 2);
    return p >= 0 ? p : -1;
  }
  if (role == Role::A) return d == R - 2 ? n - 2 : -1;
  return d == R - 1 ? n - 1 : -1;
}

bool isOne(const Dim& d) { return d.isStatic() && d.value() == 1; }

struct Merge {
  int64_t first; // output dims first and first + 1
};

// The value's shape after merging, or nullopt when the pair is not contiguous in it.
std::optional<Shape> mergedShape(const Shape& sh, Role role, int64_t first, const Shape& out) {
  auto R = static_cast<int64_t>(out.size());
  auto n = static_cast<int64_t>(sh.size());
  int64_t p0 = position(role, first, R, n), p1 = position(role, first + 1, R, n);
  auto at = [&](int64_t p) -> const Dim* {
    return p >= 0 && p < n ? &sh[static_cast<size_t>(p)] : nullptr;
  };
  const Dim* a = at(p0);
  const Dim* b = at(p1);
  Shape r = sh;
  if (!a && !b) return r;
  if (a && b) {
    if (p1 != p0 + 1) return std::nullopt;
    bool full = *a == out[static_cast<size_t>(first)] && *b == out[static_cast<size_t>(first + 1)];
    if (!(isOne(*a) && isOne(*b)) && !full) return std::nullopt;
    Dim m = isOne(*a) && isOne(*b) ? Dim(1) : Dim(a->expr() * b->expr());
    r.erase(r.begin() + p1);
    r[static_cast<size_t>(p0)] = m;
    return r;
  }
  const Dim* only = a ? a : b;
  if (!isOne(*only)) return std::nullopt;
  r.erase(r.begin() + (a ? p0 : p1));
  return r;
}

bool simpleKernel(const Func& k, const KernelShape& s) {
  for (const auto& op : k.ops()) {
    if (op->has(kTerminator) || op.get() == s.anchor) continue;
    if (!op->has(kElementwise) && op->kind() != OpKind::Broadcast) return false;
  }
  return true;
}

class CollapseDimsPass : public Pass {
public:
  explicit CollapseDimsPass(CodegenOptions opts) : opts_(std::move(opts)) {}

  Status run(Module& m) override {
    for (const auto& f : m.funcs())
      for (Op* d : f->opsSnapshot()) {
        if (d->kind() != OpKind::Dispatch || !opts_.covers(*d)) continue;
        Func* k = dispatchKernel(m, *d);
        // A dispatch writing a donated argument in place reads it unreshaped (analysis/donation.h).
        if (!k || isLoweredKernel(*k) || d->attrs().has("in_place")) continue;
        const TileOverride* o = findTileOverride(opts_.overrides, k->name());
        if (o && !o->collapse) continue;
        while (collapseOnce(m, *f, d, *k, opts_.target)) {
        }
      }
    return ok();
  }

private:
  // Tries the pairs from the innermost out; applies the first legal one.
  bool collapseOnce(Module& m, Func& f, Op*& d, Func& k, const TargetDesc& t) {
    KernelShape s = analyzeKernel(k);
    if (s.strategy == Strategy::Host || s.strategy == Strategy::Attention || !simpleKernel(k, s))
      return false;
    const LowerStrategy* strategy = matchStrategy({*d, k, s}, t);
    if (!strategy) return false;
    auto rs = roles(k, s);
    if (!rs) return false;
    auto R = static_cast<int64_t>(s.outShape.size());
    // Never merge the matmul's N with anything, nor M with N (not contiguous in A or B).
    int64_t last = s.strategy == Strategy::Matmul ? R - 3 : R - 2;
    for (int64_t first = last; first >= 0; --first) {
      std::map<const Value*, Shape> shapes;
      bool legal = true;
      for (const auto& [v, role] : *rs) {
        auto ns = mergedShape(v->type().shape(), role, first, s.outShape);
        if (!ns) {
          legal = false;
          break;
        }
        shapes[v] = *ns;
      }
      if (!legal) continue;
      Shape newOut = *mergedShape(s.outShape, Role::Out, first, s.outShape);
      if (!expressible(s, newOut, t, m.symbols())) continue;
      if (grows(*strategy, s, newOut, t, m.symbols(), k.name())) continue;
      apply(f, d, k, shapes);
      return true;
    }
    return false;
  }

  static bool expressible(const KernelShape& s, const Shape& newOut, const TargetDesc& t,
                          const SymbolTable& syms) {
    if (s.strategy != Strategy::Matmul) return true;
    SymExpr batch = SymExpr::constant(1);
    for (size_t i = 0; i + 2 < newOut.size(); ++i) batch = batch * newOut[i].expr();
    return bounds(batch, syms).hi <= t.maxWorkgroupCount[2];
  }

  static bool grows(const LowerStrategy& strategy, const KernelShape& s, const Shape& newOut,
                    const TargetDesc& t, const SymbolTable& syms, const std::string& name) {
    KernelShape after = s;
    after.outShape = newOut;
    auto before = chooseTilePlan(strategy, s, t, syms, name);
    auto later = chooseTilePlan(strategy, after, t, syms, name);
    if (!before.ok() || !later.ok()) return true;
    return sharedFootprint(sharedBuffersFor(after, *later)) >
           sharedFootprint(sharedBuffersFor(s, *before));
  }

  static void apply(Func& f, Op*& d, Func& k, const std::map<const Value*, Shape>& shapes) {
    Builder b(&f, d);
    b.setLoc(d->loc());
    b.setDevice(d->device());
    for (size_t i = 0; i < k.numArgs(); ++i) {
      Value* a = k.arg(i);
      Type nt = a->type().withShape(shapes.at(a));
      if (nt == a->type()) continue;
      a->setType(nt);
      Value* reshaped = b.createUnchecked(OpKind::Reshape, {d->operand(i)}, {}, {nt})->result();
      d->setOperand(i, reshaped);
    }
    for (const auto& op : k.ops())
      for (size_t r = 0; r < op->numResults(); ++r)
        op->result(r)->setType(op->result(r)->type().withShape(shapes.at(op->result(r))));
    std::vector<Type> rt;
    for (const Value* v : k.terminator()->operands()) rt.push_back(v->type());
    k.setResultTypes(rt);
    Builder after(&f, d);
    after.setLoc(d->loc());
    after.setDevice(d->device());
    Attrs attrs = d->attrs();
    std::vector<Value*> operands = d->operands();
    Op* nd = after.createUnchecked(OpKind::Dispatch, operands, attrs, rt);
    Op* next = nullptr;
    for (auto it = f.ops().begin(); it != f.ops().end(); ++it)
      if (it->get() == d) next = std::next(it) == f.ops().end() ? nullptr : std::next(it)->get();
    Builder post(&f, next);
    post.setLoc(d->loc());
    post.setDevice(d->device());
    for (size_t r = 0; r < d->numResults(); ++r) {
      Value* old = d->result(r);
      Value* back = nd->result(r);
      if (old->type() != back->type())
        back = post.createUnchecked(OpKind::Reshape, {back}, {}, {old->type()})->result();
      old->replaceAllUsesWith(back);
    }
    f.erase(d);
    d = nd;
  }

  CodegenOptions opts_;
};

} // namespace

std::unique_ptr<Pass> createCollapseDimsPass(const CodegenOptions& opts) {
  return std::make_unique<CollapseDimsPass>(opts);
}

} // namespace kiln
