// KernelEmitter: the structured ops, addressing and scalar ops the LLVM emitters share (see
// kernel_emitter.h).
#include "backends/llvm/kernel_emitter.h"

#include "backends/llvm/scalar.h"

namespace kiln::llvmgen {

KernelEmitter::KernelEmitter(llvm::Module& m, const Func& k, const SymbolTable& syms)
    : m_(m), c_(m.getContext()), b_(c_), k_(k), syms_(syms), bounds_(k, syms) {
  // A product added to a sum may be one fused multiply-add (one rounding instead of two:
  // closer to the interpreter's f64 accumulation, and twice the throughput).
  llvm::FastMathFlags fmf;
  fmf.setAllowContract(true);
  b_.setFastMathFlags(fmf);
}

// An op as a node: a barrier, or an op with its regions' ops (yields left out) below it.
Node KernelEmitter::makeNode(const Op* op) {
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

Status KernelEmitter::buildTree(int64_t maxThreads) {
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
      workgroup_[0] * workgroup_[1] * workgroup_[2] > maxThreads)
    return error(config_->loc(), "kernel @" + k_.name() + " has an invalid workgroup size");
  threads_ = workgroup_[0] * workgroup_[1] * workgroup_[2];
  return ok();
}

Status KernelEmitter::bindArguments() {
  int64_t extentAt = 0;
  for (size_t i = 0; i < k_.numArgs(); ++i) {
    const Type& t = k_.arg(i)->type();
    if (!t.isBuffer())
      return error(k_.loc(),
                   "kernel @" + k_.name() + " argument " + std::to_string(i) + " is not a buffer");
    Buf buf;
    buf.base = fn_->getArg(unsigned(i));
    buf.elem = t.elem();
    for (int64_t d = 0; d < t.rank(); ++d, ++extentAt) {
      Range r = dimBounds(t.dim(d), syms_);
      buf.minExtents.push_back(r.lo > 0 ? r.lo : 0);
      buf.extents.push_back(t.dim(d).isStatic() ? idx(t.dim(d).value())
                                                : dynamicExtent(i, d, extentAt));
    }
    bufs_[k_.arg(i)] = buf;
  }
  return ok();
}

void KernelEmitter::check(llvm::Value* okCond, KilnCpuStatus status) {
  if (auto* ci = llvm::dyn_cast<llvm::ConstantInt>(okCond); ci && ci->isOne()) return;
  auto* cont = llvm::BasicBlock::Create(c_, "ok", fn_);
  b_.CreateCondBr(okCond, cont, failBlock(status));
  b_.SetInsertPoint(cont);
}

llvm::Type* KernelEmitter::valueType(const Type& t) {
  if (t.isIndex()) return indexTy();
  if (t.isVector())
    return llvm::FixedVectorType::get(scalarType(c_, t.elem()),
                                      static_cast<unsigned>(t.dim(0).value()));
  return scalarType(c_, t.elem());
}

// The values a region's yield hands back, read after its ops are emitted.
std::vector<llvm::Value*> KernelEmitter::yielded(const Block& b) {
  std::vector<llvm::Value*> out;
  if (const Op* y = b.terminator())
    for (const Value* v : y->operands()) out.push_back(get(v));
  return out;
}

Status KernelEmitter::emitNode(const Node& n) {
  const Op& op = *n.op;
  if (op.kind() == OpKind::If) return emitIf(n);
  if (op.kind() != OpKind::For) return emitOp(op);
  llvm::Value* lo = get(op.operand(0));
  llvm::Value* hi = get(op.operand(1));
  llvm::Value* step = get(op.operand(2));
  check(b_.CreateICmpSGT(step, idx(0)), kKilnCpuBadLoopStep);
  std::vector<llvm::Value*> inits;
  for (size_t k = 3; k < op.numOperands(); ++k) inits.push_back(get(op.operand(k)));
  const Block& body = *op.region(0);
  keepLoop_ = keepBarrierLoops_ && n.hasBarrier;
  unrollLoop_ = op.attrs().getInt("unroll", 0) != 0;
  scalarLoop_ = op.attrs().getInt("vectorize", 1) == 0;
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
Status KernelEmitter::emitIf(const Node& n) {
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

// The element at operands [first, first + count) of `op`; `lanes` elements along the last
// dim are accessed. A data-dependent index (analysis/data_indices.h) is checked first.
Result<llvm::Value*> KernelEmitter::address(const Op& op, const Value* bufVal, size_t first,
                                            size_t count, int64_t lanes) {
  auto it = bufs_.find(bufVal);
  if (it == bufs_.end())
    return error(op.loc(), "access to a buffer " + backendName() + " cannot see");
  const Buf& buf = it->second;
  if (count != buf.extents.size()) return error(op.loc(), "buffer access needs one index per dim");
  llvm::Value* inRange = nullptr;
  for (size_t d = 0; d < count; ++d) {
    const Value* v = op.operand(first + d);
    int64_t span = d + 1 == count ? lanes : 1;
    if (!dataIndices_.count(v) || provedInRange(v, buf.minExtents[d], span)) continue;
    llvm::Value* idx = get(v);
    // 0 <= idx <= extent - span, as one unsigned compare when span is 1
    llvm::Value* c =
        span == 1
            ? b_.CreateICmpULT(idx, buf.extents[d])
            : b_.CreateAnd(b_.CreateICmpSGE(idx, this->idx(0)),
                           b_.CreateICmpSLE(idx, b_.CreateSub(buf.extents[d], this->idx(span))));
    inRange = inRange ? b_.CreateAnd(inRange, c) : c;
  }
  if (inRange) check(inRange, kKilnCpuIndexOutOfRange);
  llvm::Value* off = idx(0);
  for (size_t d = 0; d < count; ++d) {
    const Value* at = op.operand(first + d);
    llvm::Value* extent = buf.extents[d];
    // Indices (floordiv(e, n), mod(e, n)) of two dims whose inner extent is n (a reshape
    // that split a flat index over a buffer) are at offset e: (e / n) * n + e % n = e for
    // floor division, so the address stays e, not a division LLVM cannot see through. The
    // merged index may pair with the next dim again: a full delinearization over several
    // dims (im2col's patches, C x taps x OH x OW read as C*taps x OH*OW) is one index.
    while (d + 1 < count) {
      const Value* e = splitBy(at, op.operand(first + d + 1));
      if (!e || get(at->def()->operand(1)) != buf.extents[d + 1]) break;
      at = e;
      extent = b_.CreateMul(extent, buf.extents[d + 1], "", false, true);
      ++d;
    }
    llvm::Value* idx = get(at);
    off = off == this->idx(0)
              ? idx
              : b_.CreateAdd(b_.CreateMul(off, extent, "", false, true), idx, "", false, true);
  }
  if (buf.perThread)
    off = b_.CreateAdd(b_.CreateMul(thread_, idx(buf.perThread)), off, "", false, true);
  return b_.CreateInBoundsGEP(storageType(c_, buf.elem), buf.base, off);
}

// e when `outer` is ifloordiv(e, n) and `inner` is imod(e, n) (one n), else null.
const Value* KernelEmitter::splitBy(const Value* outer, const Value* inner) {
  const Op* q = outer->def();
  const Op* r = inner->def();
  if (!q || !r || q->kind() != OpKind::IFloorDiv || r->kind() != OpKind::IMod) return nullptr;
  return q->operand(0) == r->operand(0) && q->operand(1) == r->operand(1) ? q->operand(0) : nullptr;
}

// Value bounds show `span` elements from the index lie within an extent >= minExtent.
bool KernelEmitter::provedInRange(const Value* idx, int64_t minExtent, int64_t span) const {
  Range r = bounds_.of(idx);
  return r.known() && r.lo >= 0 && r.hi <= minExtent - span;
}

llvm::Align KernelEmitter::alignOf(ElemType e) {
  return llvm::Align(static_cast<uint64_t>(elemTypeBytes(e)));
}

Status KernelEmitter::emitOp(const Op& op) {
  auto in = [&](size_t i) { return get(op.operand(i)); };
  const Value* res = op.numResults() ? op.result(0) : nullptr;
  llvm::Type* it = indexTy();
  switch (op.kind()) {
  case OpKind::KernelConfig:
  case OpKind::Return: return ok();
  case OpKind::IConst: set(res, idx(op.attrs().getInt("value"))); return ok();
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
               : u            ? b_.CreateZExtOrTrunc(in(0), it)
                              : b_.CreateSExtOrTrunc(in(0), it));
    } else {
      set(res,
          convert(b_, ElemType::I64, res->type().elem(), b_.CreateSExt(in(0), b_.getInt64Ty())));
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
                   backendName() + " has no vector loads of " + std::string(elemTypeName(e)));
    auto lanes = static_cast<unsigned>(res->type().dim(0).value());
    KILN_TRY(llvm::Value * p, address(op, op.operand(0), 1, op.numOperands() - 1, lanes));
    llvm::Value* v =
        b_.CreateAlignedLoad(llvm::FixedVectorType::get(storageType(c_, e), lanes), p, alignOf(e));
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
                   backendName() + " has no vector stores of " + std::string(elemTypeName(e)));
    llvm::Value* v = in(0);
    unsigned lanes = llvm::cast<llvm::FixedVectorType>(v->getType())->getNumElements();
    if (e == ElemType::F16)
      v = b_.CreateFPTrunc(v, llvm::FixedVectorType::get(b_.getHalfTy(), lanes));
    KILN_TRY(llvm::Value * p, address(op, bufVal, 2, op.numOperands() - 2, lanes));
    b_.CreateAlignedStore(v, p, alignOf(e));
    return ok();
  }
  default: return emitTargetOp(op);
  }
}

// An f64 accumulator update, `store (add (load acc[i]), x), acc[i]` on a private buffer:
// the wide sums `lower` gives reductions and softmax. Its adds may be reassociated, so
// that LLVM vectorizes the loop around it (partial sums in vector lanes). In f64 over
// f32 data the order changes the sum by rounding far below the result's f32 precision.
bool KernelEmitter::isWideAccumulation(const Op& op) const {
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

Result<llvm::Value*> KernelEmitter::address0(const Buf& buf) {
  llvm::Value* off = b_.CreateMul(thread_, idx(buf.perThread));
  return b_.CreateInBoundsGEP(storageType(c_, buf.elem), buf.base, off);
}

// ifloordiv / iceildiv / imod: unsigned forms where value bounds prove both sides
// non-negative (shifts and masks for powers of two), the floor forms otherwise.
Status KernelEmitter::emitIndexDivision(const Op& op) {
  llvm::Value* a = get(op.operand(0));
  llvm::Value* d = get(op.operand(1));
  Range ra = bounds_.of(op.operand(0));
  Range rd = bounds_.of(op.operand(1));
  llvm::Value* zero = idx(0);
  llvm::Value* one = idx(1);
  if (!(rd.lo > 0 || rd.hi < 0)) check(b_.CreateICmpNE(d, zero), kKilnCpuIndexDivByZero);
  llvm::Value* r = nullptr;
  if (ra.lo >= 0 && rd.lo > 0) {
    switch (op.kind()) {
    case OpKind::IFloorDiv: r = b_.CreateUDiv(a, d); break;
    case OpKind::ICeilDiv:
      r = b_.CreateAdd(b_.CreateUDiv(a, d),
                       b_.CreateZExt(b_.CreateICmpNE(b_.CreateURem(a, d), zero), indexTy()));
      break;
    default: r = b_.CreateURem(a, d); break;
    }
    set(op.result(0), r);
    return ok();
  }
  // Avoid INT64_MIN / -1 (the simulator reports it; here it gives a defined value).
  llvm::Value* safe = b_.CreateSelect(b_.CreateICmpEQ(d, zero), one, d);
  llvm::Value* q = b_.CreateSDiv(a, b_.CreateSelect(b_.CreateICmpEQ(safe, idx(-1)), one, safe));
  q = b_.CreateSelect(b_.CreateICmpEQ(safe, idx(-1)), b_.CreateSub(zero, a), q);
  llvm::Value* rem = b_.CreateSub(a, b_.CreateMul(q, safe));
  llvm::Value* inexact = b_.CreateICmpNE(rem, zero);
  llvm::Value* signsDiffer =
      b_.CreateXor(b_.CreateICmpSLT(rem, zero), b_.CreateICmpSLT(safe, zero));
  switch (op.kind()) {
  case OpKind::IFloorDiv:
    r = b_.CreateSub(q, b_.CreateZExt(b_.CreateAnd(inexact, signsDiffer), indexTy()));
    break;
  case OpKind::ICeilDiv:
    r = b_.CreateAdd(q, b_.CreateZExt(b_.CreateAnd(inexact, b_.CreateNot(signsDiffer)), indexTy()));
    break;
  default:
    r = b_.CreateSelect(b_.CreateAnd(inexact, signsDiffer), b_.CreateAdd(rem, safe), rem);
    break;
  }
  set(op.result(0), r);
  return ok();
}

} // namespace kiln::llvmgen
