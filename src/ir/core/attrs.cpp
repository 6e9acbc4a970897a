// Attribute maps: lookup, equality and hashing.
#include "ir/core/attrs.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <xxhash.h>

namespace kiln {

AttrKind attrKindOf(const AttrValue& v) {
  switch (v.index()) {
  case 0: return AttrKind::Int;
  case 1: return AttrKind::Float;
  case 2: return AttrKind::Str;
  case 3: return AttrKind::Ints;
  case 4: return AttrKind::Floats;
  case 5: return AttrKind::Type;
  case 6: return AttrKind::Dense;
  case 7: return AttrKind::Strs;
  default: return AttrKind::Op;
  }
}

bool attrEqual(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (auto* x = std::get_if<double>(&a))
    return std::bit_cast<uint64_t>(*x) == std::bit_cast<uint64_t>(std::get<double>(b));
  if (auto* x = std::get_if<std::vector<double>>(&a)) {
    const auto& y = std::get<std::vector<double>>(b);
    return x->size() == y.size() &&
           (x->empty() || std::memcmp(x->data(), y.data(), x->size() * sizeof(double)) == 0);
  }
  if (auto* x = std::get_if<HostTensor>(&a)) return x->identical(std::get<HostTensor>(b));
  if (auto* x = std::get_if<int64_t>(&a)) return *x == std::get<int64_t>(b);
  if (auto* x = std::get_if<std::string>(&a)) return *x == std::get<std::string>(b);
  if (auto* x = std::get_if<std::vector<int64_t>>(&a))
    return *x == std::get<std::vector<int64_t>>(b);
  if (auto* x = std::get_if<std::vector<std::string>>(&a))
    return *x == std::get<std::vector<std::string>>(b);
  if (auto* x = std::get_if<OpKind>(&a)) return *x == std::get<OpKind>(b);
  return std::get<ElemType>(a) == std::get<ElemType>(b);
}

uint64_t attrHash(const AttrValue& v) {
  uint64_t seed = v.index();
  return std::visit(
      [&](const auto& x) -> uint64_t {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double> ||
                      std::is_same_v<T, ElemType> || std::is_same_v<T, OpKind>) {
          return XXH3_64bits_withSeed(&x, sizeof(x), seed);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return XXH3_64bits_withSeed(x.data(), x.size(), seed);
        } else if constexpr (std::is_same_v<T, HostTensor>) {
          uint64_t h = XXH3_64bits_withSeed(x.shape().data(), x.shape().size() * sizeof(int64_t),
                                            seed + static_cast<uint64_t>(x.elem()));
          return XXH3_64bits_withSeed(x.data(), x.byteSize(), h);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          uint64_t h = seed;
          for (const std::string& s : x) h = XXH3_64bits_withSeed(s.data(), s.size(), h + s.size());
          return h;
        } else {
          return XXH3_64bits_withSeed(x.data(), x.size() * sizeof(x[0]), seed);
        }
      },
      v);
}

void Attrs::set(std::string name, AttrValue value) {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const auto& e, const std::string& n) { return e.first < n; });
  if (it != entries_.end() && it->first == name)
    it->second = std::move(value);
  else
    entries_.emplace(it, std::move(name), std::move(value));
}

const AttrValue* Attrs::find(std::string_view name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const auto& e, std::string_view n) { return e.first < n; });
  if (it != entries_.end() && it->first == name) return &it->second;
  return nullptr;
}

void Attrs::erase(std::string_view name) {
  std::erase_if(entries_, [&](const auto& e) { return e.first == name; });
}

template <typename T> static const T* getAs(const Attrs& a, std::string_view name) {
  const AttrValue* v = a.find(name);
  return v ? std::get_if<T>(v) : nullptr;
}

int64_t Attrs::getInt(std::string_view name, int64_t fallback) const {
  auto* v = getAs<int64_t>(*this, name);
  return v ? *v : fallback;
}
double Attrs::getFloat(std::string_view name, double fallback) const {
  if (auto* v = getAs<double>(*this, name)) return *v;
  if (auto* v = getAs<int64_t>(*this, name)) return static_cast<double>(*v);
  return fallback;
}
std::string Attrs::getStr(std::string_view name, std::string fallback) const {
  auto* v = getAs<std::string>(*this, name);
  return v ? *v : fallback;
}
std::vector<int64_t> Attrs::getInts(std::string_view name) const {
  auto* v = getAs<std::vector<int64_t>>(*this, name);
  return v ? *v : std::vector<int64_t>{};
}
std::vector<double> Attrs::getFloats(std::string_view name) const {
  auto* v = getAs<std::vector<double>>(*this, name);
  return v ? *v : std::vector<double>{};
}
std::vector<std::string> Attrs::getStrs(std::string_view name) const {
  auto* v = getAs<std::vector<std::string>>(*this, name);
  return v ? *v : std::vector<std::string>{};
}
ElemType Attrs::getType(std::string_view name, ElemType fallback) const {
  auto* v = getAs<ElemType>(*this, name);
  return v ? *v : fallback;
}
std::optional<OpKind> Attrs::getOp(std::string_view name) const {
  auto* v = getAs<OpKind>(*this, name);
  return v ? std::optional<OpKind>(*v) : std::nullopt;
}
const HostTensor* Attrs::getDense(std::string_view name) const {
  return getAs<HostTensor>(*this, name);
}

bool Attrs::operator==(const Attrs& o) const {
  if (entries_.size() != o.entries_.size()) return false;
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].first != o.entries_[i].first ||
        !attrEqual(entries_[i].second, o.entries_[i].second))
      return false;
  return true;
}

uint64_t Attrs::hash() const {
  uint64_t h = entries_.size();
  for (const auto& [name, value] : entries_) {
    h = XXH3_64bits_withSeed(name.data(), name.size(), h);
    uint64_t vh = attrHash(value);
    h = XXH3_64bits_withSeed(&vh, sizeof(vh), h);
  }
  return h;
}

} // namespace kiln
