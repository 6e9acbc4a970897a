// PassManager: runs a pipeline of passes with the instrumentation the CLI exposes
// (--print-after, --print-after-all, --verify-each, --time-passes).
#pragma once

#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "passes/compile_timer.h"
#include "passes/pass.h"

namespace kiln {

struct PassManagerOptions {
  std::set<std::string> printAfter; // pass names
  bool printAfterAll = false;
  bool verifyEach = false;
  bool timePasses = false;
  // When set, every pass's time is recorded as a phase (kiln compile --time-passes) and its
  // name reported as progress.
  CompileTimer* timer = nullptr;
  // Options given to every pass of a pipeline text that accepts the key, unless the text
  // sets it (kiln opt's --target and --tile-config are `target` and `tile-config` here).
  PassOptions defaults;
};

class PassManager {
public:
  explicit PassManager(PassManagerOptions opts = {}) : opts_(std::move(opts)) {}

  // Appends passes from "a,b{key=value},c"; each item is a pass or a named pipeline, with
  // options in braces (on a pipeline they go to each of its passes that accepts the key).
  // Unknown names, unknown keys and bad values are errors; the passes are created here.
  Status addPipeline(const std::string& spec);
  // Appends a pass built from the API (its factory's typed options).
  void addPass(std::string name, std::unique_ptr<Pass> pass);
  std::vector<std::string> passNames() const;

  // Runs every pass in order. IR printed by --print-after goes to `dump` as
  // "// ----- IR after NAME -----" followed by the module; timings go to `dump` at the end.
  // A verifier failure after a pass names the pass.
  Status run(Module& m, std::ostream& dump);

private:
  struct Entry {
    std::string name;
    std::unique_ptr<Pass> pass;
  };
  PassManagerOptions opts_;
  std::vector<Entry> passes_;
};

} // namespace kiln
