// RefDevice: memory accounting, executable loading, and the synchronous queue that runs
// command buffers with the reference interpreter.
#include <cstdlib>
#include <cstring>

#include "ir/interp.h"
#include "runtime/ref/ref.h"
#include "runtime/semaphore.h"
#include "runtime/sim/sim.h"

namespace kiln::hal::ref {

namespace {
// Lowered kernels take buffers (kernel IR); tensor-level ones take tensors.
bool isLoweredKernel(const Func& f) { return f.numArgs() > 0 && f.arg(0)->type().isBuffer(); }

// A ref device is host memory; this bound keeps a hostile size from reaching new[].
constexpr uint64_t kMaxBufferBytes = uint64_t(16) << 30;
} // namespace

std::string RefDevice::description() const {
  return id_.kind == "sim" ? "kernel-IR simulator, host memory"
                           : "reference interpreter, host memory";
}

DeviceLimits RefDevice::limits() const { return {kMaxBufferBytes, kMaxBufferBytes}; }

MemoryStats RefDevice::memoryStats() const {
  std::lock_guard<std::mutex> lock(statsMu_);
  return stats_;
}

void RefDevice::resetPeak() {
  std::lock_guard<std::mutex> lock(statsMu_);
  stats_.peakBytes = stats_.bytesInUse;
}

// At least one byte, so that empty tensors still have a distinct address; aligned_alloc
// wants a multiple of the alignment.
static uint64_t roundedSize(uint64_t bytes) {
  return ((bytes ? bytes : 1) + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
}

void RefDevice::recycle(HostMemory memory, uint64_t bytes) {
  uint64_t rounded = roundedSize(bytes);
  std::lock_guard<std::mutex> lock(statsMu_);
  stats_.bytesInUse -= bytes;
  if (cachedBytes_ + rounded > kMaxCachedBytes) return; // freed here
  cache_[rounded].push_back(std::move(memory));
  cachedBytes_ += rounded;
}

Result<std::unique_ptr<Buffer>> RefDevice::allocate(uint64_t bytes) {
  Loc loc = Loc::named(id_.str());
  if (bytes > kMaxBufferBytes)
    return error(loc, "cannot allocate " + std::to_string(bytes) + " bytes (the limit is " +
                          std::to_string(kMaxBufferBytes) + ")");
  uint64_t rounded = roundedSize(bytes);
  HostMemory data;
  {
    std::lock_guard<std::mutex> lock(statsMu_);
    if (auto it = cache_.find(rounded); it != cache_.end() && !it->second.empty()) {
      data = std::move(it->second.back());
      it->second.pop_back();
      cachedBytes_ -= rounded;
    }
  }
  if (!data) data.reset(static_cast<uint8_t*>(std::aligned_alloc(kHostAlignment, rounded)));
  if (!data) return error(loc, "out of memory allocating " + std::to_string(bytes) + " bytes");
  {
    std::lock_guard<std::mutex> lock(statsMu_);
    stats_.bytesInUse += bytes;
    stats_.allocations += 1;
    if (stats_.bytesInUse > stats_.peakBytes) stats_.peakBytes = stats_.bytesInUse;
  }
  return std::unique_ptr<Buffer>(std::make_unique<RefBuffer>(*this, std::move(data), bytes));
}

std::unique_ptr<Buffer> RefDevice::importHost(uint8_t* data, uint64_t bytes) {
  if (!data || reinterpret_cast<uintptr_t>(data) % kHostAlignment != 0) return nullptr;
  return std::make_unique<RefBuffer>(*this, HostMemory(data, HostMemoryFree{false}), bytes);
}

Result<std::unique_ptr<Executable>> RefDevice::loadExecutable(const std::string& target,
                                                              const std::string& payload) {
  if (target != id_.kind)
    return error(Loc::named(id_.str()), "cannot load an executable for target '" + target + "' (" +
                                            id_.kind + " devices load target '" + id_.kind + "')");
  KILN_TRY(std::unique_ptr<RefExecutable> exe, RefExecutable::load(target, payload));
  return std::unique_ptr<Executable>(std::move(exe));
}

std::unique_ptr<CommandBuffer> RefDevice::createCommandBuffer() {
  return std::make_unique<RefCommandBuffer>();
}

std::unique_ptr<Semaphore> RefDevice::createSemaphore(uint64_t initial) {
  return std::make_unique<HostSemaphore>(initial);
}

Status RefDevice::submit(CommandBuffer& cb, const Semaphore* wait, uint64_t waitValue,
                         Semaphore& signal, uint64_t signalValue) {
  auto* rcb = dynamic_cast<RefCommandBuffer*>(&cb);
  if (!rcb) return error(Loc::named(id_.str()), "command buffer was not created by a ref device");
  // The queue runs on the caller's thread: a wait for a value nobody signaled yet could
  // never end, so it is refused instead of blocking forever.
  if (wait && wait->value() < waitValue)
    return error(Loc::named(id_.str()), "submission waits for semaphore value " +
                                            std::to_string(waitValue) + ", which is not signaled");
  if (wait) KILN_CHECK(wait->wait(waitValue));
  std::lock_guard<std::mutex> lock(queue_);
  for (const RefCommandBuffer::Command& c : rcb->commands()) {
    Status s = execute(c);
    if (!s.ok()) {
      signal.fail(s.diags());
      return s;
    }
  }
  signal.signal(signalValue);
  return ok();
}

Status RefDevice::checkResident(const Binding& b, const std::string& kernel, const char* role,
                                size_t i) {
  Loc loc = Loc::named(id_.str());
  if (!b.buffer)
    return error(loc,
                 "kernel @" + kernel + ": " + role + " " + std::to_string(i) + " has no buffer");
  if (&b.buffer->device() != this)
    return error(loc, "kernel @" + kernel + " on " + id_.str() + ": " + role + " " +
                          std::to_string(i) + " is a buffer of " + b.buffer->device().id().str() +
                          "; it must be transferred to " + id_.str() + " first");
  int64_t n = 1;
  for (int64_t d : b.shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      return error(loc, "kernel @" + kernel + ": " + role + " " + std::to_string(i) +
                            " has an invalid shape");
  }
  uint64_t need = static_cast<uint64_t>(n) * elemTypeBytes(b.elem);
  if (need > b.buffer->byteSize())
    return error(loc, "kernel @" + kernel + ": " + role + " " + std::to_string(i) + " needs " +
                          std::to_string(need) + " bytes but its buffer has " +
                          std::to_string(b.buffer->byteSize()));
  return ok();
}

Status RefDevice::dispatchLowered(const RefExecutable&, const Func& f,
                                  const RefCommandBuffer::Command& c) {
  // Kernel IR (sim devices): one buffer per argument, inputs then outputs, written in place.
  std::vector<sim::BufferRef> bindings;
  for (size_t i = 0; i < c.inputs.size() + c.outputs.size(); ++i) {
    bool in = i < c.inputs.size();
    const Binding& b = in ? c.inputs[i] : c.outputs[i - c.inputs.size()];
    KILN_CHECK(checkResident(b, f.name(), in ? "input" : "output", in ? i : i - c.inputs.size()));
    bindings.push_back({HostTensor::view(b.elem, b.shape, b.buffer->map(), nullptr)});
  }
  KILN_TRY(sim::Grid grid, sim::kernelGrid(f, c.dims));
  return sim::runKernel(f, bindings, c.dims, grid);
}

Status RefDevice::dispatchNow(const RefCommandBuffer::Command& c) {
  Loc loc = Loc::named(id_.str());
  auto* exe = dynamic_cast<const RefExecutable*>(c.exe);
  if (!exe) return error(loc, "dispatch of an executable that was not loaded by a ref device");
  if (c.kernel >= exe->numKernels())
    return error(loc, "dispatch of kernel " + std::to_string(c.kernel) +
                          " but the executable has " + std::to_string(exe->numKernels()));
  const Func& f = exe->kernel(c.kernel);
  if (isLoweredKernel(f)) return dispatchLowered(*exe, f, c);
  std::vector<HostTensor> inputs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Binding& b = c.inputs[i];
    KILN_CHECK(checkResident(b, f.name(), "input", i));
    inputs.push_back(HostTensor::view(b.elem, b.shape, b.buffer->map(), nullptr));
  }
  for (size_t i = 0; i < c.outputs.size(); ++i)
    KILN_CHECK(checkResident(c.outputs[i], f.name(), "output", i));
  KILN_TRY(std::vector<HostTensor> results, interpretBound(f, inputs, exe->weights(), c.dims));
  if (results.size() != c.outputs.size())
    return error(loc, "kernel @" + f.name() + " produced " + std::to_string(results.size()) +
                          " results for " + std::to_string(c.outputs.size()) + " output buffers");
  for (size_t i = 0; i < results.size(); ++i) {
    const Binding& b = c.outputs[i];
    if (results[i].elem() != b.elem || results[i].shape() != b.shape)
      return error(loc, "kernel @" + f.name() + ": result " + std::to_string(i) +
                            " does not have the shape and element type of its output buffer");
    KILN_CHECK(b.buffer->write(0, results[i].data(), results[i].byteSize()));
  }
  return ok();
}

Status RefDevice::execute(const RefCommandBuffer::Command& c) {
  Loc loc = Loc::named(id_.str());
  switch (c.kind) {
  case RefCommandBuffer::Command::Dispatch: return dispatchNow(c);
  case RefCommandBuffer::Command::Copy: {
    if (&c.dst->device() != this)
      return error(loc, "copy into a buffer of " + c.dst->device().id().str() + " submitted to " +
                            id_.str());
    uint8_t* src = c.src->map();
    if (!src) return error(loc, "copy from a buffer the host cannot map");
    if (c.srcOffset > c.src->byteSize() || c.bytes > c.src->byteSize() - c.srcOffset)
      return error(loc, "copy reads outside its source buffer");
    return c.dst->write(c.dstOffset, src + c.srcOffset, c.bytes);
  }
  case RefCommandBuffer::Command::Fill: {
    if (&c.dst->device() != this)
      return error(loc, "fill of a buffer of " + c.dst->device().id().str() + " submitted to " +
                            id_.str());
    if (c.dstOffset > c.dst->byteSize() || c.bytes > c.dst->byteSize() - c.dstOffset)
      return error(loc, "fill writes outside its buffer");
    std::memset(c.dst->map() + c.dstOffset, c.pattern, c.bytes);
    return ok();
  }
  case RefCommandBuffer::Command::Barrier: return ok();
  }
  return ok();
}

} // namespace kiln::hal::ref
