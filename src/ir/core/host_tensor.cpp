// HostTensor storage and element access.
#include "ir/core/host_tensor.h"

#include <cmath>
#include <cstring>

namespace kiln {

HostTensor::HostTensor(ElemType elem, std::vector<int64_t> shape)
    : HostTensor(elem, std::move(shape), true) {}

HostTensor HostTensor::uninitialized(ElemType elem, std::vector<int64_t> shape) {
  return HostTensor(elem, std::move(shape), false);
}

HostTensor::HostTensor(ElemType elem, std::vector<int64_t> shape, bool zero)
    : elem_(elem), shape_(std::move(shape)) {
  size_t bytes = byteSize();
  // 64-byte aligned storage, rounded up so an empty tensor still has a valid pointer.
  size_t words = (bytes + 63) / 64 + 1;
  uint8_t* raw = zero ? new (std::align_val_t(64)) uint8_t[words * 64]()
                      : new (std::align_val_t(64)) uint8_t[words * 64];
  auto storage = std::shared_ptr<uint8_t[]>(
      raw, [](uint8_t* p) { operator delete[](p, std::align_val_t(64)); });
  data_ = storage.get();
  owner_ = std::shared_ptr<const void>(storage, storage.get());
}

HostTensor HostTensor::view(ElemType elem, std::vector<int64_t> shape, const void* data,
                            std::shared_ptr<const void> owner) {
  HostTensor t;
  t.elem_ = elem;
  t.shape_ = std::move(shape);
  t.data_ = static_cast<const uint8_t*>(data);
  t.owner_ = std::move(owner);
  t.writable_ = false;
  return t;
}

HostTensor HostTensor::wrap(ElemType elem, std::vector<int64_t> shape, void* data,
                            std::shared_ptr<const void> owner) {
  HostTensor t = view(elem, std::move(shape), data, std::move(owner));
  t.writable_ = true;
  return t;
}

int64_t HostTensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

template <typename T> static T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T> static void store(uint8_t* p, T v) { std::memcpy(p, &v, sizeof(T)); }

double HostTensor::getF(int64_t i) const {
  const uint8_t* p = data_ + i * elemTypeBytes(elem_);
  switch (elem_) {
  case ElemType::F64: return load<double>(p);
  case ElemType::F32: return load<float>(p);
  case ElemType::F16: return halfToFloat(load<uint16_t>(p));
  case ElemType::BF16: return bf16ToFloat(load<uint16_t>(p));
  case ElemType::I1: return load<uint8_t>(p) ? 1.0 : 0.0;
  case ElemType::I8: return load<int8_t>(p);
  case ElemType::I16: return load<int16_t>(p);
  case ElemType::I32: return load<int32_t>(p);
  case ElemType::I64: return static_cast<double>(load<int64_t>(p));
  case ElemType::U8: return load<uint8_t>(p);
  case ElemType::U16: return load<uint16_t>(p);
  case ElemType::U32: return load<uint32_t>(p);
  case ElemType::U64: return static_cast<double>(load<uint64_t>(p));
  }
  return 0;
}

int64_t HostTensor::getI(int64_t i) const {
  const uint8_t* p = data_ + i * elemTypeBytes(elem_);
  switch (elem_) {
  case ElemType::I1: return load<uint8_t>(p) ? 1 : 0;
  case ElemType::I8: return load<int8_t>(p);
  case ElemType::I16: return load<int16_t>(p);
  case ElemType::I32: return load<int32_t>(p);
  case ElemType::I64: return load<int64_t>(p);
  case ElemType::U8: return load<uint8_t>(p);
  case ElemType::U16: return load<uint16_t>(p);
  case ElemType::U32: return load<uint32_t>(p);
  case ElemType::U64: return static_cast<int64_t>(load<uint64_t>(p)); // the bits
  default: return static_cast<int64_t>(roundToElem(ElemType::I64, getF(i)));
  }
}

void HostTensor::setF(int64_t i, double v) {
  uint8_t* p = mutableData() + i * elemTypeBytes(elem_);
  switch (elem_) {
  case ElemType::F64: store<double>(p, v); return;
  case ElemType::F32: store<float>(p, static_cast<float>(v)); return;
  case ElemType::F16: store<uint16_t>(p, floatToHalf(static_cast<float>(v))); return;
  case ElemType::BF16: store<uint16_t>(p, floatToBf16(static_cast<float>(v))); return;
  case ElemType::I64: setI(i, static_cast<int64_t>(roundToElem(ElemType::I64, v))); return;
  case ElemType::U64: {
    double r = roundToElem(ElemType::U64, v);
    store<uint64_t>(p, r >= 0x1p63 ? static_cast<uint64_t>(r)
                                   : static_cast<uint64_t>(static_cast<int64_t>(r)));
    return;
  }
  default: setI(i, static_cast<int64_t>(roundToElem(elem_, v))); return;
  }
}

void HostTensor::setI(int64_t i, int64_t v) {
  uint8_t* p = mutableData() + i * elemTypeBytes(elem_);
  switch (elem_) {
  case ElemType::I1: store<uint8_t>(p, v != 0 ? 1 : 0); return;
  case ElemType::I8: store<int8_t>(p, static_cast<int8_t>(v)); return;
  case ElemType::I16: store<int16_t>(p, static_cast<int16_t>(v)); return;
  case ElemType::I32: store<int32_t>(p, static_cast<int32_t>(v)); return;
  case ElemType::I64: store<int64_t>(p, v); return;
  case ElemType::U8: store<uint8_t>(p, static_cast<uint8_t>(v)); return;
  case ElemType::U16: store<uint16_t>(p, static_cast<uint16_t>(v)); return;
  case ElemType::U32: store<uint32_t>(p, static_cast<uint32_t>(v)); return;
  case ElemType::U64: store<uint64_t>(p, static_cast<uint64_t>(v)); return;
  default: setF(i, static_cast<double>(v)); return;
  }
}

std::vector<int64_t> HostTensor::strides() const {
  std::vector<int64_t> s(shape_.size(), 1);
  for (size_t i = shape_.size(); i-- > 1;) s[i - 1] = s[i] * shape_[i];
  return s;
}

bool HostTensor::identical(const HostTensor& o) const {
  return elem_ == o.elem_ && shape_ == o.shape_ &&
         (byteSize() == 0 || std::memcmp(data_, o.data_, byteSize()) == 0);
}

HostTensor HostTensor::clone() const {
  HostTensor t(elem_, shape_);
  if (byteSize()) std::memcpy(t.mutableData(), data_, byteSize());
  return t;
}

} // namespace kiln
