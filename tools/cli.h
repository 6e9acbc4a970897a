// Shared pieces of the kiln command-line tool: flag parsing and diagnostic output.
//
// Flags are parsed by hand so that every mistake is a diagnostic like any other:
// `--flag=value` and `--flag value` both work, `--` ends the flags, `-` is a positional
// argument (stdin).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "ir/core/diag.h"
#include "ir/core/host_tensor.h"
#include "ir/core/ir.h"
#include "ir/io/npy.h"
#include "passes/pass.h"
#include "runtime/drivers.h"
#include "runtime/program.h"
#include "target/target.h"

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
// Writes `text` to the file `path`, or to stdout for "-".
Status writeTextFile(const std::string& path, const std::string& text);

// Inputs (input.cpp). A source model (.kir, .onnx, or - for .kir on stdin) parsed or
// imported, and verified:
Result<std::unique_ptr<Module>> loadInputModule(const std::string& path);
bool isModuleFile(const std::string& path); // FILE.kmod
// A program to run: a .kmod file, or a source model compiled in memory with `placement`
// (its devices, --place, --partition) and the --donate specs (a .kmod keeps the donations
// it was compiled with; giving --donate for one is an error); --no-attention clears
// `recognizeAttention`. `check`, when given, sees a source model before it is compiled
// (kiln run refuses a wrong number of inputs there, not after seconds of compiling).
Result<std::shared_ptr<const Program>>
loadProgramInput(const std::string& path, const PlacementOptions& placement,
                 const std::vector<std::string>& donate = {}, bool recognizeAttention = true,
                 const std::function<Status(const Module&)>& check = nullptr);
// --device (repeatable), --devices=auto, --place, --partition, in the shape placeModule
// takes; commands that accept them list placementFlagSpecs() among their flags.
Result<PlacementOptions> placementFlags(const ParsedArgs& a);
const std::vector<FlagSpec>& placementFlagSpecs();
// `specs` followed by placementFlagSpecs().
std::vector<FlagSpec> withPlacementFlags(std::vector<FlagSpec> specs);
// The entry to run: --function, else @main, else the only one (of a program's entries, or
// of a source model's functions before it is compiled).
Result<std::string> pickEntry(const Program& p, const std::string& requested);
Result<std::string> pickEntry(const std::vector<std::string>& entries,
                              const std::string& requested);
// --input values (@FILE.npy or literals), in order; every bad one is reported.
Result<std::vector<HostTensor>> loadInputTensors(const std::vector<std::string>& specs);
// --target=NAME and --tile-config=FILE for a codegen pipeline (kiln opt, kiln compile
// --emit=kernels): the options every codegen pass of the pipeline text gets, and the target
// they name (the table's "cpu" when none), checked.
struct CodegenFlags {
  PassOptions passDefaults;
  TargetDesc target;
};
Result<CodegenFlags> codegenFlags(const ParsedArgs& a);
// --cpu-threads=N (kiln run, kiln bench): the cpu devices' thread count; applied before a
// device is opened.
Status applyCpuThreadsFlag(const ParsedArgs& a);
// --device: well-formed and present on this machine.
Result<hal::DeviceId> checkDevice(const std::string& spec);

// Prints diagnostics to stderr; returns the exit status for a failure (1).
int fail(const Diags& diags);
int fail(const Diag& diag);

// Subcommands: each takes the words after its name and returns the process exit status.
int runOpt(const std::vector<std::string>& args);
int runRun(const std::vector<std::string>& args);
int runCompile(const std::vector<std::string>& args);
int runDump(const std::vector<std::string>& args);
int runDevices(const std::vector<std::string>& args);
int runBench(const std::vector<std::string>& args);
int runImport(const std::vector<std::string>& args);

extern const char* const kOptHelp;
extern const char* const kRunHelp;
extern const char* const kCompileHelp;
extern const char* const kDumpHelp;
extern const char* const kDevicesHelp;
extern const char* const kBenchHelp;
extern const char* const kImportHelp;

} // namespace kiln::cli
