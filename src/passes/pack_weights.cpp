// pack-weights: on cpu targets, the weight B of an f32 GEMM is stored the way the cpu
// matmul's micro-kernel reads it, at compile time: [ceil(N / NR), K, NR], NR-column strips
// each contiguous along k (matmul_cpu.cpp then reads it in place instead of packing a
// KC x NC panel of it per block and K step). ViT-B/16's 192 x 768 x 3072 MLP product spent
// 16% of its time packing its weight on one thread (10.4 -> 8.8 ms without the packing).
//
// Requires:    shape-infer (static shapes); runs before fuse, on the ops of the devices it
//              covers, and only when the target is a cpu (TargetDesc::cpu).
// Guarantees:  every covered f32 `matmul` with static shapes, more rows than the micro-
//              kernel's MR (batch rows included), N at least its NR and B a weight held in
//              memory (an imported model's, or one compileProgram holds for a module that
//              embeds its weights; `[K, N]`, or `[N, K]` under
//              `transpose {perm = [1, 0]}`) that no other op of any function reads but
//              such matmuls, reads B as reshape(transpose(P, [1, 0, 2])), sliced to its
//              first N columns when NR does not divide N, of a new weight P
//              `<name>.packed<NR>` (`<name>.t.packed<NR>` from a transposed one) of
//              ceil(N / NR) strips with P[s, k, j] = B[k, s * NR + j] (0 past N): the same
//              values. A bf16 or f16 weight that a cast {to = f32} widens (before or after
//              the transpose) is packed the same, P keeping its type, and B is the cast of
//              those views. Likewise every such f32 matmul with a static 2-D A of at least
//              2 MR rows and more than 1.5 KC columns (deeper than one K step), at least NR
//              result columns and a B that is not a conv's patches (convPatches), whose A is
//              an f32 weight held in memory (`[M, K]`, or a reshape of one that keeps its
//              first dim: a conv's [M, C, KH, KW]) that no other op reads but such matmuls,
//              reads A as reshape(transpose(Q, [0, 2, 1])), sliced to its first M rows
//              when MR does not divide M, of a new weight Q `<name>.apacked<MR>` of
//              ceil(M / MR) panels with Q[s, k, i] = A[s * MR + i, k] (0 past M). The old
//              weight op is erased, and its declaration (its data is then not embedded in
//              the module).
// Invalidates: nothing (new ops have the weight's device and the matmul's location).
//
//   %w = weight {name = "fc"} : 768x3072     %p = weight {name = "fc.packed32"} : 96x768x32
//   %y = matmul %x, %w : 192x3072        =>  %t = transpose %p {perm = [1, 0, 2]} : 768x96x32
//                                            %b = reshape %t : 768x3072
//                                            %y = matmul %x, %b : 192x3072
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "ir/core/builder.h"
#include "passes/codegen.h"
#include "passes/lower/strategy.h"
#include "passes/passes.h"

namespace kiln {

namespace {

struct Source {
  Op* weight = nullptr;    // the weight op B comes from
  bool transposed = false; // B = transpose(weight [N, K])
  Op* widened = nullptr;   // B = cast {to = f32} of a bf16 or f16 weight (around the transpose)
};

// A cast to f32 of a bf16 or f16 value: a narrow weight widened where it is used.
bool widening(const Op* d) {
  if (!d || d->kind() != OpKind::Cast || d->result(0)->type().elem() != ElemType::F32) return false;
  ElemType from = d->operand(0)->type().elem();
  return from == ElemType::BF16 || from == ElemType::F16;
}

bool transpose2d(const Op* d) {
  return d && d->kind() == OpKind::Transpose &&
         d->attrs().getInts("perm") == std::vector<int64_t>{1, 0};
}

// The data of weight op d when the module holds it in memory and it is not a shard; else
// null.
const HostTensor* heldData(const Module& m, const Op* d) {
  if (!d || d->kind() != OpKind::Weight) return nullptr;
  const std::string& name = d->attrs().getStr("name");
  const WeightDecl* decl = m.lookupWeight(name);
  return decl && !decl->shard ? m.weightData(name) : nullptr;
}

// Where a matmul's B comes from when it is a packable weight held in memory: f32, or bf16 /
// f16 widened by a cast, with or without a transpose (on either side of the cast).
std::optional<Source> weightSource(const Module& m, const Value* b) {
  Op* d = b->def();
  Source s;
  for (int i = 0; i < 2; ++i) {
    if (!s.widened && widening(d)) {
      s.widened = d;
      d = d->operand(0)->def();
    } else if (!s.transposed && transpose2d(d)) {
      s.transposed = true;
      d = d->operand(0)->def();
    }
  }
  const HostTensor* data = heldData(m, d);
  if (!data) return std::nullopt;
  ElemType elem = d->result(0)->type().elem();
  if (data->elem() != elem || data->rank() != 2 ||
      (elem != ElemType::F32) != (s.widened != nullptr))
    return std::nullopt;
  s.weight = d;
  return s;
}

// The f32 weight a matmul's A [M, K] comes from, directly or through a reshape that keeps
// its element order (a conv's [M, C, KH, KW] weight viewed as M x C*KH*KW); null otherwise.
Op* weightSourceA(const Module& m, const Value* a) {
  Op* d = a->def();
  if (d && d->kind() == OpKind::Reshape) d = d->operand(0)->def();
  const HostTensor* data = heldData(m, d);
  if (!data || data->elem() != ElemType::F32 || d->result(0)->type().elem() != ElemType::F32 ||
      data->rank() < 2 || data->shape()[0] != a->type().dim(0).value())
    return nullptr;
  return d;
}

// P[s, kk, j] = B[kk, s * nr + j] (B stored [K, N], or [N, K] when transposed), 0 past N.
template <typename T>
void packStrips(const T* in, T* out, int64_t strips, int64_t k, int64_t n, int64_t nr,
                bool transposed) {
  for (int64_t s = 0; s < strips; ++s)
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t j = 0; j < nr; ++j) {
        int64_t col = s * nr + j;
        out[(s * k + kk) * nr + j] = col >= n     ? T(0)
                                     : transposed ? in[col * k + kk]
                                                  : in[kk * n + col];
      }
}

class PackWeightsPass : public Pass {
public:
  explicit PackWeightsPass(CodegenOptions opts) : opts_(std::move(opts)) {}

  Status run(Module& m) override {
    if (!opts_.target.cpu) return ok();
    shared_.clear();
    replaced_.clear();
    created_.clear();
    // Weights read by anything but packable matmuls, in any function (a gather of tied
    // embeddings, a decode step's product): packing those would keep both copies.
    for (const auto& f : m.funcs())
      for (const auto& op : f->ops())
        if (op->kind() == OpKind::Weight && !onlyPackableUses(*op->result(0), true, true) &&
            !onlyPackableUsesA(*op->result(0), true))
          shared_.insert(op->attrs().getStr("name"));
    for (const auto& f : m.funcs()) {
      std::vector<Op*> matmuls;
      for (const auto& op : f->ops())
        if (op->kind() == OpKind::Matmul && opts_.covers(*op)) matmuls.push_back(op.get());
      std::map<std::string, Value*> packed; // this function's packed weight ops, by name@device
      for (Op* mm : matmuls) {
        KILN_CHECK(rewrite(m, *f, *mm, packed));
        KILN_CHECK(rewriteA(m, *f, *mm, packed));
      }
    }
    // A weight no op loads any more leaves the module (a compiled module loads every
    // weight it declares).
    std::set<std::string> loaded;
    for (const auto& f : m.funcs())
      for (const auto& op : f->ops())
        if (op->kind() == OpKind::Weight) loaded.insert(op->attrs().getStr("name"));
    for (const std::string& name : replaced_)
      if (!loaded.count(name)) m.removeWeight(name);
    return ok();
  }

private:
  // A covered f32 matmul with static shapes, more rows than MR and N at least NR: its B
  // is worth storing as strips.
  bool packable(const Op& mm) const {
    if (mm.kind() != OpKind::Matmul || !opts_.covers(mm)) return false;
    const Type& at = mm.operand(0)->type();
    const Type& bt = mm.operand(1)->type();
    const Type& yt = mm.result(0)->type();
    if (!at.isStatic() || !bt.isStatic() || !yt.isStatic() || bt.rank() != 2 ||
        at.elem() != ElemType::F32 || bt.elem() != ElemType::F32 || yt.elem() != ElemType::F32)
      return false;
    auto [mr, nr] = cpuMicroTile(opts_.target, yt.elem());
    std::vector<int64_t> ys = yt.staticShape();
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < ys.size(); ++i) rows *= ys[i];
    return rows > mr && bt.dim(1).value() >= nr && bt.dim(0).value() >= 1;
  }

  // Every use of `v` is the B of a packable matmul, directly or through a transpose
  // {perm = [1, 0]} and (a bf16 or f16 weight) a cast to f32, each at most once.
  bool onlyPackableUses(const Value& v, bool throughTranspose, bool throughCast) const {
    for (const Use& u : v.uses()) {
      const Op* user = u.user;
      if (user->kind() == OpKind::Matmul && u.operandIndex == 1 && packable(*user)) continue;
      if (throughTranspose && transpose2d(user) &&
          onlyPackableUses(*user->result(0), false, throughCast))
        continue;
      if (throughCast && widening(user) &&
          onlyPackableUses(*user->result(0), throughTranspose, false))
        continue;
      return false;
    }
    return true;
  }

  // A covered f32 matmul with static shapes whose A [M, K] is at least two micro-tile
  // rows and whose columns fill a strip (fewer are the dot plan's, which reads A along k):
  // its A is worth storing as MR-row panels.
  bool packableA(const Op& mm) const {
    if (mm.kind() != OpKind::Matmul || !opts_.covers(mm)) return false;
    const Type& at = mm.operand(0)->type();
    const Type& bt = mm.operand(1)->type();
    const Type& yt = mm.result(0)->type();
    if (!at.isStatic() || !bt.isStatic() || !yt.isStatic() || at.rank() != 2 ||
        at.elem() != ElemType::F32 || bt.elem() != ElemType::F32 || yt.elem() != ElemType::F32)
      return false;
    auto [mr, nr] = cpuMicroTile(opts_.target, yt.elem());
    // A depth of one K step reads A in place as one contiguous run per block already.
    int64_t depth = at.dim(1).value();
    return at.dim(0).value() >= 2 * mr && yt.dim(yt.rank() - 1).value() >= nr &&
           cpuMatmulKStep(opts_.target, nr, bt.elem(), depth) < depth &&
           !convPatches(mm.operand(1));
  }

  // Every use of `v` is the A of a packableA matmul, directly or through a reshape, each at
  // most once.
  bool onlyPackableUsesA(const Value& v, bool throughReshape) const {
    if (!v.hasUses()) return false;
    for (const Use& u : v.uses()) {
      const Op* user = u.user;
      if (user->kind() == OpKind::Matmul && u.operandIndex == 0 && packableA(*user)) continue;
      if (throughReshape && user->kind() == OpKind::Reshape &&
          onlyPackableUsesA(*user->result(0), false))
        continue;
      return false;
    }
    return true;
  }

  // A weight read as A: stored as ceil(M / MR) panels of MR rows, each contiguous along k
  // (P[s, k, i] = A[s * MR + i, k], 0 past M), and read as the view
  // slice(reshape(transpose(P, [0, 2, 1])))[:M] that prepackedA (matmul_cpu.cpp) knows.
  Status rewriteA(Module& m, Func& f, Op& mm, std::map<std::string, Value*>& packed) {
    if (!packableA(mm)) return ok();
    Op* w = weightSourceA(m, mm.operand(0));
    if (!w || shared_.count(w->attrs().getStr("name"))) return ok();
    const Type& at = mm.operand(0)->type();
    const int64_t mr = cpuMicroTile(opts_.target, mm.result(0)->type().elem()).first;
    const int64_t rows = at.dim(0).value(), k = at.dim(1).value();
    const int64_t panels = (rows + mr - 1) / mr;
    const std::string name = w->attrs().getStr("name");
    auto fill = [&](HostTensor& p) { // A [M, K] is B [N, K] under a transpose: the same strips
      packStrips(reinterpret_cast<const uint32_t*>(m.weightData(name)->data()),
                 reinterpret_cast<uint32_t*>(p.mutableData()), panels, k, rows, mr, true);
    };
    KILN_TRY(Value * na, panelsView(m, f, mm, *w, name + ".apacked" + std::to_string(mr),
                                    Type(ElemType::F32, Shape{Dim(panels), Dim(k), Dim(mr)}), fill,
                                    0, rows, packed));
    if (na) replaceOperand(f, mm, 0, na, name);
    return ok();
  }

  // The views that read the packed weight `pname` of type pt [S, K, width] (declared and
  // filled by `fill` from weight w's data the first time) as the matmul's operand: B
  // (axis 1) as reshape(transpose(P, [1, 0, 2])) to [K, S * width], A (axis 0) as
  // reshape(transpose(P, [0, 2, 1])) to [S * width, K], sliced to the first `valid` along
  // `axis` when the last strip is padded. Null when the module has a weight of that name
  // of its own (a user's weight): the operand is then left unpacked.
  Result<Value*> panelsView(Module& m, Func& f, Op& mm, const Op& w, const std::string& pname,
                            const Type& pt, const std::function<void(HostTensor&)>& fill,
                            int64_t axis, int64_t valid, std::map<std::string, Value*>& packed) {
    const std::string& name = w.attrs().getStr("name");
    if (m.lookupWeight(pname) && !created_.count(pname)) return nullptr;
    if (created_.insert(pname).second) {
      HostTensor p = HostTensor::uninitialized(pt.elem(), pt.staticShape());
      fill(p);
      const WeightDecl* decl = m.lookupWeight(name);
      KILN_CHECK(m.addWeight(WeightDecl{pname, pt, decl->file, pname, decl->loc, std::nullopt}));
      m.setWeightData(pname, std::move(p));
    }
    Builder b(&f, &mm);
    b.setLoc(mm.loc());
    b.setDevice(w.device());
    // One packed weight op per device that reads it: a weight replicated over a tensor-
    // parallel group has a weight op on each device (one op would be another device's
    // buffer).
    const std::optional<DeviceTarget>& dev = w.device();
    Value*& pw = packed[pname + "@" + (dev ? dev->str() : std::string())];
    if (!pw) {
      // Before the first matmul that reads it, which comes before the others.
      Attrs a;
      a.set("name", pname);
      KILN_TRY(Op * nw, b.create(OpKind::Weight, {}, std::move(a), {pt}));
      pw = nw->result(0);
    }
    int64_t strips = pt.dim(0).value(), k = pt.dim(1).value(), width = pt.dim(2).value();
    Attrs perm;
    perm.set("perm", axis == 1 ? std::vector<int64_t>{1, 0, 2} : std::vector<int64_t>{0, 2, 1});
    KILN_TRY(Op * t, b.create(OpKind::Transpose, {pw}, std::move(perm)));
    Shape padded =
        axis == 1 ? Shape{Dim(k), Dim(strips * width)} : Shape{Dim(strips * width), Dim(k)};
    KILN_TRY(Op * r, b.create(OpKind::Reshape, {t->result(0)}, {}, {Type(pt.elem(), padded)}));
    Value* v = r->result(0);
    if (strips * width != valid) { // the valid part of the padded strips
      Attrs sl;
      sl.set("starts", std::vector<int64_t>{0});
      sl.set("ends", std::vector<int64_t>{valid});
      sl.set("axes", std::vector<int64_t>{axis});
      sl.set("steps", std::vector<int64_t>{1});
      KILN_TRY(Op * c, b.create(OpKind::Slice, {v}, std::move(sl)));
      v = c->result(0);
    }
    return v;
  }

  // The matmul's operand i becomes v, and the old chain (views, then the weight `name`) goes
  // when nothing else reads it.
  void replaceOperand(Func& f, Op& mm, size_t i, Value* v, const std::string& name) {
    replaced_.insert(name);
    Value* old = mm.operand(i);
    mm.setOperand(i, v);
    for (Op* d = old->def(); d && !d->result(0)->hasUses();) {
      Op* next = d->numOperands() == 1 ? d->operand(0)->def() : nullptr;
      d->dropOperands();
      f.erase(d);
      d = next;
    }
  }

  Status rewrite(Module& m, Func& f, Op& mm, std::map<std::string, Value*>& packed) {
    if (!packable(mm)) return ok();
    const Type& bt = mm.operand(1)->type();
    const int64_t nr = cpuMicroTile(opts_.target, mm.result(0)->type().elem()).second;
    const int64_t k = bt.dim(0).value(), n = bt.dim(1).value();
    const int64_t strips = (n + nr - 1) / nr; // the last one padded with zeros
    std::optional<Source> src = weightSource(m, mm.operand(1));
    if (!src || shared_.count(src->weight->attrs().getStr("name"))) return ok();

    const std::string name = src->weight->attrs().getStr("name");
    const std::string pname = name + (src->transposed ? ".t" : "") + ".packed" + std::to_string(nr);
    ElemType elem = src->weight->result(0)->type().elem();
    auto fill = [&](HostTensor& p) {
      const HostTensor& w = *m.weightData(name);
      // Elements copied as they are (a bf16 or f16 weight stays narrow); zeros past N.
      if (elemTypeBytes(elem) == 4)
        packStrips(reinterpret_cast<const uint32_t*>(w.data()),
                   reinterpret_cast<uint32_t*>(p.mutableData()), strips, k, n, nr, src->transposed);
      else
        packStrips(reinterpret_cast<const uint16_t*>(w.data()),
                   reinterpret_cast<uint16_t*>(p.mutableData()), strips, k, n, nr, src->transposed);
    };
    KILN_TRY(Value * nb,
             panelsView(m, f, mm, *src->weight, pname,
                        Type(elem, Shape{Dim(strips), Dim(k), Dim(nr)}), fill, 1, n, packed));
    if (!nb) return ok();
    if (src->widened) { // widened after the views, as before them
      Builder b(&f, &mm);
      b.setLoc(mm.loc());
      b.setDevice(src->weight->device());
      KILN_TRY(Op * c, b.create(OpKind::Cast, {nb}, src->widened->attrs()));
      nb = c->result(0);
    }
    replaceOperand(f, mm, 1, nb, name);
    return ok();
  }

  CodegenOptions opts_;
  std::set<std::string> replaced_; // weights some matmul no longer reads
  std::set<std::string> shared_;   // weights with other readers: left as they are
  std::set<std::string> created_;  // the packed weights this run declared
};

} // namespace

std::unique_ptr<Pass> createPackWeightsPass(const CodegenOptions& opts) {
  return std::make_unique<PackWeightsPass>(opts);
}

} // namespace kiln
