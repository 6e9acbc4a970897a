// gemv-split: on cpu targets, a decode step's matmul (at most 4 rows) over a large [K, N]
// B becomes S partial matmuls, each over a contiguous slice of K rows of B, and a sum of the
// S partial results, so that each cpu thread streams whole rows of B, one contiguous run
// of its memory, instead of a column stripe of every row.
//
// Requires:    shape-infer (static shapes); runs before fuse, on the ops of the devices it
//              covers, and only when the target is a cpu (TargetDesc::cpu).
// Guarantees:  every covered f32 or f64 `matmul` whose A has at most kMaxRows rows (the
//              product of its dims before the last) and whose B is a static 2-D [K, N]
//              value stored with N innermost (not a transposed [N, K] weight, which the dot
//              plan reads along K) of at least kMinBytes, with K divisible by S = 8 (else 4)
//              into slices of at least kMinSliceRows rows, is
//              reduce_sum over axis 0 of matmul(transpose(A viewed as M x S x K/S) to
//              S x M x K/S, B viewed as S x K/S x N) viewed as S x the result's shape.
//              The batched matmul's blocks have at most MR rows and S batch entries, so
//              the cpu matmul plan gives each block whole rows of its slice of B
//              (matmul_cpu.cpp); the elementwise ops on the result become the sum's
//              epilogue. Every other matmul is left.
// Invalidates: nothing (new ops have the matmul's device and location).
//
//   %y = matmul %x, %w                  %p = matmul (transpose (reshape %x : 1x8x256)),
//     (x: 1x2048, w: 2048x2048)   =>                (reshape %w : 8x256x2048) : 8x1x2048
//                                       %y = reduce_sum %p {axes = [0], keepdims = 0} : 1x2048
#include <optional>

#include "ir/core/builder.h"
#include "passes/codegen.h"
#include "passes/lower/strategy.h"
#include "passes/passes.h"

namespace kiln {

namespace {

// A decode step's rows (the dot plan's short side, matmul_cpu_dot.cpp).
constexpr int64_t kMaxRows = 4;
// B of at least 1 MiB: below it the second kernel costs more than the streaming gains.
constexpr int64_t kMinBytes = 1 << 20;
// At least this many rows of B per slice.
constexpr int64_t kMinSliceRows = 128;

// A rewritten matmul's rows (A's dims before the last, multiplied), B's K and N, and the
// number of K slices.
struct Slicing {
  int64_t rows, k, n, slices;
};

// How this matmul is sliced, or nothing when it is not rewritten.
std::optional<Slicing> slicingOf(const Op& mm) {
  const Type& a = mm.operand(0)->type();
  const Type& b = mm.operand(1)->type();
  const Type& y = mm.result(0)->type();
  // f32 or f64 results only: f16 partial products would each be rounded before the sum.
  if (!a.isStatic() || !b.isStatic() || !y.isStatic() || b.rank() != 2 || a.rank() < 2 ||
      (y.elem() != ElemType::F32 && y.elem() != ElemType::F64))
    return std::nullopt;
  std::vector<int64_t> as = a.staticShape(), bs = b.staticShape();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < as.size() && rows <= kMaxRows; ++i)
    rows = as[i] > kMaxRows ? kMaxRows + 1 : rows * as[i];
  int64_t k = bs[0], n = bs[1];
  // In double: a fuzzed program's static dims can overflow the product.
  double bytes = static_cast<double>(k) * static_cast<double>(n) * elemTypeBytes(b.elem());
  if (rows < 1 || rows > kMaxRows || bytes < kMinBytes || transposedB(mm.operand(1)))
    return std::nullopt;
  for (int64_t s : {8, 4})
    if (k % s == 0 && k / s >= kMinSliceRows) return Slicing{rows, k, n, s};
  return std::nullopt;
}

Result<Value*> split(Func& f, Op& mm, const Slicing& g) {
  Builder b(&f, &mm);
  b.setLoc(mm.loc());
  b.setDevice(mm.device());
  int64_t s = g.slices;
  auto reshape = [&](Value* v, std::vector<int64_t> dims) -> Result<Value*> {
    KILN_TRY(Op * r,
             b.create(OpKind::Reshape, {v}, {}, {Type::tensor(v->type().elem(), std::move(dims))}));
    return r->result(0);
  };
  KILN_TRY(Value * a3, reshape(mm.operand(0), {g.rows, s, g.k / s}));
  Attrs ta;
  ta.set("perm", std::vector<int64_t>{1, 0, 2});
  KILN_TRY(Op * at, b.create(OpKind::Transpose, {a3}, std::move(ta)));
  KILN_TRY(Value * w3, reshape(mm.operand(1), {s, g.k / s, g.n}));
  KILN_TRY(Op * p, b.create(OpKind::Matmul, {at->result(0), w3}));
  // The partial products viewed as S x the result's shape, so that the sum is the result
  // itself (a view of it would be copied where the function returns it).
  Value* parts = p->result(0);
  std::vector<int64_t> ys = mm.result(0)->type().staticShape();
  if (ys.size() != 2) {
    std::vector<int64_t> dims{s};
    dims.insert(dims.end(), ys.begin(), ys.end());
    KILN_TRY(parts, reshape(parts, dims));
  }
  Attrs ra;
  ra.set("axes", std::vector<int64_t>{0});
  ra.set("keepdims", int64_t{0});
  KILN_TRY(Op * sum, b.create(OpKind::ReduceSum, {parts}, std::move(ra)));
  return sum->result(0);
}

class GemvSplitPass : public Pass {
public:
  explicit GemvSplitPass(CodegenOptions opts) : opts_(std::move(opts)) {}

  Status run(Module& m) override {
    if (!opts_.target.cpu) return ok();
    for (const auto& f : m.funcs()) {
      std::vector<Op*> matmuls;
      for (const auto& op : f->ops())
        if (op->kind() == OpKind::Matmul && opts_.covers(*op)) matmuls.push_back(op.get());
      for (Op* mm : matmuls) {
        std::optional<Slicing> g = slicingOf(*mm);
        if (!g) continue;
        KILN_TRY(Value * y, split(*f, *mm, *g));
        mm->result(0)->replaceAllUsesWith(y);
        mm->dropOperands();
        f->erase(mm);
      }
    }
    return ok();
  }

private:
  CodegenOptions opts_;
};

} // namespace

std::unique_ptr<Pass> createGemvSplitPass(const CodegenOptions& opts) {
  return std::make_unique<GemvSplitPass>(opts);
}

} // namespace kiln
