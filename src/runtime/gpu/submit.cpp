// GpuDevice::submit: a recorded command list replayed on the device's stream. Every command is
// checked before it is queued (an executable or buffer of another device, a grid beyond the
// device's limits, a launch that does not match its kernel are errors, never a fault on the
// device); the submission then waits for the stream and reads the dispatches' status words.
#include "runtime/cpu/abi.h"
#include "runtime/gpu/device.h"
#include "runtime/gpu/kernargs.h"
#include "runtime/ref/ref.h"

namespace kiln::hal::gpu {

namespace {

std::string gridText(const Workgroups& w) {
  return std::to_string(w[0]) + "x" + std::to_string(w[1]) + "x" + std::to_string(w[2]);
}

} // namespace

Result<uint64_t> GpuDevice::statusWords(size_t count) {
  if (count > statusCapacity_) {
    if (statusAddress_) api_->release(statusAddress_);
    statusAddress_ = 0;
    statusCapacity_ = 0;
    size_t capacity = count < 64 ? 64 : count;
    KILN_TRY(statusAddress_, api_->allocate(4 * capacity));
    statusCapacity_ = capacity;
  }
  return statusAddress_;
}

Status GpuDevice::queueDispatch(const Command& c, uint64_t statusAddress) {
  auto* exe = dynamic_cast<const GpuExecutable*>(c.exe);
  if (!exe || &exe->owner() != this)
    return error(loc(), "dispatch of an executable that " + id_.str() + " did not load");
  if (c.kernel >= exe->numKernels())
    return error(loc(), "dispatch of kernel " + std::to_string(c.kernel) +
                            " but the executable has " + std::to_string(exe->numKernels()));
  const kiln::gpu::GpuKernelInfo& k = exe->kernel(c.kernel);
  std::string name = "kernel @" + k.name + " on " + id_.str();
  if (c.bindings.size() != k.args.size())
    return error(loc(), name + " takes " + std::to_string(k.args.size()) + " buffers, got " +
                            std::to_string(c.bindings.size()));
  const Workgroups& w = c.workgroups;
  for (int i = 0; i < 3; ++i)
    if (w[i] < 0) return error(loc(), name + " has an invalid grid " + gridText(w));
  for (int i = 0; i < 3; ++i)
    if (w[i] > int64_t(info_.limits.maxGrid[i]))
      return error(loc(), name + ": grid " + gridText(w) + " exceeds the device's " +
                              std::to_string(info_.limits.maxGrid[i]) + " workgroups along axis " +
                              std::to_string(i));
  std::vector<kiln::gpu::KernargBuffer> buffers;
  for (size_t i = 0; i < c.bindings.size(); ++i) {
    const Binding& b = c.bindings[i];
    KILN_CHECK(host::checkBinding(*this, b, k.name, "buffer", i));
    auto* buf = dynamic_cast<const GpuBuffer*>(b.buffer);
    if (!buf) return error(loc(), name + ": buffer " + std::to_string(i) + " is not device memory");
    if (b.elem != k.args[i].elem)
      return error(loc(), name + ": buffer " + std::to_string(i) + " holds " +
                              std::string(elemTypeName(b.elem)) + "; the kernel reads " +
                              std::string(elemTypeName(k.args[i].elem)));
    buffers.push_back({buf->address(), b.shape});
  }
  KILN_TRY(std::vector<uint64_t> kernargs,
           kiln::gpu::packKernargs(k, buffers, c.pushConstants, statusAddress, loc()));
  if (w[0] == 0 || w[1] == 0 || w[2] == 0) return ok(); // an empty grid runs nothing
  return api_->launch(exe->function(c.kernel), k.name, w, k.workgroupSize, k.dynamicSharedBytes,
                      kernargs);
}

Status GpuDevice::run(const std::vector<Command>& commands, std::vector<Timing>& timings) {
  KILN_CHECK(api_->bind());
  std::vector<const Command*> launched; // the dispatches with a status word, in order
  for (const Command& c : commands)
    if (c.kind == Command::Dispatch && dynamic_cast<const GpuExecutable*>(c.exe))
      launched.push_back(&c);
  uint64_t status = 0;
  if (!launched.empty()) {
    KILN_TRY(status, statusWords(launched.size()));
    KILN_CHECK(api_->fill(status, 0, 4 * launched.size()));
  }
  size_t slot = 0;
  auto gpuBuffer = [&](Buffer* b, const char* what) -> Result<const GpuBuffer*> {
    auto* g = dynamic_cast<const GpuBuffer*>(b);
    if (!g || &g->owner() != this)
      return error(loc(), std::string(what) + " a buffer of " + b->device().id().str() +
                              " submitted to " + id_.str());
    return g;
  };
  for (const Command& c : commands) {
    switch (c.kind) {
    case Command::Dispatch: {
      if (auto* refExe = dynamic_cast<const ref::RefExecutable*>(c.exe)) {
        // The interpreter reads its inputs through the host: the stream finishes first.
        KILN_CHECK(api_->finish());
        KILN_CHECK(ref::runInterpreted(*this, *refExe, c));
        break;
      }
      if (profiler_) {
        KILN_TRY(void* start, api_->recordEvent());
        timings.push_back({&c, start, nullptr});
      }
      KILN_CHECK(queueDispatch(c, status + 4 * slot++));
      if (profiler_) {
        KILN_TRY(timings.back().stop, api_->recordEvent());
      }
      break;
    }
    case Command::Copy: {
      KILN_TRY(const GpuBuffer* src, gpuBuffer(c.src, "copy from"));
      KILN_TRY(const GpuBuffer* dst, gpuBuffer(c.dst, "copy into"));
      if (c.srcOffset > src->byteSize() || c.bytes > src->byteSize() - c.srcOffset)
        return error(loc(), "copy reads outside its source buffer");
      if (c.dstOffset > dst->byteSize() || c.bytes > dst->byteSize() - c.dstOffset)
        return error(loc(), "copy writes outside its destination buffer");
      if (c.bytes)
        KILN_CHECK(api_->copy(dst->address() + c.dstOffset, src->address() + c.srcOffset, c.bytes));
      break;
    }
    case Command::Fill: {
      KILN_TRY(const GpuBuffer* dst, gpuBuffer(c.dst, "fill of"));
      if (c.dstOffset > dst->byteSize() || c.bytes > dst->byteSize() - c.dstOffset)
        return error(loc(), "fill writes outside its buffer");
      if (c.bytes) KILN_CHECK(api_->fill(dst->address() + c.dstOffset, c.pattern, c.bytes));
      break;
    }
    case Command::Barrier: break; // the stream runs its commands in order
    }
  }
  KILN_CHECK(api_->finish());
  if (launched.empty()) return ok();
  std::vector<int32_t> words(launched.size());
  KILN_CHECK(api_->download(words.data(), status, 4 * words.size()));
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] == kKilnCpuOk) continue;
    const Command& c = *launched[i];
    return error(loc(), "kernel @" + c.exe->kernelName(c.kernel) + " on " + displayName() + ": " +
                            kilnCpuStatusMessage(words[i]) + " (status " +
                            std::to_string(words[i]) + ")");
  }
  return ok();
}

Status GpuDevice::submit(CommandBuffer& cb, const Semaphore* wait, uint64_t waitValue,
                         Semaphore& signal, uint64_t signalValue) {
  auto* hcb = dynamic_cast<host::HostCommandBuffer*>(&cb);
  if (!hcb) return error(loc(), "command buffer was not created by " + id_.str());
  // The submission runs on the caller's thread: a wait for a value nobody signaled yet could
  // never end, so it is refused instead of blocking forever.
  if (wait && wait->value() < waitValue)
    return error(loc(), "submission waits for semaphore value " + std::to_string(waitValue) +
                            ", which is not signaled");
  if (wait) {
    Status s = wait->wait(waitValue);
    if (!s.ok()) {
      signal.fail(s.diags());
      return s;
    }
  }
  std::lock_guard<std::recursive_mutex> lock(queueMu_);
  std::vector<Timing> timings;
  Status s = run(hcb->commands(), timings);
  // A failed submission leaves nothing running on the stream.
  if (!s.ok()) (void)api_->finish();
  for (const Timing& t : timings) {
    if (s.ok() && profiler_ && t.stop) {
      Result<double> seconds = api_->elapsed(t.start, t.stop);
      if (!seconds.ok())
        s = seconds.takeDiags();
      else
        profiler_->record(*t.command->exe, t.command->kernel, t.command->workgroups, *seconds);
    }
    api_->destroyEvent(t.start);
    if (t.stop) api_->destroyEvent(t.stop);
  }
  if (!s.ok()) {
    signal.fail(s.diags());
    return s;
  }
  signal.signal(signalValue);
  return ok();
}

} // namespace kiln::hal::gpu
