// x86-minmax: exact float max/min trees with AVX-512DQ's VRANGE, a late LLVM function pass
// that the cpu pipeline runs after the optimizer (machine.cpp) on targets with AVX512DQ
// and AVX512VL.
//
// kiln's max and min are llvm.maximum / llvm.minimum: NaN if either operand is NaN, and
// -0.0 < +0.0. x86 has no such instruction before AVX10.2, so LLVM 19 lowers each call to
// six (a sign test, two blends, the max, a NaN test and a blend), every one on the
// dependence chain of a max pool's or a max reduction's accumulator. VRANGEPS/PD with
// imm 5 (max) or 4 (min), sign from the comparison, orders signed zeros as kiln does but
// returns the number when one operand is a quiet NaN. So a tree of maximum (or minimum)
// calls of one type, each inner call with its parent as its only user in the same block,
// becomes a balanced tree of VRANGEs over its leaves, and the result is a quiet NaN where
// any leaf is NaN: one unordered compare per pair of leaves, or-ed together, selects it.
// For n leaves that is n - 1 VRANGEs, n / 2 compares, about as many mask ors and one
// masked move, against 6 (n - 1) instructions. The result is the same value for every
// input, up to which NaN a NaN result is (LLVM leaves that unspecified too).
//
// Types: f32 and f64 scalars and <2 x float> (in the first lanes of a 128-bit vector) and
// vectors of 128, 256 or 512 bits; other calls are left as they are.
#pragma once

namespace llvm {
class Function;
class TargetMachine;
} // namespace llvm

namespace kiln::llvmgen {

// True when `tm` is an x86 machine with AVX512DQ and AVX512VL (the pass's instructions).
bool hasVrange(const llvm::TargetMachine& tm);

// Rewrites every maximum/minimum tree of `f` as described above; true when it changed f.
bool rangeMinMax(llvm::Function& f);

} // namespace kiln::llvmgen
