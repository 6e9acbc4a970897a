// Little-endian writing and bounds-checked reading of the binary payload containers that
// backends write into a .kmod and drivers read back (gpu/payload.cpp). A reader never reads
// past the end and never allocates for a count the remaining bytes cannot hold: a truncated
// or hostile payload is an error naming what was being read, never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/core/diag.h"

namespace kiln::payload_io {

inline void putU8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }
inline void putU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void putU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void putStr(std::string& out, const std::string& s) {
  putU64(out, s.size());
  out += s;
}
inline void putStrList(std::string& out, const std::vector<std::string>& l) {
  putU64(out, l.size());
  for (const std::string& s : l) putStr(out, s);
}

// Reads `bytes` front to back from `start`; errors are located at `where`.
class Reader {
public:
  Reader(const std::string& bytes, size_t start, Loc where)
      : bytes_(bytes), pos_(start), where_(std::move(where)) {}

  size_t remaining() const { return bytes_.size() - pos_; }

  template <typename T> Result<T> uint(const char* what) {
    if (remaining() < sizeof(T)) return truncated(what);
    T v = 0;
    for (size_t i = 0; i < sizeof(T); ++i)
      v |= static_cast<T>(static_cast<T>(static_cast<uint8_t>(bytes_[pos_ + i])) << (8 * i));
    pos_ += sizeof(T);
    return v;
  }
  Result<uint8_t> u8(const char* what) { return uint<uint8_t>(what); }
  Result<uint32_t> u32(const char* what) { return uint<uint32_t>(what); }
  Result<uint64_t> u64(const char* what) { return uint<uint64_t>(what); }

  Result<std::string> str(const char* what) {
    KILN_TRY(uint64_t n, u64(what));
    if (n > remaining()) return truncated(what);
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }

  // A u8 that must be 0 or 1.
  Result<bool> flag(const char* what) {
    KILN_TRY(uint8_t v, u8(what));
    if (v > 1) return bad(std::string(what) + " is " + std::to_string(v) + ", not 0 or 1");
    return v == 1;
  }

  // A count of items that each take at least `minItemBytes` (>= 1), at most `max`.
  Result<uint64_t> count(const char* what, uint64_t minItemBytes, uint64_t max = UINT64_MAX) {
    KILN_TRY(uint64_t n, u64(what));
    if (n > remaining() / minItemBytes) return truncated(what);
    if (n > max)
      return bad(std::string(what) + " has " + std::to_string(n) + " items (at most " +
                 std::to_string(max) + ")");
    return n;
  }

  Result<std::vector<std::string>> strList(const char* what) {
    KILN_TRY(uint64_t n, count(what, 8));
    std::vector<std::string> out;
    for (uint64_t i = 0; i < n; ++i) {
      KILN_TRY(std::string s, str(what));
      out.push_back(std::move(s));
    }
    return out;
  }

  Diag bad(const std::string& message) const { return error(where_, message); }
  Diag truncated(const char* what) const {
    return bad(std::string("the payload is truncated or corrupt (reading ") + what + " at byte " +
               std::to_string(pos_) + " of " + std::to_string(bytes_.size()) + ")");
  }

private:
  const std::string& bytes_;
  size_t pos_;
  Loc where_;
};

} // namespace kiln::payload_io
