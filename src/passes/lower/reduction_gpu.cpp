// Strategy `reduction-gpu` (gpu targets with subgroups): the threads of a row reduce it
// together with subgroup arithmetic and shared memory, instead of one thread per output
// element looping over the whole row (and recomputing it for every element of the row).
//
// Matches:  a pointwise kernel whose reductions are all row reductions (analyzeRowReductions:
//           float reduce_* over trailing axes, softmax / log_softmax along the last axis,
//           with the elementwise ops and views fused around them) and whose longest reduced
//           extent is at least a subgroup, on a gpu target whose subgroup size (the first of
//           its subgroupSizes) is known and above 1. Integer reductions keep `pointwise`:
//           their i64 accumulators would need 64-bit subgroup arithmetic.
// Plan:     GpuReducePlan{rows, threads, subgroup}: tile [rows, threads, subgroup],
//           workgroup [threads, rows, 1]. Threads per row: whole subgroups, about 4 reduced
//           elements each, at most subgroup^2 (the partials of a row fit one subgroup) and
//           256; rows per workgroup fill 64 threads.
// Emits:    row = (workgroup * rows + local_id.y) over the output's leading `rowDims` dims;
//           every reduction the walker hoists before the column loop (its indices are the
//           row's) is reduced by the row's threads: each strides over the flattened reduced
//           extent by `threads`, accumulating privately in the walker's type (f64, as
//           the reference), then subgroup_reduce; with several subgroups per row, lane 0 of
//           each writes its partial to shared memory, barrier, every subgroup reduces the
//           partials (subgroup_reduce), barrier. Then the row's threads stride over its
//           columns (the remaining output dims) and compute and store the epilogue.
//           Float max / min propagate NaN like the interpreter: an `or` of isnan over the
//           subgroup selects NaN (OpGroupNonUniformFMax leaves NaN operands undefined).
//
//   %m = reduce_max %x {axes = [1]}       =>   %p = for %tx, %n, %threads, -inf: max(acc, x[row,
//   j])
//     : tensor<{s}x{n}xf32> -> {s}x1           %r = subgroup_reduce %p {fn = max}
//   %y = sub %x, %m : tensor<{s}x{n}xf32>      masked_store lane == 0: %r -> partials[y, sub]
//                                              barrier; subgroup_reduce partials; barrier
//                                              for c = %tx, %n, %threads: x[row, c] - m; store
#include <algorithm>
#include <limits>

#include "passes/lower/kernel_builder.h"
#include "passes/lower/strategy.h"

namespace kiln {

namespace {

int64_t subgroupOf(const TargetDesc& t) { return t.subgroupSizes.empty() ? 1 : t.subgroupSizes[0]; }

// The product of the leading `n` output dims (the rows).
SymExpr rowCount(const KernelShape& s) {
  SymExpr rows = SymExpr::constant(1);
  for (size_t i = 0; i < static_cast<size_t>(std::max<int64_t>(s.rowDims, 0)); ++i)
    rows = rows * s.outShape[i].expr();
  return rows;
}

// What the strategy emits per row, for the row reducer.
struct Row {
  int64_t threads, subgroup;
  Value* tx;    // local_id.x: the thread's place in its row
  Value* ty;    // local_id.y: the row's place in the workgroup
  Value* lane;  // lane_id
  Value* valid; // the row exists (null when the grid covers the rows exactly)
  std::map<ElemType, Value*> partials; // shared [rows, threads / subgroup] per accumulator type
};

bool isFloatMinMax(const RowReduction& r) {
  return isFloat(r.acc) && (r.fn == OpKind::Max || r.fn == OpKind::Min);
}

// `v` combined over the subgroup; float max / min give NaN when some lane holds NaN.
Value* subgroupCombine(KernelBuilder& b, Value* v, const RowReduction& r) {
  Attrs fn;
  fn.set("fn", r.fn);
  Value* out = b.mk(b.body(), OpKind::SubgroupReduce, {v}, Type::scalar(r.acc), fn);
  if (!isFloatMinMax(r)) return out;
  Attrs any;
  any.set("fn", OpKind::Or);
  Value* nan = b.mk(b.body(), OpKind::SubgroupReduce, {b.compute(OpKind::IsNan, {v}, ElemType::I1)},
                    Type::scalar(ElemType::I1), any);
  return b.mk(b.body(), OpKind::SSelect,
              {nan, b.scst(r.acc, std::numeric_limits<double>::quiet_NaN()), out},
              Type::scalar(r.acc));
}

Result<Value*> reduceTogether(KernelBuilder& b, Row& row, const RowReduction& r) {
  Value* count = b.product(r.extents, 0, r.extents.size());
  Value* hi = row.valid
                  ? b.mk(b.body(), OpKind::SSelect, {row.valid, count, b.cst(0)}, Type::index())
                  : count;
  Value* j = b.beginFor(row.tx, hi, b.cst(row.threads), {b.scst(r.acc, r.init)});
  Value* acc = b.carried()[0];
  // The flat index as one index per extent (C order).
  std::vector<Value*> at(r.extents.size());
  Value* rest = j;
  for (size_t i = r.extents.size(); i-- > 0;) {
    if (i == 0) {
      at[i] = rest;
      break;
    }
    Value* d = b.dim(r.extents[i]);
    at[i] = b.idx(OpKind::IMod, rest, d);
    rest = b.idx(OpKind::IFloorDiv, rest, d);
  }
  KILN_TRY(Value * v, r.element(at));
  Value* part = b.endFor({b.compute(r.fn, {acc, b.castTo(v, r.acc)}, r.acc)})[0];
  Value* total = subgroupCombine(b, part, r);
  int64_t perRow = row.threads / row.subgroup;
  if (perRow == 1) return total;
  auto it = row.partials.find(r.acc);
  if (it == row.partials.end())
    return error(b.source().loc(), "lower: internal: no shared partials for " +
                                       std::string(elemTypeName(r.acc)) + " in kernel @" +
                                       b.source().name());
  Value* buf = it->second;
  Value* sub = b.idx(OpKind::IFloorDiv, row.tx, b.cst(row.subgroup));
  std::vector<Value*> ops{b.cmp("eq", row.lane, b.cst(0)), total, buf, row.ty, sub};
  b.body().createUnchecked(OpKind::MaskedStore, ops, {}, {});
  b.body().createUnchecked(OpKind::Barrier, {}, {}, {});
  // Every subgroup combines the row's partials (lanes past them contribute the identity).
  Value* in = b.cmp("lt", row.lane, b.cst(perRow));
  Value* slot = b.idx(OpKind::IMin, row.lane, b.cst(perRow - 1));
  Value* p = b.mk(b.body(), OpKind::SSelect, {in, b.ld(buf, {row.ty, slot}), b.scst(r.acc, r.init)},
                  Type::scalar(r.acc));
  total = subgroupCombine(b, p, r);
  // The partials may be overwritten by the next reduction only after every subgroup read them.
  b.body().createUnchecked(OpKind::Barrier, {}, {}, {});
  return total;
}

} // namespace

void analyzeRowReductions(const Func& k, KernelShape& s) {
  s.rowDims = -1;
  s.rowAccElems.clear();
  auto r = static_cast<int64_t>(s.outShape.size());
  int64_t p = 0;
  bool any = false, softmax = false;
  std::vector<ElemType> accs;
  // A reduction's per-row value, aligned to the output's trailing dims: the output dims up
  // to its last non-unit dim index its rows.
  auto rowsOf = [&](const Shape& stat) {
    auto n = static_cast<int64_t>(stat.size());
    if (n > r) return; // not in the output's index space (inside another reduction)
    any = true;
    for (int64_t d = 0; d < n; ++d)
      if (!(stat[static_cast<size_t>(d)].isStatic() && stat[static_cast<size_t>(d)].value() == 1))
        p = std::max(p, d + r - n + 1);
  };
  for (const auto& op : k.ops()) {
    switch (op->kind()) {
    case OpKind::ReduceSum:
    case OpKind::ReduceMean:
    case OpKind::ReduceMax:
    case OpKind::ReduceMin:
    case OpKind::ReduceProd: {
      // Threads stride over the reduced elements: they must be the innermost ones.
      std::vector<int64_t> axes = reducedAxes(*op);
      int64_t q = op->operand(0)->type().rank();
      for (size_t i = 0; i < axes.size(); ++i)
        if (axes[i] != q - static_cast<int64_t>(axes.size() - i)) return;
      // Integers accumulate in i64, and 64-bit subgroup arithmetic needs Vulkan's
      // shaderSubgroupExtendedTypes, which the runtime does not enable.
      ElemType acc = accElem(op->operand(0)->type().elem());
      if (!isFloat(acc)) return;
      accs.push_back(acc);
      rowsOf(op->result(0)->type().shape());
      break;
    }
    case OpKind::Softmax:
    case OpKind::LogSoftmax: {
      const Type& in = op->operand(0)->type();
      int64_t axis = op->attrs().getInt("axis");
      if ((axis < 0 ? axis + in.rank() : axis) != in.rank() - 1) return;
      accs.push_back(ElemType::F64);
      Shape stat = in.shape();
      stat.back() = Dim(1);
      rowsOf(stat);
      softmax = true;
      break;
    }
    case OpKind::Cumsum:
    case OpKind::ArgMax:
    case OpKind::ArgMin:
    case OpKind::Matmul:
    case OpKind::Conv:
    case OpKind::MaxPool:
    case OpKind::AvgPool: return; // loops of their own in every thread
    default: break;
    }
  }
  // A softmax's columns run along its axis: it needs at least one column dim.
  if (!any || (softmax && p >= r)) return;
  std::sort(accs.begin(), accs.end());
  accs.erase(std::unique(accs.begin(), accs.end()), accs.end());
  s.rowDims = p;
  s.rowAccElems = accs;
}

bool matchGpuReduce(const KernelRef& k, const TargetDesc& t) {
  int64_t sg = subgroupOf(t);
  return k.shape.strategy == Strategy::Pointwise && !t.cpu && sg > 1 && k.shape.rowDims >= 0 &&
         k.shape.reduceExtent >= sg;
}

std::vector<Plan> gpuReducePlans(const KernelShape& s, const TargetDesc& t,
                                 const SymbolTable& syms) {
  int64_t sg = subgroupOf(t);
  int64_t cap = std::min<int64_t>({sg * sg, 256, t.maxWorkgroupInvocations, t.maxWorkgroupSize[0]});
  int64_t threads = sg;
  while (threads * 2 <= cap && threads * 4 < s.reduceExtent) threads *= 2;
  int64_t rowsBound = 1;
  for (size_t i = 0; i < static_cast<size_t>(std::max<int64_t>(s.rowDims, 0)); ++i)
    rowsBound = std::min<int64_t>(rowsBound * upperBound(s.outShape[i], syms), 1 << 30);
  int64_t rows = 1;
  while (rows * 2 * threads <= 64 && rows * 2 <= rowsBound && rows * 2 <= t.maxWorkgroupSize[1] &&
         rows * 2 * threads <= t.maxWorkgroupInvocations)
    rows *= 2;
  // Smaller plans, for targets whose limits the first exceeds.
  std::vector<Plan> plans;
  for (int64_t th = threads; th >= sg; th /= 2)
    for (int64_t r = rows; r >= 1; r /= 2) plans.push_back(GpuReducePlan{r, th, sg});
  return plans;
}

std::vector<SharedBuffer> gpuReduceSharedBuffers(const KernelShape& s, const GpuReducePlan& p) {
  std::vector<SharedBuffer> out;
  if (p.subgroup < 1 || p.threads <= p.subgroup) return out;
  for (ElemType e : s.rowAccElems) out.push_back({e, {p.rows, p.threads / p.subgroup}});
  return out;
}

bool gpuReduceExact(const KernelShape& s, const GpuReducePlan& p, const SymbolTable& syms,
                    const TargetDesc& t) {
  SymExpr rows = rowCount(s);
  SymBounds b = bounds(rows, syms);
  return b.lo >= 1 && provablyDivisible(rows, p.rows, syms) && b.hi / p.rows <= gridCap(t);
}

std::optional<std::string> strategyProblem(const KernelShape& s, const GpuReducePlan& p,
                                           const TargetDesc& t, bool checkSharedMemory) {
  std::string tile = listStr({p.rows, p.threads, p.subgroup});
  if (s.rowDims < 0)
    return "tile " + tile +
           " is a gpu row reduction's, and the kernel's reductions are not row reductions";
  if (t.cpu) return "tile " + tile + " is a gpu row reduction's; " + t.name + " is a cpu target";
  if (p.subgroup < 2 || std::find(t.subgroupSizes.begin(), t.subgroupSizes.end(), p.subgroup) ==
                            t.subgroupSizes.end())
    return "tile " + tile + ": " + t.name + " has no subgroups of " + std::to_string(p.subgroup) +
           " threads";
  if (p.rows < 1 || p.threads < p.subgroup || p.threads % p.subgroup != 0)
    return "tile " + tile + ": the threads per row must be whole subgroups";
  if (p.threads > p.subgroup * p.subgroup)
    return "tile " + tile + ": more than subgroup^2 threads per row (" +
           std::to_string(p.subgroup * p.subgroup) + ")";
  if (checkSharedMemory) return sharedMemoryProblem(tile, gpuReduceSharedBuffers(s, p), t);
  return std::nullopt;
}

Status emitStrategy(KernelBuilder& b, const GpuReducePlan& p) {
  const KernelShape& ks = b.shape();
  if (ks.rowDims < 0)
    return error(b.source().loc(),
                 "lower: internal: kernel @" + b.source().name() + " has no row reductions");
  const Shape& s = ks.outShape;
  auto split = static_cast<size_t>(ks.rowDims);
  Shape rowShape(s.begin(), s.begin() + static_cast<long>(split));
  Shape colShape(s.begin() + static_cast<long>(split), s.end());
  b.setSubgroup(p.subgroup);
  Value* rows = b.product(rowShape, 0, rowShape.size());
  Value* cols = b.product(colShape, 0, colShape.size());
  Value* groups = b.idx(OpKind::ICeilDiv, rows, b.cst(p.rows), b.prologue());
  Value* gx =
      b.idx(OpKind::IMax, b.idx(OpKind::IMin, groups, b.cst(gridCap(b.target())), b.prologue()),
            b.cst(1), b.prologue());
  Value* gy = b.idx(OpKind::ICeilDiv, groups, gx, b.prologue());
  b.setGrid(0, gx);
  b.setGrid(1, gy);
  bool exact = !b.guarded() && gpuReduceExact(ks, p, b.symbols(), b.target());

  Value* wx = b.mk(b.body(), OpKind::WorkgroupId, {}, Type::index(), b.axisAttr(0));
  Value* wy = b.mk(b.body(), OpKind::WorkgroupId, {}, Type::index(), b.axisAttr(1));
  Row row{p.threads, p.subgroup, nullptr, nullptr, nullptr, nullptr, {}};
  row.tx = b.mk(b.body(), OpKind::LocalId, {}, Type::index(), b.axisAttr(0));
  row.ty = b.mk(b.body(), OpKind::LocalId, {}, Type::index(), b.axisAttr(1));
  row.lane = b.mk(b.body(), OpKind::LaneId, {}, Type::index());
  if (p.threads > p.subgroup)
    for (ElemType e : ks.rowAccElems)
      row.partials[e] =
          b.mk(b.body(), OpKind::Alloc, {},
               Type::buffer(e, {Dim(p.rows), Dim(p.threads / p.subgroup)}, MemSpace::Shared));
  Value* group = b.idx(OpKind::IAdd, b.idx(OpKind::IMul, wy, gx), wx);
  Value* r = b.idx(OpKind::IAdd, b.idx(OpKind::IMul, group, b.cst(p.rows)), row.ty);
  if (!exact) {
    // Rows past the end compute the last row again (every thread must reach the barriers)
    // and store nothing.
    row.valid = b.cmp("lt", r, rows);
    r = b.idx(OpKind::IMax, b.idx(OpKind::IMin, r, b.idx(OpKind::ISub, rows, b.cst(1))), b.cst(0));
  }
  std::vector<Value*> ix = rowShape.empty() ? std::vector<Value*>{} : b.delinearize(r, rowShape);
  for (Value* v : ix) b.markInvariant(v);
  b.setRowReducer(
      [&row](KernelBuilder& kb, const RowReduction& red) { return reduceTogether(kb, row, red); });
  Value* hi = row.valid
                  ? b.mk(b.body(), OpKind::SSelect, {row.valid, cols, b.cst(0)}, Type::index())
                  : cols;
  Value* c = b.beginFor(row.tx, hi, b.cst(p.threads));
  b.setColumnLoop(c->blockArgOf()->parentOp());
  std::vector<Value*> cix = colShape.empty() ? std::vector<Value*>{} : b.delinearize(c, colShape);
  ix.insert(ix.end(), cix.begin(), cix.end());
  Status st = b.storeOutputs(ix);
  b.endFor();
  b.setColumnLoop(nullptr);
  b.setRowReducer(nullptr);
  return st;
}

} // namespace kiln
