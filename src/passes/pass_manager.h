// PassManager: runs a pipeline of registered passes with the instrumentation the CLI
// exposes (--print-after, --print-after-all, --verify-each, --time-passes).
#pragma once

#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "passes/pass.h"

namespace kiln {

struct PassManagerOptions {
  std::set<std::string> printAfter; // pass names
  bool printAfterAll = false;
  bool verifyEach = false;
  bool timePasses = false;
};

class PassManager {
public:
  explicit PassManager(PassManagerOptions opts = {}) : opts_(std::move(opts)) {}

  // Appends passes from "a,b,c"; each item is a pass or a named pipeline. Unknown names
  // are an error that lists what exists.
  Status addPipeline(const std::string& spec);
  const std::vector<std::string>& passNames() const { return names_; }

  // Runs every pass in order. IR printed by --print-after goes to `dump` as
  // "// ----- IR after NAME -----" followed by the module; timings go to `dump` at the end.
  // A verifier failure after a pass names the pass.
  Status run(Module& m, std::ostream& dump);

private:
  PassManagerOptions opts_;
  std::vector<std::string> names_;
};

} // namespace kiln
