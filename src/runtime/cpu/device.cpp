// CpuDevice: a host-memory device whose kernels call their compiled entry points, workgroups
// split over the thread pool; kernels of its `ref` executable run on the interpreter.
#include <atomic>

#include "runtime/cpu/cpu.h"
#include "runtime/ref/ref.h"

namespace kiln::hal::cpu {

namespace {

// Chunks small enough to balance uneven workgroups, large enough to amortize the counter.
int64_t chunkSize(int64_t workgroups, int threads) {
  int64_t perThread = workgroups / (int64_t(threads) * 8);
  return perThread < 1 ? 1 : perThread;
}

} // namespace

CpuDevice::CpuDevice(int64_t ordinal, int threads, bool async)
    : HostDevice(DeviceId{"cpu", ordinal}), pool_(threads < 1 ? cpuThreadCount() : threads) {
  setAsync(async);
}

// The queue thread runs dispatches on pool_: it ends before pool_ does.
CpuDevice::~CpuDevice() { stopQueue(); }

std::string CpuDevice::description() const {
  return kiln::cpu::hostCpuModel() + ", " + std::to_string(threads()) + " threads, host memory";
}

Result<std::unique_ptr<Executable>> CpuDevice::loadExecutable(const std::string& target,
                                                              const std::string& payload) {
  if (target == "ref") {
    KILN_TRY(std::unique_ptr<ref::RefExecutable> exe, ref::RefExecutable::load(target, payload));
    return std::unique_ptr<Executable>(std::move(exe));
  }
  if (target != "cpu")
    return error(Loc::named(id().str()), "cannot load an executable for target '" + target +
                                             "' (cpu devices load targets 'cpu' and 'ref')");
  KILN_TRY(std::unique_ptr<CpuExecutable> exe, CpuExecutable::load(payload));
  return std::unique_ptr<Executable>(std::move(exe));
}

Status CpuDevice::dispatch(const host::HostCommandBuffer::Command& c) {
  Loc loc = Loc::named(id().str());
  if (c.kernel >= c.exe->numKernels())
    return error(loc, "dispatch of kernel " + std::to_string(c.kernel) +
                          " but the executable has " + std::to_string(c.exe->numKernels()));
  if (auto* exe = dynamic_cast<const CpuExecutable*>(c.exe)) return run(*exe, c);
  if (auto* exe = dynamic_cast<const ref::RefExecutable*>(c.exe))
    return ref::runInterpreted(*this, *exe, c);
  return error(loc, "dispatch of an executable that was not loaded by a cpu device");
}

Status CpuDevice::run(const CpuExecutable& exe, const host::HostCommandBuffer::Command& c) {
  Loc loc = Loc::named(id().str());
  const kiln::cpu::CpuKernelInfo& info = exe.info(c.kernel);
  std::string name = "kernel @" + info.name;
  size_t n = c.bindings.size();
  if (n != info.args.size())
    return error(loc, name + " takes " + std::to_string(info.args.size()) + " buffers, got " +
                          std::to_string(n));
  if (c.pushConstants.size() != info.symbols.size())
    return error(loc, name + " reads " + std::to_string(info.symbols.size()) +
                          " push constants, the dispatch has " +
                          std::to_string(c.pushConstants.size()));
  std::vector<void*> buffers(n);
  std::vector<int64_t> extents;
  for (size_t i = 0; i < n; ++i) {
    const Binding& b = c.bindings[i];
    KILN_CHECK(host::checkBinding(*this, b, info.name, "buffer", i));
    const kiln::cpu::CpuArgInfo& a = info.args[i];
    if (b.elem != a.elem || static_cast<int64_t>(b.shape.size()) != a.rank)
      return error(loc, name + " buffer " + std::to_string(i) + " is not of rank " +
                            std::to_string(a.rank) + " and element type " +
                            std::string(elemTypeName(a.elem)));
    buffers[i] = b.buffer->map();
    extents.insert(extents.end(), b.shape.begin(), b.shape.end());
  }
  const Workgroups& w = c.workgroups;
  int64_t total = 0;
  if (w[0] < 0 || w[1] < 0 || w[2] < 0 || __builtin_mul_overflow(w[0], w[1], &total) ||
      __builtin_mul_overflow(total, w[2], &total))
    return error(loc, name + " has an invalid grid " + std::to_string(w[0]) + "x" +
                          std::to_string(w[1]) + "x" + std::to_string(w[2]));
  if (total == 0) return ok();
  KilnCpuArgs args{buffers.data(), extents.data(), c.pushConstants.data(), {w[0], w[1], w[2]}};
  KilnCpuKernelFn entry = exe.entry(c.kernel);
  std::atomic<int32_t> status{kKilnCpuOk};
  pool_.run(total, chunkSize(total, pool_.threads()), [&](int64_t begin, int64_t end) {
    if (status.load(std::memory_order_relaxed) != kKilnCpuOk) return;
    int32_t s = entry(&args, begin, end);
    int32_t expected = kKilnCpuOk;
    if (s != kKilnCpuOk) status.compare_exchange_strong(expected, s);
  });
  if (int32_t s = status.load(); s != kKilnCpuOk)
    return error(loc,
                 name + ": " + kilnCpuStatusMessage(s) + " (status " + std::to_string(s) + ")");
  return ok();
}

} // namespace kiln::hal::cpu
