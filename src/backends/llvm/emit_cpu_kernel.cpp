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
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <map>
#include <unordered_map>
#include <unordered_set>

#include "analysis/data_indices.h"
#include "analysis/value_bounds.h"
#include "backends/llvm/emit.h"
#include "backends/llvm/kernel_emitter.h"
#include "backends/llvm/scalar.h"
#include "runtime/cpu/abi.h"

namespace kiln::llvmgen {

namespace {

using llvm::IRBuilder;

// Stack bytes one invocation may use for shared and per-thread private buffers and slots.
constexpr uint64_t kMaxStackBytes = uint64_t(4) << 20;
class Emitter : public KernelEmitter {
public:
  Emitter(llvm::Module& m, const Func& k, const SymbolTable& syms, bool mayAlias)
      : KernelEmitter(m, k, syms), mayAlias_(mayAlias) {}

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

  Status buildTree() {
    KILN_CHECK(KernelEmitter::buildTree(4096));
    if (config_->attrs().getInt("subgroup", 1) != 1)
      return error(config_->loc(), "the CPU backend runs subgroups of one thread; kernel @" +
                                       k_.name() + " asks for " +
                                       std::to_string(config_->attrs().getInt("subgroup")));
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

  std::string backendName() const override { return "the CPU backend"; }

  llvm::Value* dynamicExtent(size_t, int64_t, int64_t flat) override {
    llvm::Value* p =
        b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), extents_, static_cast<uint64_t>(flat));
    return b_.CreateLoad(b_.getInt64Ty(), p, "extent");
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

  llvm::BasicBlock* failBlock(KilnCpuStatus status) override {
    auto& blk = fail_[status];
    if (!blk) {
      llvm::IRBuilderBase::InsertPointGuard g(b_);
      blk = llvm::BasicBlock::Create(c_, "fail", fn_);
      b_.SetInsertPoint(blk);
      b_.CreateRet(b_.getInt32(status));
    }
    return blk;
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

  // ---- values ----------------------------------------------------------------------------

  llvm::Value* slotPtr(const Value* v) {
    llvm::AllocaInst* a = slots_.at(v);
    return b_.CreateInBoundsGEP(a->getAllocatedType(), a, {b_.getInt64(0), thread_});
  }

  llvm::Value* get(const Value* v) override {
    auto def = phaseOf_.find(v->def());
    int phase = def == phaseOf_.end() ? -1 : def->second;
    if (phase >= 0 && phase != currentPhase() && slots_.count(v))
      return b_.CreateLoad(valueType(v->type()), slotPtr(v));
    return vals_.at(v);
  }

  int currentPhase() const { return inThread_ ? curPhase_ : -1; }

  void set(const Value* v, llvm::Value* x) override {
    vals_[v] = x;
    if (auto it = slots_.find(v); it != slots_.end()) b_.CreateStore(x, slotPtr(v));
  }

  // ---- ops -------------------------------------------------------------------------------

  Status emitOp(const Op& op) override {
    if (auto it = phaseOf_.find(&op); it != phaseOf_.end() && it->second >= 0)
      curPhase_ = it->second;
    return KernelEmitter::emitOp(op);
  }

  Status emitTargetOp(const Op& op) override {
    auto in = [&](size_t i) { return get(op.operand(i)); };
    const Value* res = op.numResults() ? op.result(0) : nullptr;
    llvm::Type* i64 = b_.getInt64Ty();
    switch (op.kind()) {
    case OpKind::Barrier: return ok();
    // A read prefetch of the element's line into every cache level (prefetcht0 on x86-64).
    case OpKind::Prefetch: {
      KILN_TRY(llvm::Value * p, address(op, op.operand(0), 1, op.numOperands() - 1));
      llvm::Function* f =
          llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::prefetch, {p->getType()});
      b_.CreateCall(f, {p, b_.getInt32(0), b_.getInt32(3), b_.getInt32(1)});
      return ok();
    }
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
    case OpKind::Alloc: {
      const Buf& buf = bufs_.at(res);
      // private: this thread's slice starts zero-filled, unless `uninit`
      if (buf.perThread && !uninitAlloc(op)) {
        KILN_TRY(llvm::Value * p, address0(buf));
        uint64_t bytes = static_cast<uint64_t>(buf.perThread) * elemTypeBytes(buf.elem);
        b_.CreateMemSet(p, b_.getInt8(0), bytes, llvm::MaybeAlign(alignOf(buf.elem)));
      }
      return ok();
    }
    default:
      return error(op.loc(), "the CPU backend cannot emit '" + std::string(op.name()) +
                                 "' in kernel @" + k_.name());
    }
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

  llvm::BasicBlock* entry_ = nullptr;
  llvm::Value* extents_ = nullptr;
  llvm::Value* symbolsPtr_ = nullptr;
  std::unordered_map<const Op*, int> phaseOf_;
  int numPhases_ = 0;
  int curPhase_ = -1;
  bool inThread_ = false;
  std::unordered_map<const Value*, llvm::AllocaInst*> slots_;
  std::vector<const Value*> slotOrder_; // slots_ keys in op order
  std::vector<std::pair<llvm::AllocaInst*, uint64_t>> shared_;
  std::vector<std::string> symbolNames_;
  llvm::Value* wg_[3] = {nullptr, nullptr, nullptr};
  llvm::Value* lid_[3] = {nullptr, nullptr, nullptr};
  bool mayAlias_ = false;
};

} // namespace

Result<EmittedKernel> emitCpuKernel(llvm::Module& m, const Func& kernel, const SymbolTable& syms,
                                    const std::string& symbol, bool buffersMayAlias) {
  Emitter e(m, kernel, syms, buffersMayAlias);
  return e.run(symbol);
}

} // namespace kiln::llvmgen
