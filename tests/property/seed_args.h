// The flags the random-program property tests share: --seeds=A:B, --ops=K and -v, with
// `extra` for a test's own flags (it returns whether it took the flag).
#pragma once

#include <cstdint>
#include <functional>
#include <iostream>
#include <string>
#include <string_view>

namespace kiln::property {

struct SeedArgs {
  int64_t first = 1, last = 1;
  int ops = 16;
  bool verbose = false;
};

// Parses argv into `args`; false (after printing `usage`) on a flag it does not know.
inline bool parseSeedArgs(int argc, char** argv, SeedArgs& args, const char* usage,
                          const std::function<bool(std::string_view)>& extra = {}) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.rfind("--seeds=", 0) == 0) {
      std::string r(a.substr(8));
      size_t colon = r.find(':');
      if (colon == std::string::npos) {
        std::cerr << "--seeds=A:B\n";
        return false;
      }
      args.first = std::stoll(r.substr(0, colon));
      args.last = std::stoll(r.substr(colon + 1));
    } else if (a.rfind("--ops=", 0) == 0) {
      args.ops = std::stoi(std::string(a.substr(6)));
    } else if (a == "-v") {
      args.verbose = true;
    } else if (!extra || !extra(a)) {
      std::cerr << usage << "\n";
      return false;
    }
  }
  return true;
}

} // namespace kiln::property
