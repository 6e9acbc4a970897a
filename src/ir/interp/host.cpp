// Host-level ops have no reference kernels: they manage buffers and devices, which only
// the runtime's executor has. Interpreting one is a user error (running a scheduled
// module with the interpreter instead of the executor), reported, never a crash.
#include "ir/interp/kernels.h"

namespace kiln::interp {

static KernelResult hostOp(const KernelCtx& c) {
  return opError(c, "is a host op; a scheduled module runs on the executor (kiln run), not the "
                    "interpreter");
}

KernelResult kernelAllocBuffer(const KernelCtx& c) { return hostOp(c); }
KernelResult kernelFree(const KernelCtx& c) { return hostOp(c); }
KernelResult kernelLaunch(const KernelCtx& c) { return hostOp(c); }
KernelResult kernelTransferTo(const KernelCtx& c) { return hostOp(c); }
KernelResult kernelView(const KernelCtx& c) { return hostOp(c); }
KernelResult kernelLoadWeight(const KernelCtx& c) { return hostOp(c); }
KernelResult kernelLoadConstant(const KernelCtx& c) { return hostOp(c); }
KernelResult kernelWait(const KernelCtx& c) { return hostOp(c); }
KernelResult kernelCollective(const KernelCtx& c) { return hostOp(c); }
KernelResult kernelBindSymbol(const KernelCtx& c) { return hostOp(c); }
KernelResult kernelRunLoop(const KernelCtx& c) { return hostOp(c); }

} // namespace kiln::interp
