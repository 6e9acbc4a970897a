// Interpreter kernels for dispatches and kernel-level ops.
//
// A `dispatch` whose kernel still has a tensor-level body (after `fuse`, before `lower`) is
// interpreted by running that body, so `kiln run` works at every stage before `lower`.
// Kernel-level ops run on the `sim` device (src/runtime/sim), never here.
#include <unordered_map>

#include "ir/interp/interp.h"
#include "ir/interp/kernels.h"

namespace kiln::interp {

KernelResult kernelDispatch(const KernelCtx& c) {
  std::string name = c.op.attrs().getStr("kernel");
  const Func* parent = c.op.parent();
  const Module* m = parent ? parent->parent() : nullptr;
  const Func* callee = m ? m->lookupFunc(name) : nullptr;
  if (!callee) return opError(c, "kernel @" + name + " is not defined");
  if (!c.weights) return opError(c, "needs a weight store to run kernel @" + name);
  for (size_t i = 0; i < callee->numArgs(); ++i)
    if (!callee->arg(i)->type().isTensor())
      return opError(c, "kernel @" + name +
                            " is lowered to kernel IR; run it on the sim device, not the "
                            "reference interpreter");
  if (c.in.size() != callee->numArgs())
    return opError(c, "passes " + std::to_string(c.in.size()) + " operands to kernel @" + name +
                          ", which takes " + std::to_string(callee->numArgs()));
  // The caller's symbol values hold inside the kernel (its dims may be expressions such as
  // {n + 4} that its own arguments could not bind).
  // A data-shaped op binds its data-dependent symbols for the ops after it.
  SymbolBinding binding = c.binding;
  std::unordered_map<const Value*, HostTensor> env;
  for (size_t i = 0; i < c.in.size(); ++i) env.emplace(callee->arg(i), c.in[i]);
  for (const auto& op : callee->ops()) {
    std::vector<HostTensor> in;
    for (const Value* v : op->operands()) in.push_back(env.at(v));
    if (op->has(kTerminator)) return in;
    KILN_TRY(auto outs, evalOpBinding(*op, in, binding, c.weights));
    for (size_t r = 0; r < op->numResults(); ++r) env.insert_or_assign(op->result(r), outs[r]);
  }
  return opError(c, "kernel @" + name + " has no return");
}

// Kernel-level ops: refused with a message that says where they run.
#define KILN_KERNEL_OP(id)                                                                         \
  KernelResult kernel##id(const KernelCtx& c) {                                                    \
    return opError(c, "is a kernel-level op; kernels run on the sim device");                      \
  }
KILN_KERNEL_OP(KernelConfig)
KILN_KERNEL_OP(WorkgroupId)
KILN_KERNEL_OP(LocalId)
KILN_KERNEL_OP(SymbolValue)
KILN_KERNEL_OP(IConst)
KILN_KERNEL_OP(SConst)
KILN_KERNEL_OP(IAdd)
KILN_KERNEL_OP(ISub)
KILN_KERNEL_OP(IMul)
KILN_KERNEL_OP(IFloorDiv)
KILN_KERNEL_OP(ICeilDiv)
KILN_KERNEL_OP(IMod)
KILN_KERNEL_OP(IMin)
KILN_KERNEL_OP(IMax)
KILN_KERNEL_OP(ICmp)
KILN_KERNEL_OP(SSelect)
KILN_KERNEL_OP(ICast)
KILN_KERNEL_OP(Compute)
KILN_KERNEL_OP(Alloc)
KILN_KERNEL_OP(Load)
KILN_KERNEL_OP(MaskedLoad)
KILN_KERNEL_OP(Store)
KILN_KERNEL_OP(MaskedStore)
KILN_KERNEL_OP(VectorLoad)
KILN_KERNEL_OP(VectorStore)
KILN_KERNEL_OP(Prefetch)
KILN_KERNEL_OP(Barrier)
KILN_KERNEL_OP(For)
KILN_KERNEL_OP(If)
KILN_KERNEL_OP(Yield)
KILN_KERNEL_OP(LaneId)
KILN_KERNEL_OP(SubgroupReduce)
KILN_KERNEL_OP(SubgroupBroadcast)
KILN_KERNEL_OP(SubgroupShuffle)
#undef KILN_KERNEL_OP

} // namespace kiln::interp
