// KernelEmitter: what the cpu and GPU LLVM emitters share (internal to src/backends/llvm).
//
// A lowered kernel's ops are arranged as a tree (a `for` holds its body, an `if` its two
// blocks); the base class emits the structured ops (loops carrying values as phi nodes, ifs
// joined by phi nodes), index arithmetic, buffer addressing with the checks of data-dependent
// indices, scalar `compute` (scalar.h) and memory access. A subclass supplies what differs
// between a CPU, which runs a workgroup's threads one after another in loops, and a GPU,
// which runs each thread as one invocation: the function's signature, workgroup and thread
// ids, barriers, subgroup exchanges, shared and private memory, symbol values and how a kernel
// stops on an error (emitTargetOp, failBlock, dynamicExtent).
#pragma once

#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "analysis/value_bounds.h"
#include "ir/core/diag.h"
#include "ir/core/ir.h"
#include "runtime/cpu/abi.h"

namespace kiln::llvmgen {

struct Node {
  const Op* op = nullptr;      // the op, or the `for` / `if`
  std::vector<Node> body;      // a loop's body, an if's then block (without the yield)
  std::vector<Node> otherwise; // an if's else block (without the yield)
  bool hasBarrier = false;     // a barrier inside (at any depth)
};

// A buffer as the code sees it: element pointer and extents.
struct Buf {
  llvm::Value* base = nullptr;
  ElemType elem = ElemType::F32;
  std::vector<llvm::Value*> extents;
  std::vector<int64_t> minExtents; // the smallest value each extent can take
  int64_t perThread = 0; // private: elements per thread (the slice of thread t starts at t*n)
};

class KernelEmitter {
public:
  KernelEmitter(llvm::Module& m, const Func& k, const SymbolTable& syms);
  virtual ~KernelEmitter() = default;

protected:
  // "the CPU backend", for messages.
  virtual std::string backendName() const = 0;
  // The ops only a target knows (ids, barriers, subgroups, symbols, alloc); an op no target
  // knows is an error located at it.
  virtual Status emitTargetOp(const Op& op) = 0;
  // The block that ends the kernel with `status` (created on first use).
  virtual llvm::BasicBlock* failBlock(KilnCpuStatus status) = 0;
  // Extent `dim` of buffer argument `arg` when it is not static; `flat` counts the dims of
  // every argument before it (the ABI's order of extents).
  virtual llvm::Value* dynamicExtent(size_t arg, int64_t dim, int64_t flat) = 0;

  static Node makeNode(const Op* op);
  // Splits the kernel into prologue (before kernel_config), config and body; checks the
  // workgroup size (at most `maxThreads` threads).
  Status buildTree(int64_t maxThreads);
  // The buffer arguments as Bufs (function argument `i` holds argument i's base pointer).
  Status bindArguments();

  // Emits `for (iv = lo; iv < hi; iv += step) body(iv)`; `step` is positive.
  template <typename F> Status loop(llvm::Value* lo, llvm::Value* hi, llvm::Value* step, F body);
  // The same loop carrying values: they start as `inits`, `body(iv, carried)` returns the
  // next ones; the result is their last values (the inits when the body never runs).
  template <typename F>
  Result<std::vector<llvm::Value*>> loopCarrying(llvm::Value* lo, llvm::Value* hi,
                                                 llvm::Value* step,
                                                 const std::vector<llvm::Value*>& inits, F body);
  // Continues only when `ok` holds; otherwise the kernel stops with `status`.
  void check(llvm::Value* okCond, KilnCpuStatus status);

  virtual llvm::Value* get(const Value* v) { return vals_.at(v); }
  virtual void set(const Value* v, llvm::Value* x) { vals_[v] = x; }
  llvm::Type* valueType(const Type& t);
  // Index values: i64, or i32 in a GPU kernel whose every index value bounds prove to fit.
  llvm::Type* indexTy() { return index32_ ? b_.getInt32Ty() : b_.getInt64Ty(); }
  llvm::Value* idx(int64_t v) {
    return llvm::ConstantInt::get(indexTy(), static_cast<uint64_t>(v), true);
  }
  // The values a region's yield hands back, read after its ops are emitted.
  std::vector<llvm::Value*> yielded(const Block& b);

  // A `for`, an `if` or any other op.
  Status emitNode(const Node& n);
  Status emitIf(const Node& n);
  virtual Status emitOp(const Op& op);
  // The element at operands [first, first + count) of `op`; `lanes` elements along the last
  // dim are accessed. A data-dependent index (analysis/data_indices.h) is checked first.
  Result<llvm::Value*> address(const Op& op, const Value* bufVal, size_t first, size_t count,
                               int64_t lanes = 1);
  // Value bounds show `span` elements from the index lie within an extent >= minExtent.
  bool provedInRange(const Value* idx, int64_t minExtent, int64_t span) const;
  static const Value* splitBy(const Value* outer, const Value* inner);
  llvm::Align alignOf(ElemType e);
  // An f64 accumulator update on a private buffer whose adds may be reassociated.
  bool isWideAccumulation(const Op& op) const;
  // This thread's slice of a private buffer.
  Result<llvm::Value*> address0(const Buf& buf);
  // ifloordiv / iceildiv / imod.
  Status emitIndexDivision(const Op& op);

  llvm::Module& m_;
  llvm::LLVMContext& c_;
  llvm::IRBuilder<> b_;
  const Func& k_;
  const SymbolTable& syms_;
  ValueBounds bounds_;
  llvm::Function* fn_ = nullptr;
  std::vector<const Op*> prologue_;
  const Op* config_ = nullptr;
  std::vector<int64_t> workgroup_;
  int64_t threads_ = 1;
  std::vector<Node> body_;
  std::unordered_map<const Value*, llvm::Value*> vals_;
  std::unordered_map<const Value*, Buf> bufs_;
  std::unordered_set<const Value*> dataIndices_;
  std::map<int32_t, llvm::BasicBlock*> fail_;
  llvm::Value* thread_ = nullptr; // the CPU's thread counter (private slices); null on GPUs
  // Loops with at most this many iterations, all static, are unrolled completely (a register
  // tile's rows and columns, whose private accumulators then become registers), unless a loop
  // that stays a loop is nested inside and unrollAroundLoops_ is false.
  int64_t fullUnrollTrips_ = 32;
  // On the cpu a loop around a loop is never unrolled completely: a matmul's static K steps of
  // KC around the micro-kernel's loop over k copied the micro-kernel once per step (18 times in
  // ResNet-18's 3x3 convolutions) for no register gain, and most of LLVM's time went to the
  // copies. GPU kernels keep it (a thread's register tile around its K loop).
  bool unrollAroundLoops_ = false;
  // Whether a loop emitted since the enclosing loop's body began stays a loop (is not marked
  // for full unrolling).
  bool loopInside_ = false;
  // The next loop is not unrolled at all (set by a GPU emitter for loops holding barriers:
  // a K loop over shared tiles, whose body is a whole tile's work).
  bool keepLoop_ = false;
  bool keepBarrierLoops_ = false;
  // The next loop is unrolled completely when its trip count is static (for's unroll=1).
  bool unrollLoop_ = false;
  bool scalarLoop_ = false; // the next loop's iterations are not vectorized (for's vectorize=0)
  bool index32_ = false;    // see indexTy()
};

template <typename F>
Status KernelEmitter::loop(llvm::Value* lo, llvm::Value* hi, llvm::Value* step, F body) {
  Result<std::vector<llvm::Value*>> r = loopCarrying(
      lo, hi, step, {},
      [&](llvm::Value* iv, const std::vector<llvm::Value*>&) -> Result<std::vector<llvm::Value*>> {
        KILN_CHECK(body(iv));
        return std::vector<llvm::Value*>{};
      });
  if (!r.ok()) return r.takeDiags();
  return ok();
}

template <typename F>
Result<std::vector<llvm::Value*>>
KernelEmitter::loopCarrying(llvm::Value* lo, llvm::Value* hi, llvm::Value* step,
                            const std::vector<llvm::Value*>& inits, F body) {
  bool keep = keepLoop_, asked = unrollLoop_, scalar = scalarLoop_;
  keepLoop_ = unrollLoop_ = scalarLoop_ = false;
  bool loopAround = loopInside_;
  loopInside_ = false;
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(c_, "loop", fn_);
  auto* exit = llvm::BasicBlock::Create(c_, "loop.end", fn_);
  b_.CreateCondBr(b_.CreateICmpSLT(lo, hi), header, exit);
  b_.SetInsertPoint(header);
  llvm::PHINode* iv = b_.CreatePHI(lo->getType(), 2, "iv");
  iv->addIncoming(lo, pre);
  std::vector<llvm::PHINode*> carried;
  std::vector<llvm::Value*> carriedValues;
  for (llvm::Value* init : inits) {
    carried.push_back(b_.CreatePHI(init->getType(), 2, "carried"));
    carried.back()->addIncoming(init, pre);
    carriedValues.push_back(carried.back());
  }
  KILN_TRY(std::vector<llvm::Value*> nextValues,
           body(static_cast<llvm::Value*>(iv), carriedValues));
  if (nextValues.size() != inits.size())
    return error(k_.loc(), "a loop of kernel @" + k_.name() + " yields the wrong number of values");
  llvm::Value* next = b_.CreateAdd(iv, step, "iv.next", false, true);
  llvm::BasicBlock* latchBlock = b_.GetInsertBlock();
  iv->addIncoming(next, latchBlock);
  for (size_t k = 0; k < carried.size(); ++k) carried[k]->addIncoming(nextValues[k], latchBlock);
  llvm::BranchInst* latch = b_.CreateCondBr(b_.CreateICmpSLT(next, hi), header, exit);
  // A short loop of static trip count (a register tile's rows and columns) is unrolled
  // completely, so that its private accumulators become registers.
  auto* cl = llvm::dyn_cast<llvm::ConstantInt>(lo);
  auto* ch = llvm::dyn_cast<llvm::ConstantInt>(hi);
  auto* cs = llvm::dyn_cast<llvm::ConstantInt>(step);
  bool full = !keep && cl && ch && cs && cs->getSExtValue() > 0 &&
              (asked || ((unrollAroundLoops_ || !loopInside_) &&
                         (ch->getSExtValue() - cl->getSExtValue()) / cs->getSExtValue() <=
                             fullUnrollTrips_));
  const char* hint = keep ? "llvm.loop.unroll.disable" : full ? "llvm.loop.unroll.full" : nullptr;
  loopInside_ = loopAround || !full;
  if (hint || scalar) {
    std::vector<llvm::Metadata*> ops{nullptr};
    if (hint) ops.push_back(llvm::MDNode::get(c_, llvm::MDString::get(c_, hint)));
    if (scalar)
      ops.push_back(
          llvm::MDNode::get(c_, {llvm::MDString::get(c_, "llvm.loop.vectorize.enable"),
                                 llvm::ConstantAsMetadata::get(llvm::ConstantInt::getFalse(c_))}));
    llvm::MDNode* md = llvm::MDNode::getDistinct(c_, ops);
    md->replaceOperandWith(0, md);
    latch->setMetadata(llvm::LLVMContext::MD_loop, md);
  }
  b_.SetInsertPoint(exit);
  std::vector<llvm::Value*> results;
  for (size_t k = 0; k < inits.size(); ++k) {
    llvm::PHINode* r = b_.CreatePHI(inits[k]->getType(), 2, "carried.out");
    r->addIncoming(inits[k], pre);
    r->addIncoming(nextValues[k], latchBlock);
    results.push_back(r);
  }
  return results;
}

} // namespace kiln::llvmgen
