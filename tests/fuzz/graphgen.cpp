// kiln-graphgen: prints a random, valid kiln program for a seed (see graphgen.h).
//
//   kiln-graphgen --seed N [--ops K] [--symbolic]
//
// With --symbolic the first line is `// kiln-inputs: LIT LIT ...`, one tensor literal per
// argument of @main, to be passed to `kiln run` as --input=LIT each.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

#include "graphgen.h"

namespace {

constexpr std::string_view kUsage = "usage: kiln-graphgen --seed N [--ops K] [--symbolic]\n";

bool parseCount(std::string_view text, uint64_t max, uint64_t& out) {
  if (text.empty() || text.size() > 19) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > max) return false;
  out = v;
  return true;
}

} // namespace

int main(int argc, char** argv) {
  kiln::graphgen::Options opts;
  bool haveSeed = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    bool takesValue = arg == "--seed" || arg == "--ops";
    if (takesValue) {
      if (i + 1 >= argc) {
        std::cerr << "kiln-graphgen: error: " << arg << " needs a value\n" << kUsage;
        return 1;
      }
      value = argv[++i];
    } else if (arg.starts_with("--seed=") || arg.starts_with("--ops=")) {
      value = arg.substr(arg.find('=') + 1);
      arg = arg.substr(0, arg.find('='));
    }
    uint64_t n = 0;
    if (arg == "--seed") {
      if (!parseCount(value, UINT64_MAX / 10, n)) {
        std::cerr << "kiln-graphgen: error: bad seed '" << value << "'\n";
        return 1;
      }
      opts.seed = n;
      haveSeed = true;
    } else if (arg == "--ops") {
      if (!parseCount(value, 10000, n)) {
        std::cerr << "kiln-graphgen: error: --ops takes a count from 0 to 10000, not '" << value
                  << "'\n";
        return 1;
      }
      opts.numOps = static_cast<int>(n);
    } else if (arg == "--symbolic") {
      opts.symbolic = true;
    } else if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else {
      std::cerr << "kiln-graphgen: error: unknown argument '" << arg << "'\n" << kUsage;
      return 1;
    }
  }
  if (!haveSeed) {
    std::cerr << "kiln-graphgen: error: --seed is required\n" << kUsage;
    return 1;
  }
  auto program = kiln::graphgen::generate(opts);
  if (!program.ok()) {
    std::cerr << "kiln-graphgen: error: seed " << opts.seed
              << " made a program that does not verify (a generator or shape-rule bug):\n"
              << program.diags().str() << "\n";
    return 1;
  }
  std::cout << kiln::graphgen::programText(*program);
  return 0;
}
