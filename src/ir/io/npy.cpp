// .npy reading and writing, and the inline tensor literals and printed form the CLI uses.
//
// The .npy header is a Python dict literal; it is read by a small recursive-descent parser
// of Python literals (strings, ints, booleans, None, tuples, lists, dicts) with a depth
// limit, so a hostile header can neither crash nor exhaust the stack. Every size is checked
// for overflow and against the bytes actually present before anything is allocated.
#include "ir/io/npy.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "ir/core/types.h"

namespace kiln {

namespace {

// ---- dtypes --------------------------------------------------------------------------------

struct NpyDtype {
  ElemType elem;
  const char* descr; // what kiln writes
};

// bf16 has no numpy dtype: it is written as raw '<u2' plus a 'kiln_dtype' key (which numpy
// itself refuses, so such files are for kiln only).
constexpr NpyDtype kDtypes[] = {
    {ElemType::F64, "<f8"}, {ElemType::F32, "<f4"}, {ElemType::F16, "<f2"}, {ElemType::BF16, "<u2"},
    {ElemType::I1, "|b1"},  {ElemType::I8, "|i1"},  {ElemType::I16, "<i2"}, {ElemType::I32, "<i4"},
    {ElemType::I64, "<i8"}, {ElemType::U8, "|u1"},  {ElemType::U16, "<u2"}, {ElemType::U32, "<u4"},
    {ElemType::U64, "<u8"},
};

const char* descrOf(ElemType e) {
  for (const NpyDtype& d : kDtypes)
    if (d.elem == e) return d.descr;
  return "<f4";
}

// Maps a numpy descr (with kiln's bf16 marker) to an element type, or explains why not.
Result<ElemType> elemOfDescr(const std::string& descr, const std::string& kilnDtype,
                             const Loc& loc) {
  if (descr.size() < 2) return error(loc, "unsupported .npy dtype '" + descr + "'");
  char order = descr[0];
  std::string code = descr.substr(1);
  bool oneByte = code == "b1" || code == "i1" || code == "u1";
  if (order == '>' && !oneByte)
    return error(loc, "big-endian .npy data ('" + descr + "') is not supported");
  if (order != '<' && order != '|' && order != '=' && order != '>')
    return error(loc, "unsupported .npy dtype '" + descr + "'");
  if (!kilnDtype.empty()) {
    if (kilnDtype != "bf16")
      return error(loc, "unsupported kiln_dtype '" + kilnDtype + "' in .npy header");
    if (code != "u2" && code != "V2")
      return error(loc, "kiln_dtype 'bf16' needs 2-byte data, but the descr is '" + descr + "'");
    return ElemType::BF16;
  }
  for (const NpyDtype& d : kDtypes)
    if (d.elem != ElemType::BF16 && code == d.descr + 1) return d.elem;
  return error(loc, "unsupported .npy dtype '" + descr + "'");
}

// ---- Python literal parser -----------------------------------------------------------------

struct PyValue {
  enum Kind { Str, Int, Bool, None, Tuple, List, Dict } kind = None;
  std::string str;
  int64_t i = 0;
  bool b = false;
  std::vector<PyValue> items;        // Tuple, List
  std::vector<PyValue> keys, values; // Dict, in parallel (a vector of pairs of an incomplete type
                                     // does not compile with clang)
};

class PyLiteralParser {
public:
  PyLiteralParser(std::string_view text, Loc loc) : s_(text), loc_(std::move(loc)) {}

  Result<PyValue> parseAll() {
    KILN_TRY(PyValue v, value(0));
    skipSpace();
    if (pos_ != s_.size()) return fail("unexpected text after the header dict");
    return v;
  }

private:
  static constexpr int kMaxDepth = 32;

  Diag fail(const std::string& why) const {
    return error(loc_,
                 "malformed .npy header: " + why + " (at offset " + std::to_string(pos_) + ")");
  }
  void skipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool startsWith(std::string_view w) const { return s_.substr(pos_).starts_with(w); }

  Result<PyValue> value(int depth) {
    if (depth > kMaxDepth) return fail("nesting too deep");
    skipSpace();
    if (pos_ >= s_.size()) return fail("unexpected end");
    char c = s_[pos_];
    if (c == '\'' || c == '"') return string();
    if (c == '(') return sequence(PyValue::Tuple, ')', depth);
    if (c == '[') return sequence(PyValue::List, ']', depth);
    if (c == '{') return dict(depth);
    if (c == '-' || (c >= '0' && c <= '9')) return integer();
    for (auto [word, kind, b] :
         {std::tuple{"True", PyValue::Bool, true}, std::tuple{"False", PyValue::Bool, false},
          std::tuple{"None", PyValue::None, false}}) {
      if (startsWith(word)) {
        pos_ += std::strlen(word);
        PyValue v;
        v.kind = kind;
        v.b = b;
        return v;
      }
    }
    return fail(std::string("unexpected character '") + c + "'");
  }

  Result<PyValue> string() {
    char quote = s_[pos_++];
    PyValue v;
    v.kind = PyValue::Str;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      // numpy never writes escapes in a header; taking one literally keeps the parser simple.
      if (s_[pos_] == '\\') return fail("escape sequences are not supported");
      v.str += s_[pos_++];
    }
    if (pos_ >= s_.size()) return fail("unterminated string");
    ++pos_;
    return v;
  }

  Result<PyValue> integer() {
    const char* begin = s_.data() + pos_;
    const char* end = s_.data() + s_.size();
    PyValue v;
    v.kind = PyValue::Int;
    auto [p, ec] = std::from_chars(begin, end, v.i);
    if (ec == std::errc::result_out_of_range) return fail("integer out of range");
    if (ec != std::errc()) return fail("bad integer");
    pos_ += static_cast<size_t>(p - begin);
    // Python 2 era headers may write long ints as "3L".
    if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;
    return v;
  }

  Result<PyValue> sequence(PyValue::Kind kind, char close, int depth) {
    ++pos_;
    PyValue v;
    v.kind = kind;
    for (;;) {
      skipSpace();
      if (pos_ < s_.size() && s_[pos_] == close) {
        ++pos_;
        return v;
      }
      KILN_TRY(PyValue item, value(depth + 1));
      v.items.push_back(std::move(item));
      skipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == close) continue;
      return fail(std::string("expected ',' or '") + close + "'");
    }
  }

  Result<PyValue> dict(int depth) {
    ++pos_;
    PyValue v;
    v.kind = PyValue::Dict;
    for (;;) {
      skipSpace();
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return v;
      }
      KILN_TRY(PyValue key, value(depth + 1));
      skipSpace();
      if (pos_ >= s_.size() || s_[pos_] != ':') return fail("expected ':'");
      ++pos_;
      KILN_TRY(PyValue val, value(depth + 1));
      v.keys.push_back(std::move(key));
      v.values.push_back(std::move(val));
      skipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') continue;
      return fail("expected ',' or '}'");
    }
  }

  std::string_view s_;
  Loc loc_;
  size_t pos_ = 0;
};

// Product of dims times element size, or nullopt on overflow (also of the size_t range).
std::optional<uint64_t> byteCount(const std::vector<int64_t>& shape, int elemBytes) {
  uint64_t n = static_cast<uint64_t>(elemBytes);
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  }
  if (n > std::numeric_limits<size_t>::max() / 2) return std::nullopt;
  return n;
}

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

} // namespace

// ---- .npy ----------------------------------------------------------------------------------

Result<HostTensor> parseNpy(std::string_view bytes, const std::string& name) {
  Loc loc = Loc::named(name);
  if (bytes.size() < kMagicLen + 2 || bytes.substr(0, kMagicLen) != std::string_view(kMagic))
    return error(loc, "not a .npy file (bad magic)");
  auto major = static_cast<uint8_t>(bytes[6]);
  auto minor = static_cast<uint8_t>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0)
    return error(loc, "unsupported .npy version " + std::to_string(major) + "." +
                          std::to_string(minor) + " (kiln reads 1.0, 2.0 and 3.0)");
  size_t lenBytes = major == 1 ? 2 : 4;
  size_t prefix = kMagicLen + 2 + lenBytes;
  if (bytes.size() < prefix) return error(loc, "truncated .npy header");
  uint64_t headerLen = 0;
  for (size_t i = 0; i < lenBytes; ++i)
    headerLen |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
  if (headerLen > bytes.size() - prefix)
    return error(loc, "truncated .npy header: it claims " + std::to_string(headerLen) +
                          " bytes but the file has " + std::to_string(bytes.size() - prefix));
  std::string_view header = bytes.substr(prefix, headerLen);

  KILN_TRY(PyValue dict, PyLiteralParser(header, loc).parseAll());
  if (dict.kind != PyValue::Dict) return error(loc, "malformed .npy header: not a dict");
  std::optional<std::string> descr, kilnDtype;
  std::optional<bool> fortran;
  std::optional<std::vector<int64_t>> shape;
  for (size_t di = 0; di < dict.keys.size(); ++di) {
    const PyValue& key = dict.keys[di];
    const PyValue& val = dict.values[di];
    if (key.kind != PyValue::Str) return error(loc, "malformed .npy header: non-string key");
    if (key.str == "descr") {
      if (val.kind != PyValue::Str)
        return error(loc, "unsupported .npy dtype: structured dtypes are not supported");
      descr = val.str;
    } else if (key.str == "fortran_order") {
      if (val.kind != PyValue::Bool)
        return error(loc, "malformed .npy header: 'fortran_order' must be True or False");
      fortran = val.b;
    } else if (key.str == "shape") {
      if (val.kind != PyValue::Tuple)
        return error(loc, "malformed .npy header: 'shape' must be a tuple");
      std::vector<int64_t> dims;
      for (const PyValue& d : val.items) {
        if (d.kind != PyValue::Int || d.i < 0)
          return error(loc, "malformed .npy header: 'shape' must hold non-negative integers");
        dims.push_back(d.i);
      }
      shape = std::move(dims);
    } else if (key.str == "kiln_dtype") {
      if (val.kind != PyValue::Str)
        return error(loc, "malformed .npy header: 'kiln_dtype' must be a string");
      kilnDtype = val.str;
    } else {
      return error(loc, "malformed .npy header: unexpected key '" + key.str + "'");
    }
  }
  if (!descr || !fortran || !shape)
    return error(loc, "malformed .npy header: it needs 'descr', 'fortran_order' and 'shape'");
  if (*fortran) return error(loc, "Fortran-order .npy data is not supported (save in C order)");
  KILN_TRY(ElemType elem, elemOfDescr(*descr, kilnDtype.value_or(""), loc));

  std::optional<uint64_t> want = byteCount(*shape, elemTypeBytes(elem));
  if (!want) return error(loc, ".npy shape is too large");
  uint64_t have = bytes.size() - prefix - headerLen;
  if (*want != have)
    return error(loc, ".npy data size mismatch: shape and dtype need " + std::to_string(*want) +
                          " bytes but the file holds " + std::to_string(have));
  HostTensor t(elem, *shape);
  if (*want) std::memcpy(t.mutableData(), bytes.data() + prefix + headerLen, *want);
  // numpy accepts any nonzero byte as True; kiln's i1 holds exactly 0 or 1.
  if (elem == ElemType::I1)
    for (int64_t i = 0; i < t.numElements(); ++i) t.mutableData()[i] = t.data()[i] != 0 ? 1 : 0;
  return t;
}

Result<HostTensor> readNpy(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return error(Loc::named(path), "is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) return error(Loc::named(path), std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return error(Loc::named(path), "read failed");
  return parseNpy(buf.str(), path);
}

std::string serializeNpy(const HostTensor& t) {
  std::string dict = std::string("{'descr': '") + descrOf(t.elem()) + "', 'fortran_order': False, ";
  if (t.elem() == ElemType::BF16) dict += "'kiln_dtype': 'bf16', ";
  dict += "'shape': (";
  for (size_t i = 0; i < t.shape().size(); ++i) {
    dict += std::to_string(t.shape()[i]);
    dict += (t.shape().size() == 1 || i + 1 < t.shape().size()) ? "," : "";
    if (i + 1 < t.shape().size()) dict += " ";
  }
  dict += "), }";
  // numpy pads the header with spaces and a newline so data starts 64-byte aligned; the
  // 2-byte length of version 1.0 only overflows for absurd ranks, then 2.0 takes over.
  auto paddedLen = [&](size_t lenBytes) {
    size_t unpadded = kMagicLen + 2 + lenBytes + dict.size() + 1;
    return (unpadded + 63) / 64 * 64 - (kMagicLen + 2 + lenBytes);
  };
  bool v2 = paddedLen(2) > 65535;
  size_t lenBytes = v2 ? 4 : 2;
  size_t n = paddedLen(lenBytes);
  dict.append(n - dict.size() - 1, ' ');
  dict += '\n';

  std::string out(kMagic, kMagicLen);
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  for (size_t i = 0; i < lenBytes; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  out += dict;
  out.append(reinterpret_cast<const char*>(t.data()), t.byteSize());
  return out;
}

Status writeNpy(const std::string& path, const HostTensor& t) {
  std::string bytes = serializeNpy(t);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return error(Loc::named(path), std::string("cannot write: ") + std::strerror(errno));
  bool good = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  good = (std::fclose(f) == 0) && good;
  if (!good) return error(Loc::named(path), std::string("write failed: ") + std::strerror(errno));
  return ok();
}

// ---- tensor literals -----------------------------------------------------------------------

namespace {

// Literals are typed by hand; a cap keeps "100000000000xf32=0" an error instead of an
// allocation failure.
constexpr uint64_t kMaxLiteralBytes = uint64_t(1) << 31;

Result<double> parseFloatValue(std::string_view w, const Loc& loc) {
  std::string_view body = w;
  bool neg = false;
  if (!body.empty() && (body[0] == '-' || body[0] == '+')) {
    neg = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == "nan" || body == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (body == "inf" || body == "Inf" || body == "infinity")
    return neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  // from_chars rejects a leading '+', so parse the body and apply the sign.
  double v = 0;
  auto [p, ec] = std::from_chars(body.data(), body.data() + body.size(), v);
  if (body.empty() || ec == std::errc::invalid_argument || p != body.data() + body.size())
    return error(loc, "bad number '" + std::string(w) + "'");
  if (ec == std::errc::result_out_of_range)
    return error(loc, "number '" + std::string(w) + "' is out of range");
  return neg ? -v : v;
}

Result<int64_t> parseIntValue(std::string_view w, ElemType elem, const Loc& loc) {
  std::string name(elemTypeName(elem));
  if (elem == ElemType::I1) {
    if (w == "true" || w == "1") return 1;
    if (w == "false" || w == "0") return 0;
    return error(loc, "bad i1 value '" + std::string(w) + "' (use true, false, 1 or 0)");
  }
  std::string_view body = w;
  if (!body.empty() && body[0] == '+') body.remove_prefix(1);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(body.data(), body.data() + body.size(), v);
  if (body.empty() || ec == std::errc::invalid_argument || p != body.data() + body.size())
    return error(loc, "bad " + name + " value '" + std::string(w) + "'");
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  switch (elem) {
  case ElemType::I8: lo = -128, hi = 127; break;
  case ElemType::I16: lo = -32768, hi = 32767; break;
  case ElemType::I32:
    lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
    break;
  case ElemType::U8: lo = 0, hi = 255; break;
  case ElemType::U16: lo = 0, hi = 65535; break;
  case ElemType::U32: lo = 0, hi = 4294967295; break;
  case ElemType::U64: lo = 0; break;
  default: break;
  }
  if (ec == std::errc::result_out_of_range || v < lo || v > hi)
    return error(loc, "value '" + std::string(w) + "' is out of range for " + name);
  return v;
}

} // namespace

Result<HostTensor> parseTensorLiteral(std::string_view text, const Loc& loc) {
  size_t eq = text.find('=');
  if (eq == std::string_view::npos)
    return error(loc, "bad tensor literal '" + std::string(text) +
                          "': expected TYPE=VALUES such as 2x3xf32=1 2 3 4 5 6");
  std::string_view typeText = text.substr(0, eq);
  std::string_view valuesText = text.substr(eq + 1);

  std::vector<int64_t> shape;
  std::string_view rest = typeText;
  for (size_t x; (x = rest.find('x')) != std::string_view::npos; rest.remove_prefix(x + 1)) {
    std::string_view d = rest.substr(0, x);
    int64_t v = -1;
    auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
    if (d.empty() || ec != std::errc() || p != d.data() + d.size() || v < 0)
      return error(loc, "bad dimension '" + std::string(d) + "' in tensor literal type '" +
                            std::string(typeText) + "'");
    shape.push_back(v);
  }
  std::optional<ElemType> elem = parseElemType(rest);
  if (!elem)
    return error(loc, "unknown element type '" + std::string(rest) + "' in tensor literal '" +
                          std::string(typeText) + "'");
  std::optional<uint64_t> bytes = byteCount(shape, elemTypeBytes(*elem));
  if (!bytes || *bytes > kMaxLiteralBytes)
    return error(loc, "tensor literal '" + std::string(typeText) + "' is too large");

  std::vector<std::string_view> words;
  size_t i = 0;
  auto isSep = [](char c) { return c == ' ' || c == ',' || c == '\t' || c == '\n'; };
  while (i < valuesText.size()) {
    while (i < valuesText.size() && isSep(valuesText[i])) ++i;
    size_t start = i;
    while (i < valuesText.size() && !isSep(valuesText[i])) ++i;
    if (i > start) words.push_back(valuesText.substr(start, i - start));
  }

  HostTensor t(*elem, shape);
  int64_t n = t.numElements();
  if (!(words.size() == 1 && n > 0) && static_cast<int64_t>(words.size()) != n)
    return error(loc, "tensor literal of type " + Type::tensor(*elem, shape).str() + " needs " +
                          std::to_string(n) + " values (or one to fill it), got " +
                          std::to_string(words.size()));
  for (int64_t k = 0; k < n; ++k) {
    std::string_view w = words.size() == 1 ? words[0] : words[static_cast<size_t>(k)];
    if (isFloat(*elem)) {
      KILN_TRY(double v, parseFloatValue(w, loc));
      t.setF(k, v);
    } else {
      KILN_TRY(int64_t v, parseIntValue(w, *elem, loc));
      t.setI(k, v);
    }
  }
  return t;
}

// ---- printing ------------------------------------------------------------------------------

namespace {

std::string formatElement(const HostTensor& t, int64_t i) {
  if (isBool(t.elem())) return t.getI(i) ? "true" : "false";
  if (t.elem() == ElemType::U64) return std::to_string(static_cast<uint64_t>(t.getI(i)));
  if (!isFloat(t.elem())) return std::to_string(t.getI(i));
  double v = t.getF(i);
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void formatDim(const HostTensor& t, size_t dim, int64_t offset, const std::vector<int64_t>& strides,
               int64_t maxPerDim, std::string& out) {
  if (dim == t.shape().size()) {
    out += formatElement(t, offset);
    return;
  }
  int64_t size = t.shape()[dim];
  // Long dims show their first and last halves around "...".
  bool elide = maxPerDim > 0 && size > maxPerDim;
  int64_t head = elide ? (maxPerDim + 1) / 2 : size;
  int64_t tailStart = elide ? size - maxPerDim / 2 : size;
  out += '[';
  bool first = true;
  auto sep = [&] {
    if (!first) out += ", ";
    first = false;
  };
  for (int64_t i = 0; i < head; ++i) {
    sep();
    formatDim(t, dim + 1, offset + i * strides[dim], strides, maxPerDim, out);
  }
  if (elide) {
    sep();
    out += "...";
  }
  for (int64_t i = tailStart; i < size && elide; ++i) {
    sep();
    formatDim(t, dim + 1, offset + i * strides[dim], strides, maxPerDim, out);
  }
  out += ']';
}

} // namespace

std::string formatTensor(const HostTensor& t, int64_t maxElementsPerDim) {
  std::string out = Type::tensor(t.elem(), t.shape()).str() + " ";
  formatDim(t, 0, 0, t.strides(), maxElementsPerDim, out);
  return out;
}

} // namespace kiln
