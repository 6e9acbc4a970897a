// Element type tables and the f16/bf16 bit conversions.
#include "ir/core/elem_type.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace kiln {

namespace {
struct ElemInfo {
  std::string_view name;
  int bytes;
  bool isFloat;
  bool isSigned;
};
constexpr ElemInfo kInfo[] = {
#define X(name, text, bytes, isFloat, isSigned) {text, bytes, isFloat, isSigned},
    KILN_ELEM_TYPES(X)
#undef X
};
} // namespace

std::string_view elemTypeName(ElemType t) { return kInfo[static_cast<int>(t)].name; }

std::optional<ElemType> parseElemType(std::string_view name) {
  for (int i = 0; i < kNumElemTypes; ++i)
    if (kInfo[i].name == name) return static_cast<ElemType>(i);
  return std::nullopt;
}

int elemTypeBytes(ElemType t) { return kInfo[static_cast<int>(t)].bytes; }
bool isFloat(ElemType t) { return kInfo[static_cast<int>(t)].isFloat; }
bool isBool(ElemType t) { return t == ElemType::I1; }
bool isInteger(ElemType t) { return !isFloat(t) && !isBool(t); }
bool isSignedInt(ElemType t) { return kInfo[static_cast<int>(t)].isSigned && !isBool(t); }
bool isUnsignedInt(ElemType t) { return isInteger(t) && !isSignedInt(t); }

static double wrapInt(double v, int bits, bool isSigned) {
  if (std::isnan(v)) return 0;
  // Saturate far-out values first so the conversion to int64 is defined.
  if (v >= 9.2e18) v = 9.2e18;
  if (v <= -9.2e18) v = -9.2e18;
  auto x = static_cast<int64_t>(std::trunc(v));
  if (bits == 64) return static_cast<double>(x);
  uint64_t mask = (uint64_t(1) << bits) - 1;
  uint64_t u = static_cast<uint64_t>(x) & mask;
  if (isSigned && (u >> (bits - 1))) return static_cast<double>(static_cast<int64_t>(u | ~mask));
  return static_cast<double>(u);
}

double roundToElem(ElemType t, double v) {
  switch (t) {
  case ElemType::F64: return v;
  case ElemType::F32: return static_cast<double>(static_cast<float>(v));
  case ElemType::F16: return halfToFloat(floatToHalf(static_cast<float>(v)));
  case ElemType::BF16: return bf16ToFloat(floatToBf16(static_cast<float>(v)));
  case ElemType::I1: return (v != 0 && !std::isnan(v)) ? 1.0 : 0.0;
  case ElemType::I8: return wrapInt(v, 8, true);
  case ElemType::I16: return wrapInt(v, 16, true);
  case ElemType::I32: return wrapInt(v, 32, true);
  case ElemType::I64: return wrapInt(v, 64, true);
  case ElemType::U8: return wrapInt(v, 8, false);
  case ElemType::U16: return wrapInt(v, 16, false);
  case ElemType::U32: return wrapInt(v, 32, false);
  case ElemType::U64: {
    if (std::isnan(v)) return 0;
    if (v >= 0x1p64) return 0x1p64 - 2048; // saturates to the largest f64 below 2^64
    if (v >= 0x1p63) return std::trunc(v);
    double w = wrapInt(v, 64, true);
    return w < 0 ? w + 0x1p64 : w;
  }
  }
  return v;
}

uint16_t floatToHalf(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) // inf or NaN (keep NaN quiet)
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u); // overflow → inf
  if (absx < 0x38800000u) {                                              // subnormal or zero
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(absx >> 23);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t e = (absx >> 23) - 112;
  uint32_t mant = absx & 0x7fffffu;
  uint32_t half = (e << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float halfToFloat(uint16_t h) {
  uint32_t sign = (uint32_t(h) & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  uint32_t x;
  if (e == 0) {
    if (m == 0) {
      x = sign;
    } else { // subnormal: normalize
      int shift = 0;
      while (!(m & 0x400u)) {
        m <<= 1;
        ++shift;
      }
      m &= 0x3ffu;
      x = sign | (uint32_t(113 - shift) << 23) | (m << 13);
    }
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13);
  } else {
    x = sign | ((e + 112) << 23) | (m << 13);
  }
  return std::bit_cast<float>(x);
}

uint16_t floatToBf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

float bf16ToFloat(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

} // namespace kiln
