// The reference interpreter's driver: binds symbols from input shapes, evaluates a
// function's ops in order through the kernel table, and checks every result against its
// declared type. Also the helpers every kernel shares.
#include "ir/interp/interp.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "ir/interp/kernels.h"

namespace kiln {
namespace interp {

Diag opError(const KernelCtx& c, const std::string& message) {
  return error(c.op.loc(), std::string(c.op.name()) + ": " + message);
}

std::string shapeStr(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Result<HostTensor> newTensor(const KernelCtx& c, ElemType elem, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return opError(c, "result shape " + shapeStr(shape) + " has a negative dim");
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxElements)
      return opError(c, "result shape " + shapeStr(shape) + " has more than 2^31 elements");
  }
  return HostTensor(elem, shape);
}

Result<int64_t> normAxis(const KernelCtx& c, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return opError(c, "axis " + std::to_string(axis) + " is out of range for rank " +
                          std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

Result<std::vector<std::optional<int64_t>>> declaredDims(const KernelCtx& c, size_t i) {
  std::vector<std::optional<int64_t>> out;
  if (i >= c.op.numResults()) return opError(c, "missing result " + std::to_string(i));
  for (const Dim& d : c.op.result(i)->type().shape()) {
    if (d.isUnknown()) {
      out.push_back(std::nullopt);
      continue;
    }
    std::optional<int64_t> v = d.expr().evaluate(c.binding);
    if (!v) return opError(c, "dim " + d.str() + " of the result type cannot be evaluated");
    if (*v < 0)
      return opError(c,
                     "dim " + d.str() + " of the result type evaluates to " + std::to_string(*v));
    out.push_back(*v);
  }
  return out;
}

Result<std::vector<int64_t>> declaredShape(const KernelCtx& c, size_t i) {
  KILN_TRY(auto dims, declaredDims(c, i));
  std::vector<int64_t> out;
  for (const auto& d : dims) {
    if (!d) return opError(c, "the result type has a `?` dim that the interpreter cannot infer");
    out.push_back(*d);
  }
  return out;
}

Result<std::vector<int64_t>> broadcastShapes(const KernelCtx& c,
                                             const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      int64_t d = s[i];
      if (d == o || d == 1) continue;
      if (o != 1) {
        std::string all;
        for (const auto& t : shapes) all += (all.empty() ? "" : " and ") + shapeStr(t);
        return opError(c, "shapes " + all + " do not broadcast");
      }
      o = d;
    }
  }
  return out;
}

std::vector<int64_t> broadcastStrides(const std::vector<int64_t>& in,
                                      const std::vector<int64_t>& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t stride = 1;
  for (size_t i = in.size(); i-- > 0;) {
    size_t o = out.size() - in.size() + i;
    strides[o] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
  return strides;
}

void unravel(int64_t flat, const std::vector<int64_t>& shape, std::vector<int64_t>& idx) {
  idx.resize(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    idx[i] = shape[i] ? flat % shape[i] : 0;
    flat = shape[i] ? flat / shape[i] : 0;
  }
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Status expectSameElem(const KernelCtx& c) {
  for (size_t i = 1; i < c.in.size(); ++i)
    if (c.in[i].elem() != c.in[0].elem())
      return opError(c, "operand " + std::to_string(i) + " has element type " +
                            std::string(elemTypeName(c.in[i].elem())) + ", operand 0 has " +
                            std::string(elemTypeName(c.in[0].elem())));
  return ok();
}

double fmaxNan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

double fminNan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

int64_t intLowest(ElemType t) {
  switch (t) {
  case ElemType::I8: return INT8_MIN;
  case ElemType::I16: return INT16_MIN;
  case ElemType::I32: return INT32_MIN;
  case ElemType::I64: return INT64_MIN;
  default: return 0; // unsigned and i1
  }
}

int64_t intHighest(ElemType t) {
  switch (t) {
  case ElemType::I8: return INT8_MAX;
  case ElemType::I16: return INT16_MAX;
  case ElemType::I32: return INT32_MAX;
  case ElemType::I64: return INT64_MAX;
  case ElemType::U8: return UINT8_MAX;
  case ElemType::U16: return UINT16_MAX;
  case ElemType::U32: return UINT32_MAX;
  case ElemType::U64: return -1; // the bits of UINT64_MAX
  default: return 1;             // i1
  }
}

// One kernel per op, in OpKind order: the table is generated from ops.def, so its size
// always matches and an op whose kernel is missing fails to link.
constexpr Kernel kKernels[] = {
#define KILN_OP(id, ...) &kernel##id,
#include "ir/core/ops.def"
#undef KILN_OP
};

// Operand element classes that the op's traits demand.
static Status checkOperandClasses(const KernelCtx& c) {
  const OpInfo& info = c.op.info();
  for (size_t i = 0; i < c.in.size(); ++i) {
    ElemType e = c.in[i].elem();
    const char* want = nullptr;
    if (info.has(kFloatOnly) && !isFloat(e)) want = "a floating-point";
    if (info.has(kNumeric) && isBool(e)) want = "a numeric (non-i1)";
    if (info.has(kBoolOnly) && !isBool(e)) want = "an i1";
    if (want)
      return opError(c, "operand " + std::to_string(i) + " must have " + want +
                            " element type, got " + std::string(elemTypeName(e)));
  }
  return ok();
}

// Results must match the op's declared types: element type, rank, and every known dim
// under the binding. A mismatch means the IR lied about a type, an internal error.
static Status checkResults(const KernelCtx& c, const std::vector<HostTensor>& results) {
  if (results.size() != c.op.numResults())
    return opError(c, "internal: produced " + std::to_string(results.size()) +
                          " results, the op declares " + std::to_string(c.op.numResults()));
  for (size_t i = 0; i < results.size(); ++i) {
    const Type& t = c.op.result(i)->type();
    KILN_TRY(auto dims, declaredDims(c, i));
    bool same = results[i].elem() == t.elem() && dims.size() == results[i].shape().size();
    for (size_t d = 0; same && d < dims.size(); ++d)
      same = !dims[d] || *dims[d] == results[i].shape()[d];
    if (!same)
      return opError(c, "internal: result " + std::to_string(i) + " is " +
                            shapeStr(results[i].shape()) + " of " +
                            std::string(elemTypeName(results[i].elem())) + " but its type is " +
                            t.str());
  }
  return ok();
}

// An op that binds data-dependent symbols (kDataShaped) binds each bare symbol of its result
// types that is not bound yet to the dim it produced; one already bound must agree.
static Status bindDataSymbols(const KernelCtx& c, const std::vector<HostTensor>& results,
                              SymbolBinding& binding) {
  for (size_t i = 0; i < results.size() && i < c.op.numResults(); ++i) {
    const Type& t = c.op.result(i)->type();
    if (static_cast<size_t>(t.rank()) != results[i].shape().size()) continue; // checkResults says
    for (size_t d = 0; d < results[i].shape().size(); ++d) {
      const Dim& dim = t.dim(static_cast<int64_t>(d));
      std::optional<std::string> sym = dim.isUnknown() ? std::nullopt : dim.expr().symbolName();
      if (!sym) continue;
      int64_t v = results[i].shape()[d];
      const Func* f = c.op.parent();
      const SymbolInfo* info = f && f->parent() ? f->parent()->symbols().lookup(*sym) : nullptr;
      if (info && (v < info->lo || v > info->hi))
        return opError(c, "the data-dependent dim '" + *sym + "' is " + std::to_string(v) +
                              " at run time, outside its range [" + std::to_string(info->lo) +
                              ", " + std::to_string(info->hi) + "]");
      auto [it, inserted] = binding.emplace(*sym, v);
      if (!inserted && it->second != v)
        return opError(c, "result " + std::to_string(i) + " binds symbol '" + *sym + "' to " +
                              std::to_string(v) + ", but it is bound to " +
                              std::to_string(it->second));
    }
  }
  return ok();
}

static KernelResult runOp(const KernelCtx& c, SymbolBinding* bindOut) {
  const OpInfo& info = c.op.info();
  auto n = static_cast<int>(c.in.size());
  if (n < info.minOperands || (info.maxOperands >= 0 && n > info.maxOperands))
    return opError(c, "got " + std::to_string(n) + " operands");
  // Kernels loop over products of operand dims, also around empty dims; bounding the
  // product of the nonzero dims keeps every such loop and index finite and exact.
  for (size_t i = 0; i < c.in.size(); ++i) {
    int64_t count = 1;
    for (int64_t d : c.in[i].shape()) {
      if (d < 0) return opError(c, "operand " + std::to_string(i) + " has a negative dim");
      if (d > 0 && (__builtin_mul_overflow(count, d, &count) || count > kMaxElements))
        return opError(c, "operand " + std::to_string(i) + " of shape " +
                              shapeStr(c.in[i].shape()) + " is too large to interpret");
    }
    if (!c.in[i].data() && c.in[i].numElements() > 0)
      return opError(c, "operand " + std::to_string(i) + " has no data");
  }
  KILN_CHECK(checkOperandClasses(c));
  KILN_TRY(auto results, kKernels[static_cast<size_t>(c.op.kind())](c));
  // A dispatch binds what the data-shaped ops of its kernel bind.
  if (info.has(kDataShaped) || c.op.kind() == OpKind::Dispatch) {
    SymbolBinding local;
    SymbolBinding& binding = bindOut ? *bindOut : (local = c.binding);
    KILN_CHECK(bindDataSymbols(c, results, binding));
    KILN_CHECK(checkResults(KernelCtx{c.op, c.in, binding, c.weights}, results));
    return results;
  }
  KILN_CHECK(checkResults(c, results));
  return results;
}

} // namespace interp

using interp::KernelCtx;
using interp::shapeStr;

Status bindArguments(const Func& f, const std::vector<HostTensor>& inputs, SymbolBinding& binding) {
  if (inputs.size() != f.numArgs())
    return error(f.loc(), "@" + f.name() + " takes " + std::to_string(f.numArgs()) +
                              " inputs, got " + std::to_string(inputs.size()));
  const SymbolTable* syms = f.parent() ? &f.parent()->symbols() : nullptr;
  auto argName = [&](size_t i) {
    std::string s = "input " + std::to_string(i);
    if (!f.arg(i)->name().empty()) s += " (%" + f.arg(i)->name() + ")";
    return s;
  };
  struct Deferred {
    size_t arg, dim;
  };
  std::vector<Deferred> deferred;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Type& t = f.arg(i)->type();
    const HostTensor& x = inputs[i];
    if (x.elem() != t.elem())
      return error(f.loc(), argName(i) + " has element type " +
                                std::string(elemTypeName(x.elem())) + ", expected " + t.str());
    if (x.rank() != t.rank())
      return error(f.loc(),
                   argName(i) + " has shape " + shapeStr(x.shape()) + ", expected " + t.str());
    for (size_t d = 0; d < x.shape().size(); ++d) {
      int64_t v = x.shape()[d];
      const Dim& dim = t.dim(static_cast<int64_t>(d));
      if (v < 0) return error(f.loc(), argName(i) + " has a negative dim");
      if (dim.isUnknown()) continue;
      if (dim.isStatic()) {
        if (dim.value() != v)
          return error(f.loc(),
                       argName(i) + " has shape " + shapeStr(x.shape()) + ", expected " + t.str());
        continue;
      }
      std::optional<std::string> sym = dim.expr().symbolName();
      if (!sym) {
        deferred.push_back({i, d});
        continue;
      }
      auto [it, inserted] = binding.emplace(*sym, v);
      if (!inserted && it->second != v)
        return error(f.loc(), argName(i) + " binds symbol '" + *sym + "' to " + std::to_string(v) +
                                  ", but an earlier input bound it to " +
                                  std::to_string(it->second));
      const SymbolInfo* info = syms ? syms->lookup(*sym) : nullptr;
      if (inserted && info) {
        if (v < info->lo || v > info->hi)
          return error(f.loc(), argName(i) + " binds symbol '" + *sym + "' to " +
                                    std::to_string(v) + ", outside its range [" +
                                    std::to_string(info->lo) + ", " + std::to_string(info->hi) +
                                    "]");
        if (info->divisor > 1 && v % info->divisor != 0)
          return error(f.loc(), argName(i) + " binds symbol '" + *sym + "' to " +
                                    std::to_string(v) + ", which is not divisible by " +
                                    std::to_string(info->divisor) + " (range [" +
                                    std::to_string(info->lo) + ", " + std::to_string(info->hi) +
                                    "] divisible_by " + std::to_string(info->divisor) + ")");
      }
    }
  }
  for (const Deferred& d : deferred) {
    const Dim& dim = f.arg(d.arg)->type().dim(static_cast<int64_t>(d.dim));
    int64_t actual = inputs[d.arg].shape()[d.dim];
    std::optional<int64_t> v = dim.expr().evaluate(binding);
    if (!v)
      return error(f.loc(), argName(d.arg) + ": dim " + dim.str() +
                                " cannot be evaluated from the symbols the inputs bind");
    if (*v != actual)
      return error(f.loc(), argName(d.arg) + " has shape " + shapeStr(inputs[d.arg].shape()) +
                                ", but dim " + dim.str() + " evaluates to " + std::to_string(*v));
  }
  return ok();
}

Result<std::vector<HostTensor>> interpret(const Func& f, const std::vector<HostTensor>& inputs,
                                          WeightStore& weights) {
  return interpretBound(f, inputs, weights, SymbolBinding{});
}

Result<std::vector<HostTensor>> interpretBound(const Func& f, const std::vector<HostTensor>& inputs,
                                               WeightStore& weights, SymbolBinding binding) {
  KILN_CHECK(bindArguments(f, inputs, binding));
  std::unordered_map<const Value*, HostTensor> env;
  for (size_t i = 0; i < inputs.size(); ++i) env.emplace(f.arg(i), inputs[i]);
  for (const auto& opPtr : f.ops()) {
    const Op& op = *opPtr;
    std::vector<HostTensor> operands;
    operands.reserve(op.numOperands());
    for (size_t i = 0; i < op.numOperands(); ++i) {
      auto it = env.find(op.operand(i));
      if (it == env.end())
        return error(op.loc(), std::string(op.name()) + ": internal: operand " + std::to_string(i) +
                                   " is used before it is defined");
      operands.push_back(it->second);
    }
    if (op.kind() == OpKind::Return) return operands;
    KernelCtx c{op, operands, binding, &weights};
    KILN_TRY(auto results, interp::runOp(c, &binding));
    for (size_t i = 0; i < results.size(); ++i) env[op.result(i)] = std::move(results[i]);
  }
  return error(f.loc(), "@" + f.name() + " has no return");
}

Result<std::vector<HostTensor>> evalOp(const Op& op, const std::vector<HostTensor>& operands,
                                       const SymbolBinding& binding, WeightStore* weights) {
  KernelCtx c{op, operands, binding, weights};
  return interp::runOp(c, nullptr);
}

Status bindResultSymbols(const Op& op, const std::vector<HostTensor>& operands,
                         const std::vector<HostTensor>& results, SymbolBinding& binding) {
  KernelCtx c{op, operands, binding, nullptr};
  return interp::bindDataSymbols(c, results, binding);
}

Result<std::vector<HostTensor>> evalOpBinding(const Op& op, const std::vector<HostTensor>& operands,
                                              SymbolBinding& binding, WeightStore* weights) {
  KernelCtx c{op, operands, binding, weights};
  return interp::runOp(c, &binding);
}

} // namespace kiln
