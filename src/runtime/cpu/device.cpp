// CpuDevice: a ref device (host memory, the interpreter for tensor-level kernels) whose
// lowered kernels call their compiled entry points, workgroups split over the thread pool.
#include <atomic>

#include "runtime/cpu/cpu.h"

namespace kiln::hal::cpu {

namespace {

const char* statusMessage(int32_t s) {
  switch (s) {
  case kKilnCpuIndexDivByZero: return "index arithmetic divides by zero";
  case kKilnCpuBadLoopStep: return "loop step is not positive";
  case kKilnCpuIndexOutOfRange:
    return "an index read from tensor data (a gather or scatter index) is out of range";
  default: return "failed with an unknown status";
  }
}

// Chunks small enough to balance uneven workgroups, large enough to amortize the counter.
int64_t chunkSize(int64_t workgroups, int threads) {
  int64_t perThread = workgroups / (int64_t(threads) * 8);
  return perThread < 1 ? 1 : perThread;
}

} // namespace

CpuDevice::CpuDevice(int64_t ordinal, int threads)
    : RefDevice("cpu", ordinal), pool_(threads < 1 ? cpuThreadCount() : threads) {}

std::string CpuDevice::description() const {
  return kiln::cpu::hostCpuModel() + ", " + std::to_string(threads()) + " threads, host memory";
}

Result<std::unique_ptr<Executable>> CpuDevice::loadExecutable(const std::string& target,
                                                              const std::string& payload) {
  if (target != "cpu")
    return error(Loc::named(id().str()), "cannot load an executable for target '" + target +
                                             "' (cpu devices load target 'cpu')");
  KILN_TRY(std::unique_ptr<CpuExecutable> exe, CpuExecutable::load(payload));
  return std::unique_ptr<Executable>(std::move(exe));
}

Status CpuDevice::dispatchLowered(const ref::RefExecutable& exe, const Func& f,
                                  const ref::RefCommandBuffer::Command& c) {
  auto* cexe = dynamic_cast<const CpuExecutable*>(&exe);
  KilnCpuKernelFn entry = cexe ? cexe->entry(c.kernel) : nullptr;
  if (!entry) return RefDevice::dispatchLowered(exe, f, c); // kernel IR without code
  Loc loc = Loc::named(id().str());
  std::string name = "kernel @" + f.name();
  size_t n = c.inputs.size() + c.outputs.size();
  if (n != f.numArgs())
    return error(loc, name + " takes " + std::to_string(f.numArgs()) + " buffers, got " +
                          std::to_string(n));
  std::vector<void*> buffers;
  std::vector<int64_t> extents;
  for (size_t i = 0; i < n; ++i) {
    bool in = i < c.inputs.size();
    const Binding& b = in ? c.inputs[i] : c.outputs[i - c.inputs.size()];
    KILN_CHECK(checkResident(b, f.name(), in ? "input" : "output", in ? i : i - c.inputs.size()));
    const Type& t = f.arg(i)->type();
    bool good = b.elem == t.elem() && static_cast<int64_t>(b.shape.size()) == t.rank();
    for (int64_t d = 0; good && d < t.rank(); ++d) {
      std::optional<int64_t> v =
          t.dim(d).isUnknown() ? std::nullopt : t.dim(d).expr().evaluate(c.dims);
      good = v && *v == b.shape[static_cast<size_t>(d)];
    }
    if (!good)
      return error(loc,
                   name + " buffer " + std::to_string(i) + " does not match its type " + t.str());
    buffers.push_back(b.buffer->map());
    extents.insert(extents.end(), b.shape.begin(), b.shape.end());
  }
  std::vector<int64_t> symbols;
  for (const std::string& s : cexe->info(c.kernel).symbols) {
    auto it = c.dims.find(s);
    if (it == c.dims.end())
      return error(loc, name + " reads the symbol '" + s + "', which the dispatch does not bind");
    symbols.push_back(it->second);
  }
  KILN_TRY(sim::Grid grid, cexe->grid(c.kernel, c.dims));
  int64_t total = 0;
  if (grid.x < 0 || grid.y < 0 || grid.z < 0 || __builtin_mul_overflow(grid.x, grid.y, &total) ||
      __builtin_mul_overflow(total, grid.z, &total))
    return error(loc, name + " has an invalid grid " + std::to_string(grid.x) + "x" +
                          std::to_string(grid.y) + "x" + std::to_string(grid.z));
  if (total == 0) return ok();
  KilnCpuArgs args{buffers.data(), extents.data(), symbols.data(), {grid.x, grid.y, grid.z}};
  std::atomic<int32_t> status{kKilnCpuOk};
  pool_.run(total, chunkSize(total, pool_.threads()), [&](int64_t begin, int64_t end) {
    if (status.load(std::memory_order_relaxed) != kKilnCpuOk) return;
    int32_t s = entry(&args, begin, end);
    int32_t expected = kKilnCpuOk;
    if (s != kKilnCpuOk) status.compare_exchange_strong(expected, s);
  });
  if (int32_t s = status.load(); s != kKilnCpuOk)
    return error(loc, name + ": " + statusMessage(s) + " (status " + std::to_string(s) + ")");
  return ok();
}

} // namespace kiln::hal::cpu
