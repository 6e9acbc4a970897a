// The op table built from ops.def.
#include "ir/core/ops.h"

#include <map>
#include <string>

namespace kiln {

static std::vector<AttrSpec> parseAttrSpecs(std::string_view spec) {
  std::vector<AttrSpec> out;
  size_t i = 0;
  while (i < spec.size()) {
    while (i < spec.size() && spec[i] == ' ') ++i;
    size_t j = spec.find(' ', i);
    if (j == std::string_view::npos) j = spec.size();
    std::string_view item = spec.substr(i, j - i);
    i = j;
    if (item.empty()) continue;
    size_t colon = item.find(':');
    std::string_view name = item.substr(0, colon);
    std::string_view kind = item.substr(colon + 1);
    bool optional = !kind.empty() && kind.back() == '?';
    if (optional) kind.remove_suffix(1);
    static const std::map<std::string_view, AttrKind> kinds = {
        {"int", AttrKind::Int},     {"float", AttrKind::Float},   {"str", AttrKind::Str},
        {"ints", AttrKind::Ints},   {"floats", AttrKind::Floats}, {"type", AttrKind::Type},
        {"dense", AttrKind::Dense}, {"strs", AttrKind::Strs},     {"op", AttrKind::Op}};
    out.push_back({name, kinds.at(kind), optional});
  }
  return out;
}

const std::vector<OpInfo>& allOps() {
  static const std::vector<OpInfo> table = {
#define KILN_OP(id, text, level, minOps, maxOps, nres, traits, attrs, meaning)                     \
  OpInfo{OpKind::id, text,   OpLevel::level,        minOps, maxOps,                                \
         nres,       traits, parseAttrSpecs(attrs), meaning},
#include "ir/core/ops.def"
#undef KILN_OP
  };
  return table;
}

const OpInfo& opInfo(OpKind kind) { return allOps()[static_cast<size_t>(kind)]; }

bool isTranscendental(OpKind kind) {
  switch (kind) {
  case OpKind::Sqrt:
  case OpKind::Rsqrt:
  case OpKind::Reciprocal:
  case OpKind::Floor:
  case OpKind::Ceil:
  case OpKind::Round:
  case OpKind::IsNan:
  case OpKind::IsInf: return false;
  case OpKind::Pow: return true;
  default: {
    const OpInfo& i = opInfo(kind);
    return i.has(kElementwise) && i.has(kFloatOnly);
  }
  }
}

std::optional<OpKind> lookupOp(std::string_view name) {
  static const std::map<std::string_view, OpKind> byName = [] {
    std::map<std::string_view, OpKind> m;
    for (const OpInfo& info : allOps()) m.emplace(info.name, info.kind);
    return m;
  }();
  auto it = byName.find(name);
  if (it == byName.end()) return std::nullopt;
  return it->second;
}

size_t numRegionsOf(OpKind kind) {
  switch (kind) {
  case OpKind::For: return 1;
  case OpKind::If: return 2;
  default: return 0;
  }
}

std::string_view attrKindName(AttrKind kind) {
  switch (kind) {
  case AttrKind::Int: return "int";
  case AttrKind::Float: return "float";
  case AttrKind::Str: return "str";
  case AttrKind::Ints: return "ints";
  case AttrKind::Floats: return "floats";
  case AttrKind::Type: return "type";
  case AttrKind::Dense: return "dense";
  case AttrKind::Strs: return "strs";
  case AttrKind::Op: return "op";
  }
  return "?";
}

} // namespace kiln
