// The interpreter's `loop`: calls the body function while the iteration count and the
// condition allow, carrying its values from one iteration to the next.
#include "ir/interp/interp.h"
#include "ir/interp/kernels.h"

namespace kiln::interp {

KernelResult kernelLoop(const KernelCtx& c) {
  std::string name = c.op.attrs().getStr("body");
  const Func* parent = c.op.parent();
  const Module* m = parent ? parent->parent() : nullptr;
  const Func* body = m ? m->lookupFunc(name) : nullptr;
  if (!body) return opError(c, "the body @" + name + " is not defined");
  if (!c.weights) return opError(c, "needs a weight store to run the body @" + name);
  auto carried = static_cast<size_t>(c.op.attrs().getInt("carried"));
  if (c.in.size() < 2 + carried || c.in[0].numElements() != 1 || c.in[1].numElements() != 1)
    return opError(c, "needs the most iterations, the condition and " + std::to_string(carried) +
                          " carried values");
  int64_t most = c.in[0].getI(0);
  bool cond = c.in[1].getI(0) != 0;
  std::vector<HostTensor> values(c.in.begin() + 2, c.in.begin() + 2 + static_cast<long>(carried));
  for (int64_t i = 0; cond && i < most; ++i) {
    if (i == kMaxLoopIterations)
      return opError(c, "the loop runs more than " + std::to_string(kMaxLoopIterations) +
                            " iterations, kiln's limit");
    HostTensor iter(ElemType::I64, {}), flag(ElemType::I1, {});
    iter.setI(0, i);
    flag.setI(0, 1);
    std::vector<HostTensor> in = {iter, flag};
    in.insert(in.end(), values.begin(), values.end());
    in.insert(in.end(), c.in.begin() + 2 + static_cast<long>(carried), c.in.end());
    KILN_TRY(std::vector<HostTensor> out, interpret(*body, in, *c.weights));
    if (out.size() != carried + 1 || out[0].numElements() != 1)
      return opError(c, "the body @" + name + " must return the condition and " +
                            std::to_string(carried) + " carried values");
    cond = out[0].getI(0) != 0;
    for (size_t k = 0; k < carried; ++k) values[k] = std::move(out[k + 1]);
  }
  return values;
}

} // namespace kiln::interp
