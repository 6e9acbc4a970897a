// Types of IR values: tensors with static, symbolic or unknown dims, and the kernel-level
// types (buffers, index, scalars, vectors).
//
// Text: `tensor<2x{seq}x?xf32>`; a 0-d tensor is `tensor<f32>`. A dim is a static size,
// a symbolic expression in braces, or `?` (not yet inferred: shape-infer replaces it).
// Kernel level: `buffer<64x{seq}xf32>` (a global binding), `buffer<64x64xf16, shared>`
// (workgroup shared memory), `buffer<4xf64, private>` (per-thread), `index` (a signed
// 64-bit index), a scalar by its element type (`f32`, `i1`), `vector<4xf32>`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/core/elem_type.h"
#include "ir/core/symexpr.h"

namespace kiln {

class Dim {
public:
  Dim(int64_t size) : expr_(SymExpr::constant(size)) {} // NOLINT: implicit on purpose
  Dim(SymExpr e) : expr_(std::move(e)) {}               // NOLINT
  static Dim unknown() { return Dim(); }

  bool isUnknown() const { return !expr_.has_value(); }
  bool isStatic() const { return expr_ && expr_->isConstant(); }
  // Only for static dims.
  int64_t value() const { return *expr_->constantValue(); }
  // Only for known dims.
  const SymExpr& expr() const { return *expr_; }

  std::string str() const; // "4", "{seq}", "?"
  bool operator==(const Dim& o) const { return expr_ == o.expr_; }
  bool operator!=(const Dim& o) const { return !(*this == o); }

private:
  Dim() = default;
  std::optional<SymExpr> expr_;
};

using Shape = std::vector<Dim>;

// What a Type describes; tensors are the default.
enum class TypeKind : uint8_t { Tensor, Buffer, Index, Scalar, Vector };
// Where a buffer lives.
enum class MemSpace : uint8_t { Global, Shared, Private };

class Type {
public:
  Type() = default;
  Type(ElemType elem, Shape shape) : elem_(elem), shape_(std::move(shape)) {}
  static Type tensor(ElemType elem, const std::vector<int64_t>& dims);
  static Type buffer(ElemType elem, Shape shape, MemSpace space = MemSpace::Global);
  static Type index();
  static Type scalar(ElemType elem);
  static Type vector(ElemType elem, int64_t lanes);

  TypeKind kind() const { return kind_; }
  bool isTensor() const { return kind_ == TypeKind::Tensor; }
  bool isBuffer() const { return kind_ == TypeKind::Buffer; }
  bool isIndex() const { return kind_ == TypeKind::Index; }
  bool isScalar() const { return kind_ == TypeKind::Scalar; }
  bool isVector() const { return kind_ == TypeKind::Vector; }
  MemSpace space() const { return space_; }

  ElemType elem() const { return elem_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  const Dim& dim(int64_t i) const { return shape_[static_cast<size_t>(i)]; }
  bool isStatic() const;       // every dim static
  bool hasUnknownDims() const; // some dim is `?`
  // Static dims as integers; only when isStatic().
  std::vector<int64_t> staticShape() const;
  // Product of dims when static.
  std::optional<int64_t> numElements() const;
  Type withElem(ElemType e) const {
    Type t = *this;
    t.elem_ = e;
    return t;
  }
  Type withShape(Shape s) const {
    Type t = *this;
    t.shape_ = std::move(s);
    return t;
  }

  std::string str() const;
  uint64_t hash() const;
  bool operator==(const Type& o) const {
    return kind_ == o.kind_ && space_ == o.space_ && elem_ == o.elem_ && shape_ == o.shape_;
  }
  bool operator!=(const Type& o) const { return !(*this == o); }

private:
  TypeKind kind_ = TypeKind::Tensor;
  MemSpace space_ = MemSpace::Global;
  ElemType elem_ = ElemType::F32;
  Shape shape_;
};

std::string_view memSpaceName(MemSpace s);

} // namespace kiln
