// KernelEmitter, structure half (see emitter.h): the interface (buffers, push constants,
// builtins), the kernel's ops in order, loops and ifs as structured constructs, memory
// accesses, barriers and subgroup operations.
#include <algorithm>
#include <climits>

#include "analysis/data_indices.h"
#include "backends/spirv/emitter.h"
#include "ir/core/push_constants.h"

namespace kiln::spirv {

using SOp = spv::Op;

namespace {

constexpr uint32_t kScopeWorkgroup = 2;
constexpr uint32_t kScopeSubgroup = 3;
// AcquireRelease | WorkgroupMemory
constexpr uint32_t kBarrierSemantics = 0x8 | 0x100;
// Loops of at most this many static trips are marked for complete unrolling (emitFor).
constexpr int64_t kUnrollTrips = 8;

} // namespace

KernelEmitter::KernelEmitter(const Func& k, const SymbolTable& syms, const SpirvTarget& target)
    : k_(k), syms_(syms), target_(target),
      bounds_(k, syms,
              std::max({target.desc.maxWorkgroupCount[0], target.desc.maxWorkgroupCount[1],
                        target.desc.maxWorkgroupCount[2]})) {}

Status KernelEmitter::checkKernel() {
  walkOps(k_, [&](const Op& op) {
    if (op.kind() == OpKind::KernelConfig && !config_) config_ = &op;
  });
  if (!config_) return error(k_.loc(), "kernel @" + k_.name() + " has no kernel_config");
  std::vector<int64_t> wg = config_->attrs().getInts("workgroup");
  if (wg.size() != 3 || wg[0] < 1 || wg[1] < 1 || wg[2] < 1 || wg[0] * wg[1] * wg[2] > 65536)
    return error(config_->loc(), "kernel @" + k_.name() + " has an invalid workgroup size");
  workgroup_ = {wg[0], wg[1], wg[2]};
  subgroup_ = config_->attrs().getInt("subgroup", 0);
  for (size_t i = 0; i < k_.numArgs(); ++i)
    if (!k_.arg(i)->type().isBuffer())
      return error(k_.loc(),
                   "kernel @" + k_.name() + " argument " + std::to_string(i) + " is not a buffer");
  return ok();
}

// 32-bit index arithmetic when every index value (other than data-dependent ones, which
// are range-checked before use) and every buffer's element count fits in an int32.
void KernelEmitter::chooseIndexWidth() {
  bool fits = true;
  walkOps(k_, [&](const Op& op) {
    for (size_t r = 0; r < op.numResults(); ++r) {
      const Value* v = op.result(r);
      if (v->type().isIndex() && !dataIndices_.count(v) && !fitsI32(bounds_.of(v))) fits = false;
    }
    for (size_t r = 0; r < op.numRegions(); ++r)
      for (size_t a = 0; a < op.region(r)->numArgs(); ++a) {
        const Value* v = op.region(r)->arg(a);
        if (v->type().isIndex() && !dataIndices_.count(v) && !fitsI32(bounds_.of(v))) fits = false;
      }
  });
  for (size_t i = 0; i < k_.numArgs() && fits; ++i) {
    const Type& t = k_.arg(i)->type();
    double elems = 1;
    for (int64_t d = 0; d < t.rank(); ++d) {
      Range r = dimBounds(t.dim(d), syms_);
      if (!r.known()) fits = false;
      elems *= double(r.hi);
    }
    if (elems >= double(INT32_MAX)) fits = false;
  }
  for (const std::string& s : push_) {
    const SymbolInfo* info = syms_.lookup(s);
    if (!info || info->lo < INT32_MIN || info->hi > INT32_MAX) fits = false;
  }
  idxBits_ = fits ? 32 : 64;
  if (!fits) b_.capability(spv::Capability::Int64);
  idx_ = b_.typeInt(idxBits_);
}

Id KernelEmitter::builtin(spv::BuiltIn which, Id type) {
  auto it = builtins_.find(uint32_t(which));
  if (it != builtins_.end()) return it->second;
  Id var =
      b_.globalVariable(b_.typePointer(spv::StorageClass::Input, type), spv::StorageClass::Input);
  b_.decorate(var, spv::Decoration::BuiltIn, {uint32_t(which)});
  interface_.push_back(var);
  builtins_[uint32_t(which)] = var;
  return var;
}

void KernelEmitter::declareInterface() {
  void_ = b_.typeVoid();
  bool_ = b_.typeBool();
  u32_ = b_.typeInt(32);
  f32_ = b_.typeFloat(32);
  main_ = b_.newId();
  b_.name(main_, k_.name());
  if (!push_.empty()) {
    std::vector<Id> members(push_.size(), idx_);
    pushStruct_ = b_.typeStruct(members);
    b_.decorate(pushStruct_, spv::Decoration::Block);
    for (uint32_t i = 0; i < push_.size(); ++i)
      b_.memberDecorate(pushStruct_, i, spv::Decoration::Offset, {i * (idxBits_ / 8)});
    pushVar_ = b_.globalVariable(b_.typePointer(spv::StorageClass::PushConstant, pushStruct_),
                                 spv::StorageClass::PushConstant);
    b_.name(pushVar_, "push");
  }
}

Status KernelEmitter::declareBuffers() {
  for (size_t i = 0; i < k_.numArgs(); ++i) {
    const Value* arg = k_.arg(i);
    const Type& t = arg->type();
    Buf buf;
    buf.elem = t.elem();
    buf.elemType = storageType(t.elem());
    Id rt = b_.typeRuntimeArray(buf.elemType, uint32_t(elemTypeBytes(t.elem())));
    Id st = b_.typeStruct({rt});
    b_.decorate(st, spv::Decoration::Block);
    b_.memberDecorate(st, 0, spv::Decoration::Offset, {0});
    if (!written_.count(arg)) b_.memberDecorate(st, 0, spv::Decoration::NonWritable);
    buf.var = b_.globalVariable(b_.typePointer(spv::StorageClass::StorageBuffer, st),
                                spv::StorageClass::StorageBuffer);
    b_.decorate(buf.var, spv::Decoration::DescriptorSet, {0});
    b_.decorate(buf.var, spv::Decoration::Binding, {uint32_t(i)});
    if (!arg->name().empty()) b_.name(buf.var, arg->name());
    for (int64_t d = 0; d < t.rank(); ++d) {
      Range r = dimBounds(t.dim(d), syms_);
      buf.minExtents.push_back(r.lo > 0 ? r.lo : 0);
      if (t.dim(d).isStatic()) {
        buf.extents.push_back(indexConst(t.dim(d).value()));
      } else if (t.dim(d).isUnknown()) {
        return error(k_.loc(), "kernel @" + k_.name() + " argument " + std::to_string(i) +
                                   " has a dim of unknown size");
      } else {
        buf.extents.push_back(symExprValue(t.dim(d).expr()));
      }
    }
    bufs_[arg] = buf;
  }
  // Shared and private buffers.
  Status s = ok();
  walkOps(k_, [&](const Op& op) {
    if (op.kind() != OpKind::Alloc || !s.ok()) return;
    const Type& t = op.result(0)->type();
    std::optional<int64_t> n = t.numElements();
    if (!n || *n < 1 || *n > INT32_MAX) {
      s = error(op.loc(), "alloc needs a static, non-empty shape");
      return;
    }
    Buf buf;
    buf.elem = t.elem();
    buf.elemType = internalType(t.elem());
    buf.count = uint64_t(*n);
    bool priv = t.space() == MemSpace::Private;
    buf.sc = priv ? spv::StorageClass::Function : spv::StorageClass::Workgroup;
    buf.vec4 =
        !priv && t.elem() == ElemType::F32 && t.rank() > 0 && t.dim(t.rank() - 1).value() % 4 == 0;
    Id arr = buf.vec4 ? b_.typeArray(b_.typeVector(buf.elemType, 4), uint32_t(*n / 4))
                      : b_.typeArray(buf.elemType, uint32_t(*n));
    Id ptr = b_.typePointer(buf.sc, arr);
    if (priv) {
      buf.var = b_.newId();
      b_.functionVariableSection(ptr, buf.var, 0);
    } else {
      buf.var = b_.globalVariable(ptr, spv::StorageClass::Workgroup);
      uint64_t bytes =
          buf.count *
          (isBool(t.elem())
               ? 4
               : (elemTypeBytes(t.elem()) < 4 && isFloat(t.elem()) ? 4 : elemTypeBytes(t.elem())));
      sharedBytes_ += bytes;
      shared_.push_back(&op);
    }
    for (int64_t d = 0; d < t.rank(); ++d) {
      buf.extents.push_back(indexConst(t.dim(d).value()));
      buf.minExtents.push_back(t.dim(d).value());
    }
    bufs_[op.result(0)] = buf;
  });
  if (!s.ok()) return s;
  if (target_.desc.sharedMemoryBytes && sharedBytes_ > target_.desc.sharedMemoryBytes)
    return error(k_.loc(), "kernel @" + k_.name() + " needs " + std::to_string(sharedBytes_) +
                               " bytes of shared memory; target " + target_.desc.name + " has " +
                               std::to_string(target_.desc.sharedMemoryBytes));
  return ok();
}

Id KernelEmitter::symbolValue(const std::string& name) {
  auto it = symbols_.find(name);
  if (it != symbols_.end()) return it->second;
  size_t k = 0;
  while (k < push_.size() && push_[k] != name) ++k;
  Id p = b_.codeResult(SOp::OpAccessChain, b_.typePointer(spv::StorageClass::PushConstant, idx_),
                       {pushVar_, b_.constInt(u32_, k)});
  Id v = b_.codeResult(SOp::OpLoad, idx_, {p});
  symbols_[name] = v;
  return v;
}

Id KernelEmitter::symExprValue(const SymExpr& e) {
  std::vector<std::unique_ptr<Id>> keep;
  auto box = [&](Id v) -> void* {
    keep.push_back(std::make_unique<Id>(v));
    return keep.back().get();
  };
  auto val = [](void* p) { return *static_cast<Id*>(p); };
  SymLowering l;
  l.constant = [&](int64_t c) { return box(indexConst(c)); };
  l.symbol = [&](const std::string& s) { return box(symbolValue(s)); };
  l.binary = [&](std::string_view op, void* a, void* c) -> void* {
    Id x = val(a), y = val(c);
    if (op == "add") return box(op2(SOp::OpIAdd, idx_, x, y));
    if (op == "mul") return box(op2(SOp::OpIMul, idx_, x, y));
    Id lt = op2(SOp::OpSLessThan, bool_, x, y);
    if (op == "min") return box(select(idx_, lt, x, y));
    if (op == "max") return box(select(idx_, lt, y, x));
    // floordiv / ceildiv / mod of dims: both sides non-negative, the divisor positive.
    Id one = indexConst(1);
    Id safe = select(idx_, op2(SOp::OpSLessThan, bool_, y, one), one, y);
    if (op == "mod") return box(op2(SOp::OpUMod, idx_, x, safe));
    Id q = op2(SOp::OpUDiv, idx_, x, safe);
    if (op == "floordiv") return box(q);
    Id rem = op2(SOp::OpUMod, idx_, x, safe);
    Id up = select(idx_, op2(SOp::OpINotEqual, bool_, rem, indexConst(0)), one, indexConst(0));
    return box(op2(SOp::OpIAdd, idx_, q, up));
  };
  return *static_cast<Id*>(lowerSymExpr(e, l));
}

void KernelEmitter::label(Id l) {
  b_.code(SOp::OpLabel, {l});
  cur_ = l;
}

Result<std::vector<Id>> KernelEmitter::loop(Id lo, Id hi, Id step, bool stepPositive,
                                            const std::vector<std::pair<Id, Id>>& inits,
                                            const LoopBody& body, bool unroll) {
  Id pre = cur_;
  Id header = b_.newId(), cond = b_.newId(), bodyLabel = b_.newId(), cont = b_.newId(),
     merge = b_.newId();
  Id next = b_.newId();
  b_.code(SOp::OpBranch, {header});
  label(header);
  Id iv = b_.codeResult(SOp::OpPhi, idx_, {lo, pre, next, cont});
  std::vector<Id> carried;
  std::vector<size_t> patchAt;
  for (const auto& [type, init] : inits) {
    carried.push_back(b_.codeResult(SOp::OpPhi, type, {init, pre, 0, cont}));
    patchAt.push_back(b_.codeSize() - 2);
  }
  b_.code(SOp::OpLoopMerge,
          {merge, cont,
           uint32_t(unroll ? spv::LoopControlMask::Unroll : spv::LoopControlMask::MaskNone)});
  b_.code(SOp::OpBranch, {cond});
  label(cond);
  Id more = op2(SOp::OpSLessThan, bool_, iv, hi);
  // A step that is not positive would never end: the loop then does not run.
  if (!stepPositive)
    more =
        op2(SOp::OpLogicalAnd, bool_, more, op2(SOp::OpSGreaterThan, bool_, step, indexConst(0)));
  b_.code(SOp::OpBranchConditional, {more, bodyLabel, merge});
  label(bodyLabel);
  KILN_TRY(std::vector<Id> yielded, body(iv, carried));
  if (yielded.size() != carried.size())
    return error(k_.loc(), "a loop of kernel @" + k_.name() + " yields the wrong number of values");
  b_.code(SOp::OpBranch, {cont});
  label(cont);
  b_.codeResultId(SOp::OpIAdd, idx_, next, {iv, step});
  b_.code(SOp::OpBranch, {header});
  label(merge);
  for (size_t i = 0; i < yielded.size(); ++i) b_.patch(patchAt[i], yielded[i]);
  return carried;
}

Result<std::vector<Id>>
KernelEmitter::guarded(Id cond, const std::vector<std::pair<Id, Id>>& otherwise,
                       const std::function<Result<std::vector<Id>>()>& then) {
  Id from = cur_;
  Id thenLabel = b_.newId(), merge = b_.newId();
  b_.code(SOp::OpSelectionMerge, {merge, uint32_t(spv::SelectionControlMask::MaskNone)});
  b_.code(SOp::OpBranchConditional, {cond, thenLabel, merge});
  label(thenLabel);
  KILN_TRY(std::vector<Id> values, then());
  Id thenEnd = cur_;
  b_.code(SOp::OpBranch, {merge});
  label(merge);
  std::vector<Id> out;
  for (size_t i = 0; i < otherwise.size(); ++i)
    out.push_back(b_.codeResult(SOp::OpPhi, otherwise[i].first,
                                {otherwise[i].second, from, values[i], thenEnd}));
  return out;
}

void KernelEmitter::zeroSharedMemory() {
  if (shared_.empty()) return;
  int64_t threads = workgroup_[0] * workgroup_[1] * workgroup_[2];
  for (const Op* op : shared_) {
    const Buf& buf = bufs_.at(op->result(0));
    Id slot = buf.vec4 ? b_.typeVector(buf.elemType, 4) : buf.elemType;
    Id zero = b_.constNull(slot);
    Id ptrType = b_.typePointer(spv::StorageClass::Workgroup, slot);
    (void)loop(localLinear_, indexConst(int64_t(buf.vec4 ? buf.count / 4 : buf.count)),
               indexConst(threads), true, {},
               [&](Id i, const std::vector<Id>&) -> Result<std::vector<Id>> {
                 Id p = b_.codeResult(SOp::OpAccessChain, ptrType, {buf.var, i});
                 b_.code(SOp::OpStore, {p, zero});
                 return std::vector<Id>{};
               });
  }
  b_.code(SOp::OpControlBarrier,
          {b_.constInt(u32_, kScopeWorkgroup), b_.constInt(u32_, kScopeWorkgroup),
           b_.constInt(u32_, kBarrierSemantics)});
}

Result<vulkan::VulkanKernelInfo> KernelEmitter::run() {
  KILN_CHECK(checkKernel());
  dataIndices_ = dataDependentIndices(k_);
  push_ = pushConstantSymbols(k_);
  walkOps(k_, [&](const Op& op) {
    if (op.kind() == OpKind::Store || op.kind() == OpKind::MaskedStore ||
        op.kind() == OpKind::VectorStore) {
      size_t bufAt = op.kind() == OpKind::MaskedStore ? 2 : 1;
      written_.insert(op.operand(bufAt));
    }
  });
  b_.capability(spv::Capability::Shader);
  chooseIndexWidth();
  declareInterface();
  // The function starts here: buffers' extents are computed in its first block.
  b_.code(SOp::OpFunction,
          {void_, main_, uint32_t(spv::FunctionControlMask::MaskNone), b_.typeFunction(void_)});
  label(b_.newId());
  b_.beginVariables();
  KILN_CHECK(declareBuffers());
  {
    Id uvec3 = b_.typeVector(u32_, 3);
    Id lid = b_.codeResult(SOp::OpLoad, uvec3, {builtin(spv::BuiltIn::LocalInvocationId, uvec3)});
    Id wid = b_.codeResult(SOp::OpLoad, uvec3, {builtin(spv::BuiltIn::WorkgroupId, uvec3)});
    for (uint32_t a = 0; a < 3; ++a) {
      Id l = b_.codeResult(SOp::OpCompositeExtract, u32_, {lid, a});
      Id w = b_.codeResult(SOp::OpCompositeExtract, u32_, {wid, a});
      localId_[a] = idxBits_ == 32 ? l : op1(SOp::OpUConvert, idx_, l);
      workgroupId_[a] = idxBits_ == 32 ? w : op1(SOp::OpUConvert, idx_, w);
    }
    // The thread's linear index in its workgroup, x fastest.
    Id yz = op2(SOp::OpIAdd, idx_, op2(SOp::OpIMul, idx_, localId_[2], indexConst(workgroup_[1])),
                localId_[1]);
    localLinear_ =
        op2(SOp::OpIAdd, idx_, op2(SOp::OpIMul, idx_, yz, indexConst(workgroup_[0])), localId_[0]);
  }
  zeroSharedMemory();
  KILN_CHECK(emitBlock(k_.body()));
  b_.code(SOp::OpReturn, {});
  b_.code(SOp::OpFunctionEnd, {});
  b_.entryPoint(main_, "main", interface_);
  b_.localSize(main_, uint32_t(workgroup_[0]), uint32_t(workgroup_[1]), uint32_t(workgroup_[2]));
  // Without SignedZeroInfNanPreserve a Vulkan driver may assume floats are never NaN or
  // infinite and fold them away (NVIDIA's does: x != x, min/max and inf - inf came out as
  // numbers). Every float width the kernel computes in keeps IEEE special values.
  b_.capability(spv::Capability::SignedZeroInfNanPreserve);
  if (target_.version < 0x00010400) b_.extension("SPV_KHR_float_controls");
  b_.executionMode(main_, spv::ExecutionMode::SignedZeroInfNanPreserve, {32});
  if (b_.capabilities().count(spv::Capability::Float64))
    b_.executionMode(main_, spv::ExecutionMode::SignedZeroInfNanPreserve, {64});

  vulkan::VulkanKernelInfo info;
  info.name = k_.name();
  info.entryPoint = "main";
  info.spirv = b_.finish(target_.version);
  for (size_t i = 0; i < k_.numArgs(); ++i) {
    vulkan::VulkanBindingInfo bi;
    bi.written = written_.count(k_.arg(i)) != 0;
    const Type& t = k_.arg(i)->type();
    double elems = 1;
    bool known = true;
    for (int64_t d = 0; d < t.rank(); ++d) {
      Range r = dimBounds(t.dim(d), syms_);
      known = known && r.known();
      elems *= double(r.hi);
    }
    // A bound beyond what one binding may address says nothing the driver can use (symbol
    // ranges are often wide); the driver checks the bound buffers' sizes at dispatch.
    double bytes = elems * double(elemTypeBytes(t.elem()));
    uint64_t range = target_.desc.maxStorageBufferRange;
    if (known && bytes < 1e18 && (!range || bytes <= double(range))) bi.maxBytes = uint64_t(bytes);
    info.bindings.push_back(bi);
  }
  for (const std::string& s : push_)
    info.push.push_back({s, idxBits_ == 32 ? vulkan::PushType::I32 : vulkan::PushType::I64});
  info.workgroupSize = {uint32_t(workgroup_[0]), uint32_t(workgroup_[1]), uint32_t(workgroup_[2])};
  info.sharedMemoryBytes = uint32_t(sharedBytes_);
  if (builtins_.count(uint32_t(spv::BuiltIn::SubgroupLocalInvocationId)) ||
      b_.capabilities().count(spv::Capability::GroupNonUniform)) {
    info.requiredSubgroupSize = uint32_t(subgroup_);
    info.fullSubgroups = true;
  }
  for (spv::Capability c : b_.capabilities()) info.capabilities.push_back(uint32_t(c));
  for (const std::string& e : b_.extensions()) info.extensions.push_back(e);
  return info;
}

Status KernelEmitter::emitBlock(const Block& block) {
  for (const auto& op : block.ops()) {
    if (op->kind() == OpKind::Yield || op->kind() == OpKind::Return) continue;
    KILN_CHECK(emitOp(*op));
  }
  return ok();
}

Status KernelEmitter::emitFor(const Op& op) {
  Id lo = get(op.operand(0)), hi = get(op.operand(1)), step = get(op.operand(2));
  Range rs = bounds_.of(op.operand(2));
  std::vector<std::pair<Id, Id>> inits;
  for (size_t i = 3; i < op.numOperands(); ++i)
    inits.push_back({valueType(op.operand(i)->type()), get(op.operand(i))});
  const Block& body = *op.region(0);
  // A short loop of static trip count without a barrier (a thread's register tile: its rows
  // and columns, whose private arrays become registers only once unrolled), or one the
  // lowering asks for (unroll=1), is marked for complete unrolling, as the LLVM GPU emitter
  // does (kernel_emitter.h).
  Range rl = bounds_.of(op.operand(0)), rh = bounds_.of(op.operand(1));
  bool unroll = rl.known() && rl.lo == rl.hi && rh.known() && rh.lo == rh.hi && rs.known() &&
                rs.lo == rs.hi && rs.lo > 0 &&
                ((rh.lo - rl.lo) / rs.lo <= kUnrollTrips || op.attrs().getInt("unroll", 0) != 0);
  walkOps(body, [&](const kiln::Op& o) { unroll = unroll && o.kind() != OpKind::Barrier; });
  KILN_TRY(std::vector<Id> results,
           loop(
               lo, hi, step, rs.known() && rs.lo > 0, inits,
               [&](Id iv, const std::vector<Id>& carried) -> Result<std::vector<Id>> {
                 vals_[body.arg(0)] = iv;
                 for (size_t i = 0; i < carried.size(); ++i) vals_[body.arg(i + 1)] = carried[i];
                 KILN_CHECK(emitBlock(body));
                 std::vector<Id> next;
                 if (const kiln::Op* y = body.terminator())
                   for (const Value* v : y->operands()) next.push_back(get(v));
                 return next;
               },
               unroll));
  for (size_t i = 0; i < results.size(); ++i) vals_[op.result(i)] = results[i];
  return ok();
}

Status KernelEmitter::emitIf(const Op& op) {
  Id thenLabel = b_.newId(), elseLabel = b_.newId(), merge = b_.newId();
  b_.code(SOp::OpSelectionMerge, {merge, uint32_t(spv::SelectionControlMask::MaskNone)});
  b_.code(SOp::OpBranchConditional, {get(op.operand(0)), thenLabel, elseLabel});
  std::vector<Id> values[2];
  Id ends[2];
  Id starts[2] = {thenLabel, elseLabel};
  for (size_t r = 0; r < 2; ++r) {
    label(starts[r]);
    if (r < op.numRegions()) {
      KILN_CHECK(emitBlock(*op.region(r)));
      if (const kiln::Op* y = op.region(r)->terminator())
        for (const Value* v : y->operands()) values[r].push_back(get(v));
    }
    ends[r] = cur_;
    b_.code(SOp::OpBranch, {merge});
  }
  label(merge);
  for (size_t i = 0; i < op.numResults(); ++i) {
    if (i >= values[0].size() || i >= values[1].size())
      return error(op.loc(), "an if of kernel @" + k_.name() + " yields too few values");
    vals_[op.result(i)] = b_.codeResult(SOp::OpPhi, valueType(op.result(i)->type()),
                                        {values[0][i], ends[0], values[1][i], ends[1]});
  }
  return ok();
}

// The element offset of indices [first, first + count) of `op` in `buf`.
Result<Id> KernelEmitter::address(const Op& op, const Buf& buf, size_t first, size_t count) {
  if (count != buf.extents.size()) return error(op.loc(), "buffer access needs one index per dim");
  Id off = count == 0 ? indexConst(0) : get(op.operand(first));
  for (size_t d = 1; d < count; ++d)
    off = op2(SOp::OpIAdd, idx_, op2(SOp::OpIMul, idx_, off, buf.extents[d]),
              get(op.operand(first + d)));
  return off;
}

// The condition that data-dependent indices of the access lie in range, or 0 when every
// index is in range by construction.
Id KernelEmitter::inRange(const Op& op, const Buf& buf, size_t first, size_t count, int64_t lanes) {
  Id all = 0;
  for (size_t d = 0; d < count && d < buf.extents.size(); ++d) {
    const Value* v = op.operand(first + d);
    int64_t span = d + 1 == count ? lanes : 1;
    if (!dataIndices_.count(v)) continue;
    Range r = bounds_.of(v);
    if (r.known() && r.lo >= 0 && r.hi <= buf.minExtents[d] - span) continue;
    Id idx = get(v);
    Id c = op2(SOp::OpLogicalAnd, bool_, op2(SOp::OpSGreaterThanEqual, bool_, idx, indexConst(0)),
               op2(SOp::OpSLessThanEqual, bool_, idx,
                   op2(SOp::OpISub, idx_, buf.extents[d], indexConst(span))));
    all = all ? op2(SOp::OpLogicalAnd, bool_, all, c) : c;
  }
  return all;
}

Status KernelEmitter::emitAccess(const Op& op) {
  bool isLoad = op.kind() == OpKind::Load || op.kind() == OpKind::MaskedLoad ||
                op.kind() == OpKind::VectorLoad;
  size_t bufAt = op.kind() == OpKind::MaskedStore ? 2 : isLoad ? 0 : 1;
  size_t first = bufAt + (op.kind() == OpKind::MaskedLoad ? 2 : 1);
  auto it = bufs_.find(op.operand(bufAt));
  if (it == bufs_.end()) return error(op.loc(), "access to a buffer the SPIR-V backend cannot see");
  const Buf& buf = it->second;
  size_t count = op.numOperands() - first;
  bool vector = op.kind() == OpKind::VectorLoad || op.kind() == OpKind::VectorStore;
  int64_t lanes = 1;
  if (vector) {
    const Type& vt = isLoad ? op.result(0)->type() : op.operand(0)->type();
    lanes = vt.dim(0).value();
    if (lanes < 2 || lanes > 4)
      return error(op.loc(),
                   "the SPIR-V backend has vectors of 2 to 4 lanes, not " + std::to_string(lanes));
  }
  Id cond = inRange(op, buf, first, count, lanes);
  Id mask = op.kind() == OpKind::MaskedLoad    ? get(op.operand(1))
            : op.kind() == OpKind::MaskedStore ? get(op.operand(0))
                                               : 0;
  if (mask && cond)
    cond = op2(SOp::OpLogicalAnd, bool_, mask, cond);
  else if (mask)
    cond = mask;
  Id ptrType = b_.typePointer(buf.sc, buf.elemType);
  bool sb = buf.sc == spv::StorageClass::StorageBuffer;
  Id four = indexConst(4);
  auto element = [&](Id off) {
    if (buf.vec4)
      return b_.codeResult(
          SOp::OpAccessChain, ptrType,
          {buf.var, op2(SOp::OpUDiv, idx_, off, four), op2(SOp::OpUMod, idx_, off, four)});
    return sb ? b_.codeResult(SOp::OpAccessChain, ptrType, {buf.var, b_.constInt(u32_, 0), off})
              : b_.codeResult(SOp::OpAccessChain, ptrType, {buf.var, off});
  };
  // One vec4 access when the buffer is an array of vec4 and the first lane's index along
  // the last dim is a multiple of 4 (the rows are): the offset then is too.
  bool whole = vector && lanes == 4 && buf.vec4 &&
               bounds_.of(op.operand(first + count - 1)).divisor % 4 == 0;
  Id vec4Type = whole ? b_.typeVector(buf.elemType, 4) : 0;
  auto slot = [&](Id off) {
    return b_.codeResult(SOp::OpAccessChain, b_.typePointer(buf.sc, vec4Type),
                         {buf.var, op2(SOp::OpUDiv, idx_, off, four)});
  };
  auto loadAt = [&](Id off) {
    Id raw = b_.codeResult(SOp::OpLoad, buf.elemType, {element(off)});
    return sb ? fromStorage(buf.elem, raw) : raw;
  };
  auto storeAt = [&](Id off, Id v) {
    b_.code(SOp::OpStore, {element(off), sb ? toStorage(buf.elem, v) : roundTo(buf.elem, v)});
  };
  auto access = [&]() -> Result<std::vector<Id>> {
    KILN_TRY(Id off, address(op, buf, first, count));
    if (!isLoad) {
      Id v = get(op.operand(op.kind() == OpKind::MaskedStore ? 1 : 0));
      if (!vector) {
        storeAt(off, v);
      } else if (whole) {
        b_.code(SOp::OpStore, {slot(off), v});
      } else {
        Id st = scalarType(buf.elem);
        for (int64_t l = 0; l < lanes; ++l)
          storeAt(op2(SOp::OpIAdd, idx_, off, indexConst(l)),
                  b_.codeResult(SOp::OpCompositeExtract, st, {v, uint32_t(l)}));
      }
      return std::vector<Id>{};
    }
    if (!vector) return std::vector<Id>{loadAt(off)};
    if (whole) return std::vector<Id>{b_.codeResult(SOp::OpLoad, vec4Type, {slot(off)})};
    std::vector<Id> parts;
    for (int64_t l = 0; l < lanes; ++l)
      parts.push_back(loadAt(op2(SOp::OpIAdd, idx_, off, indexConst(l))));
    return std::vector<Id>{
        b_.codeResult(SOp::OpCompositeConstruct, valueType(op.result(0)->type()), parts)};
  };
  if (!cond) {
    KILN_TRY(std::vector<Id> r, access());
    if (isLoad) vals_[op.result(0)] = r[0];
    return ok();
  }
  std::vector<std::pair<Id, Id>> otherwise;
  if (isLoad) {
    Id t = valueType(op.result(0)->type());
    Id other = op.kind() == OpKind::MaskedLoad
                   ? scalarConstant(op.result(0)->type().elem(), op.attrs().getFloat("other"))
                   : b_.constNull(t);
    otherwise.push_back({t, other});
  }
  KILN_TRY(std::vector<Id> r, guarded(cond, otherwise, access));
  if (isLoad) vals_[op.result(0)] = r[0];
  return ok();
}

Status KernelEmitter::emitSubgroup(const Op& op) {
  if (subgroup_ < 1)
    return error(op.loc(), "kernel @" + k_.name() + " uses subgroup operations but its " +
                               "kernel_config names no subgroup size");
  b_.capability(spv::Capability::GroupNonUniform);
  Id scope = b_.constInt(u32_, kScopeSubgroup);
  const Type& t = op.result(0)->type();
  Id type = valueType(t);
  if (op.kind() == OpKind::SubgroupReduce) {
    b_.capability(spv::Capability::GroupNonUniformArithmetic);
    OpKind fn = op.attrs().getOp("fn").value_or(OpKind::Add);
    bool flt = !t.isIndex() && isFloat(t.elem());
    bool boolean = !t.isIndex() && isBool(t.elem());
    bool uns = !t.isIndex() && isUnsignedInt(t.elem());
    SOp o;
    switch (fn) {
    case OpKind::Add: o = flt ? SOp::OpGroupNonUniformFAdd : SOp::OpGroupNonUniformIAdd; break;
    case OpKind::Mul: o = flt ? SOp::OpGroupNonUniformFMul : SOp::OpGroupNonUniformIMul; break;
    case OpKind::Max:
      o = flt   ? SOp::OpGroupNonUniformFMax
          : uns ? SOp::OpGroupNonUniformUMax
                : SOp::OpGroupNonUniformSMax;
      break;
    case OpKind::Min:
      o = flt   ? SOp::OpGroupNonUniformFMin
          : uns ? SOp::OpGroupNonUniformUMin
                : SOp::OpGroupNonUniformSMin;
      break;
    case OpKind::And: o = SOp::OpGroupNonUniformLogicalAnd; break;
    case OpKind::Or: o = SOp::OpGroupNonUniformLogicalOr; break;
    case OpKind::Xor: o = SOp::OpGroupNonUniformLogicalXor; break;
    default:
      return error(op.loc(),
                   "subgroup_reduce cannot combine with '" + std::string(opInfo(fn).name) + "'");
    }
    if (boolean != (fn == OpKind::And || fn == OpKind::Or || fn == OpKind::Xor))
      return error(op.loc(), "subgroup_reduce: and/or/xor combine i1 values only");
    vals_[op.result(0)] =
        b_.codeResult(o, type, {scope, uint32_t(spv::GroupOperation::Reduce), get(op.operand(0))});
    return ok();
  }
  b_.capability(spv::Capability::GroupNonUniformShuffle);
  Id lane = get(op.operand(1));
  if (idxBits_ != 32) lane = op1(SOp::OpUConvert, u32_, lane);
  vals_[op.result(0)] =
      b_.codeResult(SOp::OpGroupNonUniformShuffle, type, {scope, get(op.operand(0)), lane});
  return ok();
}

Status KernelEmitter::emitOp(const Op& op) {
  const Value* res = op.numResults() ? op.result(0) : nullptr;
  switch (op.kind()) {
  case OpKind::KernelConfig: return ok();
  case OpKind::Barrier:
    b_.code(SOp::OpControlBarrier,
            {b_.constInt(u32_, kScopeWorkgroup), b_.constInt(u32_, kScopeWorkgroup),
             b_.constInt(u32_, kBarrierSemantics)});
    return ok();
  case OpKind::WorkgroupId:
  case OpKind::LocalId: {
    int64_t axis = op.attrs().getInt("axis");
    if (axis < 0 || axis > 2) return error(op.loc(), "axis must be 0, 1 or 2");
    vals_[res] = op.kind() == OpKind::WorkgroupId ? workgroupId_[axis] : localId_[axis];
    return ok();
  }
  case OpKind::LaneId: {
    if (subgroup_ < 1)
      return error(op.loc(), "kernel @" + k_.name() + " reads lane_id but its kernel_config " +
                                 "names no subgroup size");
    b_.capability(spv::Capability::GroupNonUniform);
    Id v =
        b_.codeResult(SOp::OpLoad, u32_, {builtin(spv::BuiltIn::SubgroupLocalInvocationId, u32_)});
    vals_[res] = idxBits_ == 32 ? v : op1(SOp::OpUConvert, idx_, v);
    return ok();
  }
  case OpKind::SubgroupReduce:
  case OpKind::SubgroupBroadcast:
  case OpKind::SubgroupShuffle: return emitSubgroup(op);
  case OpKind::SymbolValue: vals_[res] = symbolValue(op.attrs().getStr("name")); return ok();
  case OpKind::IConst: vals_[res] = indexConst(op.attrs().getInt("value")); return ok();
  case OpKind::SConst:
    vals_[res] = scalarConstant(res->type().elem(), op.attrs().getFloat("value"));
    return ok();
  case OpKind::IAdd:
  case OpKind::ISub:
  case OpKind::IMul:
  case OpKind::IMin:
  case OpKind::IMax:
  case OpKind::IFloorDiv:
  case OpKind::ICeilDiv:
  case OpKind::IMod:
  case OpKind::ICmp: return indexArith(op);
  case OpKind::SSelect:
    vals_[res] =
        select(valueType(res->type()), get(op.operand(0)), get(op.operand(1)), get(op.operand(2)));
    return ok();
  case OpKind::ICast: {
    KILN_TRY(Id v, indexCast(op));
    vals_[res] = v;
    return ok();
  }
  case OpKind::Compute: {
    KILN_TRY(Id v, compute(op));
    vals_[res] = v;
    return ok();
  }
  case OpKind::Alloc: {
    const Buf& buf = bufs_.at(res);
    // this thread's copy starts zero-filled, unless `uninit`
    if (buf.sc == spv::StorageClass::Function && !uninitAlloc(op))
      b_.code(SOp::OpStore,
              {buf.var, b_.constNull(b_.typeArray(buf.elemType, uint32_t(buf.count)))});
    return ok();
  }
  case OpKind::Load:
  case OpKind::MaskedLoad:
  case OpKind::Store:
  case OpKind::MaskedStore:
  case OpKind::VectorLoad:
  case OpKind::VectorStore: return emitAccess(op);
  case OpKind::Prefetch: return ok(); // a hint SPIR-V has no instruction for
  case OpKind::For: return emitFor(op);
  case OpKind::If: return emitIf(op);
  default:
    return error(op.loc(), "the SPIR-V backend cannot emit '" + std::string(op.name()) +
                               "' in kernel @" + k_.name());
  }
}

Result<vulkan::VulkanKernelInfo> emitSpirvKernel(const Func& kernel, const SymbolTable& syms,
                                                 const SpirvTarget& target) {
  KernelEmitter e(kernel, syms, target);
  KILN_TRY(vulkan::VulkanKernelInfo info, e.run());
  KILN_CHECK(validateSpirv(info.spirv, kernel));
  return info;
}

} // namespace kiln::spirv
