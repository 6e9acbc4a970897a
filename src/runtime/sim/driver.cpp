// The sim test driver: a tensor-level caller interpreted op by op, its lowered dispatches
// sent to the simulator. This is how `lower` is proven against the reference interpreter
// until the runtime's executor drives the sim device.
#include <unordered_map>

#include "runtime/sim/sim.h"

namespace kiln::sim {

namespace detail {
SimStats& stats();
}

namespace {

// Binds every symbol that appears alone as an argument dim from the inputs' shapes.
Result<SymbolBinding> bindSymbols(const Func& f, const std::vector<HostTensor>& inputs) {
  if (inputs.size() != f.numArgs())
    return error(f.loc(), "@" + f.name() + " takes " + std::to_string(f.numArgs()) +
                              " inputs, got " + std::to_string(inputs.size()));
  SymbolBinding b;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Type& t = f.arg(i)->type();
    if (t.rank() != inputs[i].rank())
      return error(f.loc(), "input " + std::to_string(i) + " has the wrong rank for " + t.str());
    for (int64_t d = 0; d < t.rank(); ++d)
      if (!t.dim(d).isUnknown())
        if (auto name = t.dim(d).expr().symbolName())
          b.emplace(*name, inputs[i].shape()[static_cast<size_t>(d)]);
  }
  return b;
}

Result<std::vector<HostTensor>> runDispatch(const Op& op, const Func& kernel,
                                            const std::vector<HostTensor>& in,
                                            const SymbolBinding& dims) {
  std::vector<BufferRef> bindings;
  for (const HostTensor& t : in) bindings.push_back({t});
  std::vector<HostTensor> outs;
  for (size_t r = 0; r < op.numResults(); ++r) {
    const Type& t = op.result(r)->type();
    std::vector<int64_t> shape;
    for (const Dim& d : t.shape()) {
      std::optional<int64_t> v = d.isUnknown() ? std::nullopt : d.expr().evaluate(dims);
      if (!v || *v < 0)
        return error(op.loc(), "dispatch result " + std::to_string(r) + " type " + t.str() +
                                   " has a dim the symbol values do not determine");
      shape.push_back(*v);
    }
    outs.emplace_back(t.elem(), shape);
    bindings.push_back({outs.back()});
  }
  KILN_TRY(Grid g, kernelGrid(kernel, dims));
  KILN_CHECK(runKernel(kernel, bindings, dims, g));
  return outs;
}

// Runs `f`: its dispatches of lowered kernels on the simulator, a `loop` by running its body
// the same way (at most kMaxLoopDepth deep), every other op on the interpreter.
Result<std::vector<HostTensor>> runFunc(const Func& f, const std::vector<HostTensor>& inputs,
                                        WeightStore& weights, int depth) {
  KILN_TRY(SymbolBinding dims, bindSymbols(f, inputs));
  std::unordered_map<const Value*, HostTensor> env;
  for (size_t i = 0; i < inputs.size(); ++i) env.emplace(f.arg(i), inputs[i]);
  const Module* m = f.parent();
  for (const auto& op : f.ops()) {
    std::vector<HostTensor> in;
    for (const Value* v : op->operands()) in.push_back(env.at(v));
    if (op->has(kTerminator)) return in;
    if (op->kind() == OpKind::Loop) {
      const Func* body = m ? m->lookupFunc(op->attrs().getStr("body")) : nullptr;
      if (!body)
        return error(op->loc(),
                     "loop: the body @" + op->attrs().getStr("body") + " is not defined");
      if (depth >= kMaxLoopDepth)
        return error(op->loc(), "loops nest more than " + std::to_string(kMaxLoopDepth) + " deep");
      auto carried = static_cast<size_t>(op->attrs().getInt("carried"));
      std::vector<Type> scanTypes;
      for (size_t r = carried; r < op->numResults(); ++r)
        scanTypes.push_back(op->result(r)->type());
      KILN_TRY(std::vector<HostTensor> outs, runLoopIterations(
                                                 in, carried, scanTypes, dims,
                                                 [&](const std::vector<HostTensor>& args) {
                                                   return runFunc(*body, args, weights, depth + 1);
                                                 },
                                                 op->loc()));
      // The scan outputs' length binds their data-dependent symbol.
      KILN_CHECK(bindResultSymbols(*op, in, outs, dims));
      for (size_t r = 0; r < op->numResults() && r < outs.size(); ++r)
        env.insert_or_assign(op->result(r), outs[r]);
      continue;
    }
    const Func* kernel = nullptr;
    if (op->kind() == OpKind::Dispatch && m) kernel = m->lookupFunc(op->attrs().getStr("kernel"));
    Result<std::vector<HostTensor>> outs = kernel && isLoweredKernel(*kernel)
                                               ? runDispatch(*op, *kernel, in, dims)
                                               : evalOpBinding(*op, in, dims, &weights);
    if (!outs.ok()) return outs.takeDiags();
    if (op->kind() == OpKind::Dispatch && !(kernel && isLoweredKernel(*kernel)))
      ++detail::stats().hostOps;
    for (size_t r = 0; r < op->numResults(); ++r) env.insert_or_assign(op->result(r), (*outs)[r]);
  }
  return error(f.loc(), "@" + f.name() + " has no return");
}

} // namespace

Result<std::vector<HostTensor>> runOnSim(const Func& f, const std::vector<HostTensor>& inputs,
                                         WeightStore& weights, SimStats* stats) {
  detail::stats() = SimStats{};
  KILN_TRY(std::vector<HostTensor> out, runFunc(f, inputs, weights, 0));
  if (stats) *stats = detail::stats();
  return out;
}

} // namespace kiln::sim
