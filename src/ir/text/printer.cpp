// Printer: the canonical text form of modules, functions, ops and attribute values.
//
// Canonical means one spelling per IR: results numbered %0, %1, ... per function,
// attributes in name order, floats in their shortest text that reparses to the same bits
// (with a '.' or exponent so they read back as floats), dense values as a splat whenever
// every element has the same bits. parse(print(m)) therefore prints byte-identically.
#include "ir/text/printer.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <unordered_map>

#include "ir/text/lexer.h"

namespace kiln {

namespace {

// Makes shortest-form numbers read back as floats: `1` becomes `1.0`.
std::string floatLooking(std::string s) {
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string shortest(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string hexBits(uint64_t bits, int bytes) {
  static const char* hex = "0123456789abcdef";
  std::string s = "0x";
  for (int i = bytes * 2 - 1; i >= 0; --i) s += hex[(bits >> (i * 4)) & 15];
  return s;
}

// Bits of the element type's value `v` (v is exactly representable in it).
uint64_t elemBits(double v, ElemType t) {
  switch (t) {
  case ElemType::F64: return std::bit_cast<uint64_t>(v);
  case ElemType::F32: return std::bit_cast<uint32_t>(static_cast<float>(v));
  case ElemType::F16: return floatToHalf(static_cast<float>(v));
  default: return floatToBf16(static_cast<float>(v));
  }
}

// A float of element type `t` whose bits are `bits`, as text the parser reads back to the
// same bits: NaNs other than the one `nan` parses to keep their bits as `nan(0x...)`.
std::string formatFloat(double v, uint64_t bits, ElemType t) {
  if (std::isnan(v)) {
    if (bits == elemBits(std::numeric_limits<double>::quiet_NaN(), t)) return "nan";
    return "nan(" + hexBits(bits, elemTypeBytes(t)) + ")";
  }
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (t == ElemType::F64) return floatLooking(shortest(v));
  if (t == ElemType::F32) {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, static_cast<float>(v));
    return floatLooking(std::string(buf, r.ptr));
  }
  // f16/bf16: the fewest significant digits that round back to the same bits.
  for (int p = 1; p <= 9; ++p) {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, p);
    std::optional<double> d = parseFloatLiteral(std::string_view(buf, r.ptr - buf), ElemType::F64);
    if (!d) continue;
    std::string s = floatLooking(shortest(*d));
    std::optional<double> back = parseFloatLiteral(s, t);
    if (back && elemBits(*back, t) == bits) return s;
  }
  return floatLooking(shortest(v));
}

std::string formatDouble(double v) {
  return formatFloat(v, std::bit_cast<uint64_t>(v), ElemType::F64);
}

uint64_t rawBits(const HostTensor& t, int64_t i) {
  uint64_t bits = 0;
  size_t n = static_cast<size_t>(elemTypeBytes(t.elem()));
  std::memcpy(&bits, t.data() + static_cast<size_t>(i) * n, n); // little-endian host
  return bits;
}

std::string formatElem(const HostTensor& t, int64_t i) {
  if (isFloat(t.elem())) return formatFloat(t.getF(i), rawBits(t, i), t.elem());
  if (t.elem() == ElemType::U64) return std::to_string(static_cast<uint64_t>(t.getI(i)));
  return std::to_string(t.getI(i));
}

void printNested(const HostTensor& t, size_t depth, int64_t& index, std::string& out) {
  if (depth == t.shape().size()) {
    out += formatElem(t, index++);
    return;
  }
  out += '[';
  for (int64_t i = 0; i < t.shape()[depth]; ++i) {
    if (i) out += ", ";
    printNested(t, depth + 1, index, out);
  }
  out += ']';
}

std::string printDense(const HostTensor& t) {
  std::string out = "dense<";
  int64_t n = t.numElements();
  size_t bytes = static_cast<size_t>(elemTypeBytes(t.elem()));
  bool splat = n > 0;
  for (int64_t i = 1; i < n && splat; ++i)
    splat = std::memcmp(t.data(), t.data() + static_cast<size_t>(i) * bytes, bytes) == 0;
  if (splat) {
    out += formatElem(t, 0);
  } else {
    int64_t index = 0;
    printNested(t, 0, index, out);
  }
  return out + "> : " + Type::tensor(t.elem(), t.shape()).str();
}

std::string globalName(std::string_view name) {
  return "@" + (isBareName(name) ? std::string(name) : quoteString(name));
}

std::string printLoc(const Loc& loc) {
  std::string s = "loc(" + quoteString(loc.file);
  if (loc.line != 0) s += ":" + std::to_string(loc.line) + ":" + std::to_string(loc.col);
  return s + ")";
}

// ` on @name` when the module names the target, else ` on kind[n]`.
std::string printOn(const std::optional<DeviceTarget>& d, const Func* f) {
  if (!d) return "";
  const Module* m = f ? f->parent() : nullptr;
  const DeviceDecl* decl = m ? m->findDevice(*d) : nullptr;
  if (decl && !decl->name.empty()) return " on " + globalName(decl->name);
  return " on " + d->str();
}

// The names values print with inside one function.
class ValueNames {
public:
  explicit ValueNames(const Func* f) {
    if (!f) return;
    std::set<std::string> used;
    for (size_t i = 0; i < f->numArgs(); ++i) {
      const Value* a = f->arg(i);
      std::string base = sanitize(a->name());
      if (base.empty()) base = "arg" + std::to_string(i);
      std::string name = base;
      for (int k = 1; used.count(name); ++k) name = base + "_" + std::to_string(k);
      used.insert(name);
      names_.emplace(a, "%" + name);
    }
    // Results, then the block arguments of the op's regions, then the ops inside: the order
    // they appear in the text.
    size_t next = 0;
    walkOps(*f, [&](const Op& op) {
      for (size_t r = 0; r < op.numResults(); ++r)
        names_.emplace(op.result(r), "%" + std::to_string(next++));
      for (size_t r = 0; r < op.numRegions(); ++r)
        for (size_t a = 0; a < op.region(r)->numArgs(); ++a)
          names_.emplace(op.region(r)->arg(a), "%" + std::to_string(next++));
    });
  }

  // A value from elsewhere (only in broken IR) still prints, recognizably.
  std::string operator()(const Value* v) const {
    auto it = names_.find(v);
    return it == names_.end() ? "%<undefined>" : it->second;
  }

private:
  // Keeps [A-Za-z0-9_.]; a leading digit would read as a result number.
  static std::string sanitize(const std::string& name) {
    std::string s;
    for (char c : name)
      s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') ? c : '_';
    if (!s.empty() && s[0] >= '0' && s[0] <= '9') s = "v" + s;
    return s;
  }

  std::unordered_map<const Value*, std::string> names_;
};

std::string printOpWith(const Op& op, const ValueNames& names, const PrintOptions& opts) {
  std::string s;
  for (size_t i = 0; i < op.numResults(); ++i) s += (i ? ", " : "") + names(op.result(i));
  if (op.numResults()) s += " = ";
  s += op.name();
  for (size_t i = 0; i < op.numOperands(); ++i) s += (i ? ", " : " ") + names(op.operand(i));
  if (!op.attrs().empty()) {
    s += " {";
    bool first = true;
    for (const auto& [name, value] : op.attrs().entries()) {
      s += (first ? "" : ", ") + name + " = " + printAttrValue(value);
      first = false;
    }
    s += "}";
  }
  for (size_t i = 0; i < op.numResults(); ++i) s += (i ? ", " : " : ") + op.result(i)->type().str();
  s += printOn(op.device(), op.parent());
  if (opts.locs) s += " " + printLoc(op.loc());
  return s;
}

// A yield without operands that ends a region is implicit in the text.
bool isImplicitYield(const Op& op) {
  return op.kind() == OpKind::Yield && op.numOperands() == 0 && op.block() &&
         op.block()->terminator() == &op;
}

// An op with its regions, each nested op on its own line at `indent` plus two spaces.
void printOpTree(const Op& op, const ValueNames& names, const PrintOptions& opts,
                 const std::string& indent, std::string& out) {
  out += indent + printOpWith(op, names, opts);
  for (size_t r = 0; r < op.numRegions(); ++r) {
    const Block& b = *op.region(r);
    if (r > 0) {
      bool empty = b.numArgs() == 0 &&
                   (b.empty() || (b.ops().size() == 1 && isImplicitYield(*b.ops().front())));
      if (empty) continue; // `if` without else
      out += " else";
    }
    if (b.numArgs()) {
      out += " (";
      for (size_t a = 0; a < b.numArgs(); ++a)
        out += (a ? ", " : "") + names(b.arg(a)) + ": " + b.arg(a)->type().str();
      out += ")";
    }
    out += " {\n";
    for (const auto& inner : b.ops()) {
      if (isImplicitYield(*inner)) continue;
      printOpTree(*inner, names, opts, indent + "  ", out);
    }
    out += indent + "}";
  }
  out += "\n";
}

} // namespace

std::string printAttrValue(const AttrValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return std::to_string(x);
        } else if constexpr (std::is_same_v<T, double>) {
          return formatDouble(x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return quoteString(x);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          std::string s = "[";
          for (size_t i = 0; i < x.size(); ++i) s += (i ? ", " : "") + std::to_string(x[i]);
          return s + "]";
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          std::string s = "[";
          for (size_t i = 0; i < x.size(); ++i) s += (i ? ", " : "") + formatDouble(x[i]);
          return s + "]";
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          std::string s = "[";
          for (size_t i = 0; i < x.size(); ++i) s += (i ? ", " : "") + quoteString(x[i]);
          return s + "]";
        } else if constexpr (std::is_same_v<T, ElemType>) {
          return std::string(elemTypeName(x));
        } else if constexpr (std::is_same_v<T, OpKind>) {
          return std::string(opInfo(x).name);
        } else {
          return printDense(x);
        }
      },
      v);
}

std::string printOp(const Op& op) {
  std::string s = printOpWith(op, ValueNames(op.parent()), {});
  for (size_t r = 0; r < op.numRegions(); ++r) s += r ? " else {...}" : " {...}";
  return s;
}

std::string printFunc(const Func& f, const PrintOptions& opts) {
  ValueNames names(&f);
  std::string s = "func " + globalName(f.name()) + "(";
  for (size_t i = 0; i < f.numArgs(); ++i)
    s += (i ? ", " : "") + names(f.arg(i)) + ": " + f.arg(i)->type().str() +
         printOn(f.argDevice(i), &f) +
         (f.argDonation(i) ? " donate " + std::to_string(*f.argDonation(i)) : "");
  s += ") -> (";
  for (size_t i = 0; i < f.resultTypes().size(); ++i)
    s += (i ? ", " : "") + f.resultTypes()[i].str() + printOn(f.resultDevice(i), &f);
  s += ") {\n";
  for (const auto& op : f.ops()) printOpTree(*op, names, opts, "  ", s);
  return s + "}\n";
}

std::string printModule(const Module& m, const PrintOptions& opts) {
  std::vector<std::string> sections;
  std::string syms;
  for (const auto& [name, info] : m.symbols().all()) {
    syms +=
        "symbol " + name + " in [" + std::to_string(info.lo) + ", " + std::to_string(info.hi) + "]";
    if (info.divisor != 1) syms += " divisible_by " + std::to_string(info.divisor);
    if (info.dataDependent) syms += " data_dependent";
    syms += "\n";
  }
  if (!syms.empty()) sections.push_back(std::move(syms));
  std::string weights;
  for (const WeightDecl& w : m.weights()) {
    weights += "weight " + globalName(w.name) + " : " + w.type.str() + " = " + quoteString(w.file) +
               "[" + quoteString(w.tensor) + "]";
    if (w.shard)
      weights += " shard " + std::to_string(w.shard->index) + " of " +
                 std::to_string(w.shard->count) + " along " + std::to_string(w.shard->axis);
    weights += "\n";
  }
  if (!weights.empty()) sections.push_back(std::move(weights));
  std::string devices;
  for (const DeviceDecl& d : m.devices())
    devices +=
        "device " + (d.name.empty() ? "" : globalName(d.name) + " = ") + d.target.str() + "\n";
  if (!devices.empty()) sections.push_back(std::move(devices));
  for (const auto& f : m.funcs())
    if (!opts.funcFilter || opts.funcFilter(*f)) sections.push_back(printFunc(*f, opts));
  std::string out;
  for (size_t i = 0; i < sections.size(); ++i) out += (i ? "\n" : "") + sections[i];
  return out;
}

} // namespace kiln
