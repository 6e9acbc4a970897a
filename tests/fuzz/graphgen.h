// Random program generator shared by `kiln-graphgen` and the property test.
//
// generate() builds a valid, self-contained tensor program from a seed: `func @main`
// whose data comes from inline constants (and, in symbolic mode, from arguments with
// symbolic dims), followed by K ops drawn from the whole tensor-level op set. Every op is
// made with Builder::create, so the shape rules type it; a random choice the rules reject
// is dropped and drawn again. The same seed and options give the same program on every
// platform: randomness comes from std::mt19937_64 (its output sequence is fixed by the
// standard) through hand-written distributions.
//
// Values are kept tame so that comparisons after rewriting mean something: tensors stay
// small, log/sqrt/rsqrt/reciprocal see abs(x) + 1, exp sees tanh(x), divisors of float
// division are abs(y) + 1, gather indices are in range.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/core/host_tensor.h"
#include "ir/core/ir.h"

namespace kiln::graphgen {

struct Options {
  uint64_t seed = 1;
  int numOps = 12;       // random ops drawn (helper constants and taming ops not counted)
  bool symbolic = false; // declare symbols and give @main arguments with symbolic dims
};

struct Program {
  std::unique_ptr<Module> module;
  // One tensor literal per @main argument (tensorLiteral below), with the
  // concrete sizes the generator chose for the symbols; empty without --symbolic.
  std::vector<std::string> inputLiterals;
};

// Fails only when the generator itself is broken (a module that does not verify).
Result<Program> generate(const Options& opts);

// The program as kiln-graphgen prints it: a `// kiln-inputs: ...` line when the program
// has arguments, then the module's text.
std::string programText(const Program& p);

// A tensor literal for parseTensorLiteral without spaces, so that it is one shell word:
// "2x3xf32=1,2,3,4,5,6", "f32=7" for 0-d.
std::string tensorLiteral(const HostTensor& t);

} // namespace kiln::graphgen
