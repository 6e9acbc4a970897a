// Interpreter kernels for ops that produce values from attributes, weights or shapes:
// constant, weight, iota, range and dim; and return, which has no results of its own.
#include "ir/interp/kernels.h"

namespace kiln::interp {

KernelResult kernelConstant(const KernelCtx& c) {
  const HostTensor* value = c.op.attrs().getDense("value");
  if (!value) return opError(c, "needs a dense `value` attribute");
  // The generic result check compares the value's type with the declared one.
  return std::vector<HostTensor>{*value};
}

KernelResult kernelWeight(const KernelCtx& c) {
  std::string name = c.op.attrs().getStr("name");
  if (!c.weights) return opError(c, "weight '" + name + "' cannot be read without a weight store");
  Result<HostTensor> w = c.weights->get(name);
  if (w.ok()) return std::vector<HostTensor>{w.take()};
  // Store errors point at the weight's declaration when there is one, else at this op.
  Diags d = w.takeDiags();
  for (Diag& e : d.list)
    if (e.loc.empty()) e.loc = c.op.loc();
  return d;
}

KernelResult kernelIota(const KernelCtx& c) {
  KILN_TRY(auto shape, declaredShape(c, 0));
  KILN_TRY(int64_t axis,
           normAxis(c, c.op.attrs().getInt("axis", 0), static_cast<int64_t>(shape.size())));
  KILN_TRY(HostTensor out, newTensor(c, c.op.result()->type().elem(), shape));
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < out.numElements(); ++i) {
    unravel(i, shape, idx);
    out.setI(i, idx[static_cast<size_t>(axis)]);
  }
  return std::vector<HostTensor>{out};
}

KernelResult kernelRange(const KernelCtx& c) {
  KILN_TRY(auto shape, declaredShape(c, 0));
  if (shape.size() != 1) return opError(c, "the result must be 1-D, got " + shapeStr(shape));
  double start = c.op.attrs().getFloat("start"), delta = c.op.attrs().getFloat("delta");
  KILN_TRY(HostTensor out, newTensor(c, c.op.result()->type().elem(), shape));
  for (int64_t i = 0; i < out.numElements(); ++i)
    out.setF(i, start + static_cast<double>(i) * delta);
  return std::vector<HostTensor>{out};
}

KernelResult kernelDim(const KernelCtx& c) {
  KILN_TRY(int64_t axis, normAxis(c, c.op.attrs().getInt("axis", 0), c.in[0].rank()));
  KILN_TRY(HostTensor out, newTensor(c, ElemType::I64, {}));
  out.setI(0, c.in[0].shape()[static_cast<size_t>(axis)]);
  return std::vector<HostTensor>{out};
}

// `return` has no results: interpret() hands its operands back as the function's results.
KernelResult kernelReturn(const KernelCtx&) { return std::vector<HostTensor>{}; }

} // namespace kiln::interp
