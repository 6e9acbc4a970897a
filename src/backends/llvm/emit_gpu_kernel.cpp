// emitGpuKernel: one lowered kernel as a GPU kernel function (AMDGPU or NVPTX), with the
// kernel ABI of runtime/gpu/payload.h.
//
// Each thread of the kernel IR is one GPU invocation, so the kernel's tree is emitted straight
// (kernel_emitter.h does the structured ops, addressing and scalars): ids come from the
// target's intrinsics, `barrier` is the target's workgroup barrier (on AMDGPU a release fence,
// s_barrier and an acquire fence, as HIP's __syncthreads: s_barrier alone does not publish LDS
// stores; on NVPTX bar.sync, which orders the CTA's memory accesses itself), shared buffers are
// address-space-3 memory (AMDGPU: one LDS global each; NVPTX: slices of the dynamic shared
// memory, so that a kernel may use the opt-in size above 48 KiB), private buffers stack
// arrays in the target's private space, zero-filled like the interpreter's. Subgroup ops
// become shuffles within the wave or warp (ds_bpermute on AMDGPU, shfl.sync on NVPTX);
// reductions are butterflies of log2(subgroup) shuffles. An error a kernel finds (a checked
// data-dependent index, a zero divisor, a bad loop step) stores its KilnCpuStatus code in the
// status word and ends the thread.
#include <llvm/IR/IntrinsicsAMDGPU.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

#include <set>

#include "analysis/data_indices.h"
#include "backends/llvm/emit.h"
#include "backends/llvm/kernel_emitter.h"
#include "backends/llvm/scalar.h"
#include "ir/core/push_constants.h"

namespace kiln::llvmgen {

namespace {

constexpr unsigned kGlobal = 1;
constexpr unsigned kShared = 3;
constexpr int64_t kMaxGpuThreads = 1024;

class GpuEmitter : public KernelEmitter {
public:
  GpuEmitter(llvm::Module& m, const Func& k, const SymbolTable& syms, const GpuEmitOptions& o)
      : KernelEmitter(m, k, syms), o_(o) {
    // A GPU thread's register tile is at most 8x8; a longer loop (the K steps over a shared
    // tile) unrolled into every tile element would exhaust the registers.
    fullUnrollTrips_ = 8;
    unrollAroundLoops_ = true;
    keepBarrierLoops_ = true;
  }

  Result<EmittedGpuKernel> run(const std::string& entry) {
    KILN_CHECK(buildTree(kMaxGpuThreads));
    subgroup_ = config_->attrs().getInt("subgroup", 1);
    if (subgroup_ < 1 || (subgroup_ & (subgroup_ - 1)) != 0 || subgroup_ > o_.waveSize ||
        threads_ % subgroup_ != 0)
      return error(config_->loc(), "kernel @" + k_.name() + " asks for subgroups of " +
                                       std::to_string(subgroup_) + " threads; " + backendName() +
                                       " runs waves of " + std::to_string(o_.waveSize) +
                                       " and needs a power of two dividing the workgroup");
    dataIndices_ = dataDependentIndices(k_);
    symbols_ = pushConstantSymbols(k_);
    index32_ = indicesFitInt32();
    EmittedGpuKernel out;
    out.entry = entry;
    out.symbols = symbols_;
    out.subgroup = subgroup_;
    for (int i = 0; i < 3; ++i) out.workgroup[i] = static_cast<uint32_t>(workgroup_[i]);

    llvm::Type* i64 = b_.getInt64Ty();
    llvm::Type* gptr = b_.getPtrTy(kGlobal);
    std::vector<llvm::Type*> params(k_.numArgs(), gptr);
    int64_t extents = 0;
    for (size_t i = 0; i < k_.numArgs(); ++i) extents += k_.arg(i)->type().rank();
    params.insert(params.end(), static_cast<size_t>(extents) + symbols_.size(), i64);
    params.push_back(gptr); // the status word
    fn_ = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false),
                                 llvm::GlobalValue::ExternalLinkage, entry, m_);
    extentBase_ = unsigned(k_.numArgs());
    symbolBase_ = extentBase_ + unsigned(extents);
    status_ = fn_->getArg(unsigned(params.size() - 1));
    for (size_t i = 0; i < k_.numArgs(); ++i) {
      if (!o_.buffersMayAlias) fn_->addParamAttr(unsigned(i), llvm::Attribute::NoAlias);
      // Drivers bind whole allocations (hipMalloc and cuMemAlloc align to 256 bytes).
      fn_->addParamAttr(unsigned(i), llvm::Attribute::getWithAlignment(c_, llvm::Align(16)));
    }
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    markKernel();
    llvm::BasicBlock* entryBlock = llvm::BasicBlock::Create(c_, "entry", fn_);
    b_.SetInsertPoint(entryBlock);
    KILN_CHECK(bindArguments());
    KILN_CHECK(allocateMemory(out));
    for (const Op* op : prologue_) KILN_CHECK(emitOp(*op));
    linearThread_ = linearThreadId();
    KILN_CHECK(zeroShared());
    for (const Node& n : body_) KILN_CHECK(emitNode(n));
    b_.CreateRetVoid();
    walkOps(k_, [&](const Op& op) {
      size_t at = op.kind() == OpKind::Store || op.kind() == OpKind::VectorStore ? 1
                  : op.kind() == OpKind::MaskedStore                             ? 2
                                                                                 : 0;
      if (!at) return;
      for (size_t i = 0; i < k_.numArgs(); ++i)
        if (op.operand(at) == k_.arg(i)) written_.insert(i);
    });
    for (size_t i = 0; i < k_.numArgs(); ++i) out.written.push_back(written_.count(i) > 0);
    return out;
  }

private:
  bool amd() const { return o_.arch == GpuArch::Amdgpu; }

  std::string backendName() const override {
    return amd() ? "the AMDGPU backend" : "the NVPTX backend";
  }

  void markKernel() {
    std::string threads = std::to_string(threads_);
    if (amd()) {
      fn_->setCallingConv(llvm::CallingConv::AMDGPU_KERNEL);
      fn_->addFnAttr("amdgpu-flat-work-group-size", "1," + threads);
      fn_->addFnAttr("uniform-work-group-size", "true");
      // The kernel reads no hidden argument (it knows its workgroup size, and grid sizes are
      // not asked for), so the kernarg segment is exactly the ABI's block.
      for (const char* a :
           {"amdgpu-no-implicitarg-ptr", "amdgpu-no-dispatch-ptr", "amdgpu-no-queue-ptr",
            "amdgpu-no-dispatch-id", "amdgpu-no-hostcall-ptr", "amdgpu-no-heap-ptr",
            "amdgpu-no-multigrid-sync-arg", "amdgpu-no-default-queue",
            "amdgpu-no-completion-action", "amdgpu-no-lds-kernel-id"})
        fn_->addFnAttr(a);
      return;
    }
    llvm::NamedMDNode* ann = m_.getOrInsertNamedMetadata("nvvm.annotations");
    auto add = [&](const char* key, int64_t v) {
      ann->addOperand(llvm::MDNode::get(
          c_, {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(c_, key),
               llvm::ValueAsMetadata::get(b_.getInt32(static_cast<uint32_t>(v)))}));
    };
    add("kernel", 1);
    add("reqntidx", workgroup_[0]);
    add("reqntidy", workgroup_[1]);
    add("reqntidz", workgroup_[2]);
  }

  llvm::Value* dynamicExtent(size_t, int64_t, int64_t flat) override {
    return b_.CreateTrunc(fn_->getArg(extentBase_ + unsigned(flat)), indexTy(), "extent");
  }

  // Whether 32-bit index arithmetic is exact in this kernel: value bounds (workgroup ids
  // below the grid the kernel_config's operands give) put every index value, and every
  // buffer's element count (the largest linear offset), within int32.
  bool indicesFitInt32() {
    constexpr int64_t kMax = INT32_MAX;
    for (size_t i = 0; i < 3 && i < config_->numOperands(); ++i) {
      Range r = bounds_.of(config_->operand(i));
      if (!r.known() || r.hi > kMax) return false;
    }
    for (size_t i = 0; i < k_.numArgs(); ++i) {
      const Type& t = k_.arg(i)->type();
      int64_t elems = 1;
      for (int64_t d = 0; d < t.rank(); ++d) {
        Range r = dimBounds(t.dim(d), syms_);
        if (!r.known() || r.hi < 0 || (r.hi > 0 && elems > kMax / r.hi)) return false;
        elems *= std::max<int64_t>(r.hi, 1);
      }
    }
    bool fits = true;
    auto check = [&](const Value* v) {
      if (!v->type().isIndex()) return;
      Range r = bounds_.of(v);
      fits = fits && r.known() && r.lo >= -kMax && r.hi <= kMax;
    };
    walkOps(k_, [&](const Op& op) {
      for (size_t r = 0; r < op.numResults(); ++r) check(op.result(r));
      for (size_t g = 0; g < op.numRegions(); ++g)
        for (size_t a = 0; a < op.region(g)->numArgs(); ++a) check(op.region(g)->arg(a));
    });
    return fits;
  }

  llvm::BasicBlock* failBlock(KilnCpuStatus status) override {
    auto& blk = fail_[status];
    if (!blk) {
      llvm::IRBuilderBase::InsertPointGuard g(b_);
      blk = llvm::BasicBlock::Create(c_, "fail", fn_);
      b_.SetInsertPoint(blk);
      b_.CreateAlignedStore(b_.getInt32(static_cast<uint32_t>(status)), status_, llvm::Align(4),
                            /*isVolatile=*/true);
      b_.CreateRetVoid();
    }
    return blk;
  }

  // ---- ids, barriers, subgroups ------------------------------------------------------------

  llvm::Value* idIntrinsic(bool workgroup, int axis) {
    using namespace llvm::Intrinsic;
    static const ID amdWg[] = {amdgcn_workgroup_id_x, amdgcn_workgroup_id_y, amdgcn_workgroup_id_z};
    static const ID amdLid[] = {amdgcn_workitem_id_x, amdgcn_workitem_id_y, amdgcn_workitem_id_z};
    static const ID nvWg[] = {nvvm_read_ptx_sreg_ctaid_x, nvvm_read_ptx_sreg_ctaid_y,
                              nvvm_read_ptx_sreg_ctaid_z};
    static const ID nvLid[] = {nvvm_read_ptx_sreg_tid_x, nvvm_read_ptx_sreg_tid_y,
                               nvvm_read_ptx_sreg_tid_z};
    if (!workgroup && workgroup_[axis] == 1) return idx(0);
    ID id = amd() ? (workgroup ? amdWg : amdLid)[axis] : (workgroup ? nvWg : nvLid)[axis];
    return b_.CreateZExt(b_.CreateIntrinsic(id, {}, {}), indexTy(), workgroup ? "wg" : "lid");
  }

  // x fastest, then y, then z (the kernel IR's order of a workgroup's threads).
  llvm::Value* linearThreadId() {
    llvm::Value* x = idIntrinsic(false, 0);
    llvm::Value* y = idIntrinsic(false, 1);
    llvm::Value* z = idIntrinsic(false, 2);
    llvm::Value* wx = idx(workgroup_[0]);
    llvm::Value* wy = idx(workgroup_[1]);
    return b_.CreateAdd(x, b_.CreateMul(wx, b_.CreateAdd(y, b_.CreateMul(wy, z), "", true, true)),
                        "tid", true, true);
  }

  void barrier() {
    if (!amd()) {
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
      return;
    }
    llvm::SyncScope::ID wg = c_.getOrInsertSyncScopeID("workgroup");
    b_.CreateFence(llvm::AtomicOrdering::Release, wg);
    b_.CreateIntrinsic(llvm::Intrinsic::amdgcn_s_barrier, {}, {});
    b_.CreateFence(llvm::AtomicOrdering::Acquire, wg);
  }

  // The value of `v` (an i32) in hardware lane `src` of this wave or warp.
  llvm::Value* shuffle32(llvm::Value* v, llvm::Value* src) {
    llvm::Value* src32 = b_.CreateZExtOrTrunc(src, b_.getInt32Ty());
    if (amd())
      return b_.CreateIntrinsic(llvm::Intrinsic::amdgcn_ds_bpermute, {},
                                {b_.CreateShl(src32, 2), v});
    // Every thread of a warp takes part when the workgroup is whole warps; otherwise the
    // last warp's threads are the active ones.
    llvm::Value* mask = threads_ % 32 == 0
                            ? static_cast<llvm::Value*>(b_.getInt32(0xffffffffu))
                            : b_.CreateIntrinsic(llvm::Intrinsic::nvvm_activemask, {}, {});
    return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_idx_i32, {},
                              {mask, v, src32, b_.getInt32(31)});
  }

  // Any scalar: through one or two i32 shuffles.
  llvm::Value* shuffle(llvm::Value* v, llvm::Value* src) {
    llvm::Type* t = v->getType();
    unsigned bits = t->getPrimitiveSizeInBits();
    llvm::Type* it = b_.getIntNTy(bits);
    llvm::Value* x = t->isIntegerTy() ? v : b_.CreateBitCast(v, it);
    llvm::Value* r;
    if (bits <= 32) {
      r = b_.CreateTrunc(shuffle32(b_.CreateZExt(x, b_.getInt32Ty()), src), it);
    } else {
      llvm::Value* lo = shuffle32(b_.CreateTrunc(x, b_.getInt32Ty()), src);
      llvm::Value* hi = shuffle32(b_.CreateTrunc(b_.CreateLShr(x, 32), b_.getInt32Ty()), src);
      r = b_.CreateOr(b_.CreateZExt(lo, it), b_.CreateShl(b_.CreateZExt(hi, it), 32));
    }
    return t->isIntegerTy() ? r : b_.CreateBitCast(r, t);
  }

  llvm::Value* hardwareLane() { return b_.CreateURem(linearThread_, idx(o_.waveSize)); }

  // Two lanes' values combined as subgroup_reduce's `fn` does (index values are i64).
  Result<llvm::Value*> combine(const Op& op, const Type& t, llvm::Value* a, llvm::Value* x) {
    OpKind fn = op.attrs().getOp("fn").value_or(OpKind::Add);
    bool fp = !t.isIndex() && isFloat(t.elem());
    bool u = !t.isIndex() && (isUnsignedInt(t.elem()) || isBool(t.elem()));
    using llvm::Intrinsic::ID;
    switch (fn) {
    case OpKind::Add: return fp ? b_.CreateFAdd(a, x) : b_.CreateAdd(a, x);
    case OpKind::Mul: return fp ? b_.CreateFMul(a, x) : b_.CreateMul(a, x);
    case OpKind::Max:
    case OpKind::Min: {
      bool max = fn == OpKind::Max;
      ID id = fp  ? (max ? llvm::Intrinsic::maxnum : llvm::Intrinsic::minnum)
              : u ? (max ? llvm::Intrinsic::umax : llvm::Intrinsic::umin)
                  : (max ? llvm::Intrinsic::smax : llvm::Intrinsic::smin);
      return b_.CreateBinaryIntrinsic(id, a, x);
    }
    case OpKind::And:
      if (!fp) return b_.CreateAnd(a, x);
      break;
    case OpKind::Or:
      if (!fp) return b_.CreateOr(a, x);
      break;
    case OpKind::Xor:
      if (!fp) return b_.CreateXor(a, x);
      break;
    default: break;
    }
    return error(op.loc(), backendName() + " has no subgroup_reduce combining with '" +
                               std::string(opInfo(fn).name) + "'");
  }

  Status emitTargetOp(const Op& op) override {
    const Value* res = op.numResults() ? op.result(0) : nullptr;
    auto in = [&](size_t i) { return get(op.operand(i)); };
    switch (op.kind()) {
    case OpKind::Barrier: barrier(); return ok();
    case OpKind::Prefetch: return ok(); // a cpu cache hint
    case OpKind::WorkgroupId:
    case OpKind::LocalId: {
      int64_t axis = op.attrs().getInt("axis");
      if (axis < 0 || axis > 2) return error(op.loc(), "axis must be 0, 1 or 2");
      set(res, idIntrinsic(op.kind() == OpKind::WorkgroupId, int(axis)));
      return ok();
    }
    case OpKind::LaneId: set(res, b_.CreateURem(linearThread_, idx(subgroup_))); return ok();
    case OpKind::SubgroupBroadcast:
    case OpKind::SubgroupShuffle:
    case OpKind::SubgroupReduce: {
      if (res->type().isVector())
        return error(op.loc(), backendName() + " exchanges scalars between lanes, not vectors");
      if (subgroup_ == 1) {
        set(res, in(0));
        return ok();
      }
      llvm::Value* lane = hardwareLane();
      if (op.kind() != OpKind::SubgroupReduce) {
        // Lane `in(1)` of this thread's subgroup.
        llvm::Value* base = b_.CreateSub(lane, b_.CreateURem(lane, idx(subgroup_)));
        set(res, shuffle(in(0), b_.CreateAdd(base, in(1))));
        return ok();
      }
      llvm::Value* v = in(0);
      for (int64_t off = subgroup_ / 2; off >= 1; off /= 2) {
        llvm::Value* other = shuffle(v, b_.CreateXor(lane, idx(off)));
        KILN_TRY(v, combine(op, res->type(), v, other));
      }
      set(res, v);
      return ok();
    }
    case OpKind::SymbolValue: {
      std::string name = op.attrs().getStr("name");
      for (size_t k = 0; k < symbols_.size(); ++k)
        if (symbols_[k] == name) {
          set(res, b_.CreateTrunc(fn_->getArg(symbolBase_ + unsigned(k)), indexTy(), name));
          return ok();
        }
      return error(op.loc(), "internal: symbol '" + name + "' is not among kernel @" + k_.name() +
                                 "'s push constants");
    }
    case OpKind::Alloc: {
      const Buf& buf = bufs_.at(res);
      if (!privateBytes_.count(res)) return ok(); // shared: zero-filled at the start
      if (uninitAlloc(op)) return ok();
      b_.CreateMemSet(buf.base, b_.getInt8(0), privateBytes_.at(res),
                      llvm::MaybeAlign(alignOf(buf.elem)));
      return ok();
    }
    default:
      return error(op.loc(), backendName() + " cannot emit '" + std::string(op.name()) +
                                 "' in kernel @" + k_.name());
    }
  }

  // ---- memory ------------------------------------------------------------------------------

  // Shared buffers in address space 3, private ones as entry-block allocas.
  Status allocateMemory(EmittedGpuKernel& out) {
    std::vector<const Op*> allocs;
    walkOps(k_, [&](const Op& op) {
      if (op.kind() == OpKind::Alloc) allocs.push_back(&op);
    });
    uint64_t shared = 0;
    llvm::GlobalVariable* dynamic = nullptr;
    for (const Op* op : allocs) {
      const Type& t = op->result(0)->type();
      std::optional<int64_t> n = t.numElements();
      if (!n) return error(op->loc(), "alloc needs a static shape");
      uint64_t bytes = static_cast<uint64_t>(*n) * elemTypeBytes(t.elem());
      llvm::Type* array = llvm::ArrayType::get(storageType(c_, t.elem()), uint64_t(*n));
      Buf buf;
      buf.elem = t.elem();
      for (int64_t d = 0; d < t.rank(); ++d) {
        buf.extents.push_back(idx(t.dim(d).value()));
        buf.minExtents.push_back(t.dim(d).value());
      }
      if (t.space() == MemSpace::Private) {
        auto* a = b_.CreateAlloca(array, nullptr, "private");
        a->setAlignment(llvm::Align(16));
        buf.base = a;
        privateBytes_[op->result(0)] = bytes;
      } else {
        shared = (shared + 15) / 16 * 16;
        if (amd()) {
          auto* g = new llvm::GlobalVariable(m_, array, false, llvm::GlobalValue::InternalLinkage,
                                             llvm::UndefValue::get(array), "shared", nullptr,
                                             llvm::GlobalValue::NotThreadLocal, kShared);
          g->setAlignment(llvm::Align(16));
          buf.base = g;
        } else {
          if (!dynamic) {
            llvm::Type* none = llvm::ArrayType::get(b_.getInt8Ty(), 0);
            dynamic = new llvm::GlobalVariable(m_, none, false, llvm::GlobalValue::ExternalLinkage,
                                               nullptr, "kiln_dynamic_shared", nullptr,
                                               llvm::GlobalValue::NotThreadLocal, kShared);
            dynamic->setAlignment(llvm::Align(16));
          }
          buf.base = b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), dynamic, shared);
        }
        shared_.push_back({op->result(0), static_cast<uint64_t>(*n)});
        shared += bytes;
      }
      bufs_[op->result(0)] = buf;
    }
    (amd() ? out.staticSharedBytes : out.dynamicSharedBytes) = shared;
    return ok();
  }

  // Shared buffers start zero-filled (as on the sim device): the workgroup's threads stride
  // over them, then meet at a barrier.
  Status zeroShared() {
    if (shared_.empty()) return ok();
    llvm::Value* step = idx(threads_);
    for (const auto& [v, count] : shared_) {
      const Buf& buf = bufs_.at(v);
      llvm::Type* st = storageType(c_, buf.elem);
      KILN_CHECK(loop(linearThread_, idx(int64_t(count)), step, [&](llvm::Value* i) -> Status {
        b_.CreateStore(llvm::Constant::getNullValue(st), b_.CreateInBoundsGEP(st, buf.base, i));
        return ok();
      }));
    }
    barrier();
    return ok();
  }

  GpuEmitOptions o_;
  int64_t subgroup_ = 1;
  std::vector<std::string> symbols_;
  unsigned extentBase_ = 0, symbolBase_ = 0;
  llvm::Value* status_ = nullptr;
  llvm::Value* linearThread_ = nullptr;
  std::vector<std::pair<const Value*, uint64_t>> shared_; // buffer, elements
  std::unordered_map<const Value*, uint64_t> privateBytes_;
  std::set<size_t> written_;
};

} // namespace

Result<EmittedGpuKernel> emitGpuKernel(llvm::Module& m, const Func& kernel, const SymbolTable& syms,
                                       const std::string& entry, const GpuEmitOptions& o) {
  if (o.arch == GpuArch::Amdgpu && !m.getModuleFlag("amdhsa_code_object_version"))
    // Code object v5 (LLVM 19's "5" aborts: the flag's value is the version times 100).
    m.addModuleFlag(llvm::Module::Error, "amdhsa_code_object_version", 500);
  GpuEmitter e(m, kernel, syms, o);
  return e.run(entry);
}

} // namespace kiln::llvmgen
