// HostBuffer: host memory owned by one host device; every host access is range-checked.
#include <cstdlib>
#include <cstring>

#include "runtime/host/host.h"

namespace kiln::hal::host {

void HostMemoryFree::operator()(uint8_t* p) const {
  if (owned) std::free(p);
}

HostBuffer::~HostBuffer() {
  if (data_.get_deleter().owned) device_.recycle(std::move(data_), bytes_);
}

Device& HostBuffer::device() { return device_; }

static Status checkRange(const HostDevice& d, uint64_t offset, uint64_t bytes, uint64_t size) {
  if (offset > size || bytes > size - offset)
    return error(Loc::named(d.id().str()), "buffer access of " + std::to_string(bytes) +
                                               " bytes at offset " + std::to_string(offset) +
                                               " is outside the " + std::to_string(size) +
                                               "-byte buffer");
  return ok();
}

Status HostBuffer::write(uint64_t offset, const void* src, uint64_t bytes) {
  KILN_CHECK(checkRange(device_, offset, bytes, bytes_));
  if (bytes) std::memcpy(data_.get() + offset, src, bytes);
  return ok();
}

Status HostBuffer::read(uint64_t offset, void* dst, uint64_t bytes) const {
  KILN_CHECK(checkRange(device_, offset, bytes, bytes_));
  if (bytes) std::memcpy(dst, data_.get() + offset, bytes);
  return ok();
}

} // namespace kiln::hal::host
