// HostCommandBuffer: records commands; HostDevice::submit runs them in order.
#include "runtime/host/host.h"

namespace kiln::hal::host {

void HostCommandBuffer::dispatch(const Executable& exe, size_t kernel, Workgroups workgroups,
                                 std::vector<int64_t> pushConstants,
                                 std::vector<Binding> bindings) {
  Command c;
  c.kind = Command::Dispatch;
  c.exe = &exe;
  c.kernel = kernel;
  c.workgroups = workgroups;
  c.pushConstants = std::move(pushConstants);
  c.bindings = std::move(bindings);
  commands_.push_back(std::move(c));
}

void HostCommandBuffer::copy(Buffer& src, uint64_t srcOffset, Buffer& dst, uint64_t dstOffset,
                             uint64_t bytes) {
  Command c;
  c.kind = Command::Copy;
  c.src = &src;
  c.dst = &dst;
  c.srcOffset = srcOffset;
  c.dstOffset = dstOffset;
  c.bytes = bytes;
  commands_.push_back(std::move(c));
}

void HostCommandBuffer::fill(Buffer& dst, uint64_t offset, uint64_t bytes, uint8_t pattern) {
  Command c;
  c.kind = Command::Fill;
  c.dst = &dst;
  c.dstOffset = offset;
  c.bytes = bytes;
  c.pattern = pattern;
  commands_.push_back(std::move(c));
}

// Commands run one after another on a host device, so a barrier has nothing left to order.
void HostCommandBuffer::barrier() { commands_.push_back(Command{}); }

} // namespace kiln::hal::host
