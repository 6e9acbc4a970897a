// The kernel builder every lowering strategy emits through: a kernel-IR function under
// construction (buffer arguments, a uniform prologue, kernel_config, one thread's body),
// the op-construction helpers (index arithmetic, constants, loops, loads, private
// accumulators) and `emitAt`, which computes one element of a tensor-level value by
// walking the tensor-level body backwards from it: views become index arithmetic on the
// loads (never copies), elementwise ops become `compute`, reductions, softmax, cumsum,
// argmax, windows and naive matmuls become loops with a private f64 / i64 accumulator,
// exactly like the reference interpreter's wide accumulation.
//
// The walker's op lowerings live beside it by kind: kernel_builder.cpp (views,
// elementwise, concat, pad, naive matmul), reduction.cpp (reductions, softmax, cumsum,
// argmax, and the hoisting of row reductions before the column loop of the cpu rows and
// gpu reduce plans), window.cpp (conv, pooling).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ir/core/builder.h"
#include "passes/codegen.h"
#include "target/target.h"

namespace kiln {

// The reference's wide accumulator type: f64 for floats, i64 for integers.
ElemType accElem(ElemType e);
// A reduce_* op's reduced axes, sorted and unique (all axes when `axes` is empty).
std::vector<int64_t> reducedAxes(const Op& op);
// A matmul's accumulator: wide (f64 / i64) like the reference, or f32 for f32/f16/bf16
// results on targets without wideAccumulation (cpu).
ElemType matmulAccElem(ElemType e, const TargetDesc& t);

class KernelBuilder;

// A reduction the walker needs one value of (a reduce_*, softmax's max or sum): `fn` over
// the elements of an index space of `extents` (C order) from `init`, in type `acc`.
struct RowReduction {
  OpKind fn = OpKind::Add;
  ElemType acc = ElemType::F64;
  double init = 0;
  Shape extents;
  // The element at one index per extent (any type; it is cast to `acc`).
  std::function<Result<Value*>(const std::vector<Value*>& j)> element;
};
// Emits a reduction that all threads of the workgroup reach together, by all of them (the
// gpu reduce strategy, reduction_gpu.cpp); every thread gets the result.
using RowReducer = std::function<Result<Value*>(KernelBuilder& b, const RowReduction& r)>;

class KernelBuilder {
public:
  // Starts the kernel of `src`: buffer arguments (inputs, then outputs) and a
  // kernel_config with `workgroup` and a grid of [1, 1, 1] until setGrid changes it.
  KernelBuilder(const Func& src, const KernelShape& shape, const std::vector<int64_t>& workgroup,
                bool guarded, const TargetDesc& target);
  // Closes the body and hands the kernel over.
  std::unique_ptr<Func> finish();

  const Func& source() const { return src_; }
  const KernelShape& shape() const { return shape_; }
  const TargetDesc& target() const { return target_; }
  // True when pad could not prove the padded iteration space exact.
  bool guarded() const { return guarded_; }
  const SymbolTable& symbols() const;
  Builder& body() { return *body_; }
  Builder* prologue() { return pro_.get(); }
  // The output buffer of the kernel's `o`-th result.
  Value* output(size_t o) const { return outs_[o]; }
  // Workgroup counts along `axis` (a prologue value).
  void setGrid(size_t axis, Value* count);
  // The subgroup size the kernel is lowered for (kernel_config's `subgroup`).
  void setSubgroup(int64_t size);

  // ---- op construction ------------------------------------------------------------------
  Value* mk(Builder& b, OpKind k, std::vector<Value*> ops, Type t, Attrs a = {});
  Value* idx(OpKind k, Value* a, Value* b, Builder* where = nullptr);
  // An index constant, created once in the prologue.
  Value* cst(int64_t v);
  Value* scst(ElemType e, double v);
  Value* cmp(const char* pred, Value* a, Value* b);
  Value* compute(OpKind fn, std::vector<Value*> ops, ElemType result, const Attrs* extra = nullptr);
  Value* castTo(Value* v, ElemType e);
  Value* andMask(Value* a, Value* b);
  Value* icastFromIndex(Value* i, ElemType e);
  Attrs axisAttr(int64_t a);
  // A dim's value, computed once in the prologue.
  Value* dim(const Dim& d);
  // The product of dims [from, to) of `s`, in the prologue.
  Value* product(const Shape& s, size_t from, size_t to);
  // Store `v` to / load from `buf` at `ix` (no mask).
  Value* st(Value* v, Value* buf, std::vector<Value*> ix);
  Value* ld(Value* buf, std::vector<Value*> ix);

  // ---- loops and indices ----------------------------------------------------------------
  // Opens `for lo, hi, step` carrying `carried` (their initial values) and returns its index
  // counter; ops go into its body until the matching endFor.
  Value* beginFor(Value* lo, Value* hi, Value* step, const std::vector<Value*>& carried = {});
  // Marks the innermost open loop for complete unrolling (for's unroll=1): its trip count is
  // static and the private arrays it indexes should become registers.
  void unrollLoop();
  // Marks `loop` (default: the innermost open loop) as not vectorized across its
  // iterations (for's vectorize=0): the loops inside it carry the vectors, or its code is
  // better scalar.
  void scalarLoop(Op* loop = nullptr);
  // The innermost open loop's carried values, as its body sees them.
  std::vector<Value*> carried() const;
  // Closes the innermost open loop: the body yields `next` (one per carried value) and the
  // loop's results (the last carried values) are returned.
  std::vector<Value*> endFor(const std::vector<Value*>& next = {});
  // C-order multi-index of flat `e` in `s`.
  std::vector<Value*> delinearize(Value* e, const Shape& s);
  Value* linearize(const std::vector<Value*>& ix, const Shape& s);
  // Index into an operand of shape `in` broadcast (numpy) to an index of rank out.size().
  std::vector<Value*> bcast(const std::vector<Value*>& out, const Shape& in);
  // A negative index counts from the end of `d`.
  Value* normIndex(Value* i, const Dim& d);

  // ---- values at an index ---------------------------------------------------------------
  // An argument's element (masked by the current mask, if any).
  Result<Value*> load(const Value* arg, const std::vector<Value*>& ix);
  // A private one-element accumulator initialised to `init`.
  Value* accumulator(ElemType e, double init);
  Value* accLoad(Value* acc);
  void accStore(Value* acc, Value* v);
  // The element of `v` at `ix`.
  Result<Value*> emitAt(const Value* v, const std::vector<Value*>& ix);
  // A prefetch of the element of `v` at `ix` when that element is one load of a buffer (v
  // is an argument or a view of one: reshape, slice, transpose, concat picked by a row
  // index); true when one was emitted. The indices must lie inside v's shape. For any
  // other v, what emitAt emitted is left unused (the backends drop it): callers check
  // first that v is such a view (matmul-cpu: no op in B's prologue).
  Result<bool> prefetchAt(const Value* v, const std::vector<Value*>& ix);
  // Stores every kernel result's element at `ix` (masked by the current mask).
  Status storeOutputs(const std::vector<Value*>& ix);
  // Index lists of a matmul's operands for output index `ix` and contraction index `k`.
  std::pair<std::vector<Value*>, std::vector<Value*>>
  matmulIndices(const Op& op, const std::vector<Value*>& ix, Value* k);

  // ---- state the strategies set ---------------------------------------------------------
  // Loads and stores are masked by `m` (null: unmasked).
  Value* mask() const { return mask_; }
  void setMask(Value* m) { mask_ = m; }
  // emitAt returns `v` for `value` (a matmul anchor's accumulator).
  void substitute(const Value* value, Value* v) { subst_[value] = v; }
  void unsubstitute(const Value* value) { subst_.erase(value); }
  // cpu rows: `v` is the same for every column of a row.
  void markInvariant(const Value* v) { invariant_.insert(v); }
  // cpu rows, gpu reduce: the column loop (row-invariant code is hoisted before it), or null.
  void setColumnLoop(Op* loop) { colLoop_ = loop; }
  // gpu reduce: hoisted row reductions are emitted by `r` (null: one thread's loop).
  void setRowReducer(RowReducer r) { rowReducer_ = std::move(r); }
  // A row reduction's value: by the row reducer where the code is hoisted before the column
  // loop (every thread of the workgroup runs it), else one thread's loop.
  Result<Value*> reduceRow(const RowReduction& r);
  // cpu rows: runs `loop`, which emits the column loop at the insertion point and returns its
  // `for`, once per operand of each concat whose index along its axis is the same for every
  // column (a row index): an `if` tree on that index (before the loop, log2(operands) deep)
  // picks the copy in which the concat is its one operand, so that an element costs that
  // operand's load instead of a masked load of every operand and a select chain (im2col's
  // patches: KH*KW operands). A first run finds such a concat and is erased. At most
  // kMaxColumnCopies copies; past that, a concat keeps the select chain.
  Status versionByConcat(const std::function<Result<Op*>()>& loop);
  // cpu matmul, K segments: while picked, `cat` indexed along its axis by `at` is its operand
  // `operand` alone (the caller's loop keeps `at` in that operand's range), no masked loads.
  void pickConcat(const Op& cat, Value* at, size_t operand) { picked_[&cat] = {at, operand}; }
  void unpickConcat(const Op& cat) { picked_.erase(&cat); }
  // Where each operand of `cat` starts along its axis, then its end (operands + 1 values).
  std::vector<Value*> concatBounds(const Op& cat);

private:
  // A loop opened by beginFor: where ops went before it.
  struct OpenLoop {
    Op* loop;
    Block* block;
    Op* before;
  };
  std::vector<OpenLoop> loops_;
  bool rowInvariant(const std::vector<Value*>& ix) const;
  Result<Value*> hoisted(const void* what, const std::vector<Value*>& ix,
                         const std::function<Result<Value*>()>& f);
  Result<Value*> reduce(const Op& op, const std::vector<Value*>& ix);
  Result<Value*> reduceAt(const Op& op, const std::vector<Value*>& ix);
  Result<Value*> softmax(const Op& op, const std::vector<Value*>& ix);
  Result<Value*> cumsum(const Op& op, const std::vector<Value*>& ix);
  Result<Value*> argExtreme(const Op& op, const std::vector<Value*>& ix);
  Result<Value*> window(const Op& op, const std::vector<Value*>& ix);
  Result<Value*> matmulNaive(const Op& op, const std::vector<Value*>& ix);
  Result<Value*> concat(const Op& op, const std::vector<Value*>& ix);
  Result<Value*> reshape(const Shape& out, const Value* x, const std::vector<Value*>& ix);
  std::vector<Value*> concatOffsets(const Op& op, size_t axis);
  Status pickTree(const Op& cat, Value* at, const std::vector<Value*>& offsets, size_t lo,
                  size_t hi, const std::function<Result<Op*>()>& loop);
  Result<Value*> pad(const Op& op, const std::vector<Value*>& ix);

  const Func& src_;
  KernelShape shape_;
  bool guarded_;
  const TargetDesc& target_;
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
  // gpu reduce: the row reducer, and whether the insertion point is hoisted code that all
  // threads of the workgroup run together.
  RowReducer rowReducer_;
  bool uniform_ = false;
  // cpu rows, versionByConcat: the concats taken as one operand (when indexed along their axis
  // by `at`) in the copy of the column loop being emitted; the first concat found that could
  // be (while `versioning_`); the copies the enclosing `if` trees make.
  struct ConcatPick {
    Value* at;
    size_t operand;
  };
  std::map<const Op*, ConcatPick> picked_;
  const Op* splitConcat_ = nullptr;
  Value* splitAt_ = nullptr;
  bool versioning_ = false;
  int64_t copies_ = 1;
  static constexpr int64_t kMaxColumnCopies = 1024;
};

} // namespace kiln
