// Op attributes: a small sorted map from name to a typed value.
//
// Text (inside `{...}` after the operands): `axes = [0, 2]`, `keepdims = 1`,
// `value = 1.5` (floats always print with a '.', an exponent, or as nan/inf/-inf),
// `mode = "reflect"`, `to = f16`, `value = dense<[[1, 2], [3, 4]]> : tensor<2x2xi64>`
// (a dense value with every element equal prints as `dense<7> : tensor<...>`),
// `workgroups = ["n ceildiv 64", "1", "1"]` (a list of strings), `fn = exp` (an op kind:
// a kernel's `compute` names the elementwise op it applies).
// An empty list `[]` is an int list.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ir/core/elem_type.h"
#include "ir/core/host_tensor.h"
#include "ir/core/ops.h"

namespace kiln {

using AttrValue =
    std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>, ElemType,
                 HostTensor, std::vector<std::string>, OpKind>;

AttrKind attrKindOf(const AttrValue& v);
// Equality that compares dense tensors by bytes and floats bitwise (NaN == NaN).
bool attrEqual(const AttrValue& a, const AttrValue& b);
uint64_t attrHash(const AttrValue& v);

class Attrs {
public:
  void set(std::string name, AttrValue value);
  bool has(std::string_view name) const { return find(name) != nullptr; }
  const AttrValue* find(std::string_view name) const;
  void erase(std::string_view name);

  // Typed getters; the fallback is returned when the attribute is absent or of another
  // kind (the verifier reports kind mismatches, so passes may rely on these).
  int64_t getInt(std::string_view name, int64_t fallback = 0) const;
  double getFloat(std::string_view name, double fallback = 0) const;
  std::string getStr(std::string_view name, std::string fallback = "") const;
  std::vector<int64_t> getInts(std::string_view name) const;
  std::vector<double> getFloats(std::string_view name) const;
  std::vector<std::string> getStrs(std::string_view name) const;
  ElemType getType(std::string_view name, ElemType fallback = ElemType::F32) const;
  std::optional<OpKind> getOp(std::string_view name) const;
  const HostTensor* getDense(std::string_view name) const;

  // Sorted by name, so printing and hashing are deterministic.
  const std::vector<std::pair<std::string, AttrValue>>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  bool operator==(const Attrs& o) const;
  uint64_t hash() const;

private:
  std::vector<std::pair<std::string, AttrValue>> entries_;
};

} // namespace kiln
