// Shared pieces of the kiln command-line tool: flag parsing and diagnostic output.
//
// Flags are parsed by hand so that every mistake is a diagnostic like any other:
// `--flag=value` and `--flag value` both work, `--` ends the flags, `-` is a positional
// argument (stdin).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/diag.h"
#include "ir/host_tensor.h"
#include "ir/ir.h"

namespace kiln::cli {

struct FlagSpec {
  std::string name;      // without the leading "--"
  bool takesValue;       // --name=VALUE / --name VALUE; otherwise a switch
  bool repeatable;       // may be given more than once
  std::string shortName; // optional one-letter alias such as "o" for -o
};

struct ParsedArgs {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> values; // repeated values keep their order
  bool help = false;

  bool has(const std::string& flag) const { return values.count(flag) != 0; }
  // The single value of a non-repeatable flag, or `fallback`.
  std::string get(const std::string& flag, const std::string& fallback = "") const;
  const std::vector<std::string>& all(const std::string& flag) const;
};

// Parses `args` (the words after the subcommand) against `specs`; unknown flags, missing
// values and repeats of a single-use flag are errors that name `command`.
Result<ParsedArgs> parseArgs(const std::vector<std::string>& args,
                             const std::vector<FlagSpec>& specs, const std::string& command);

// Parses FILE (or stdin for "-") and verifies it.
Result<std::unique_ptr<Module>> loadModule(const std::string& path);
// loadModule, or for a path ending in .onnx an in-memory import whose weight data goes to
// `weights` (cmd_import.cpp).
Result<std::unique_ptr<Module>> loadModel(const std::string& path,
                                          std::map<std::string, HostTensor>& weights);
Status writeTextFile(const std::string& path, const std::string& text);

// Prints diagnostics to stderr; returns the exit status for a failure (1).
int fail(const Diags& diags);
int fail(const Diag& diag);

// Subcommands: each takes the words after its name and returns the process exit status.
int runOpt(const std::vector<std::string>& args);
int runRun(const std::vector<std::string>& args);
int runImport(const std::vector<std::string>& args);

extern const char* const kOptHelp;
extern const char* const kRunHelp;
extern const char* const kImportHelp;

} // namespace kiln::cli
