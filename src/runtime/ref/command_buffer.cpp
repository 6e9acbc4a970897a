// RefCommandBuffer: records commands; RefDevice::submit runs them in order.
#include "runtime/ref/ref.h"

namespace kiln::hal::ref {

void RefCommandBuffer::dispatch(const Executable& exe, size_t kernel, std::vector<Binding> inputs,
                                std::vector<Binding> outputs, SymbolBinding dims) {
  Command c;
  c.kind = Command::Dispatch;
  c.exe = &exe;
  c.kernel = kernel;
  c.inputs = std::move(inputs);
  c.outputs = std::move(outputs);
  c.dims = std::move(dims);
  commands_.push_back(std::move(c));
}

void RefCommandBuffer::copy(Buffer& src, uint64_t srcOffset, Buffer& dst, uint64_t dstOffset,
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

void RefCommandBuffer::fill(Buffer& dst, uint64_t offset, uint64_t bytes, uint8_t pattern) {
  Command c;
  c.kind = Command::Fill;
  c.dst = &dst;
  c.dstOffset = offset;
  c.bytes = bytes;
  c.pattern = pattern;
  commands_.push_back(std::move(c));
}

// Commands run one after another on ref, so a barrier has nothing left to order.
void RefCommandBuffer::barrier() { commands_.push_back(Command{}); }

} // namespace kiln::hal::ref
