// Submissions: a recorded command list (host::HostCommandBuffer) becomes one VkCommandBuffer,
// checked command by command before anything reaches the queue, and one vkQueueSubmit that
// waits and signals timeline semaphores. A list that holds dispatches of `ref` executables
// (the kernels the vulkan backend left tensor-level) is cut at each of them: every run of
// device commands between them is one VkCommandBuffer and one vkQueueSubmit, and each ref
// dispatch runs on the interpreter on the submitting thread once the runs before it have
// finished, reading and writing its buffers through the host (ref::runInterpreted).
//
// Barriers come from the commands' buffers: a command that reads a buffer an earlier command
// of the submission wrote, or writes one an earlier command read or wrote, is preceded by a
// global memory barrier (compute and transfer stages); explicit barrier() commands always
// emit one. The submission ends with a barrier that makes device writes visible to the host.
// Each submission also signals the device's own queue timeline with its serial, which tells
// when its command buffer and descriptor pool can be freed and when a buffer it used can be
// read by the host or destroyed.
#include <chrono>
#include <cstring>
#include <limits>
#include <thread>

#include "runtime/ref/ref.h"
#include "runtime/vulkan/vulkan.h"

namespace kiln::hal::vulkan {

namespace {

using Command = host::HostCommandBuffer::Command;

constexpr VkPipelineStageFlags kDeviceStages =
    VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;

void memoryBarrier(const Api& vk, VkCommandBuffer cb, VkPipelineStageFlags dstStages,
                   VkAccessFlags dstAccess) {
  VkMemoryBarrier b{};
  b.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  b.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  b.dstAccessMask = dstAccess;
  vk.vkCmdPipelineBarrier(cb, kDeviceStages, dstStages, 0, 1, &b, 0, nullptr, 0, nullptr);
}

void deviceBarrier(const Api& vk, VkCommandBuffer cb) {
  memoryBarrier(vk, cb, kDeviceStages,
                VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                    VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
}

void hostBarrier(const Api& vk, VkCommandBuffer cb) {
  memoryBarrier(vk, cb, VK_PIPELINE_STAGE_HOST_BIT,
                VK_ACCESS_HOST_READ_BIT | VK_ACCESS_HOST_WRITE_BIT);
}

// A primary command buffer from `pool`, begun for one submission.
VkResult beginOneTime(const Api& vk, VkDevice device, VkCommandPool pool, VkCommandBuffer* cb) {
  VkCommandBufferAllocateInfo ai{};
  ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  ai.commandPool = pool;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  if (VkResult r = vk.vkAllocateCommandBuffers(device, &ai, cb); r != VK_SUCCESS) {
    *cb = VK_NULL_HANDLE;
    return r;
  }
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  VkResult r = vk.vkBeginCommandBuffer(*cb, &bi);
  if (r != VK_SUCCESS) {
    vk.vkFreeCommandBuffers(device, pool, 1, cb);
    *cb = VK_NULL_HANDLE;
  }
  return r;
}

// The buffers read and written since the last barrier.
struct Hazards {
  std::set<VkBuffer> read, written;
  bool conflicts(const std::vector<VkBuffer>& reads, const std::vector<VkBuffer>& writes) const {
    for (VkBuffer b : reads)
      if (written.count(b)) return true;
    for (VkBuffer b : writes)
      if (written.count(b) || read.count(b)) return true;
    return false;
  }
  void add(const std::vector<VkBuffer>& reads, const std::vector<VkBuffer>& writes) {
    read.insert(reads.begin(), reads.end());
    written.insert(writes.begin(), writes.end());
  }
  void clear() { read.clear(), written.clear(); }
};

} // namespace

VkResult VulkanDevice::waitTimeline(VkSemaphore sem, uint64_t value, uint64_t timeoutNs) const {
  // Most waits are for a few microseconds of work (a staging copy, a decode step's kernels),
  // and a blocked thread can take far longer to wake: poll the counter first.
  auto start = std::chrono::steady_clock::now();
  for (uint64_t v = 0;;) {
    if (VkResult r = api().vkGetSemaphoreCounterValue(device_, sem, &v); r != VK_SUCCESS) return r;
    if (v >= value) return VK_SUCCESS;
    if (std::chrono::steady_clock::now() - start >= std::chrono::nanoseconds(spinNs_)) break;
    std::this_thread::yield();
  }
  VkSemaphoreWaitInfo wi{};
  wi.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO;
  wi.semaphoreCount = 1;
  wi.pSemaphores = &sem;
  wi.pValues = &value;
  return api().vkWaitSemaphores(device_, &wi, timeoutNs);
}

Status VulkanDevice::waitSerial(uint64_t serial) const {
  if (serial == 0) return ok();
  KILN_CHECK(alive());
  VkResult r = waitTimeline(queueTimeline_, serial, std::numeric_limits<uint64_t>::max());
  if (r != VK_SUCCESS) return vkError("vkWaitSemaphores", r);
  return ok();
}

// Frees the command buffers and descriptor pools of finished submissions (queueMu_ held).
void VulkanDevice::reclaim() {
  uint64_t done = 0;
  if (api().vkGetSemaphoreCounterValue(device_, queueTimeline_, &done) != VK_SUCCESS) return;
  while (!inFlight_.empty() && inFlight_.front().serial <= done) {
    const InFlight& f = inFlight_.front();
    api().vkFreeCommandBuffers(device_, commandPool_, 1, &f.cb);
    if (f.pool) api().vkDestroyDescriptorPool(device_, f.pool, nullptr);
    inFlight_.pop_front();
  }
}

Status VulkanDevice::runNow(const std::function<void(VkCommandBuffer)>& recordFn) {
  KILN_CHECK(alive());
  const Api& vk = api();
  uint64_t serial = 0;
  {
    std::lock_guard<std::mutex> lock(queueMu_);
    reclaim();
    VkCommandBuffer cb = VK_NULL_HANDLE;
    if (VkResult r = beginOneTime(vk, device_, commandPool_, &cb); r != VK_SUCCESS)
      return vkError("vkAllocateCommandBuffers", r);
    recordFn(cb);
    hostBarrier(vk, cb);
    vk.vkEndCommandBuffer(cb);
    serial = ++serial_;
    VkTimelineSemaphoreSubmitInfo ti{};
    ti.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO;
    ti.signalSemaphoreValueCount = 1;
    ti.pSignalSemaphoreValues = &serial;
    VkSubmitInfo si{};
    si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    si.pNext = &ti;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    si.signalSemaphoreCount = 1;
    si.pSignalSemaphores = &queueTimeline_;
    if (VkResult r = vk.vkQueueSubmit(queue_, 1, &si, VK_NULL_HANDLE); r != VK_SUCCESS) {
      vk.vkFreeCommandBuffers(device_, commandPool_, 1, &cb);
      --serial_;
      return vkError("vkQueueSubmit", r);
    }
    inFlight_.push_back({serial, cb, VK_NULL_HANDLE});
  }
  return waitSerial(serial);
}

Status VulkanDevice::recordDispatch(VkCommandBuffer vcb, const Command& c, VkDescriptorPool pool) {
  const Api& vk = api();
  auto* exe = dynamic_cast<const VulkanExecutable*>(c.exe);
  if (!exe || &exe->owner() != this)
    return error(loc(), "dispatch of an executable that " + id_.str() + " did not load");
  if (c.kernel >= exe->numKernels())
    return error(loc(), "dispatch of kernel " + std::to_string(c.kernel) +
                            " but the executable has " + std::to_string(exe->numKernels()));
  const VulkanKernel& k = exe->kernel(c.kernel);
  std::string name = "kernel @" + k.info.name + " on " + id_.str();
  if (c.bindings.size() != k.info.bindings.size())
    return error(loc(), name + " takes " + std::to_string(k.info.bindings.size()) +
                            " buffers, got " + std::to_string(c.bindings.size()));
  if (c.pushConstants.size() != k.info.push.size())
    return error(loc(), name + " reads " + std::to_string(k.info.push.size()) +
                            " push constants, the dispatch has " +
                            std::to_string(c.pushConstants.size()));
  const VkPhysicalDeviceLimits& lim = props_.props.limits;
  for (int i = 0; i < 3; ++i)
    if (c.workgroups[i] < 0 || c.workgroups[i] > int64_t(lim.maxComputeWorkGroupCount[i]))
      return error(loc(), name + ": grid " + std::to_string(c.workgroups[0]) + "x" +
                              std::to_string(c.workgroups[1]) + "x" +
                              std::to_string(c.workgroups[2]) + " exceeds the device's " +
                              std::to_string(lim.maxComputeWorkGroupCount[i]) + " workgroups " +
                              "along axis " + std::to_string(i) + " (maxComputeWorkGroupCount)");
  std::vector<VkDescriptorBufferInfo> infos(c.bindings.size());
  for (size_t i = 0; i < c.bindings.size(); ++i) {
    const Binding& b = c.bindings[i];
    std::string what = name + ": buffer " + std::to_string(i);
    auto* buf = dynamic_cast<VulkanBuffer*>(b.buffer);
    if (!b.buffer) return error(loc(), what + " is missing");
    if (!buf || &buf->owner() != this)
      return error(loc(), what + " is a buffer of " + b.buffer->device().id().str() +
                              "; it must be transferred to " + id_.str() + " first");
    uint64_t need = elemTypeBytes(b.elem);
    for (int64_t d : b.shape)
      if (d < 0 || __builtin_mul_overflow(need, static_cast<uint64_t>(d), &need))
        return error(loc(), what + " has an invalid shape");
    if (need > buf->byteSize())
      return error(loc(), what + " needs " + std::to_string(need) + " bytes but has " +
                              std::to_string(buf->byteSize()));
    if (buf->allocatedSize() > lim.maxStorageBufferRange)
      return error(loc(), what + " holds " + std::to_string(buf->byteSize()) +
                              " bytes, more than one binding may address on this device (" +
                              std::to_string(lim.maxStorageBufferRange) +
                              " bytes, maxStorageBufferRange)");
    infos[i] = {buf->handle(), 0, buf->allocatedSize()};
  }
  std::vector<uint8_t> push(k.pushBytes, 0);
  for (size_t i = 0; i < c.pushConstants.size(); ++i) {
    int64_t v = c.pushConstants[i];
    if (k.info.push[i].type == kiln::vulkan::PushType::I32) {
      if (v < INT32_MIN || v > INT32_MAX)
        return error(loc(), name + ": push constant '" + k.info.push[i].symbol +
                                "' = " + std::to_string(v) + " does not fit the kernel's 32 bits");
      int32_t v32 = static_cast<int32_t>(v);
      std::memcpy(push.data() + k.pushOffsets[i], &v32, 4);
    } else {
      std::memcpy(push.data() + k.pushOffsets[i], &v, 8);
    }
  }
  if (c.workgroups[0] == 0 || c.workgroups[1] == 0 || c.workgroups[2] == 0) return ok();

  std::vector<VkWriteDescriptorSet> writes(infos.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    VkWriteDescriptorSet& w = writes[i];
    w.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    w.dstBinding = static_cast<uint32_t>(i);
    w.descriptorCount = 1;
    w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w.pBufferInfo = &infos[i];
  }
  vk.vkCmdBindPipeline(vcb, VK_PIPELINE_BIND_POINT_COMPUTE, k.pipeline);
  if (!writes.empty()) {
    if (pushDescriptor_) {
      pushDescriptor_(vcb, VK_PIPELINE_BIND_POINT_COMPUTE, k.layout, 0,
                      static_cast<uint32_t>(writes.size()), writes.data());
    } else {
      VkDescriptorSetAllocateInfo ai{};
      ai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
      ai.descriptorPool = pool;
      ai.descriptorSetCount = 1;
      ai.pSetLayouts = &k.setLayout;
      VkDescriptorSet set = VK_NULL_HANDLE;
      if (VkResult r = vk.vkAllocateDescriptorSets(device_, &ai, &set); r != VK_SUCCESS)
        return vkError("vkAllocateDescriptorSets", r);
      for (VkWriteDescriptorSet& w : writes) w.dstSet = set;
      vk.vkUpdateDescriptorSets(device_, static_cast<uint32_t>(writes.size()), writes.data(), 0,
                                nullptr);
      vk.vkCmdBindDescriptorSets(vcb, VK_PIPELINE_BIND_POINT_COMPUTE, k.layout, 0, 1, &set, 0,
                                 nullptr);
    }
  }
  if (!push.empty())
    vk.vkCmdPushConstants(vcb, k.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                          static_cast<uint32_t>(push.size()), push.data());
  vk.vkCmdDispatch(vcb, static_cast<uint32_t>(c.workgroups[0]),
                   static_cast<uint32_t>(c.workgroups[1]), static_cast<uint32_t>(c.workgroups[2]));
  return ok();
}

Status VulkanDevice::record(VkCommandBuffer vcb, Commands commands, VkDescriptorPool pool,
                            Recorded* timing) {
  const Api& vk = api();
  Hazards hazards;
  auto ours = [&](Buffer* b, const char* what) -> Result<VulkanBuffer*> {
    auto* vb = dynamic_cast<VulkanBuffer*>(b);
    if (!vb || &vb->owner() != this)
      return error(loc(), std::string(what) + " a buffer of " +
                              (b ? b->device().id().str() : std::string("no device")) +
                              " submitted to " + id_.str());
    return vb;
  };
  for (const Command& c : commands) {
    std::vector<VkBuffer> reads, writes;
    switch (c.kind) {
    case Command::Dispatch: {
      auto* exe = dynamic_cast<const VulkanExecutable*>(c.exe);
      const VulkanKernel* k =
          exe && c.kernel < exe->numKernels() ? &exe->kernel(c.kernel) : nullptr;
      for (size_t i = 0; i < c.bindings.size(); ++i) {
        auto* vb = dynamic_cast<VulkanBuffer*>(c.bindings[i].buffer);
        if (!vb) continue; // refused by recordDispatch
        bool written = !k || i >= k->info.bindings.size() || k->info.bindings[i].written;
        (written ? writes : reads).push_back(vb->handle());
      }
      break;
    }
    case Command::Copy: {
      KILN_TRY(VulkanBuffer * src, ours(c.src, "copy from"));
      KILN_TRY(VulkanBuffer * dst, ours(c.dst, "copy into"));
      reads.push_back(src->handle());
      writes.push_back(dst->handle());
      break;
    }
    case Command::Fill: {
      KILN_TRY(VulkanBuffer * dst, ours(c.dst, "fill of"));
      writes.push_back(dst->handle());
      break;
    }
    case Command::Barrier: break;
    }
    if (c.kind == Command::Barrier || hazards.conflicts(reads, writes)) {
      deviceBarrier(vk, vcb);
      hazards.clear();
    }
    hazards.add(reads, writes);
    switch (c.kind) {
    case Command::Dispatch: {
      // A timestamp is written once every command before it has finished the stage: the pair
      // brackets this dispatch, which the barrier above serializes where it must.
      auto q = timing ? uint32_t(2 * timing->timed.size()) : 0;
      if (timing)
        vk.vkCmdWriteTimestamp(vcb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, timing->queries, q);
      KILN_CHECK(recordDispatch(vcb, c, pool));
      if (timing) {
        vk.vkCmdWriteTimestamp(vcb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, timing->queries, q + 1);
        timing->timed.push_back(&c);
      }
      break;
    }
    case Command::Copy: {
      auto* src = static_cast<VulkanBuffer*>(c.src);
      auto* dst = static_cast<VulkanBuffer*>(c.dst);
      if (c.srcOffset > src->byteSize() || c.bytes > src->byteSize() - c.srcOffset ||
          c.dstOffset > dst->byteSize() || c.bytes > dst->byteSize() - c.dstOffset)
        return error(loc(), "a copy on " + id_.str() + " reaches outside its buffers");
      if (c.bytes == 0) break;
      VkBufferCopy region{c.srcOffset, c.dstOffset, c.bytes};
      vk.vkCmdCopyBuffer(vcb, src->handle(), dst->handle(), 1, &region);
      break;
    }
    case Command::Fill: {
      auto* dst = static_cast<VulkanBuffer*>(c.dst);
      if (c.dstOffset > dst->byteSize() || c.bytes > dst->byteSize() - c.dstOffset)
        return error(loc(), "a fill on " + id_.str() + " writes outside its buffer");
      // vkCmdFillBuffer writes whole words: a fill that ends at the buffer's end may spill
      // into the padding allocate() adds, any other must be word-aligned.
      uint64_t bytes = c.bytes;
      if (c.dstOffset + bytes == dst->byteSize()) bytes = (bytes + 3) / 4 * 4;
      if (c.dstOffset % 4 || bytes % 4)
        return error(loc(), "a fill on " + id_.str() +
                                " must start and end at multiples of "
                                "4 bytes (offset " +
                                std::to_string(c.dstOffset) + ", " + std::to_string(c.bytes) +
                                " bytes)");
      if (bytes == 0) break;
      uint32_t word = 0x01010101u * c.pattern;
      vk.vkCmdFillBuffer(vcb, dst->handle(), c.dstOffset, bytes, word);
      break;
    }
    case Command::Barrier: break;
    }
  }
  hostBarrier(vk, vcb);
  return ok();
}

Result<VkDescriptorPool> VulkanDevice::descriptorPoolFor(Commands commands) {
  if (pushDescriptor_) return VkDescriptorPool(VK_NULL_HANDLE);
  uint32_t sets = 0, descriptors = 0;
  for (const Command& c : commands)
    if (c.kind == Command::Dispatch && !c.bindings.empty()) {
      ++sets;
      descriptors += static_cast<uint32_t>(c.bindings.size());
    }
  if (sets == 0) return VkDescriptorPool(VK_NULL_HANDLE);
  VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptors};
  VkDescriptorPoolCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
  ci.maxSets = sets;
  ci.poolSizeCount = 1;
  ci.pPoolSizes = &size;
  VkDescriptorPool pool = VK_NULL_HANDLE;
  if (VkResult r = api().vkCreateDescriptorPool(device_, &ci, nullptr, &pool); r != VK_SUCCESS)
    return vkError("vkCreateDescriptorPool", r);
  return pool;
}

Result<VulkanDevice::Recorded> VulkanDevice::recordRun(Commands commands) {
  const Api& vk = api();
  Recorded run;
  for (const Command& c : commands) {
    for (const Binding& b : c.bindings)
      if (auto* vb = dynamic_cast<VulkanBuffer*>(b.buffer)) run.used.push_back(vb);
    for (Buffer* b : {c.src, c.dst})
      if (auto* vb = dynamic_cast<VulkanBuffer*>(b)) run.used.push_back(vb);
  }
  KILN_TRY(run.pool, descriptorPoolFor(commands));
  if (VkResult r = beginOneTime(vk, device_, commandPool_, &run.cb); r != VK_SUCCESS) {
    discard(run);
    return vkError("vkAllocateCommandBuffers", r);
  }
  size_t dispatches = 0;
  for (const Command& c : commands) dispatches += c.kind == Command::Dispatch ? 1 : 0;
  if (profiler_ && dispatches) {
    VkQueryPoolCreateInfo qi{};
    qi.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qi.queryCount = static_cast<uint32_t>(2 * dispatches);
    if (VkResult r = vk.vkCreateQueryPool(device_, &qi, nullptr, &run.queries); r != VK_SUCCESS) {
      vk.vkEndCommandBuffer(run.cb);
      discard(run);
      return vkError("vkCreateQueryPool", r);
    }
    vk.vkCmdResetQueryPool(run.cb, run.queries, 0, qi.queryCount);
  }
  Status recorded = record(run.cb, commands, run.pool, run.queries ? &run : nullptr);
  vk.vkEndCommandBuffer(run.cb);
  if (!recorded.ok()) {
    discard(run);
    return recorded.diags();
  }
  return run;
}

void VulkanDevice::discard(Recorded& run) {
  if (run.queries) api().vkDestroyQueryPool(device_, run.queries, nullptr);
  run.queries = VK_NULL_HANDLE;
  if (run.cb) api().vkFreeCommandBuffers(device_, commandPool_, 1, &run.cb);
  if (run.pool) api().vkDestroyDescriptorPool(device_, run.pool, nullptr);
  run.cb = VK_NULL_HANDLE;
  run.pool = VK_NULL_HANDLE;
}

Result<uint64_t> VulkanDevice::submitRecorded(Recorded& run, const VulkanSemaphore* wait,
                                              uint64_t waitValue, VulkanSemaphore* signal,
                                              uint64_t signalValue) {
  std::lock_guard<std::mutex> lock(queueMu_);
  uint64_t serial = ++serial_;
  VkSemaphore signals[2] = {queueTimeline_, signal ? signal->handle() : VK_NULL_HANDLE};
  uint64_t signalValues[2] = {serial, signalValue};
  VkSemaphore waitSem = wait ? wait->handle() : VK_NULL_HANDLE;
  VkPipelineStageFlags waitStage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
  VkTimelineSemaphoreSubmitInfo ti{};
  ti.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO;
  ti.waitSemaphoreValueCount = wait ? 1 : 0;
  ti.pWaitSemaphoreValues = &waitValue;
  ti.signalSemaphoreValueCount = signal ? 2 : 1;
  ti.pSignalSemaphoreValues = signalValues;
  VkSubmitInfo si{};
  si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  si.pNext = &ti;
  si.waitSemaphoreCount = wait ? 1 : 0;
  si.pWaitSemaphores = &waitSem;
  si.pWaitDstStageMask = &waitStage;
  si.commandBufferCount = 1;
  si.pCommandBuffers = &run.cb;
  si.signalSemaphoreCount = signal ? 2 : 1;
  si.pSignalSemaphores = signals;
  if (VkResult r = api().vkQueueSubmit(queue_, 1, &si, VK_NULL_HANDLE); r != VK_SUCCESS) {
    --serial_;
    discard(run);
    return vkError("vkQueueSubmit", r);
  }
  inFlight_.push_back({serial, run.cb, run.pool});
  run.cb = VK_NULL_HANDLE;
  run.pool = VK_NULL_HANDLE;
  for (VulkanBuffer* b : run.used) b->lastUse = serial;
  return serial;
}

// A submission is a sequence of pieces: runs of device commands, each one VkCommandBuffer
// and one vkQueueSubmit, and dispatches of `ref` executables, which run on the host once the
// runs before them have finished. Every run is recorded (and so every command checked) before
// anything reaches the queue. The submission's wait is on the first run when it comes first
// (else the host waits before the first ref dispatch); its signal is on the last run when it
// comes last (else the host signals after the last ref dispatch).
Status VulkanDevice::submit(CommandBuffer& cb, const Semaphore* wait, uint64_t waitValue,
                            Semaphore& signal, uint64_t signalValue) {
  Status s = [&]() -> Status {
    KILN_CHECK(alive());
    auto* hcb = dynamic_cast<host::HostCommandBuffer*>(&cb);
    if (!hcb) return error(loc(), "command buffer was not created by " + id_.str());
    const std::vector<Command>& commands = hcb->commands();
    auto interpreted = [](const Command& c) -> const ref::RefExecutable* {
      return c.kind == Command::Dispatch ? dynamic_cast<const ref::RefExecutable*>(c.exe) : nullptr;
    };
    // Pieces: [begin, end) of device commands, or one ref dispatch.
    struct Piece {
      size_t begin, end;
      const ref::RefExecutable* exe;
      Recorded run;
    };
    std::vector<Piece> pieces;
    for (size_t i = 0; i < commands.size(); ++i) {
      if (const ref::RefExecutable* exe = interpreted(commands[i])) {
        KILN_CHECK(ref::checkInterpreted(*this, *exe, commands[i]));
        pieces.push_back({i, i + 1, exe, {}});
      } else if (pieces.empty() || pieces.back().exe) {
        pieces.push_back({i, i + 1, nullptr, {}});
      } else {
        pieces.back().end = i + 1;
      }
    }
    if (pieces.empty()) pieces.push_back({0, 0, nullptr, {}}); // still waits and signals
    auto* gpuWait = dynamic_cast<const VulkanSemaphore*>(wait);
    if (gpuWait && &gpuWait->owner() != this) gpuWait = nullptr;
    // A semaphore of another device is waited for on the host.
    if (wait && !gpuWait) KILN_CHECK(wait->wait(waitValue));
    auto* gpuSignal = dynamic_cast<VulkanSemaphore*>(&signal);
    if (gpuSignal && &gpuSignal->owner() != this) gpuSignal = nullptr;

    auto discardAll = [&] {
      std::lock_guard<std::mutex> lock(queueMu_);
      for (Piece& p : pieces) discard(p.run);
    };
    {
      std::lock_guard<std::mutex> lock(queueMu_);
      reclaim();
      for (Piece& p : pieces) {
        if (p.exe) continue;
        Result<Recorded> run = recordRun(Commands(commands).subspan(p.begin, p.end - p.begin));
        if (!run.ok()) {
          for (Piece& q : pieces) discard(q.run);
          return run.diags();
        }
        p.run = run.take();
      }
    }
    uint64_t serial = 0; // of the last run submitted
    bool signaled = false;
    for (size_t i = 0; i < pieces.size(); ++i) {
      Piece& p = pieces[i];
      Status step = [&]() -> Status {
        if (!p.exe) {
          bool last = i + 1 == pieces.size();
          KILN_TRY(serial, submitRecorded(p.run, gpuWait, waitValue, last ? gpuSignal : nullptr,
                                          signalValue));
          if (p.run.queries) {
            KILN_CHECK(waitSerial(serial));
            KILN_CHECK(reportTimes(p.run));
          }
          signaled = last && gpuSignal;
          gpuWait = nullptr;
          return ok();
        }
        if (gpuWait) KILN_CHECK(gpuWait->wait(waitValue));
        gpuWait = nullptr;
        KILN_CHECK(waitSerial(serial));
        return ref::runInterpreted(*this, *p.exe, commands[p.begin]);
      }();
      if (!step.ok()) {
        discardAll();
        return step;
      }
    }
    if (!signaled) {
      KILN_CHECK(waitSerial(serial));
      signal.signal(signalValue);
    }
    return ok();
  }();
  if (!s.ok()) signal.fail(s.diags());
  return s;
}

bool VulkanDevice::setProfiler(DispatchProfiler* profiler) {
  if (profiler && props_.timestampBits == 0) return false;
  profiler_ = profiler;
  return true;
}

Status VulkanDevice::reportTimes(Recorded& run) {
  std::vector<uint64_t> ticks(2 * run.timed.size());
  VkResult r = api().vkGetQueryPoolResults(
      device_, run.queries, 0, static_cast<uint32_t>(ticks.size()), ticks.size() * 8, ticks.data(),
      8, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
  api().vkDestroyQueryPool(device_, run.queries, nullptr);
  run.queries = VK_NULL_HANDLE;
  if (r != VK_SUCCESS) return vkError("vkGetQueryPoolResults", r);
  uint64_t mask =
      props_.timestampBits >= 64 ? ~uint64_t{0} : (uint64_t{1} << props_.timestampBits) - 1;
  double nsPerTick = props_.props.limits.timestampPeriod;
  for (size_t i = 0; i < run.timed.size(); ++i) {
    const Command& c = *run.timed[i];
    uint64_t elapsed = (ticks[2 * i + 1] - ticks[2 * i]) & mask;
    if (profiler_)
      profiler_->record(*c.exe, c.kernel, c.workgroups, double(elapsed) * nsPerTick * 1e-9);
  }
  return ok();
}

// --- semaphores

VulkanSemaphore::VulkanSemaphore(std::shared_ptr<VulkanDevice> device, VkSemaphore sem)
    : device_(std::move(device)), sem_(sem) {}

VulkanSemaphore::~VulkanSemaphore() {
  if (!sem_ || processExiting()) return;
  // Submissions that signal it must be done with it; a lost device runs nothing more.
  if (device_->alive().ok()) device_->api().vkDeviceWaitIdle(device_->handle());
  device_->api().vkDestroySemaphore(device_->handle(), sem_, nullptr);
}

uint64_t VulkanSemaphore::value() const {
  uint64_t v = 0;
  if (sem_) device_->api().vkGetSemaphoreCounterValue(device_->handle(), sem_, &v);
  return v;
}

void VulkanSemaphore::signal(uint64_t value) {
  if (!sem_ || value <= this->value()) return;
  VkSemaphoreSignalInfo si{};
  si.sType = VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO;
  si.semaphore = sem_;
  si.value = value;
  if (VkResult r = device_->api().vkSignalSemaphore(device_->handle(), &si); r != VK_SUCCESS)
    fail(Diags{{device_->vkError("vkSignalSemaphore", r)}});
}

void VulkanSemaphore::fail(Diags why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_) return;
  failed_ = true;
  why_ = std::move(why);
}

Status VulkanSemaphore::wait(uint64_t target) const {
  // Short waits, so that a failure reported from another thread ends this one.
  constexpr uint64_t kSliceNs = 50'000'000;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed_) return why_;
    }
    KILN_CHECK(device_->alive());
    VkResult r = device_->waitTimeline(sem_, target, kSliceNs);
    if (r == VK_SUCCESS) return ok();
    if (r != VK_TIMEOUT) return device_->vkError("vkWaitSemaphores", r);
  }
}

} // namespace kiln::hal::vulkan
