// Printing and queries for Dim and Type.
#include "ir/core/types.h"

#include <xxhash.h>

namespace kiln {

std::string Dim::str() const {
  if (isUnknown()) return "?";
  if (isStatic()) return std::to_string(value());
  return "{" + expr_->str() + "}";
}

Type Type::tensor(ElemType elem, const std::vector<int64_t>& dims) {
  Shape s;
  s.reserve(dims.size());
  for (int64_t d : dims) s.emplace_back(d);
  return Type(elem, std::move(s));
}

Type Type::buffer(ElemType elem, Shape shape, MemSpace space) {
  Type t(elem, std::move(shape));
  t.kind_ = TypeKind::Buffer;
  t.space_ = space;
  return t;
}

Type Type::index() {
  Type t(ElemType::I64, {});
  t.kind_ = TypeKind::Index;
  return t;
}

Type Type::scalar(ElemType elem) {
  Type t(elem, {});
  t.kind_ = TypeKind::Scalar;
  return t;
}

Type Type::vector(ElemType elem, int64_t lanes) {
  Type t(elem, {Dim(lanes)});
  t.kind_ = TypeKind::Vector;
  return t;
}

std::string_view memSpaceName(MemSpace s) {
  switch (s) {
  case MemSpace::Global: return "global";
  case MemSpace::Shared: return "shared";
  case MemSpace::Private: return "private";
  }
  return "?";
}

bool Type::isStatic() const {
  for (const Dim& d : shape_)
    if (!d.isStatic()) return false;
  return true;
}

bool Type::hasUnknownDims() const {
  for (const Dim& d : shape_)
    if (d.isUnknown()) return true;
  return false;
}

std::vector<int64_t> Type::staticShape() const {
  std::vector<int64_t> out;
  out.reserve(shape_.size());
  for (const Dim& d : shape_) out.push_back(d.value());
  return out;
}

std::optional<int64_t> Type::numElements() const {
  if (!isStatic()) return std::nullopt;
  int64_t n = 1;
  for (const Dim& d : shape_)
    if (__builtin_mul_overflow(n, d.value(), &n)) return std::nullopt;
  return n;
}

std::string Type::str() const {
  switch (kind_) {
  case TypeKind::Index: return "index";
  case TypeKind::Scalar: return std::string(elemTypeName(elem_));
  case TypeKind::Tensor:
  case TypeKind::Buffer:
  case TypeKind::Vector: break;
  }
  std::string s = kind_ == TypeKind::Tensor   ? "tensor<"
                  : kind_ == TypeKind::Buffer ? "buffer<"
                                              : "vector<";
  for (const Dim& d : shape_) s += d.str() + "x";
  s += elemTypeName(elem_);
  if (kind_ == TypeKind::Buffer && space_ != MemSpace::Global)
    s += ", " + std::string(memSpaceName(space_));
  return s + ">";
}

uint64_t Type::hash() const {
  uint8_t tag[3] = {static_cast<uint8_t>(elem_), static_cast<uint8_t>(kind_),
                    static_cast<uint8_t>(space_)};
  uint64_t h = XXH3_64bits_withSeed(tag, sizeof(tag), shape_.size());
  for (const Dim& d : shape_) {
    uint64_t dh = d.isUnknown() ? 0x9e3779b97f4a7c15ull : d.expr().hash();
    h = XXH3_64bits_withSeed(&dh, sizeof(dh), h);
  }
  return h;
}

} // namespace kiln
