// Op kinds and their static properties, generated from ops.def.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace kiln {

enum class OpKind : uint16_t {
#define KILN_OP(id, text, level, minOps, maxOps, nres, traits, attrs, meaning) id,
#include "ir/core/ops.def"
#undef KILN_OP
};

enum class OpLevel : uint8_t { Tensor, Host, Kernel };

// Properties passes ask for instead of listing op names.
enum OpTraits : uint32_t {
  kElementwise = 1u << 0,  // result[i] depends on operand[i] only (after broadcasting)
  kBroadcast = 1u << 1,    // operands broadcast numpy-style to the result shape
  kCommutative = 1u << 2,  // the two operands may be swapped
  kPadSafe = 1u << 3,      // f(0, ..., 0) = 0, so zero padding survives the op
  kSideEffects = 1u << 4,  // never removed or reordered by dce/cse
  kCheapToClone = 1u << 5, // recomputing is cheaper than moving (constants, splats)
  kReduction = 1u << 6,    // reduces over some dims
  kContraction = 1u << 7,  // matmul-like: anchors a dispatch
  kView = 1u << 8,         // only rearranges or selects elements
  kTerminator = 1u << 9,   // ends a function
  kFloatOnly = 1u << 10,   // operands must be floating point
  kNumeric = 1u << 11,     // operands must be float or integer (not i1)
  kBoolOnly = 1u << 12,    // operands must be i1
  kResultBool = 1u << 13,  // result element type is i1
  kResultI64 = 1u << 14,   // result element type is i64
  kSubgroup = 1u << 15,    // exchanges values between the threads of a subgroup
  kCollective = 1u << 16,  // spans a device group: operand i and result i on devices[i]
  kDataShaped = 1u << 17,  // a result dim may be a data-dependent symbol that the op binds
};

// The kinds an attribute can have; see ops.def for the spelling.
enum class AttrKind : uint8_t { Int, Float, Str, Ints, Floats, Type, Dense, Strs, Op };

struct AttrSpec {
  std::string_view name;
  AttrKind kind;
  bool optional;
};

// numResults of ops with any number of results, none included (`for`, `if`).
constexpr int kAnyResults = -2;

struct OpInfo {
  OpKind kind;
  std::string_view name;
  OpLevel level;
  int minOperands;
  int maxOperands; // -1: no limit
  int numResults;  // -1: variadic (at least one), kAnyResults: any number
  uint32_t traits;
  std::vector<AttrSpec> attrs;
  std::string_view meaning;

  bool has(uint32_t trait) const { return (traits & trait) == trait; }
  // Whether `n` results fit the table's count.
  bool resultCountFits(size_t n) const {
    return numResults == kAnyResults || (numResults == -1 && n > 0) ||
           (numResults >= 0 && n == static_cast<size_t>(numResults));
  }
};

// The number of regions an op owns (`for`: its body; `if`: then and else), 0 for most.
size_t numRegionsOf(OpKind kind);
// Elementwise ops that cost a libm-class function per element: the float-only math ops
// except the ones a CPU does in an instruction or two (sqrt, rsqrt, reciprocal, floor, ceil,
// round, isnan, isinf), and pow. Backends may compute them within a few ulp of the
// interpreter (docs/cpu.md); `fuse` keeps them out of contractions (FusionRules).
bool isTranscendental(OpKind kind);

const OpInfo& opInfo(OpKind kind);
std::optional<OpKind> lookupOp(std::string_view name);
const std::vector<OpInfo>& allOps();
std::string_view attrKindName(AttrKind kind);

} // namespace kiln
