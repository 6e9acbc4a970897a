// emitCpuKernel: one lowered kernel as an LLVM function with the cpu entry-point ABI.
//
// The kernel's ops are first arranged as a tree (a `for` holds its body, an `if` its two
// blocks) and split into phases at barriers (see emit.h). Emission then walks the tree:
//
//   entry:      the uniform prologue (ops before kernel_config), buffer pointers, extents
//   wg loop:    for w in [begin, end): workgroup ids; shared buffers zeroed
//     phase:    for t in [0, threads): local ids; the phase's ops
//     uniform:  a barrier-holding `for`, its phases inside
//
// A value used in a phase other than the one defining it lives in a per-thread slot. Carried
// values of a `for` and results of an `if` are phi nodes; a barrier-holding loop carries
// none, and no barrier sits inside an `if` (both are refused). Subgroups are one thread
// on this backend (kernel_config's `subgroup` must be 1), so subgroup ops are copies.
//
// Accesses at indices computed from data (an `icast` of a loaded scalar: gather and scatter
// indices) are checked against the buffer's extents and return kKilnCpuIndexOutOfRange;
// every other index is derived from ids, loop counters, constants and symbols by `lower`,
// and stays unchecked so that the hot loops carry no branches.
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <map>
#include <unordered_map>
#include <unordered_set>

#include "analysis/data_indices.h"
#include "analysis/value_bounds.h"
#include "backends/llvm/emit.h"
#include "backends/llvm/scalar.h"
#include "runtime/cpu/abi.h"

namespace kiln::llvmgen {

namespace {

using llvm::IRBuilder;

// Stack bytes one invocation may use for shared and per-thread private buffers and slots.
constexpr uint64_t kMaxStackBytes = uint64_t(4) << 20;
// Loops with at most this many iterations, all static, are unrolled completely.
constexpr int64_t kFullUnrollTrips = 32;

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

class Emitter {
public:
  Emitter(llvm::Module& m, const Func& k, const SymbolTable& syms, bool mayAlias)
      : m_(m), c_(m.getContext()), b_(c_), k_(k), syms_(syms), bounds_(k, syms),
        mayAlias_(mayAlias) {
    // A product added to a sum may be one fused multiply-add (one rounding instead of two:
    // closer to the interpreter's f64 accumulation, and twice the throughput).
    llvm::FastMathFlags fmf;
    fmf.setAllowContract(true);
    b_.setFastMathFlags(fmf);
  }

  Result<EmittedKernel> run(const std::string& symbol) {
    KILN_CHECK(buildTree());
    dataIndices_ = dataDependentIndices(k_);
    EmittedKernel out;
    out.symbol = symbol;
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::Type* ptr = b_.getPtrTy();
    // The body takes every buffer as a noalias pointer, so loads and stores of different
    // buffers are known not to overlap (unless the kernel writes a buffer in place).
    std::vector<llvm::Type*> params(k_.numArgs(), ptr);
    params.push_back(ptr); // extents
    params.push_back(ptr); // symbols
    params.push_back(i64); // begin
    params.push_back(i64); // end
    fn_ = llvm::Function::Create(llvm::FunctionType::get(b_.getInt32Ty(), params, false),
                                 llvm::GlobalValue::InternalLinkage, symbol + ".body", m_);
    for (size_t i = 0; i < k_.numArgs() && !mayAlias_; ++i)
      fn_->addParamAttr(unsigned(i), llvm::Attribute::NoAlias);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    entry_ = llvm::BasicBlock::Create(c_, "entry", fn_);
    b_.SetInsertPoint(entry_);
    extents_ = fn_->getArg(unsigned(k_.numArgs()));
    symbolsPtr_ = fn_->getArg(unsigned(k_.numArgs() + 1));
    llvm::Value* begin = fn_->getArg(unsigned(k_.numArgs() + 2));
    llvm::Value* end = fn_->getArg(unsigned(k_.numArgs() + 3));
    KILN_CHECK(bindArguments());
    for (const Op* op : prologue_) KILN_CHECK(emitOp(*op));
    KILN_CHECK(allocateStack());
    KILN_CHECK(emitWorkgroupLoop(begin, end));
    b_.CreateRet(b_.getInt32(kKilnCpuOk));
    out.symbols = symbolNames_;
    emitEntryPoint(symbol);
    return out;
  }

private:
  // ---- structure -------------------------------------------------------------------------

  // An op as a node: a barrier, or an op with its regions' ops (yields left out) below it.
  static Node makeNode(const Op* op) {
    Node n{op, {}, {}, op->kind() == OpKind::Barrier};
    auto region = [&](size_t r, std::vector<Node>& out) {
      if (r >= op->numRegions()) return;
      for (const auto& inner : op->region(r)->ops()) {
        if (inner->kind() == OpKind::Yield) continue;
        out.push_back(makeNode(inner.get()));
        n.hasBarrier = n.hasBarrier || out.back().hasBarrier;
      }
    };
    region(0, n.body);
    region(1, n.otherwise);
    return n;
  }

  Status buildTree() {
    bool configured = false;
    for (const auto& opPtr : k_.ops()) {
      const Op* op = opPtr.get();
      if (!configured) {
        if (op->kind() == OpKind::KernelConfig) {
          configured = true;
          config_ = op;
          workgroup_ = op->attrs().getInts("workgroup");
        } else {
          prologue_.push_back(op);
        }
        continue;
      }
      if (op->kind() == OpKind::Return) continue;
      body_.push_back(makeNode(op));
    }
    if (!config_) return error(k_.loc(), "kernel @" + k_.name() + " has no kernel_config");
    if (workgroup_.size() != 3 || workgroup_[0] < 1 || workgroup_[1] < 1 || workgroup_[2] < 1 ||
        workgroup_[0] * workgroup_[1] * workgroup_[2] > 4096)
      return error(config_->loc(), "kernel @" + k_.name() + " has an invalid workgroup size");
    if (config_->attrs().getInt("subgroup", 1) != 1)
      return error(config_->loc(), "the CPU backend runs subgroups of one thread; kernel @" +
                                       k_.name() + " asks for " +
                                       std::to_string(config_->attrs().getInt("subgroup")));
    threads_ = workgroup_[0] * workgroup_[1] * workgroup_[2];
    int cur = -2;
    assignPhases(body_, cur);
    // Values crossing phases get a per-thread slot.
    // In op order, so that the emitted code (and the shared object) is the same every time.
    walkOps(k_, [&](const Op& o) {
      const Op* opPtr = &o;
      auto def = phaseOf_.find(opPtr);
      if (def == phaseOf_.end() || def->second < 0) return;
      for (size_t r = 0; r < opPtr->numResults(); ++r) {
        const Value* v = opPtr->result(r);
        if (!v->type().isIndex() && !v->type().isScalar() && !v->type().isVector()) continue;
        for (const Use& u : v->uses()) {
          auto it = phaseOf_.find(u.user);
          if (it == phaseOf_.end() || it->second != def->second) {
            slots_.emplace(v, nullptr);
            slotOrder_.push_back(v);
            break;
          }
        }
      }
    });
    return ok();
  }

  // Phase numbers: consecutive barrier-free nodes share one; a barrier or the edge of a
  // uniform loop starts the next. Uniform loops themselves are phase -1.
  void assignPhases(const std::vector<Node>& nodes, int& cur) {
    for (const Node& n : nodes) {
      if (n.op->kind() == OpKind::Barrier) {
        cur = -2;
      } else if (n.hasBarrier) {
        phaseOf_[n.op] = -1;
        cur = -2;
        assignPhases(n.body, cur);
        cur = -2;
      } else {
        if (cur == -2) cur = numPhases_++;
        markPhase(n, cur);
      }
    }
  }

  void markPhase(const Node& n, int phase) {
    phaseOf_[n.op] = phase;
    for (size_t r = 0; r < n.op->numRegions(); ++r)
      if (const Op* y = n.op->region(r)->terminator()) phaseOf_[y] = phase;
    for (const Node& c : n.body) markPhase(c, phase);
    for (const Node& c : n.otherwise) markPhase(c, phase);
  }

  // ---- arguments, stack ------------------------------------------------------------------

  Status bindArguments() {
    int64_t extentAt = 0;
    for (size_t i = 0; i < k_.numArgs(); ++i) {
      const Type& t = k_.arg(i)->type();
      if (!t.isBuffer())
        return error(k_.loc(), "kernel @" + k_.name() + " argument " + std::to_string(i) +
                                   " is not a buffer");
      Buf buf;
      buf.base = fn_->getArg(unsigned(i));
      buf.elem = t.elem();
      for (int64_t d = 0; d < t.rank(); ++d, ++extentAt) {
        Range r = dimBounds(t.dim(d), syms_);
        buf.minExtents.push_back(r.lo > 0 ? r.lo : 0);
        if (t.dim(d).isStatic()) {
          buf.extents.push_back(b_.getInt64(static_cast<uint64_t>(t.dim(d).value())));
        } else {
          llvm::Value* p = b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), extents_,
                                                         static_cast<uint64_t>(extentAt));
          buf.extents.push_back(b_.CreateLoad(b_.getInt64Ty(), p, "extent"));
        }
      }
      bufs_[k_.arg(i)] = buf;
    }
    return ok();
  }

  // Shared and private buffers and phase slots, all static allocas in the entry block.
  Status allocateStack() {
    uint64_t bytes = 0;
    std::vector<const Op*> allocs;
    walkOps(k_, [&](const Op& op) {
      if (op.kind() == OpKind::Alloc) allocs.push_back(&op);
    });
    for (const Op* allocOp : allocs) {
      const Op& op = *allocOp;
      const Type& t = op.result(0)->type();
      std::optional<int64_t> n = t.numElements();
      if (!n) return error(op.loc(), "alloc needs a static shape");
      bool priv = t.space() == MemSpace::Private;
      uint64_t count = static_cast<uint64_t>(*n) * (priv ? static_cast<uint64_t>(threads_) : 1);
      bytes += count * static_cast<uint64_t>(elemTypeBytes(t.elem()));
      if (bytes > kMaxStackBytes)
        return error(op.loc(), "kernel @" + k_.name() + " needs more than " +
                                   std::to_string(kMaxStackBytes) +
                                   " bytes of shared and private memory on the CPU stack");
      llvm::Type* st = storageType(c_, t.elem());
      auto* a =
          b_.CreateAlloca(llvm::ArrayType::get(st, count), nullptr, priv ? "private" : "shared");
      a->setAlignment(llvm::Align(64));
      Buf buf;
      buf.base = a;
      buf.elem = t.elem();
      for (int64_t d = 0; d < t.rank(); ++d) {
        buf.extents.push_back(b_.getInt64(static_cast<uint64_t>(t.dim(d).value())));
        buf.minExtents.push_back(t.dim(d).value());
      }
      buf.perThread = priv ? *n : 0;
      bufs_[op.result(0)] = buf;
      if (!priv) shared_.push_back({a, count * static_cast<uint64_t>(elemTypeBytes(t.elem()))});
    }
    for (const Value* v : slotOrder_) {
      llvm::AllocaInst*& slot = slots_.at(v);
      llvm::Type* t = valueType(v->type());
      bytes += static_cast<uint64_t>(threads_) * 16;
      if (bytes > kMaxStackBytes)
        return error(k_.loc(), "kernel @" + k_.name() + " keeps too many values across barriers");
      slot = b_.CreateAlloca(llvm::ArrayType::get(t, static_cast<uint64_t>(threads_)), nullptr,
                             "slot");
    }
    return ok();
  }

  llvm::Type* valueType(const Type& t) {
    if (t.isIndex()) return b_.getInt64Ty();
    if (t.isVector())
      return llvm::FixedVectorType::get(scalarType(c_, t.elem()),
                                        static_cast<unsigned>(t.dim(0).value()));
    return scalarType(c_, t.elem());
  }

  // ---- loops -----------------------------------------------------------------------------

  // Emits `for (iv = lo; iv < hi; iv += step) body(iv)`; `step` is positive.
  template <typename F> Status loop(llvm::Value* lo, llvm::Value* hi, llvm::Value* step, F body) {
    Result<std::vector<llvm::Value*>> r =
        loopCarrying(lo, hi, step, {},
                     [&](llvm::Value* iv,
                         const std::vector<llvm::Value*>&) -> Result<std::vector<llvm::Value*>> {
                       KILN_CHECK(body(iv));
                       return std::vector<llvm::Value*>{};
                     });
    if (!r.ok()) return r.takeDiags();
    return ok();
  }

  // The same loop carrying values: they start as `inits`, `body(iv, carried)` returns the
  // next ones; the result is their last values (the inits when the body never runs).
  template <typename F>
  Result<std::vector<llvm::Value*>> loopCarrying(llvm::Value* lo, llvm::Value* hi,
                                                 llvm::Value* step,
                                                 const std::vector<llvm::Value*>& inits, F body) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(c_, "loop", fn_);
    auto* exit = llvm::BasicBlock::Create(c_, "loop.end", fn_);
    b_.CreateCondBr(b_.CreateICmpSLT(lo, hi), header, exit);
    b_.SetInsertPoint(header);
    llvm::PHINode* iv = b_.CreatePHI(b_.getInt64Ty(), 2, "iv");
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
      return error(k_.loc(),
                   "a loop of kernel @" + k_.name() + " yields the wrong number of values");
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
    if (cl && ch && cs && cs->getSExtValue() > 0 &&
        (ch->getSExtValue() - cl->getSExtValue()) / cs->getSExtValue() <= kFullUnrollTrips) {
      llvm::MDNode* full = llvm::MDNode::get(c_, llvm::MDString::get(c_, "llvm.loop.unroll.full"));
      llvm::MDNode* md = llvm::MDNode::getDistinct(c_, {nullptr, full});
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

  llvm::BasicBlock* failBlock(KilnCpuStatus status) {
    auto& blk = fail_[status];
    if (!blk) {
      llvm::IRBuilderBase::InsertPointGuard g(b_);
      blk = llvm::BasicBlock::Create(c_, "fail", fn_);
      b_.SetInsertPoint(blk);
      b_.CreateRet(b_.getInt32(status));
    }
    return blk;
  }

  // Continues only when `ok` holds; otherwise the kernel returns `status`.
  void check(llvm::Value* okCond, KilnCpuStatus status) {
    if (auto* ci = llvm::dyn_cast<llvm::ConstantInt>(okCond); ci && ci->isOne()) return;
    auto* cont = llvm::BasicBlock::Create(c_, "ok", fn_);
    b_.CreateCondBr(okCond, cont, failBlock(status));
    b_.SetInsertPoint(cont);
  }

  Status emitWorkgroupLoop(llvm::Value* begin, llvm::Value* end) {
    llvm::Value* gx = get(config_->operand(0));
    llvm::Value* gy = get(config_->operand(1));
    return loop(begin, end, b_.getInt64(1), [&](llvm::Value* w) -> Status {
      wg_[0] = b_.CreateURem(w, gx, "wg.x");
      llvm::Value* rest = b_.CreateUDiv(w, gx);
      wg_[1] = b_.CreateURem(rest, gy, "wg.y");
      wg_[2] = b_.CreateUDiv(rest, gy, "wg.z");
      for (auto& [a, bytes] : shared_)
        b_.CreateMemSet(a, b_.getInt8(0), bytes, llvm::MaybeAlign(64));
      return emitRegion(body_);
    });
  }

  Status emitRegion(const std::vector<Node>& nodes) {
    size_t i = 0;
    while (i < nodes.size()) {
      const Node& n = nodes[i];
      if (n.op->kind() == OpKind::Barrier) {
        ++i;
        continue;
      }
      if (n.hasBarrier) {
        KILN_CHECK(emitUniformLoop(n));
        ++i;
        continue;
      }
      size_t j = i;
      while (j < nodes.size() && nodes[j].op->kind() != OpKind::Barrier && !nodes[j].hasBarrier)
        ++j;
      KILN_CHECK(emitPhase(nodes, i, j));
      i = j;
    }
    return ok();
  }

  // Every thread of the workgroup runs nodes[i, j).
  Status emitPhase(const std::vector<Node>& nodes, size_t i, size_t j) {
    auto run = [&](llvm::Value* t) -> Status {
      thread_ = t;
      curPhase_ = phaseOf_.at(nodes[i].op);
      if (threads_ == 1) {
        lid_[0] = lid_[1] = lid_[2] = b_.getInt64(0);
      } else {
        llvm::Value* wx = b_.getInt64(static_cast<uint64_t>(workgroup_[0]));
        llvm::Value* wy = b_.getInt64(static_cast<uint64_t>(workgroup_[1]));
        lid_[0] = b_.CreateURem(t, wx, "lid.x");
        llvm::Value* rest = b_.CreateUDiv(t, wx);
        lid_[1] = b_.CreateURem(rest, wy, "lid.y");
        lid_[2] = b_.CreateUDiv(rest, wy, "lid.z");
      }
      inThread_ = true;
      for (size_t k = i; k < j; ++k) KILN_CHECK(emitNode(nodes[k]));
      inThread_ = false;
      return ok();
    };
    Status s = threads_ == 1 ? run(b_.getInt64(0))
                             : loop(b_.getInt64(0), b_.getInt64(static_cast<uint64_t>(threads_)),
                                    b_.getInt64(1), run);
    thread_ = nullptr; // the thread loop's counter does not reach past it
    return s;
  }

  Status emitUniformLoop(const Node& n) {
    if (n.op->kind() != OpKind::For)
      return error(n.op->loc(),
                   "the CPU backend has no barrier inside an if (kernel @" + k_.name() + ")");
    if (n.op->numResults() != 0)
      return error(n.op->loc(), "the CPU backend has no loop that holds a barrier and carries "
                                "values (kernel @" +
                                    k_.name() + ")");
    thread_ = b_.getInt64(0); // a uniform bound kept in a slot is read as thread 0's
    llvm::Value* lo = get(n.op->operand(0));
    llvm::Value* hi = get(n.op->operand(1));
    llvm::Value* step = get(n.op->operand(2));
    check(b_.CreateICmpSGT(step, b_.getInt64(0)), kKilnCpuBadLoopStep);
    return loop(lo, hi, step, [&](llvm::Value* iv) -> Status {
      vals_[n.op->region(0)->arg(0)] = iv;
      return emitRegion(n.body);
    });
  }

  // The values a region's yield hands back, read after its ops are emitted.
  std::vector<llvm::Value*> yielded(const Block& b) {
    std::vector<llvm::Value*> out;
    if (const Op* y = b.terminator())
      for (const Value* v : y->operands()) out.push_back(get(v));
    return out;
  }

  Status emitNode(const Node& n) {
    const Op& op = *n.op;
    if (op.kind() == OpKind::If) return emitIf(n);
    if (op.kind() != OpKind::For) return emitOp(op);
    llvm::Value* lo = get(op.operand(0));
    llvm::Value* hi = get(op.operand(1));
    llvm::Value* step = get(op.operand(2));
    check(b_.CreateICmpSGT(step, b_.getInt64(0)), kKilnCpuBadLoopStep);
    std::vector<llvm::Value*> inits;
    for (size_t k = 3; k < op.numOperands(); ++k) inits.push_back(get(op.operand(k)));
    const Block& body = *op.region(0);
    KILN_TRY(std::vector<llvm::Value*> results,
             loopCarrying(lo, hi, step, inits,
                          [&](llvm::Value* iv, const std::vector<llvm::Value*>& carried)
                              -> Result<std::vector<llvm::Value*>> {
                            set(body.arg(0), iv);
                            for (size_t k = 0; k < carried.size(); ++k)
                              set(body.arg(k + 1), carried[k]);
                            for (const Node& c : n.body) KILN_CHECK(emitNode(c));
                            return yielded(body);
                          }));
    for (size_t k = 0; k < results.size(); ++k) set(op.result(k), results[k]);
    return ok();
  }

  // if/else as two blocks joined by phi nodes for the results.
  Status emitIf(const Node& n) {
    const Op& op = *n.op;
    auto* then = llvm::BasicBlock::Create(c_, "if.then", fn_);
    auto* otherwise = llvm::BasicBlock::Create(c_, "if.else", fn_);
    auto* join = llvm::BasicBlock::Create(c_, "if.end", fn_);
    b_.CreateCondBr(get(op.operand(0)), then, otherwise);
    std::vector<llvm::Value*> values[2];
    llvm::BasicBlock* ends[2] = {nullptr, nullptr};
    const std::vector<Node>* blocks[2] = {&n.body, &n.otherwise};
    llvm::BasicBlock* starts[2] = {then, otherwise};
    for (size_t r = 0; r < 2; ++r) {
      b_.SetInsertPoint(starts[r]);
      for (const Node& c : *blocks[r]) KILN_CHECK(emitNode(c));
      values[r] = yielded(*op.region(r));
      ends[r] = b_.GetInsertBlock();
      b_.CreateBr(join);
    }
    b_.SetInsertPoint(join);
    for (size_t k = 0; k < op.numResults(); ++k) {
      llvm::PHINode* phi = b_.CreatePHI(values[0][k]->getType(), 2);
      phi->addIncoming(values[0][k], ends[0]);
      phi->addIncoming(values[1][k], ends[1]);
      set(op.result(k), phi);
    }
    return ok();
  }

  // ---- values ----------------------------------------------------------------------------

  llvm::Value* slotPtr(const Value* v) {
    llvm::AllocaInst* a = slots_.at(v);
    return b_.CreateInBoundsGEP(a->getAllocatedType(), a, {b_.getInt64(0), thread_});
  }

  llvm::Value* get(const Value* v) {
    auto def = phaseOf_.find(v->def());
    int phase = def == phaseOf_.end() ? -1 : def->second;
    if (phase >= 0 && phase != currentPhase() && slots_.count(v))
      return b_.CreateLoad(valueType(v->type()), slotPtr(v));
    return vals_.at(v);
  }

  int currentPhase() const { return inThread_ ? curPhase_ : -1; }

  void set(const Value* v, llvm::Value* x) {
    vals_[v] = x;
    if (auto it = slots_.find(v); it != slots_.end()) b_.CreateStore(x, slotPtr(v));
  }

  // ---- ops -------------------------------------------------------------------------------

  // The element at operands [first, first + count) of `op`; `lanes` elements along the last
  // dim are accessed. A data-dependent index (analysis/data_indices.h) is checked first.
  Result<llvm::Value*> address(const Op& op, const Value* bufVal, size_t first, size_t count,
                               int64_t lanes = 1) {
    auto it = bufs_.find(bufVal);
    if (it == bufs_.end()) return error(op.loc(), "access to a buffer the CPU backend cannot see");
    const Buf& buf = it->second;
    if (count != buf.extents.size())
      return error(op.loc(), "buffer access needs one index per dim");
    llvm::Value* inRange = nullptr;
    for (size_t d = 0; d < count; ++d) {
      const Value* v = op.operand(first + d);
      int64_t span = d + 1 == count ? lanes : 1;
      if (!dataIndices_.count(v) || provedInRange(v, buf.minExtents[d], span)) continue;
      llvm::Value* idx = get(v);
      // 0 <= idx <= extent - span, as one unsigned compare when span is 1
      llvm::Value* c =
          span == 1 ? b_.CreateICmpULT(idx, buf.extents[d])
                    : b_.CreateAnd(
                          b_.CreateICmpSGE(idx, b_.getInt64(0)),
                          b_.CreateICmpSLE(idx, b_.CreateSub(buf.extents[d], b_.getInt64(span))));
      inRange = inRange ? b_.CreateAnd(inRange, c) : c;
    }
    if (inRange) check(inRange, kKilnCpuIndexOutOfRange);
    llvm::Value* off = b_.getInt64(0);
    for (size_t d = 0; d < count; ++d) {
      llvm::Value* idx = get(op.operand(first + d));
      off = d == 0 ? idx
                   : b_.CreateAdd(b_.CreateMul(off, buf.extents[d], "", false, true), idx, "",
                                  false, true);
    }
    if (buf.perThread)
      off = b_.CreateAdd(b_.CreateMul(thread_, b_.getInt64(static_cast<uint64_t>(buf.perThread))),
                         off, "", false, true);
    return b_.CreateInBoundsGEP(storageType(c_, buf.elem), buf.base, off);
  }

  // Value bounds show `span` elements from the index lie within an extent >= minExtent.
  bool provedInRange(const Value* idx, int64_t minExtent, int64_t span) const {
    Range r = bounds_.of(idx);
    return r.known() && r.lo >= 0 && r.hi <= minExtent - span;
  }

  llvm::Align alignOf(ElemType e) { return llvm::Align(static_cast<uint64_t>(elemTypeBytes(e))); }

  Status emitOp(const Op& op) {
    if (auto it = phaseOf_.find(&op); it != phaseOf_.end() && it->second >= 0)
      curPhase_ = it->second;
    auto in = [&](size_t i) { return get(op.operand(i)); };
    const Value* res = op.numResults() ? op.result(0) : nullptr;
    llvm::Type* i64 = b_.getInt64Ty();
    switch (op.kind()) {
    case OpKind::KernelConfig:
    case OpKind::Barrier:
    case OpKind::Return: return ok();
    // Subgroups of one thread: the lane is 0 and every exchange gives the thread's own value.
    case OpKind::LaneId: set(res, b_.getInt64(0)); return ok();
    case OpKind::SubgroupReduce:
    case OpKind::SubgroupBroadcast:
    case OpKind::SubgroupShuffle: set(res, in(0)); return ok();
    case OpKind::WorkgroupId:
    case OpKind::LocalId: {
      int64_t axis = op.attrs().getInt("axis");
      if (axis < 0 || axis > 2) return error(op.loc(), "axis must be 0, 1 or 2");
      if (op.kind() == OpKind::WorkgroupId && !inThread_)
        return error(op.loc(), "workgroup_id before kernel_config");
      set(res, op.kind() == OpKind::WorkgroupId ? wg_[axis] : lid_[axis]);
      return ok();
    }
    case OpKind::SymbolValue: {
      std::string name = op.attrs().getStr("name");
      size_t k = 0;
      while (k < symbolNames_.size() && symbolNames_[k] != name) ++k;
      if (k == symbolNames_.size()) symbolNames_.push_back(name);
      llvm::Value* p = b_.CreateConstInBoundsGEP1_64(i64, symbolsPtr_, k);
      set(res, b_.CreateLoad(i64, p, name));
      return ok();
    }
    case OpKind::IConst:
      set(res, b_.getInt64(static_cast<uint64_t>(op.attrs().getInt("value"))));
      return ok();
    case OpKind::SConst:
      set(res, scalarConstant(b_, res->type().elem(), op.attrs().getFloat("value")));
      return ok();
    case OpKind::IAdd: set(res, b_.CreateAdd(in(0), in(1), "", false, true)); return ok();
    case OpKind::ISub: set(res, b_.CreateSub(in(0), in(1), "", false, true)); return ok();
    case OpKind::IMul: set(res, b_.CreateMul(in(0), in(1), "", false, true)); return ok();
    case OpKind::IMin:
      set(res, b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, in(0), in(1)));
      return ok();
    case OpKind::IMax:
      set(res, b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, in(0), in(1)));
      return ok();
    case OpKind::IFloorDiv:
    case OpKind::ICeilDiv:
    case OpKind::IMod: return emitIndexDivision(op);
    case OpKind::ICmp: {
      std::string p = op.attrs().getStr("pred");
      using P = llvm::CmpInst::Predicate;
      P pred = p == "lt"   ? P::ICMP_SLT
               : p == "le" ? P::ICMP_SLE
               : p == "gt" ? P::ICMP_SGT
               : p == "ge" ? P::ICMP_SGE
               : p == "eq" ? P::ICMP_EQ
                           : P::ICMP_NE;
      set(res, b_.CreateICmp(pred, in(0), in(1)));
      return ok();
    }
    case OpKind::SSelect: set(res, b_.CreateSelect(in(0), in(1), in(2))); return ok();
    case OpKind::ICast: {
      const Type& from = op.operand(0)->type();
      if (res->type().isIndex()) {
        ElemType e = from.elem();
        bool u = isUnsignedInt(e) || e == ElemType::I1;
        set(res, from.isIndex() ? in(0)
                 : u            ? b_.CreateZExt(in(0), i64)
                                : b_.CreateSExt(in(0), i64));
      } else {
        set(res, convert(b_, ElemType::I64, res->type().elem(), in(0)));
      }
      return ok();
    }
    case OpKind::Compute: {
      std::vector<llvm::Value*> args;
      for (size_t i = 0; i < op.numOperands(); ++i) args.push_back(in(i));
      KILN_TRY(llvm::Value * v, emitCompute(b_, m_, op, args));
      if (isWideAccumulation(op))
        if (auto* add = llvm::dyn_cast<llvm::BinaryOperator>(v);
            add && add->getOpcode() == llvm::Instruction::FAdd)
          add->setHasAllowReassoc(true);
      set(res, v);
      return ok();
    }
    case OpKind::Alloc: {
      const Buf& buf = bufs_.at(res);
      if (buf.perThread) { // private: this thread's slice starts zero-filled
        KILN_TRY(llvm::Value * p, address0(buf));
        uint64_t bytes = static_cast<uint64_t>(buf.perThread) * elemTypeBytes(buf.elem);
        b_.CreateMemSet(p, b_.getInt8(0), bytes, llvm::MaybeAlign(alignOf(buf.elem)));
      }
      return ok();
    }
    case OpKind::Load: {
      KILN_TRY(llvm::Value * p, address(op, op.operand(0), 1, op.numOperands() - 1));
      ElemType e = res->type().elem();
      set(res, fromStorage(b_, e, b_.CreateAlignedLoad(storageType(c_, e), p, alignOf(e))));
      return ok();
    }
    case OpKind::MaskedLoad: {
      ElemType e = res->type().elem();
      llvm::Value* mask = in(1);
      llvm::Value* other = scalarConstant(b_, e, op.attrs().getFloat("other"));
      llvm::BasicBlock* from = b_.GetInsertBlock();
      auto* then = llvm::BasicBlock::Create(c_, "masked.load", fn_);
      auto* join = llvm::BasicBlock::Create(c_, "masked.join", fn_);
      b_.CreateCondBr(mask, then, join);
      b_.SetInsertPoint(then);
      KILN_TRY(llvm::Value * p, address(op, op.operand(0), 2, op.numOperands() - 2));
      llvm::Value* v = fromStorage(b_, e, b_.CreateAlignedLoad(storageType(c_, e), p, alignOf(e)));
      llvm::BasicBlock* thenEnd = b_.GetInsertBlock();
      b_.CreateBr(join);
      b_.SetInsertPoint(join);
      llvm::PHINode* phi = b_.CreatePHI(v->getType(), 2);
      phi->addIncoming(other, from);
      phi->addIncoming(v, thenEnd);
      set(res, phi);
      return ok();
    }
    case OpKind::Store:
    case OpKind::MaskedStore: {
      size_t first = op.kind() == OpKind::Store ? 0 : 1;
      llvm::BasicBlock* join = nullptr;
      if (first == 1) {
        auto* then = llvm::BasicBlock::Create(c_, "masked.store", fn_);
        join = llvm::BasicBlock::Create(c_, "masked.join", fn_);
        b_.CreateCondBr(in(0), then, join);
        b_.SetInsertPoint(then);
      }
      const Value* bufVal = op.operand(first + 1);
      ElemType e = bufVal->type().elem();
      llvm::Value* v = in(first);
      KILN_TRY(llvm::Value * p, address(op, bufVal, first + 2, op.numOperands() - first - 2));
      b_.CreateAlignedStore(toStorage(b_, e, v), p, alignOf(e));
      if (join) {
        b_.CreateBr(join);
        b_.SetInsertPoint(join);
      }
      return ok();
    }
    case OpKind::VectorLoad: {
      ElemType e = res->type().elem();
      if (e == ElemType::BF16 || e == ElemType::I1)
        return error(op.loc(),
                     "the CPU backend has no vector loads of " + std::string(elemTypeName(e)));
      auto lanes = static_cast<unsigned>(res->type().dim(0).value());
      KILN_TRY(llvm::Value * p, address(op, op.operand(0), 1, op.numOperands() - 1, lanes));
      llvm::Value* v = b_.CreateAlignedLoad(llvm::FixedVectorType::get(storageType(c_, e), lanes),
                                            p, alignOf(e));
      if (e == ElemType::F16)
        v = b_.CreateFPExt(v, llvm::FixedVectorType::get(b_.getFloatTy(), lanes));
      set(res, v);
      return ok();
    }
    case OpKind::VectorStore: {
      const Value* bufVal = op.operand(1);
      ElemType e = bufVal->type().elem();
      if (e == ElemType::BF16 || e == ElemType::I1)
        return error(op.loc(),
                     "the CPU backend has no vector stores of " + std::string(elemTypeName(e)));
      llvm::Value* v = in(0);
      unsigned lanes = llvm::cast<llvm::FixedVectorType>(v->getType())->getNumElements();
      if (e == ElemType::F16)
        v = b_.CreateFPTrunc(v, llvm::FixedVectorType::get(b_.getHalfTy(), lanes));
      KILN_TRY(llvm::Value * p, address(op, bufVal, 2, op.numOperands() - 2, lanes));
      b_.CreateAlignedStore(v, p, alignOf(e));
      return ok();
    }
    default:
      return error(op.loc(), "the CPU backend cannot emit '" + std::string(op.name()) +
                                 "' in kernel @" + k_.name());
    }
  }

  // An f64 accumulator update, `store (add (load acc[i]), x), acc[i]` on a private buffer:
  // the wide sums `lower` gives reductions and softmax. Its adds may be reassociated, so
  // that LLVM vectorizes the loop around it (partial sums in vector lanes). In f64 over
  // f32 data the order changes the sum by rounding far below the result's f32 precision.
  bool isWideAccumulation(const Op& op) const {
    const Value* r = op.result(0);
    if (op.attrs().getOp("fn") != OpKind::Add || r->type().elem() != ElemType::F64 ||
        r->uses().size() != 1)
      return false;
    const Op* store = r->uses()[0].user;
    if (store->kind() != OpKind::Store || r->uses()[0].operandIndex != 0) return false;
    const Value* acc = store->operand(1);
    if (!acc->def() || acc->def()->kind() != OpKind::Alloc ||
        acc->type().space() != MemSpace::Private)
      return false;
    for (const Value* x : op.operands()) {
      const Op* load = x->def();
      if (!load || load->kind() != OpKind::Load || load->operand(0) != acc ||
          load->numOperands() != store->numOperands() - 1)
        continue;
      bool same = true;
      for (size_t k = 1; k < load->numOperands(); ++k)
        same = same && load->operand(k) == store->operand(k + 1);
      if (same) return true;
    }
    return false;
  }

  Result<llvm::Value*> address0(const Buf& buf) {
    llvm::Value* off = b_.CreateMul(thread_, b_.getInt64(static_cast<uint64_t>(buf.perThread)));
    return b_.CreateInBoundsGEP(storageType(c_, buf.elem), buf.base, off);
  }

  // ifloordiv / iceildiv / imod: unsigned forms where value bounds prove both sides
  // non-negative (shifts and masks for powers of two), the floor forms otherwise.
  Status emitIndexDivision(const Op& op) {
    llvm::Value* a = get(op.operand(0));
    llvm::Value* d = get(op.operand(1));
    Range ra = bounds_.of(op.operand(0));
    Range rd = bounds_.of(op.operand(1));
    llvm::Value* zero = b_.getInt64(0);
    llvm::Value* one = b_.getInt64(1);
    if (!(rd.lo > 0 || rd.hi < 0)) check(b_.CreateICmpNE(d, zero), kKilnCpuIndexDivByZero);
    llvm::Value* r = nullptr;
    if (ra.lo >= 0 && rd.lo > 0) {
      switch (op.kind()) {
      case OpKind::IFloorDiv: r = b_.CreateUDiv(a, d); break;
      case OpKind::ICeilDiv:
        r = b_.CreateAdd(
            b_.CreateUDiv(a, d),
            b_.CreateZExt(b_.CreateICmpNE(b_.CreateURem(a, d), zero), b_.getInt64Ty()));
        break;
      default: r = b_.CreateURem(a, d); break;
      }
      set(op.result(0), r);
      return ok();
    }
    // Avoid INT64_MIN / -1 (the simulator reports it; here it gives a defined value).
    llvm::Value* safe = b_.CreateSelect(b_.CreateICmpEQ(d, zero), one, d);
    llvm::Value* q =
        b_.CreateSDiv(a, b_.CreateSelect(b_.CreateICmpEQ(safe, b_.getInt64(-1)), one, safe));
    q = b_.CreateSelect(b_.CreateICmpEQ(safe, b_.getInt64(-1)), b_.CreateSub(zero, a), q);
    llvm::Value* rem = b_.CreateSub(a, b_.CreateMul(q, safe));
    llvm::Value* inexact = b_.CreateICmpNE(rem, zero);
    llvm::Value* signsDiffer =
        b_.CreateXor(b_.CreateICmpSLT(rem, zero), b_.CreateICmpSLT(safe, zero));
    switch (op.kind()) {
    case OpKind::IFloorDiv:
      r = b_.CreateSub(q, b_.CreateZExt(b_.CreateAnd(inexact, signsDiffer), b_.getInt64Ty()));
      break;
    case OpKind::ICeilDiv:
      r = b_.CreateAdd(
          q, b_.CreateZExt(b_.CreateAnd(inexact, b_.CreateNot(signsDiffer)), b_.getInt64Ty()));
      break;
    default:
      r = b_.CreateSelect(b_.CreateAnd(inexact, signsDiffer), b_.CreateAdd(rem, safe), rem);
      break;
    }
    set(op.result(0), r);
    return ok();
  }

  // The exported entry point: unpacks KilnCpuArgs and calls the body.
  void emitEntryPoint(const std::string& symbol) {
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::Type* ptr = b_.getPtrTy();
    auto* f =
        llvm::Function::Create(llvm::FunctionType::get(b_.getInt32Ty(), {ptr, i64, i64}, false),
                               llvm::GlobalValue::ExternalLinkage, symbol, m_);
    f->addFnAttr(llvm::Attribute::NoUnwind);
    auto* bb = llvm::BasicBlock::Create(c_, "entry", f);
    b_.SetInsertPoint(bb);
    llvm::Value* args = f->getArg(0);
    // KilnCpuArgs: {ptr buffers, ptr extents, ptr symbols, [3 x i64] grid}
    llvm::Value* buffers = b_.CreateLoad(ptr, args, "buffers");
    llvm::Value* extents =
        b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, args, 1), "extents");
    llvm::Value* symbols =
        b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, args, 2), "symbols");
    std::vector<llvm::Value*> callArgs;
    for (size_t i = 0; i < k_.numArgs(); ++i)
      callArgs.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, buffers, i)));
    callArgs.push_back(extents);
    callArgs.push_back(symbols);
    callArgs.push_back(f->getArg(1));
    callArgs.push_back(f->getArg(2));
    b_.CreateRet(b_.CreateCall(fn_, callArgs));
  }

  llvm::Module& m_;
  llvm::LLVMContext& c_;
  IRBuilder<> b_;
  const Func& k_;
  const SymbolTable& syms_;
  ValueBounds bounds_;
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  llvm::Value* extents_ = nullptr;
  llvm::Value* symbolsPtr_ = nullptr;
  std::vector<const Op*> prologue_;
  const Op* config_ = nullptr;
  std::vector<int64_t> workgroup_;
  int64_t threads_ = 1;
  std::vector<Node> body_;
  std::unordered_map<const Op*, int> phaseOf_;
  int numPhases_ = 0;
  int curPhase_ = -1;
  bool inThread_ = false;
  std::unordered_map<const Value*, llvm::AllocaInst*> slots_;
  std::vector<const Value*> slotOrder_; // slots_ keys in op order
  std::unordered_map<const Value*, llvm::Value*> vals_;
  std::unordered_map<const Value*, Buf> bufs_;
  std::unordered_set<const Value*> dataIndices_;
  std::vector<std::pair<llvm::AllocaInst*, uint64_t>> shared_;
  std::map<int32_t, llvm::BasicBlock*> fail_;
  std::vector<std::string> symbolNames_;
  llvm::Value* wg_[3] = {nullptr, nullptr, nullptr};
  llvm::Value* lid_[3] = {nullptr, nullptr, nullptr};
  llvm::Value* thread_ = nullptr;
  bool mayAlias_ = false;
};

} // namespace

Result<EmittedKernel> emitCpuKernel(llvm::Module& m, const Func& kernel, const SymbolTable& syms,
                                    const std::string& symbol, bool buffersMayAlias) {
  Emitter e(m, kernel, syms, buffersMayAlias);
  return e.run(symbol);
}

} // namespace kiln::llvmgen
