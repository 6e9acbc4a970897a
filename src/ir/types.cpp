// Printing and queries for Dim and Type.
#include "ir/types.h"

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
  std::string s = "tensor<";
  for (const Dim& d : shape_) s += d.str() + "x";
  s += elemTypeName(elem_);
  return s + ">";
}

uint64_t Type::hash() const {
  uint64_t h = XXH3_64bits_withSeed(&elem_, sizeof(elem_), shape_.size());
  for (const Dim& d : shape_) {
    uint64_t dh = d.isUnknown() ? 0x9e3779b97f4a7c15ull : d.expr().hash();
    h = XXH3_64bits_withSeed(&dh, sizeof(dh), h);
  }
  return h;
}

} // namespace kiln
