// GpuDevice, GpuBuffer and GpuExecutable: memory, host transfers, and executables loaded from
// GPU payloads with every kernel checked against the device. Submissions are in submit.cpp.
#include "runtime/gpu/device.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "runtime/ref/ref.h"
#include "runtime/semaphore.h"

namespace kiln::hal::gpu {

Result<void*> openLibrary(const char* env, const char* fallback, const std::string& hint) {
  const char* path = std::getenv(env);
  if (!path || !*path) path = fallback;
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    return error(Loc::named(path), std::string(path) + " could not be opened (" +
                                       (why ? why : "no reason given") + "); " + hint +
                                       ", or set " + env + " to its path");
  }
  return lib;
}

GpuDevice::GpuDevice(DeviceId id, std::string target, GpuDeviceInfo info,
                     std::unique_ptr<GpuApi> api)
    : id_(std::move(id)), target_(std::move(target)), info_(std::move(info)), api_(std::move(api)),
      recycler_(info_.memoryBytes / 2, Recycler<uint64_t>::Order::OldestFirst) {}

GpuDevice::~GpuDevice() {
  if (!api_->bind().ok()) return;
  if (statusAddress_) api_->release(statusAddress_);
  for (uint64_t address : recycler_.drain()) api_->release(address);
}

MemoryStats GpuDevice::memoryStats() const {
  std::lock_guard<std::mutex> lock(statsMu_);
  return stats_;
}

void GpuDevice::resetPeak() {
  std::lock_guard<std::mutex> lock(statsMu_);
  stats_.peakBytes = stats_.bytesInUse;
}

void GpuDevice::released(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(statsMu_);
  stats_.bytesInUse -= bytes;
}

Result<std::unique_ptr<Buffer>> GpuDevice::allocate(uint64_t bytes) {
  if (bytes > info_.memoryBytes)
    return error(loc(), displayName() + " cannot allocate " + std::to_string(bytes) +
                            " bytes: it has " + std::to_string(info_.memoryBytes) +
                            " bytes of memory");
  std::lock_guard<std::recursive_mutex> lock(queueMu_);
  KILN_CHECK(api_->bind());
  uint64_t rounded = granules(bytes);
  std::optional<uint64_t> kept = recycler_.take(rounded);
  Result<uint64_t> fresh = kept ? Result<uint64_t>(*kept) : api_->allocate(rounded);
  if (!fresh.ok()) {
    // Out of memory, perhaps only because freed buffers are kept: free them, and try again.
    std::vector<uint64_t> freed = recycler_.drain();
    for (uint64_t address : freed) api_->release(address);
    if (!freed.empty()) fresh = api_->allocate(rounded);
  }
  KILN_TRY(uint64_t address, std::move(fresh));
  {
    std::lock_guard<std::mutex> stats(statsMu_);
    stats_.bytesInUse += bytes;
    stats_.allocations += 1;
    if (stats_.bytesInUse > stats_.peakBytes) stats_.peakBytes = stats_.bytesInUse;
  }
  return std::unique_ptr<Buffer>(std::make_unique<GpuBuffer>(shared_from_this(), address, bytes));
}

void GpuDevice::recycle(uint64_t address, uint64_t bytes) {
  // Called with the queue lock held: submit waits for its stream, so nothing still uses the
  // memory, and the next owner's work is queued behind whatever was.
  if (std::optional<uint64_t> left = recycler_.keep(granules(bytes), address))
    if (api_->bind().ok()) api_->release(*left);
  released(bytes);
}

Result<std::unique_ptr<Executable>> GpuDevice::loadExecutable(const std::string& target,
                                                              const std::string& payload) {
  if (target == "ref") {
    KILN_TRY(std::unique_ptr<ref::RefExecutable> exe, ref::RefExecutable::load(target, payload));
    return std::unique_ptr<Executable>(std::move(exe));
  }
  if (target != target_)
    return error(loc(), "cannot load an executable for target '" + target + "' (" + id_.kind +
                            " devices load targets '" + target_ + "' and 'ref')");
  KILN_TRY(std::unique_ptr<GpuExecutable> exe, GpuExecutable::load(shared_from_this(), payload));
  return std::unique_ptr<Executable>(std::move(exe));
}

std::unique_ptr<CommandBuffer> GpuDevice::createCommandBuffer() {
  return std::make_unique<host::HostCommandBuffer>();
}

std::unique_ptr<Semaphore> GpuDevice::createSemaphore(uint64_t initial) {
  return std::make_unique<HostSemaphore>(initial);
}

// --- buffers

GpuBuffer::~GpuBuffer() {
  std::lock_guard<std::recursive_mutex> lock(device_->queueMutex());
  device_->recycle(address_, bytes_);
}

Device& GpuBuffer::device() { return *device_; }

Status GpuBuffer::write(uint64_t offset, const void* src, uint64_t bytes) {
  KILN_CHECK(host::checkHostAccess(*device_, bytes_, offset, bytes, "a host write"));
  if (bytes == 0) return ok();
  std::lock_guard<std::recursive_mutex> lock(device_->queueMutex());
  KILN_CHECK(device_->api().bind());
  return device_->api().upload(address_ + offset, src, bytes);
}

Status GpuBuffer::read(uint64_t offset, void* dst, uint64_t bytes) const {
  KILN_CHECK(host::checkHostAccess(*device_, bytes_, offset, bytes, "a host read"));
  if (bytes == 0) return ok();
  std::lock_guard<std::recursive_mutex> lock(device_->queueMutex());
  KILN_CHECK(device_->api().bind());
  return device_->api().download(dst, address_ + offset, bytes);
}

// --- executables

namespace {

// Everything kernel `k` needs that the device lacks, one phrase each.
std::vector<std::string> missing(const GpuLimits& l, const kiln::gpu::GpuKernelInfo& k) {
  std::vector<std::string> out;
  auto n = [](uint64_t v) { return std::to_string(v); };
  uint64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    threads *= k.workgroupSize[i];
    if (k.workgroupSize[i] > l.maxBlock[i])
      out.push_back("a workgroup of " + n(k.workgroupSize[i]) + " threads along axis " + n(i) +
                    " (the device allows " + n(l.maxBlock[i]) + ")");
  }
  if (threads > l.maxThreadsPerBlock)
    out.push_back(n(threads) + " threads per workgroup (the device allows " +
                  n(l.maxThreadsPerBlock) + ")");
  uint64_t shared = uint64_t(k.staticSharedBytes) + k.dynamicSharedBytes;
  if (shared > l.sharedBytes)
    out.push_back(n(shared) + " bytes of shared memory (the device allows " + n(l.sharedBytes) +
                  " per workgroup)");
  if (k.subgroupSize) {
    bool offered = false;
    std::string sizes;
    for (uint32_t s : l.subgroupSizes) {
      offered = offered || s == k.subgroupSize;
      sizes += (sizes.empty() ? "" : " or ") + n(s);
    }
    if (!offered)
      out.push_back("subgroups of " + n(k.subgroupSize) + " (the device runs subgroups of " +
                    sizes + ")");
  }
  return out;
}

} // namespace

Result<std::unique_ptr<GpuExecutable>> GpuExecutable::load(std::shared_ptr<GpuDevice> device,
                                                           const std::string& payload) {
  GpuDevice& dev = *device;
  KILN_TRY(kiln::gpu::GpuPayload p, kiln::gpu::parseGpuPayload(payload));
  if (p.target != dev.executableTarget())
    return error(dev.loc(), "the executable is for target '" + p.target + "'; " + dev.id().str() +
                                " runs '" + dev.executableTarget() + "'");
  KILN_TRY(const kiln::gpu::GpuImage* image,
           kiln::gpu::imageForArch(p, dev.info().arch, dev.id().str()));
  Diags problems;
  for (const kiln::gpu::GpuKernelInfo& k : image->kernels) {
    std::vector<std::string> lacks = missing(dev.info().limits, k);
    if (lacks.empty()) continue;
    std::string list;
    for (size_t i = 0; i < lacks.size(); ++i)
      list += (i == 0 ? "" : i + 1 == lacks.size() ? " and " : ", ") + lacks[i];
    problems.add(error(dev.loc(), "kernel '" + k.name + "' cannot run on " + dev.displayName() +
                                      ": it needs " + list +
                                      "; compile for this device (--device=" + dev.id().str() +
                                      ") or a target within its limits"));
  }
  if (problems.hasErrors()) return problems;

  std::unique_ptr<GpuExecutable> exe(new GpuExecutable(device));
  exe->target_ = p.target;
  exe->image_ = *image;
  std::lock_guard<std::recursive_mutex> lock(dev.queueMutex());
  KILN_CHECK(dev.api().bind());
  if (!exe->image_.kernels.empty()) {
    KILN_TRY(exe->module_, dev.api().loadModule(exe->image_));
  }
  for (const kiln::gpu::GpuKernelInfo& k : exe->image_.kernels) {
    KILN_TRY(void* fn, dev.api().function(exe->module_, k));
    exe->functions_.push_back(fn);
  }
  return exe;
}

GpuExecutable::~GpuExecutable() {
  if (!module_) return;
  std::lock_guard<std::recursive_mutex> lock(device_->queueMutex());
  if (device_->api().bind().ok()) device_->api().unloadModule(module_);
}

} // namespace kiln::hal::gpu
