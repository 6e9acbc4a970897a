// The kernel emitter's state, shared by its two halves: emit_kernel.cpp (structure: entry
// point, buffers, push constants, loops, ifs, memory, subgroups) and emit_scalar.cpp (the
// arithmetic of `compute`, `icast` and index ops, with the interpreter's semantics).
//
// Values: an index is a 32-bit integer when value bounds prove that every index of the
// kernel fits (most kernels), else 64-bit; f16 and bf16 scalars are f32 (rounded to their
// precision after each exact op, as the cpu backend does); i1 is bool; other integers keep
// their width. Storage buffers hold each element type's storage form (f16 as half, bf16 as
// 16-bit integers, i1 as bytes); shared and private buffers hold the value form.
#pragma once

#include <climits>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "analysis/value_bounds.h"
#include "backends/spirv/module_builder.h"
#include "backends/spirv/spirv_backend.h"
#include "ir/core/ir.h"

namespace kiln::spirv {

inline bool fitsI32(const Range& r) { return r.known() && r.lo >= INT32_MIN && r.hi <= INT32_MAX; }

// A buffer as the code sees it.
struct Buf {
  Id var = 0; // the variable
  spv::StorageClass sc = spv::StorageClass::StorageBuffer;
  ElemType elem = ElemType::F32;
  Id elemType = 0;                 // the type of one element in memory
  std::vector<Id> extents;         // index-typed
  std::vector<int64_t> minExtents; // the smallest value each extent can take
  uint64_t count = 0;              // elements (shared and private buffers)
  // A shared f32 buffer whose rows are multiples of 4 elements is an array of vec4 (`var`'s
  // elements are vectors, an element access chains into one): aligned vector_load and
  // vector_store of 4 lanes are then one vec4 access.
  bool vec4 = false;
};

class KernelEmitter {
public:
  KernelEmitter(const Func& k, const SymbolTable& syms, const SpirvTarget& target);
  Result<vulkan::VulkanKernelInfo> run();

private:
  // ---- emit_kernel.cpp -------------------------------------------------------------------
  Status checkKernel();
  void chooseIndexWidth();
  void declareInterface();
  Status declareBuffers();
  Status emitBlock(const Block& block);
  Status emitOp(const Op& op);
  Status emitFor(const Op& op);
  Status emitIf(const Op& op);
  Status emitAccess(const Op& op);
  Status emitSubgroup(const Op& op);
  void zeroSharedMemory();
  // for (iv = lo; iv < hi; iv += step) with carried values; `body` returns the next ones.
  // `unroll` asks the driver to unroll it completely (OpLoopMerge's Unroll control).
  using LoopBody = std::function<Result<std::vector<Id>>(Id iv, const std::vector<Id>&)>;
  Result<std::vector<Id>> loop(Id lo, Id hi, Id step, bool stepPositive,
                               const std::vector<std::pair<Id, Id>>& inits, const LoopBody& body,
                               bool unroll = false);
  // if (cond) then(); the values `then` returns, or `otherwise` when it does not run.
  Result<std::vector<Id>> guarded(Id cond, const std::vector<std::pair<Id, Id>>& otherwise,
                                  const std::function<Result<std::vector<Id>>()>& then);
  Result<Id> address(const Op& op, const Buf& buf, size_t first, size_t count);
  Id inRange(const Op& op, const Buf& buf, size_t first, size_t count, int64_t lanes);
  void label(Id l);
  Id get(const Value* v) const { return vals_.at(v); }
  Id builtin(spv::BuiltIn which, Id type);
  Id symbolValue(const std::string& name);

  // ---- emit_scalar.cpp -------------------------------------------------------------------
  Id valueType(const Type& t);
  Id scalarType(ElemType e);
  Id storageType(ElemType e);
  Id internalType(ElemType e);
  Id fromStorage(ElemType e, Id raw);
  Id toStorage(ElemType e, Id v);
  Id roundTo(ElemType e, Id f32Value);
  Id scalarConstant(ElemType e, double v);
  Id indexConst(int64_t v);
  Id boolToInt(Id b, Id intType);
  // Signed conversions through signed types (module_builder.h says why).
  Id signExtend(Id v, uint32_t fromBits, uint32_t toBits);
  Id signedToFloat(Id v, uint32_t bits, Id floatType);
  Id floatToI64(Id v);
  Result<Id> compute(const Op& op);
  Result<Id> floatCompute(const Op& op, OpKind fn, ElemType e, const std::vector<Id>& a);
  Result<Id> intCompute(const Op& op, OpKind fn, ElemType e, const std::vector<Id>& a);
  Result<Id> convert(ElemType from, ElemType to, Id v);
  Id glsl(uint32_t inst, Id type, const std::vector<Id>& args);
  Id op1(spv::Op op, Id type, Id a) { return b_.codeResult(op, type, {a}); }
  Id op2(spv::Op op, Id type, Id a, Id c) { return b_.codeResult(op, type, {a, c}); }
  Id select(Id type, Id c, Id a, Id d) { return b_.codeResult(spv::Op::OpSelect, type, {c, a, d}); }
  Id ipow(Id x, Id y, Id type, int64_t bits);
  Id divide(Id x, Id y, Id type);
  Id erf(Id x, Id type);
  Id asinAcos(Id x, bool acos);
  Id tanhSafe(Id x, Id type);
  Id sigmoid(Id x, Id type);
  Status indexArith(const Op& op);
  Id divMod(OpKind kind, Id a, Id d, Id t, bool unsignedForm);
  Result<Id> indexCast(const Op& op);
  Id symExprValue(const SymExpr& e);

  const Func& k_;
  const SymbolTable& syms_;
  const SpirvTarget& target_;
  ValueBounds bounds_;
  SpirvBuilder b_;
  Id idx_ = 0; // the index type
  uint32_t idxBits_ = 32;
  Id bool_ = 0, u32_ = 0, f32_ = 0, void_ = 0;
  Id main_ = 0;
  Id cur_ = 0; // the block being written
  const Op* config_ = nullptr;
  std::array<int64_t, 3> workgroup_ = {1, 1, 1};
  int64_t subgroup_ = 0;
  std::unordered_map<const Value*, Id> vals_;
  std::unordered_map<const Value*, Buf> bufs_;
  std::unordered_set<const Value*> dataIndices_;
  std::unordered_set<const Value*> written_;
  std::vector<std::string> push_; // the push constants, in the launch's order
  Id pushVar_ = 0, pushStruct_ = 0;
  std::unordered_map<std::string, Id> symbols_;
  std::unordered_map<uint32_t, Id> builtins_; // BuiltIn -> its Input variable
  Id localId_[3] = {0, 0, 0}, workgroupId_[3] = {0, 0, 0};
  std::vector<Id> interface_;
  std::vector<const Op*> shared_;
  uint64_t sharedBytes_ = 0;
  Id localLinear_ = 0;
};

} // namespace kiln::spirv
