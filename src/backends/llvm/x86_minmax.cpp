// Exact float max/min trees with VRANGE (see x86_minmax.h).
#include "backends/llvm/x86_minmax.h"

#include <llvm/ADT/APFloat.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Triple.h>

#include <vector>

namespace kiln::llvmgen {

namespace {

// VRANGE's imm8: bits 1:0 pick min (0) or max (1), bits 3:2 = 01 the sign of the
// comparison's result (which orders -0.0 below +0.0).
constexpr unsigned kRangeMin = 4, kRangeMax = 5;

bool isMinMax(const llvm::Value* v, llvm::Intrinsic::ID id) {
  const auto* c = llvm::dyn_cast<llvm::IntrinsicInst>(v);
  return c && c->getIntrinsicID() == id;
}

// The VRANGE intrinsic for a 128-, 256- or 512-bit vector of f32 or f64, or none.
llvm::Intrinsic::ID rangeFor(llvm::FixedVectorType* t) {
  bool f32 = t->getElementType()->isFloatTy();
  if (!f32 && !t->getElementType()->isDoubleTy()) return llvm::Intrinsic::not_intrinsic;
  switch (t->getPrimitiveSizeInBits().getFixedValue()) {
  case 128:
    return f32 ? llvm::Intrinsic::x86_avx512_mask_range_ps_128
               : llvm::Intrinsic::x86_avx512_mask_range_pd_128;
  case 256:
    return f32 ? llvm::Intrinsic::x86_avx512_mask_range_ps_256
               : llvm::Intrinsic::x86_avx512_mask_range_pd_256;
  case 512:
    return f32 ? llvm::Intrinsic::x86_avx512_mask_range_ps_512
               : llvm::Intrinsic::x86_avx512_mask_range_pd_512;
  default: return llvm::Intrinsic::not_intrinsic;
  }
}

// The vector type VRANGE computes `t` in: t itself, or a 128-bit vector whose first lanes
// hold a scalar or a narrower vector (<2 x float>).
llvm::FixedVectorType* workType(llvm::Type* t) {
  llvm::Type* e = t->getScalarType();
  if (!e->isFloatTy() && !e->isDoubleTy()) return nullptr;
  auto* v = llvm::dyn_cast<llvm::FixedVectorType>(t);
  if (v && v->getPrimitiveSizeInBits().getFixedValue() >= 128) return v;
  if (!v && !t->isVectorTy()) return llvm::FixedVectorType::get(e, e->isFloatTy() ? 4 : 2);
  if (v && v->getPrimitiveSizeInBits().getFixedValue() == 64 && e->isFloatTy())
    return llvm::FixedVectorType::get(e, 4);
  return nullptr;
}

class TreeRewriter {
public:
  // Collects the tree's inner calls and leaves.
  TreeRewriter(llvm::IntrinsicInst* root, llvm::Intrinsic::ID id) : root_(root), id_(id), b_(root) {
    visit(root_);
  }

  void rewrite() {
    llvm::Type* t = root_->getType();
    llvm::FixedVectorType* vt = workType(t);
    llvm::Module* m = root_->getModule();
    llvm::Function* range = llvm::Intrinsic::getDeclaration(m, rangeFor(vt));
    unsigned bits = vt->getPrimitiveSizeInBits().getFixedValue();
    llvm::Type* maskTy = b_.getIntNTy(bits == 512 ? vt->getNumElements() : 8);
    unsigned imm = id_ == llvm::Intrinsic::maximum ? kRangeMax : kRangeMin;
    bool scalar = !t->isVectorTy(), narrow = !scalar && t != vt;
    // A narrow vector's lanes first, the rest poison (their results are dropped).
    std::vector<int> widen, shrink;
    if (narrow) {
      unsigned n = llvm::cast<llvm::FixedVectorType>(t)->getNumElements();
      for (unsigned i = 0; i < vt->getNumElements(); ++i) widen.push_back(i < n ? int(i) : -1);
      for (unsigned i = 0; i < n; ++i) shrink.push_back(int(i));
    }
    std::vector<llvm::Value*> level;
    for (llvm::Value* l : leaves_)
      level.push_back(scalar   ? b_.CreateInsertElement(llvm::PoisonValue::get(vt), l, uint64_t(0))
                      : narrow ? b_.CreateShuffleVector(l, widen)
                               : l);
    // NaN where any leaf is NaN: one unordered compare per pair of leaves.
    llvm::Value* nan = nullptr;
    for (size_t i = 0; i < level.size(); i += 2) {
      llvm::Value* u = b_.CreateFCmpUNO(level[i], level[i + 1 < level.size() ? i + 1 : i]);
      nan = nan ? b_.CreateOr(nan, u) : u;
    }
    while (level.size() > 1) {
      std::vector<llvm::Value*> next;
      for (size_t i = 0; i + 1 < level.size(); i += 2) {
        std::vector<llvm::Value*> args{level[i], level[i + 1], b_.getInt32(imm),
                                       llvm::PoisonValue::get(vt),
                                       llvm::ConstantInt::getAllOnesValue(maskTy)};
        if (bits == 512) args.push_back(b_.getInt32(4)); // the current rounding mode
        next.push_back(b_.CreateCall(range, args));
      }
      if (level.size() % 2) next.push_back(level.back());
      level = std::move(next);
    }
    llvm::Value* qnan =
        llvm::ConstantFP::get(vt, llvm::APFloat::getQNaN(vt->getElementType()->getFltSemantics()));
    llvm::Value* r = b_.CreateSelect(nan, qnan, level[0]);
    if (scalar) r = b_.CreateExtractElement(r, uint64_t(0));
    if (narrow) r = b_.CreateShuffleVector(r, shrink);
    root_->replaceAllUsesWith(r);
    for (llvm::IntrinsicInst* c : inner_) c->eraseFromParent(); // users before operands
  }

private:
  // An operand is an inner call when it is a call of the same intrinsic in the same block
  // whose only user is this call; else a leaf.
  void visit(llvm::IntrinsicInst* c) {
    inner_.push_back(c);
    for (llvm::Value* op : c->args()) {
      auto* oc = llvm::dyn_cast<llvm::IntrinsicInst>(op);
      if (oc && isMinMax(oc, id_) && oc->hasOneUse() && oc->getParent() == root_->getParent())
        visit(oc);
      else
        leaves_.push_back(op);
    }
  }

  llvm::IntrinsicInst* root_;
  llvm::Intrinsic::ID id_;
  llvm::IRBuilder<> b_;
  std::vector<llvm::IntrinsicInst*> inner_;
  std::vector<llvm::Value*> leaves_;
};

} // namespace

bool hasVrange(const llvm::TargetMachine& tm) {
  const llvm::MCSubtargetInfo* sti = tm.getMCSubtargetInfo();
  return tm.getTargetTriple().getArch() == llvm::Triple::x86_64 && sti &&
         sti->checkFeatures("+avx512dq,+avx512vl");
}

bool rangeMinMax(llvm::Function& f) {
  // Roots: calls whose user is not a call of the same intrinsic (in the same block, as
  // their only user) that would hold them as an inner node.
  std::vector<std::pair<llvm::IntrinsicInst*, llvm::Intrinsic::ID>> roots;
  for (llvm::BasicBlock& bb : f)
    for (llvm::Instruction& i : bb) {
      auto* c = llvm::dyn_cast<llvm::IntrinsicInst>(&i);
      if (!c) continue;
      llvm::Intrinsic::ID id = c->getIntrinsicID();
      if (id != llvm::Intrinsic::maximum && id != llvm::Intrinsic::minimum) continue;
      llvm::FixedVectorType* vt = workType(c->getType());
      if (!vt || rangeFor(vt) == llvm::Intrinsic::not_intrinsic) continue;
      bool inner = c->hasOneUse() && isMinMax(c->user_back(), id) &&
                   llvm::cast<llvm::Instruction>(c->user_back())->getParent() == &bb;
      if (!inner) roots.push_back({c, id});
    }
  for (auto [root, id] : roots) TreeRewriter(root, id).rewrite();
  return !roots.empty();
}

} // namespace kiln::llvmgen
