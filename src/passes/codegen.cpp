// The codegen analyses shared by fuse, collapse-dims, pad, tile and lower (see codegen.h):
// what lower supports, a kernel's shape, the tile-override lookup and the shared-memory
// footprint.
#include "passes/codegen.h"

#include <algorithm>
#include <set>

namespace kiln {

bool CodegenOptions::covers(const Op& op) const {
  if (devices.empty()) return true;
  return op.device() && std::find(devices.begin(), devices.end(), *op.device()) != devices.end();
}

const std::vector<std::string>& codegenOptionKeys() {
  static const std::vector<std::string> keys = {"target", "tile-config"};
  return keys;
}

Result<CodegenOptions> codegenOptionsFrom(const PassOptions& text) {
  CodegenOptions o;
  auto t = text.find("target");
  KILN_TRY(o.target, lookupTarget(t == text.end() ? "cpu" : t->second));
  if (auto c = text.find("tile-config"); c != text.end()) {
    KILN_TRY(o.overrides, readTileConfig(c->second));
  }
  return o;
}

bool lowerSupports(const Op& op) {
  for (size_t i = 0; i < op.numOperands(); ++i)
    if (op.operand(i)->type().hasUnknownDims()) return false;
  if (op.has(kElementwise)) return true;
  switch (op.kind()) {
  case OpKind::Reshape:
  case OpKind::Transpose:
  case OpKind::Broadcast:
  case OpKind::Slice:
  case OpKind::Gather:
  case OpKind::GatherElements:
  case OpKind::Triu:
  case OpKind::Tril:
  case OpKind::ReduceSum:
  case OpKind::ReduceMean:
  case OpKind::ReduceMax:
  case OpKind::ReduceMin:
  case OpKind::ReduceProd:
  case OpKind::Matmul:
  case OpKind::Attention:
  case OpKind::Softmax:
  case OpKind::LogSoftmax:
  case OpKind::Concat:
  case OpKind::Cumsum: return true;
  case OpKind::Conv:
  case OpKind::MaxPool:
  case OpKind::AvgPool: {
    // Windows are lowered with static shapes (the window arithmetic is unrolled per dim).
    for (const Value* v : op.operands())
      if (!v->type().isStatic()) return false;
    int64_t r = op.operand(0)->type().rank();
    return r >= 3 && r <= 5 && op.result(0)->type().isStatic();
  }
  case OpKind::ArgMax:
  case OpKind::ArgMin: {
    // The reference rejects an empty axis; the kernel must never meet one.
    const Type& t = op.operand(0)->type();
    int64_t axis = op.attrs().getInt("axis");
    axis = axis < 0 ? axis + t.rank() : axis;
    if (axis < 0 || axis >= t.rank()) return false;
    const SymbolTable* syms =
        op.parent() && op.parent()->parent() ? &op.parent()->parent()->symbols() : nullptr;
    const Dim& d = t.dim(axis);
    if (d.isStatic()) return d.value() >= 1;
    return syms && bounds(d.expr(), *syms).lo >= 1;
  }
  case OpKind::Pad: {
    std::string mode = op.attrs().getStr("mode", "constant");
    if (mode == "reflect") // the mirror period needs static dims
      return op.operand(0)->type().isStatic();
    return mode == "constant" || mode == "edge";
  }
  default: return false;
  }
}

Func* dispatchKernel(const Module& m, const Op& dispatch) {
  return m.lookupFunc(dispatch.attrs().getStr("kernel"));
}

bool epilogueIsPointwise(const std::vector<const Op*>& ops, const Op* anchor, const Shape& out) {
  std::set<const Value*> dep{anchor->result(0)};
  for (const Op* op : ops) {
    if (op == anchor || op->has(kTerminator)) continue;
    bool uses = false;
    for (const Value* v : op->operands()) uses |= dep.count(v) > 0;
    if (!uses) continue;
    if (!op->has(kElementwise) || op->result(0)->type().shape() != out) return false;
    for (const Value* v : op->operands())
      if (dep.count(v) && v->type().shape() != out) return false;
    dep.insert(op->result(0));
  }
  return true;
}

KernelShape analyzeKernel(const Func& k) {
  KernelShape s;
  const Op* ret = k.terminator();
  if (!ret || ret->numOperands() == 0 || isLoweredKernel(k)) return s;
  for (const auto& op : k.ops())
    if (!op->has(kTerminator) && !lowerSupports(*op)) return s;
  s.outShape = ret->operand(0)->type().shape();
  for (const Value* v : ret->operands())
    if (v->type().shape() != s.outShape || v->type().hasUnknownDims()) return s;
  for (const auto& op : k.ops())
    if (op->kind() == OpKind::Attention) {
      // Its operands' producers fold into its loads; nothing may follow it.
      if (ret->numOperands() != 1 || ret->operand(0) != op->result(0)) return s;
      s.strategy = Strategy::Attention;
      s.anchor = op.get();
      s.aElem = s.bElem = op->operand(0)->type().elem();
      return s;
    }
  s.strategy = Strategy::Pointwise;
  for (const auto& op : k.ops()) {
    bool red = op->has(kReduction) || op->kind() == OpKind::Softmax ||
               op->kind() == OpKind::LogSoftmax || op->kind() == OpKind::Cumsum;
    if (!red || op->numOperands() == 0) continue;
    s.reduces = true;
    // The reduced extent: the input's elements per output element.
    auto count = [](const Type& t) {
      int64_t n = 1;
      for (const Dim& d : t.shape())
        n = std::min<int64_t>(n * (d.isStatic() ? d.value() : 1024), 1 << 30);
      return n;
    };
    const Type& in = op->operand(0)->type();
    const Type& out = op->result(0)->type();
    int64_t ext = in.shape() == out.shape() ? 1 : count(in) / std::max<int64_t>(1, count(out));
    if (op->kind() == OpKind::Softmax || op->kind() == OpKind::LogSoftmax ||
        op->kind() == OpKind::Cumsum) {
      int64_t axis = op->attrs().getInt("axis");
      axis = axis < 0 ? axis + in.rank() : axis;
      if (axis >= 0 && axis < in.rank()) {
        const Dim& d = in.dim(axis);
        ext = d.isStatic() ? d.value() : 1024;
      }
    }
    s.reduceExtent = std::max(s.reduceExtent, ext);
  }
  for (const auto& op : k.ops()) {
    if (op->kind() != OpKind::Matmul) continue;
    const Type& a = op->operand(0)->type();
    const Type& b = op->operand(1)->type();
    if (a.rank() < 2 || b.rank() < 2 || op->result(0)->type().shape() != s.outShape) continue;
    std::vector<const Op*> ops;
    for (const auto& o : k.ops()) ops.push_back(o.get());
    if (!epilogueIsPointwise(ops, op.get(), s.outShape)) continue;
    s.strategy = Strategy::Matmul;
    s.anchor = op.get();
    s.aElem = a.elem();
    s.bElem = b.elem();
    break;
  }
  if (s.strategy == Strategy::Pointwise && s.reduces) analyzeRowReductions(k, s);
  return s;
}

std::optional<std::string> sharedMemoryProblem(const std::string& tile,
                                               const std::vector<SharedBuffer>& buffers,
                                               const TargetDesc& t) {
  uint64_t bytes = sharedFootprint(buffers);
  if (bytes <= t.sharedMemoryBytes) return std::nullopt;
  return "tile " + tile + " needs " + std::to_string(bytes) + " bytes of shared memory; " + t.name +
         " has " + std::to_string(t.sharedMemoryBytes);
}

uint64_t sharedFootprint(const std::vector<SharedBuffer>& buffers) {
  uint64_t total = 0;
  for (const SharedBuffer& b : buffers) {
    uint64_t bytes = static_cast<uint64_t>(elemTypeBytes(b.elem));
    for (int64_t d : b.dims)
      if (d < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
        return UINT64_MAX;
    if (__builtin_add_overflow(total, bytes, &total)) return UINT64_MAX;
  }
  return total;
}

std::vector<SharedBuffer> sharedBuffersOf(const Func& k) {
  std::vector<SharedBuffer> out;
  walkOps(k, [&](const Op& op) {
    if (op.kind() != OpKind::Alloc) return;
    const Type& t = op.result(0)->type();
    if (t.space() == MemSpace::Shared && t.isStatic()) out.push_back({t.elem(), t.staticShape()});
  });
  return out;
}

} // namespace kiln

namespace kiln {

std::string kernelReport(const Module& m, const TargetDesc& t) {
  auto list = [](const std::vector<int64_t>& v) {
    std::string r = "[";
    for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
    return r + "]";
  };
  std::string out = "target " + t.name + ": shared memory " + std::to_string(t.sharedMemoryBytes) +
                    " bytes, " + std::to_string(t.maxWorkgroupInvocations) +
                    " threads per workgroup\n";
  int lowered = 0, host = 0, fits = 0;
  std::set<const Func*> seen;
  for (const auto& f : m.funcs())
    for (const auto& op : f->ops()) {
      if (op->kind() != OpKind::Dispatch) continue;
      Func* k = dispatchKernel(m, *op);
      if (!k || !seen.insert(k).second) continue;
      if (!isLoweredKernel(*k)) {
        std::string ops;
        for (const auto& o : k->ops())
          if (!o->has(kTerminator)) ops += (ops.empty() ? "" : ", ") + std::string(o->name());
        out += "kernel @" + k->name() + ": not lowered, runs on the host side (" + ops + ")\n";
        ++host;
        continue;
      }
      ++lowered;
      std::vector<int64_t> wg{1, 1, 1};
      for (const auto& o : k->ops())
        if (o->kind() == OpKind::KernelConfig) wg = o->attrs().getInts("workgroup");
      uint64_t bytes = sharedFootprint(sharedBuffersOf(*k));
      bool ok = bytes <= t.sharedMemoryBytes;
      fits += ok;
      out += "kernel @" + k->name() + ": workgroup " + list(wg) + ", tile " +
             list(op->attrs().getInts("tile")) +
             (op->attrs().getInt("guarded", 1) ? ", guarded" : ", exact") + ", shared " +
             std::to_string(bytes) + " / " + std::to_string(t.sharedMemoryBytes) + " bytes" +
             (ok ? "" : "  OVER LIMIT") + "\n";
    }
  out += std::to_string(lowered) + " kernels lowered (" + std::to_string(fits) +
         " within the shared-memory limit), " + std::to_string(host) + " on the host side\n";
  return out;
}

} // namespace kiln
