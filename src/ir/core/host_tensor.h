// HostTensor: a tensor's concrete data in host memory, with a concrete shape.
//
// It is the value the reference interpreter computes with, the payload of dense
// constants, and what .npy and safetensors files read into. Data is shared (copies of a
// HostTensor alias the same bytes); mutate only a tensor you just created. Weights
// loaded by mmap keep the mapping alive through the shared owner.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ir/core/elem_type.h"

namespace kiln {

class HostTensor {
public:
  HostTensor() = default;
  // Zero-filled tensor of that element type and shape.
  HostTensor(ElemType elem, std::vector<int64_t> shape);
  // The same without the zero fill, for a tensor about to be overwritten in full (a result
  // read back from a device).
  static HostTensor uninitialized(ElemType elem, std::vector<int64_t> shape);
  // Wraps existing bytes (size must equal numElements * element size); `owner` keeps them
  // alive (a mapping, a buffer).
  static HostTensor view(ElemType elem, std::vector<int64_t> shape, const void* data,
                         std::shared_ptr<const void> owner);
  // The same over memory the caller lets kiln write (a donated argument's result is written
  // into it); view() tensors are read-only to kiln.
  static HostTensor wrap(ElemType elem, std::vector<int64_t> shape, void* data,
                         std::shared_ptr<const void> owner);

  ElemType elem() const { return elem_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numElements() const;
  size_t byteSize() const { return static_cast<size_t>(numElements()) * elemTypeBytes(elem_); }
  const uint8_t* data() const { return data_; }
  uint8_t* mutableData() { return const_cast<uint8_t*>(data_); }
  // Whether kiln may write the storage: tensors it allocated (constructor, clone) and wrap().
  bool writable() const { return writable_; }

  // Element i (flat, C order) as f64 (floats exact, integers may round above 2^53) or as
  // int64 (floats truncate toward zero).
  double getF(int64_t i) const;
  int64_t getI(int64_t i) const;
  // Stores v converted to the element type (roundToElem rules).
  void setF(int64_t i, double v);
  void setI(int64_t i, int64_t v);

  // Row-major strides in elements.
  std::vector<int64_t> strides() const;
  // Same element type, shape and bytes.
  bool identical(const HostTensor& o) const;
  // Deep copy with its own storage.
  HostTensor clone() const;

private:
  HostTensor(ElemType elem, std::vector<int64_t> shape, bool zero);
  ElemType elem_ = ElemType::F32;
  std::vector<int64_t> shape_;
  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;
  bool writable_ = true;
};

} // namespace kiln
