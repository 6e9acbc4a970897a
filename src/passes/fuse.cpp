// fuse: dispatch formation. Groups the tensor ops of each function into kernels.
//
// Requires:    a verified tensor-level module (shape-infer run: no `?` dims).
// Guarantees:  every live computing op of a non-kernel function is inside exactly one kernel
//              function, called by one `dispatch`; sources (constant, weight, iota, range,
//              dim) stay in the caller and are passed as operands; a kernel has at most one
//              anchor (reduction, contraction, softmax, or an op `lower` cannot handle, which
//              is always alone), unless a registered multi-anchor pattern (fuse.h) formed
//              it, besides the concat of conv patches a cpu GEMM reads in place
//              (patchesIntoGemm), a pad read by a concat (padIntoConcat) and a concat
//              read by a matmul along K or by a pool (concatIntoGemmColumns,
//              concatIntoPool); groups are
//              convex, so the caller stays in SSA order.
// Invalidates: op order in the caller (re-sorted topologically, otherwise in source order).
//
//   %1 = matmul %x, %w : tensor<4x8xf32>         %1 = dispatch %x, %w {kernel = "main_dispatch_0"}
//   %2 = add %1, %b : ...                   =>        : tensor<4x8xf32>
//   %3 = relu %2 : ...                          (with %b) and @main_dispatch_0 holding all three
//
// Options (codegen.h): the target's fusion switches; on a placed module, only the ops of the
// given devices are grouped, never ops of two devices together, and the dispatch runs on its
// ops' device (`transfer` ops stay in the caller).
//
// The rules, each with a per-target switch (TargetDesc::fusion, target.h):
//   elementwise-into-consumer  an elementwise op whose users are all in one dispatch joins it
//   views-into-loads           a view (slice, transpose, broadcast, reshape, gather) whose
//                              users are all in one dispatch joins it; `lower` folds it into
//                              that dispatch's loads, so it is never materialized
//   elementwise-into-producer  an anchor whose users are all in one anchor-free dispatch joins
//                              it when that dispatch's outputs have the anchor's shape (the
//                              elementwise chain becomes the anchor's epilogue); a matmul
//                              only when that epilogue is pointwise over its result
//                              (epilogueIsPointwise, codegen.h)
// and two restrictions. FusionRules::transcendentalIntoContraction (off on every target): a
// transcendental op (exp, silu, tanh, ...) does not join a contraction's operands, where it
// would be recomputed for every tile that loads them; it gets its own dispatch instead.
// FusionRules::epilogueOverConsumer (on on CPU targets): an elementwise op over a matmul's
// result and shape (a conv's bias, residual add, activation) does not join a consumer
// dispatch anchored by a pad, concat, pool or another matmul, which the matmul cannot
// join, nor one that reads it through 4 or more slices (a depthwise conv's taps of the map
// pad-gemm's GEMM computes, which would recompute it per tap): it stays the matmul's
// epilogue. FusionRules::elementwiseIntoGemmRows (off on CPU targets): an elementwise op
// that computes the A operand (the rows) of a matmul with more than 8 rows does not join
// it (computesGemmRows), where the GEMM would recompute it for every NR-column strip; it
// is computed once, in its own dispatch or as the epilogue of the matmul before it.
// FusionRules::windowIntoGemmColumns (off on CPU targets): an elementwise op that computes
// a matmul's B from a window (readsWindow: 4 or more slices of one value among the ops
// only it reads, a depthwise conv's taps) does not join it, where the GEMM would compute
// the window per flattened column in its packing loop.
// FusionRules::patchesIntoGemm (on for CPU targets): the concat of a conv's im2col patches
// (conv-gemm) joins the matmul that reads them, with its slices, when the cpu GEMM reads
// them in place from the padded input or its phases (convPatches, strategy.h), so the
// patches are never materialized; the concat is then not the kernel's anchor.
// FusionRules::padIntoConcat (on for CPU targets): a constant pad joins a kernel anchored by
// a concat that has no more elements than the pad (a stride-2 conv's four phases), which
// then reads the pad's input through masked loads: one pass over it instead of two.
// FusionRules::concatIntoGemmColumns (on for CPU targets): a concat along the axis that
// becomes a matmul's K joins the matmul that reads it as B (itself or through a reshape),
// which reads each K range from its operand (SqueezeNet's fire modules).
// FusionRules::concatIntoPool (on for CPU targets): a concat along batch or channels joins
// the max or average pool that is its one user; the pool's rows pick their operand.
// Before grouping, each `split` becomes one `slice` per piece (views, which then join their
// consumers; a multi-result kernel could not be lowered and would run on the host side).
// An op that writes a donated argument in place (analysis/donation.h) is always alone in its
// dispatch, which records `in_place = [operand, 0]`.
#include <algorithm>
#include <map>
#include <set>

#include "analysis/donation.h"
#include "ir/core/builder.h"
#include "passes/codegen.h"
#include "passes/fuse.h"
#include "passes/lower/strategy.h"
#include "passes/passes.h"

namespace kiln {

namespace {

bool isSource(const Op& op) { return op.numOperands() == 0 || op.kind() == OpKind::Dim; }

// A `transfer` and a collective (placed modules) stay in the caller: the schedule turns
// them into a copy and a `collective`; so does a `loop`, which runs on the host side.
bool isComputing(const Op& op) {
  return op.info().level == OpLevel::Tensor && !op.has(kTerminator) &&
         op.kind() != OpKind::Dispatch && op.kind() != OpKind::Transfer &&
         op.kind() != OpKind::Loop && !op.has(kCollective) && !isSource(op);
}

bool isAnchor(const Op& op) { return !op.has(kElementwise) && !op.has(kView); }

class Grouping {
public:
  Grouping(Func& f, const CodegenOptions& opts, std::set<const Op*> alone,
           const std::vector<FusionPattern>& patterns)
      : opts_(opts), rules_(opts.target.fusion), ops_(f.opsSnapshot()), alone_(std::move(alone)),
        patterns_(patterns) {
    for (size_t i = 0; i < ops_.size(); ++i) index_[ops_[i]] = i;
    group_.assign(ops_.size(), -1);
  }

  void run() {
    for (size_t i = ops_.size(); i-- > 0;) {
      Op& op = *ops_[i];
      if (!isComputing(op) || !opts_.covers(op) || group_[i] >= 0) continue;
      if (groupPattern(op)) continue;
      std::optional<int> target = consumerGroup(op);
      if (target && !alone_.count(&op) && !aloneGroups_.count(*target) && canJoin(op, *target) &&
          !staysForEpilogue(op, *target)) {
        add(*target, i);
      } else {
        groups_.push_back({});
        add(static_cast<int>(groups_.size()) - 1, i);
        if (alone_.count(&op)) aloneGroups_.insert(static_cast<int>(groups_.size()) - 1);
      }
    }
  }

  const std::vector<std::vector<size_t>>& groups() const { return groups_; }
  int groupOf(const Op* op) const {
    auto it = index_.find(op);
    return it == index_.end() ? -1 : group_[it->second];
  }
  const std::vector<Op*>& ops() const { return ops_; }

private:
  // The first multi-anchor pattern whose instance ends at `root` forms a group: it joins
  // the group of root's users by elementwise-into-producer (an anchor-free group whose
  // outputs have root's shape), or starts a new one. False when no pattern applies.
  bool groupPattern(const Op& root) {
    for (const FusionPattern& p : patterns_) {
      std::vector<const Op*> members = p.match(root);
      std::set<const Op*> set(members.begin(), members.end());
      if (members.empty() || !set.count(&root) || !patternSupported(members) || !convex(set))
        continue;
      std::optional<int> target = consumerGroup(root);
      if (target && !aloneGroups_.count(*target) && canJoin(root, *target)) {
        std::set<const Op*> merged = set;
        for (size_t i : groups_[static_cast<size_t>(*target)]) merged.insert(ops_[i]);
        if (!convex(merged)) target.reset();
      } else {
        target.reset();
      }
      if (!target) {
        groups_.push_back({});
        target = static_cast<int>(groups_.size()) - 1;
      }
      for (const Op* m : members) add(*target, index_.at(m));
      return true;
    }
    return false;
  }

  // Every op computing, not grouped yet, supported by `lower`, and not a donated writer.
  bool patternSupported(const std::vector<const Op*>& members) const {
    for (const Op* m : members) {
      auto it = index_.find(m);
      // A kernel runs on one device: every member is on the root's.
      if (!opts_.covers(*m) || m->device() != members.back()->device()) return false;
      if (it == index_.end() || group_[it->second] >= 0 || !isComputing(*m) || !lowerSupports(*m) ||
          alone_.count(m))
        return false;
    }
    return true;
  }

  // No path leaves the set and comes back into it.
  bool convex(const std::set<const Op*>& set) const {
    size_t lo = SIZE_MAX;
    for (const Op* m : set) lo = std::min(lo, index_.at(m));
    for (const Op* m : set) {
      std::vector<const Op*> stack;
      for (const Value* v : m->operands())
        if (v->def() && !set.count(v->def())) stack.push_back(v->def());
      std::set<const Op*> seen;
      while (!stack.empty()) {
        const Op* cur = stack.back();
        stack.pop_back();
        if (index_.at(cur) < lo || !seen.insert(cur).second) continue;
        for (const Value* v : cur->operands()) {
          const Op* d = v->def();
          if (!d) continue;
          if (set.count(d)) return false;
          stack.push_back(d);
        }
      }
    }
    return true;
  }

  void add(int g, size_t i) {
    group_[i] = g;
    groups_[static_cast<size_t>(g)].push_back(i);
  }

  // The one group all of op's users are in, if there is one.
  std::optional<int> consumerGroup(const Op& op) const {
    std::set<int> gs;
    for (size_t r = 0; r < op.numResults(); ++r)
      for (const Use& u : op.result(r)->uses()) {
        int g = groupOf(u.user);
        if (g < 0) return std::nullopt;
        gs.insert(g);
      }
    if (gs.size() != 1) return std::nullopt;
    return *gs.begin();
  }

  bool groupSupported(int g) const {
    for (size_t i : groups_[static_cast<size_t>(g)])
      if (!lowerSupports(*ops_[i])) return false;
    return true;
  }

  // g's ops in program order.
  std::vector<const Op*> membersOf(int g) const {
    std::vector<size_t> idx = groups_[static_cast<size_t>(g)];
    std::sort(idx.begin(), idx.end());
    std::vector<const Op*> members;
    for (size_t i : idx) members.push_back(ops_[i]);
    return members;
  }

  const Op* anchorOf(int g) const {
    for (size_t i : groups_[static_cast<size_t>(g)])
      if (isAnchor(*ops_[i])) return ops_[i];
    return nullptr;
  }

  bool hasContraction(int g) const {
    for (size_t i : groups_[static_cast<size_t>(g)])
      if (ops_[i]->has(kContraction)) return true;
    return false;
  }

  // True when `op` reads a matmul's result over the matmul's shape, directly or through
  // elementwise ops that do: it can be the matmul's epilogue.
  bool onEpilogue(const Op& op) {
    if (!op.has(kElementwise) || op.numResults() != 1) return false;
    auto memo = epilogue_.find(&op);
    if (memo != epilogue_.end()) return memo->second;
    bool on = false;
    const Shape& shape = op.result(0)->type().shape();
    for (const Value* v : op.operands()) {
      const Op* d = v->def();
      if (!d || v->type().shape() != shape) continue;
      if (d->kind() == OpKind::Matmul || onEpilogue(*d)) on = true;
    }
    epilogue_[&op] = on;
    return on;
  }

  // FusionRules::epilogueOverConsumer: an epilogue op does not join a group anchored by an
  // op that only moves or windows data (pad, concat, pool) or by another matmul, nor one
  // that reads it through a window: it starts a group the matmul joins. Attention and
  // reductions (softmax, layer norm) keep their prologues, which save them a materialized
  // input.
  bool staysForEpilogue(const Op& op, int g) {
    if (!rules_.epilogueOverConsumer || !rules_.elementwiseIntoProducer || !onEpilogue(op))
      return false;
    // g reads it through a window (a depthwise conv's taps of the map pad-gemm's GEMM
    // computes): g would compute it once per tap.
    if (readThroughWindow(op, g)) return true;
    const Op* a = anchorOf(g);
    return a && !a->has(kReduction) && a->kind() != OpKind::Attention &&
           a->kind() != OpKind::Softmax && a->kind() != OpKind::LogSoftmax &&
           a->kind() != OpKind::Cumsum;
  }

  // True when `op` (whose users are all in g) computes, directly or through g's views and
  // elementwise ops, the A operand of g's matmul, and that matmul has more than 8 rows (a
  // register block): M, times the batch when B has no batch dim above 1 (the cpu GEMM
  // folds the batch into M), with symbolic sizes counted as many.
  bool computesGemmRows(const Op& op, int g) const {
    const Op* mm = nullptr;
    for (size_t i : groups_[static_cast<size_t>(g)])
      if (ops_[i]->kind() == OpKind::Matmul) mm = ops_[i];
    if (!mm) return false;
    const Type& a = mm->operand(0)->type();
    const Type& b = mm->operand(1)->type();
    if (a.rank() < 2 || b.rank() < 2) return false;
    const Shape& out = mm->result(0)->type().shape();
    bool bBatched = false;
    for (int64_t i = 0; i + 2 < b.rank(); ++i)
      bBatched |= !(b.dim(i).isStatic() && b.dim(i).value() == 1);
    int64_t rows = 1;
    for (size_t i = bBatched ? out.size() - 2 : 0; i + 1 < out.size(); ++i) {
      if (!out[i].isStatic()) return rowsReach(op, *mm);
      rows = std::min<int64_t>(rows * out[i].value(), int64_t(1) << 40);
    }
    return rows > 8 && rowsReach(op, *mm);
  }

  // True when `op` (whose users are all in g) computes, directly or through g's views and
  // elementwise ops, the B operand of g's matmul.
  bool computesGemmColumns(const Op& op, int g) const {
    for (size_t i : groups_[static_cast<size_t>(g)])
      if (ops_[i]->kind() == OpKind::Matmul && operandReach(op, *ops_[i], 1)) return true;
    return false;
  }

  // True when the elementwise and view ops that `op` reads, transitively, and that only
  // it (or such ops) reads (what would join g with it), hold kWindowSlices or more slices
  // of one value: a stencil, such as a depthwise conv's taps. A value that others read too
  // (an SE block's activations, which its pool reads) ends the walk: it is a dispatch's
  // output whichever group op joins.
  static constexpr size_t kWindowSlices = 4;
  bool readsWindow(const Op& op, int g) const {
    constexpr size_t kMaxOps = 512;
    std::vector<const Op*> stack{&op};
    std::set<const Op*> seen;
    std::map<const Value*, size_t> slices;
    while (!stack.empty() && seen.size() < kMaxOps) {
      const Op* cur = stack.back();
      stack.pop_back();
      if (!seen.insert(cur).second) continue;
      if (cur->kind() == OpKind::Slice && ++slices[cur->operand(0)] >= kWindowSlices) return true;
      for (const Value* v : cur->operands()) {
        const Op* d = v->def();
        if (!d || !(d->has(kElementwise) || d->has(kView))) continue;
        bool only = true;
        for (size_t r = 0; r < d->numResults(); ++r)
          for (const Use& u : d->result(r)->uses())
            only = only && (seen.count(u.user) || groupOf(u.user) == g);
        if (only) stack.push_back(d);
      }
    }
    return false;
  }

  // True when g reads op's result through kWindowSlices or more slices of it or of its
  // reshapes.
  bool readThroughWindow(const Op& op, int g) const {
    size_t slices = 0;
    std::vector<const Value*> stack{op.result(0)};
    std::set<const Op*> seen;
    while (!stack.empty()) {
      const Value* v = stack.back();
      stack.pop_back();
      for (const Use& u : v->uses()) {
        if (groupOf(u.user) != g || !seen.insert(u.user).second) continue;
        if (u.user->kind() == OpKind::Slice && ++slices >= kWindowSlices) return true;
        if (u.user->kind() == OpKind::Reshape) stack.push_back(u.user->result(0));
      }
    }
    return false;
  }

  // True when a path of uses from `op` reaches operand 0 of `mm` (users are in mm's group).
  static bool rowsReach(const Op& op, const Op& mm) { return operandReach(op, mm, 0); }

  // True when a path of uses from `op` reaches operand `index` of `mm` through elementwise
  // ops and views.
  static bool operandReach(const Op& op, const Op& mm, unsigned index) {
    std::vector<const Op*> stack{&op};
    std::set<const Op*> seen;
    while (!stack.empty()) {
      const Op* cur = stack.back();
      stack.pop_back();
      if (!seen.insert(cur).second) continue;
      for (size_t r = 0; r < cur->numResults(); ++r)
        for (const Use& u : cur->result(r)->uses()) {
          if (u.user == &mm) {
            if (u.operandIndex == index) return true;
          } else if (u.user->has(kElementwise) || u.user->has(kView)) {
            stack.push_back(u.user);
          }
        }
    }
    return false;
  }

  // Every value of g that a non-member reads has shape `shape`.
  bool outputsHaveShape(int g, const Shape& shape) const {
    for (size_t i : groups_[static_cast<size_t>(g)])
      for (size_t r = 0; r < ops_[i]->numResults(); ++r) {
        bool output = false;
        for (const Use& u : ops_[i]->result(r)->uses()) output |= groupOf(u.user) != g;
        if (output && ops_[i]->result(r)->type().shape() != shape) return false;
      }
    return true;
  }

  // True when `op` is the concat of im2col patches that g's matmul reads as B through
  // one reshape and the cpu GEMM reads in place (convPatches) from a value no kernel of g
  // computes: an anchor's result (a pad, a stride-2 conv's phases: they never join the
  // matmul) or an argument.
  bool readsPatchesInPlace(const Op& op, int g) const {
    if (op.kind() != OpKind::Concat || op.numResults() != 1) return false;
    const std::vector<Use>& uses = op.result(0)->uses();
    if (uses.size() != 1 || uses[0].user->kind() != OpKind::Reshape || groupOf(uses[0].user) != g)
      return false;
    const Value* b = uses[0].user->result(0);
    if (b->uses().size() != 1) return false;
    const Use& mm = b->uses()[0];
    if (mm.user->kind() != OpKind::Matmul || mm.operandIndex != 1 || groupOf(mm.user) != g)
      return false;
    std::optional<ConvPatches> p = convPatches(b);
    return p && (!p->x->def() || isAnchor(*p->x->def()));
  }

  // True when `op` is a constant pad with static shapes, g is anchored by one concat and
  // nothing else, and that concat has no more elements than the pad (FusionRules::
  // padIntoConcat): the concat's kernel reads the pad's input through masked loads, each
  // element about once (a stride-2 conv's four phases). Im2col patches, which hold every
  // padded element once per tap, keep the pad: their masked loads cost more than the
  // pad's pass (ResNet-18's 512-channel 7x7 patches 0.08 -> 0.16 ms).
  bool padOfConcat(const Op& op, int g) const {
    if (op.kind() != OpKind::Pad || op.attrs().getStr("mode", "constant") != "constant")
      return false;
    const Op* cat = nullptr;
    for (size_t i : groups_[static_cast<size_t>(g)]) {
      if (!isAnchor(*ops_[i])) continue;
      if (ops_[i]->kind() != OpKind::Concat || cat) return false;
      cat = ops_[i];
    }
    std::optional<int64_t> padded = op.result(0)->type().numElements();
    std::optional<int64_t> read = cat ? cat->result(0)->type().numElements() : std::nullopt;
    return padded && read && *read <= *padded;
  }

  // True when `op` is a concat that g's matmul reads as B, itself or through one reshape,
  // along B's K axis (concatAlongK, FusionRules::concatIntoGemmColumns): row k of B lies in
  // one operand.
  bool concatOfGemmColumns(const Op& op, int g) const {
    if (op.kind() != OpKind::Concat || op.numResults() != 1) return false;
    const Value* cat = op.result(0);
    if (cat->uses().size() != 1) return false;
    const Value* b = cat;
    if (const Op* u = cat->uses()[0].user; u->kind() == OpKind::Reshape) {
      if (groupOf(u) != g || u->result(0)->uses().size() != 1) return false;
      b = u->result(0);
    }
    const Use& mm = b->uses()[0]; // b has one use: the concat's, or the reshape's
    if (mm.user->kind() != OpKind::Matmul || mm.operandIndex != 1 || groupOf(mm.user) != g)
      return false;
    return concatAlongK(b) == &op;
  }

  // True when `op` is a concat along batch or channels whose one user is g's max or
  // average pool (FusionRules::concatIntoPool): every window lies in one operand.
  bool concatOfPool(const Op& op, int g) const {
    if (op.kind() != OpKind::Concat || op.numResults() != 1) return false;
    const std::vector<Use>& uses = op.result(0)->uses();
    if (uses.size() != 1) return false;
    const Op* pool = uses[0].user;
    if ((pool->kind() != OpKind::MaxPool && pool->kind() != OpKind::AvgPool) || anchorOf(g) != pool)
      return false;
    int64_t r = op.result(0)->type().rank();
    int64_t axis = op.attrs().getInt("axis");
    axis = axis < 0 ? axis + r : axis;
    return axis >= 0 && axis < 2;
  }

  bool canJoin(const Op& op, int g) const {
    if (!lowerSupports(op) || !groupSupported(g)) return false;
    // A kernel runs on one device.
    if (ops_[groups_[static_cast<size_t>(g)].front()]->device() != op.device()) return false;
    if (rules_.patchesIntoGemm && readsPatchesInPlace(op, g)) return convexWith(op, g);
    if (rules_.concatIntoGemmColumns && concatOfGemmColumns(op, g)) return convexWith(op, g);
    if (rules_.concatIntoPool && concatOfPool(op, g)) return convexWith(op, g);
    if (rules_.padIntoConcat && padOfConcat(op, g)) return convexWith(op, g);
    if (op.has(kView)) {
      if (!rules_.viewsIntoLoads) return false;
    } else if (op.has(kElementwise)) {
      if (!rules_.elementwiseIntoConsumer) return false;
      if (!rules_.transcendentalIntoContraction && isTranscendental(op.kind()))
        if (hasContraction(g)) return false;
      if (!rules_.elementwiseIntoGemmRows && computesGemmRows(op, g)) return false;
      if (!rules_.windowIntoGemmColumns && readsWindow(op, g) && computesGemmColumns(op, g))
        return false;
    } else {
      if (!rules_.elementwiseIntoProducer || anchorOf(g) || op.numResults() != 1) return false;
      // The attention strategy stores the op's result itself: no epilogue.
      if (op.kind() == OpKind::Attention) return false;
      // The group's outputs must span the anchor's iteration space.
      const Shape& shape = op.result(0)->type().shape();
      if (!outputsHaveShape(g, shape)) return false;
      // A matmul joins only an epilogue the matmul strategies run (analyzeKernel): one
      // pointwise over its result. Behind a view (a transpose, even one that a later
      // transpose undoes) the kernel would be `rows`, one scalar dot product per output.
      if (op.kind() == OpKind::Matmul && !epilogueIsPointwise(membersOf(g), &op, shape))
        return false;
    }
    return convexWith(op, g);
  }

  // No path leads from a member of g through a non-member to `op` (op's users are all in g,
  // so paths out of op stay inside).
  bool convexWith(const Op& op, int g) const {
    size_t lo = SIZE_MAX;
    for (size_t i : groups_[static_cast<size_t>(g)]) lo = std::min(lo, i);
    std::vector<const Op*> stack{&op};
    std::set<const Op*> seen;
    while (!stack.empty()) {
      const Op* cur = stack.back();
      stack.pop_back();
      for (const Value* v : cur->operands()) {
        const Op* d = v->def();
        if (!d || index_.at(d) < lo || !seen.insert(d).second) continue;
        if (d != &op && groupOf(d) == g) return false;
        stack.push_back(d);
      }
    }
    return true;
  }

  const CodegenOptions& opts_;
  FusionRules rules_;
  std::vector<Op*> ops_;
  std::map<const Op*, size_t> index_;
  std::vector<int> group_;
  std::vector<std::vector<size_t>> groups_;
  std::set<const Op*> alone_; // writers of donated arguments
  std::set<int> aloneGroups_;
  std::map<const Op*, bool> epilogue_; // onEpilogue's answers
  const std::vector<FusionPattern>& patterns_;
};

std::string freshName(const Module& m, const std::string& base, int& counter) {
  for (;;) {
    std::string n = base + "_dispatch_" + std::to_string(counter++);
    if (!m.lookupFunc(n)) return n;
  }
}

// Outlines one group into a kernel function and replaces it by a dispatch at the end of f.
// `members` are in source order. Returns the dispatch (null when the group was dead).
Op* outline(Module& m, Func& f, const std::vector<Op*>& members, int& counter) {
  std::set<const Op*> in(members.begin(), members.end());
  std::vector<Value*> inputs, outputs;
  std::set<Value*> seenInputs;
  for (Op* op : members)
    for (Value* v : op->operands())
      if ((!v->def() || !in.count(v->def())) && seenInputs.insert(v).second) inputs.push_back(v);
  for (Op* op : members)
    for (size_t r = 0; r < op->numResults(); ++r) {
      Value* v = op->result(r);
      bool outside = false;
      for (const Use& u : v->uses()) outside |= !in.count(u.user);
      if (outside) outputs.push_back(v);
    }
  if (outputs.empty()) { // dead code: nothing outside reads the group
    for (auto it = members.rbegin(); it != members.rend(); ++it) f.erase(*it);
    return nullptr;
  }
  std::string name = freshName(m, f.name(), counter);
  auto kernel = std::make_unique<Func>(name, members.front()->loc());
  std::map<const Value*, Value*> map;
  for (Value* v : inputs) map[v] = kernel->addArg(v->type());
  std::vector<Type> outTypes;
  for (Value* v : outputs) outTypes.push_back(v->type());
  kernel->setResultTypes(outTypes);
  Builder kb(kernel.get());
  for (Op* op : members) {
    std::vector<Value*> operands;
    for (Value* v : op->operands()) operands.push_back(map.at(v));
    std::vector<Type> types;
    for (size_t r = 0; r < op->numResults(); ++r) types.push_back(op->result(r)->type());
    kb.setLoc(op->loc());
    Op* c = kb.createUnchecked(op->kind(), operands, op->attrs(), types);
    for (size_t r = 0; r < op->numResults(); ++r) map[op->result(r)] = c->result(r);
  }
  std::vector<Value*> rets;
  for (Value* v : outputs) rets.push_back(map.at(v));
  kb.createUnchecked(OpKind::Return, rets, {}, {});
  m.addFunc(std::move(kernel));

  Builder b(&f);
  b.setLoc(members.front()->loc());
  b.setDevice(members.front()->device());
  Attrs a;
  a.set("kernel", name);
  Op* d = b.createUnchecked(OpKind::Dispatch, inputs, a, outTypes);
  for (size_t i = 0; i < outputs.size(); ++i) outputs[i]->replaceAllUsesWith(d->result(i));
  for (auto it = members.rbegin(); it != members.rend(); ++it) f.erase(*it);
  return d;
}

// Each `split` becomes one `slice` per piece, so that every piece is a view that joins its
// consumers (views-into-loads) instead of a multi-result kernel, which `lower` cannot emit
// and which would run on the host side (on a gpu: a round trip through host memory).
Status splitsAsSlices(Func& f) {
  for (Op* op : f.opsSnapshot()) {
    if (op->kind() != OpKind::Split || op->numOperands() != 1) continue;
    Value* x = op->operand(0);
    int64_t axis = op->attrs().getInt("axis");
    if (axis < 0) axis += x->type().rank();
    std::vector<int64_t> sizes = op->attrs().getInts("sizes");
    if (axis < 0 || axis >= x->type().rank() || sizes.size() != op->numResults()) continue;
    Builder b(&f, op);
    b.setLoc(op->loc());
    b.setDevice(op->device());
    int64_t start = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      Attrs a;
      a.set("starts", std::vector<int64_t>{start});
      a.set("ends", std::vector<int64_t>{start + sizes[i]});
      a.set("axes", std::vector<int64_t>{axis});
      a.set("steps", std::vector<int64_t>{1});
      start += sizes[i];
      KILN_TRY(Op * piece, b.create(OpKind::Slice, {x}, std::move(a), {op->result(i)->type()}));
      op->result(i)->replaceAllUsesWith(piece->result(0));
    }
    op->dropOperands();
    f.erase(op);
  }
  return ok();
}

Status formDispatches(Module& m, Func& f, const CodegenOptions& opts,
                      const std::vector<FusionPattern>& patterns, int& counter) {
  KILN_CHECK(splitsAsSlices(f));
  KILN_TRY(std::vector<Donation> donations, analyzeDonations(f));
  std::map<const Op*, Value*> inPlace; // writer -> the operand it writes over
  std::set<const Op*> alone;
  for (const Donation& d : donations)
    if (d.writer && d.writer->kind() != OpKind::Dispatch) {
      inPlace[d.writer] = d.writer->operand(d.operand);
      alone.insert(d.writer);
    }
  Grouping g(f, opts, std::move(alone), patterns);
  g.run();
  const std::vector<Op*>& ops = g.ops();
  // Units: a group, or an op outside every group; emitted in a topological order that keeps
  // the source order where dependencies allow (Kahn's algorithm, smallest first index first).
  size_t numGroups = g.groups().size();
  auto unitOf = [&](const Op* op) -> size_t {
    int gr = g.groupOf(op);
    if (gr >= 0) return static_cast<size_t>(gr);
    return numGroups + static_cast<size_t>(std::find(ops.begin(), ops.end(), op) - ops.begin());
  };
  size_t numUnits = numGroups + ops.size();
  std::vector<size_t> firstIndex(numUnits, SIZE_MAX), pending(numUnits, 0);
  std::vector<std::set<size_t>> succ(numUnits);
  std::vector<bool> live(numUnits, false);
  for (size_t i = 0; i < ops.size(); ++i) {
    size_t u = unitOf(ops[i]);
    live[u] = true;
    firstIndex[u] = std::min(firstIndex[u], i);
    for (const Value* v : ops[i]->operands())
      if (v->def()) {
        size_t p = unitOf(v->def());
        if (p != u && succ[p].insert(u).second) ++pending[u];
      }
  }
  std::set<std::pair<size_t, size_t>> ready; // (first index, unit)
  for (size_t u = 0; u < numUnits; ++u)
    if (live[u] && pending[u] == 0) ready.insert({firstIndex[u], u});
  Op* ret = f.terminator();
  while (!ready.empty()) {
    size_t u = ready.begin()->second;
    ready.erase(ready.begin());
    if (u < numGroups) {
      std::vector<Op*> members;
      std::vector<size_t> idx = g.groups()[u];
      std::sort(idx.begin(), idx.end());
      for (size_t i : idx) members.push_back(ops[i]);
      auto ip = members.size() == 1 ? inPlace.find(members[0]) : inPlace.end();
      Value* over = ip == inPlace.end() ? nullptr : ip->second;
      Op* d = outline(m, f, members, counter);
      if (d && over) {
        const std::vector<Value*>& in = d->operands();
        auto k = std::find(in.begin(), in.end(), over) - in.begin();
        d->attrs().set("in_place", std::vector<int64_t>{static_cast<int64_t>(k), 0});
      }
    } else if (ops[u - numGroups] != ret) {
      f.move(ops[u - numGroups], nullptr);
    }
    for (size_t s : succ[u])
      if (--pending[s] == 0) ready.insert({firstIndex[s], s});
  }
  if (ret) f.move(ret, nullptr);
  return ok();
}

class FusePass : public Pass {
public:
  FusePass(CodegenOptions opts, std::vector<FusionPattern> patterns)
      : opts_(std::move(opts)), patterns_(std::move(patterns)) {}

  Status run(Module& m) override {
    std::set<std::string> kernels;
    for (const auto& f : m.funcs())
      for (const auto& op : f->ops())
        if (op->kind() == OpKind::Dispatch) kernels.insert(op->attrs().getStr("kernel"));
    std::vector<Func*> todo;
    for (const auto& f : m.funcs())
      if (!kernels.count(f->name()) && !isLoweredKernel(*f)) todo.push_back(f.get());
    int counter = 0;
    for (Func* f : todo) KILN_CHECK(formDispatches(m, *f, opts_, patterns_, counter));
    return ok();
  }

private:
  CodegenOptions opts_;
  std::vector<FusionPattern> patterns_;
};

} // namespace

const std::vector<FusionPattern>& fusionPatterns() {
  static const std::vector<FusionPattern> table;
  return table;
}

std::unique_ptr<Pass> createFusePass(const CodegenOptions& opts,
                                     std::vector<FusionPattern> patterns) {
  return std::make_unique<FusePass>(opts, std::move(patterns));
}

std::unique_ptr<Pass> createFusePass(const CodegenOptions& opts) {
  return createFusePass(opts, fusionPatterns());
}

} // namespace kiln
