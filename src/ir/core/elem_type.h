// Element types of tensors and scalars, with their sizes, names and the f16/bf16
// conversions every part of kiln shares.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

// The order is part of the .kmod format; append only.
#define KILN_ELEM_TYPES(X)                                                                         \
  X(F64, "f64", 8, true, false)                                                                    \
  X(F32, "f32", 4, true, false)                                                                    \
  X(F16, "f16", 2, true, false)                                                                    \
  X(BF16, "bf16", 2, true, false)                                                                  \
  X(I1, "i1", 1, false, true)                                                                      \
  X(I8, "i8", 1, false, true)                                                                      \
  X(I16, "i16", 2, false, true)                                                                    \
  X(I32, "i32", 4, false, true)                                                                    \
  X(I64, "i64", 8, false, true)                                                                    \
  X(U8, "u8", 1, false, false)                                                                     \
  X(U16, "u16", 2, false, false)                                                                   \
  X(U32, "u32", 4, false, false)                                                                   \
  X(U64, "u64", 8, false, false)

enum class ElemType : uint8_t {
#define X(name, text, bytes, isFloat, isSigned) name,
  KILN_ELEM_TYPES(X)
#undef X
};

inline constexpr int kNumElemTypes = 13;

std::string_view elemTypeName(ElemType t);
std::optional<ElemType> parseElemType(std::string_view name);
int elemTypeBytes(ElemType t);
bool isFloat(ElemType t);
bool isInteger(ElemType t); // i1 counts as bool, not integer
bool isBool(ElemType t);
bool isSignedInt(ElemType t);
bool isUnsignedInt(ElemType t); // u8, u16, u32, u64

// Converts a double to the element type's value set: rounds floats to the type's
// precision (round-to-nearest-even), wraps integers (two's complement), maps to 0/1
// for i1. Float → integer truncates toward zero; NaN → 0; out of range saturates. A u64
// value above 2^63 is returned as itself (rounded to f64), never negative.
double roundToElem(ElemType t, double v);

uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
uint16_t floatToBf16(float f);
float bf16ToFloat(uint16_t b);

} // namespace kiln
