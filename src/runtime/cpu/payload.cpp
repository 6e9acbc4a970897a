// The cpu executable's payload container: magic "KILNCPU2", then the fields of CpuPayload
// in declaration order. A string is a u64 little-endian length and its bytes; a list is a
// u64 count and its items; an argument is its element type's name and its rank (u64). Every length
// and count is checked against the bytes that remain, so a truncated or hostile payload is an
// error, not a read past the end or a huge allocation.
#include <cstring>

#include "runtime/cpu/payload.h"

namespace kiln::cpu {

namespace {

constexpr char kMagic[] = "KILNCPU2";
constexpr size_t kMagicBytes = 8;

void putU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void putStr(std::string& out, const std::string& s) {
  putU64(out, s.size());
  out += s;
}

void putList(std::string& out, const std::vector<std::string>& l) {
  putU64(out, l.size());
  for (const std::string& s : l) putStr(out, s);
}

// Reads the container front to back; every failure names what it was reading.
class Reader {
public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}

  size_t remaining() const { return bytes_.size() - pos_; }

  Result<uint64_t> u64(const char* what) {
    if (remaining() < 8) return truncated(what);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return v;
  }

  Result<std::string> str(const char* what) {
    KILN_TRY(uint64_t n, u64(what));
    if (n > remaining()) return truncated(what);
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }

  // A count of items that each take at least `minItemBytes`: a count the remaining bytes
  // cannot hold is refused before anything is allocated for it.
  Result<uint64_t> count(const char* what, uint64_t minItemBytes) {
    KILN_TRY(uint64_t n, u64(what));
    if (n > remaining() / minItemBytes) return truncated(what);
    return n;
  }

  Result<std::vector<std::string>> list(const char* what) {
    KILN_TRY(uint64_t n, count(what, 8));
    std::vector<std::string> out;
    for (uint64_t i = 0; i < n; ++i) {
      KILN_TRY(std::string s, str(what));
      out.push_back(std::move(s));
    }
    return out;
  }

  Diag truncated(const char* what) const {
    return bad(std::string("the payload is truncated or corrupt (reading ") + what + " at byte " +
               std::to_string(pos_) + " of " + std::to_string(bytes_.size()) + ")");
  }
  static Diag bad(const std::string& message) {
    return error(Loc::named("<cpu executable>"), message);
  }

private:
  const std::string& bytes_;
  size_t pos_ = kMagicBytes;
};

} // namespace

std::string serializeCpuPayload(const CpuPayload& p) {
  std::string out(kMagic, kMagicBytes);
  putStr(out, p.cpu);
  putList(out, p.features);
  putU64(out, p.kernels.size());
  for (const CpuKernelInfo& k : p.kernels) {
    putStr(out, k.name);
    putStr(out, k.symbol);
    putList(out, k.symbols);
    putU64(out, k.args.size());
    for (const CpuArgInfo& a : k.args) {
      putStr(out, std::string(elemTypeName(a.elem)));
      putU64(out, static_cast<uint64_t>(a.rank));
    }
  }
  putStr(out, p.sharedObject);
  return out;
}

Result<CpuPayload> parseCpuPayload(const std::string& bytes) {
  if (bytes.size() < kMagicBytes || std::memcmp(bytes.data(), kMagic, kMagicBytes) != 0)
    return Reader::bad("not a cpu executable payload of this version (no KILNCPU2 header); "
                       "recompile it with this version of kiln");
  Reader r(bytes);
  CpuPayload p;
  KILN_TRY(p.cpu, r.str("the CPU name"));
  KILN_TRY(p.features, r.list("the feature list"));
  // A kernel takes at least its two strings' lengths and its two counts.
  KILN_TRY(uint64_t kernels, r.count("the kernel list", 8 * 4));
  for (uint64_t i = 0; i < kernels; ++i) {
    CpuKernelInfo k;
    KILN_TRY(k.name, r.str("a kernel name"));
    KILN_TRY(k.symbol, r.str("a kernel's entry point"));
    KILN_TRY(k.symbols, r.list("a kernel's push constants"));
    KILN_TRY(uint64_t args, r.count("a kernel's arguments", 8 * 2));
    for (uint64_t a = 0; a < args; ++a) {
      KILN_TRY(std::string elem, r.str("an argument's element type"));
      std::optional<ElemType> t = parseElemType(elem);
      if (!t)
        return Reader::bad("kernel '" + k.name + "' has an argument of unknown type '" + elem +
                           "'");
      KILN_TRY(uint64_t rank, r.u64("an argument's rank"));
      if (rank > 64)
        return Reader::bad("kernel '" + k.name + "' has an argument of rank " +
                           std::to_string(rank));
      k.args.push_back({*t, static_cast<int64_t>(rank)});
    }
    p.kernels.push_back(std::move(k));
  }
  KILN_TRY(p.sharedObject, r.str("the shared object"));
  if (r.remaining() != 0)
    return Reader::bad("the payload has " + std::to_string(r.remaining()) +
                       " bytes after its last field");
  return p;
}

} // namespace kiln::cpu
