// The kiln command-line tool: dispatches to subcommands and keeps every failure a
// diagnostic with exit status 1 (no exception leaves main).
#include <exception>
#include <iostream>

#include "cli.h"
#include "kiln_version.h"
#include "runtime/drivers.h"

namespace {

const char* const kHelp = R"(usage: kiln COMMAND [flags]

commands:
  opt      parse, verify, transform and print a .kir module
  import   convert an ONNX model to a .kir module and a weights file
  compile  compile a .kir module or an .onnx model to a .kmod module file
  run      run a function of a .kmod, .kir or .onnx model on a device
  bench    time repeated calls of a module's functions
  dump     validate a .kmod file and print what it holds
  devices  list the devices every driver sees

  kiln COMMAND --help   flags of one command
  kiln --version        print the version
)";

int dispatch(const std::vector<std::string>& words) {
  using namespace kiln;
  if (words.empty()) {
    std::cerr << kHelp;
    return cli::fail(error(Loc{}, "no command given"));
  }
  const std::string& cmd = words[0];
  std::vector<std::string> rest(words.begin() + 1, words.end());
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << kHelp;
    return 0;
  }
  if (cmd == "--version") {
    std::cout << "kiln " << KILN_VERSION << "\n";
    return 0;
  }
  if (cmd == "opt") return cli::runOpt(rest);
  if (cmd == "run") return cli::runRun(rest);
  if (cmd == "compile") return cli::runCompile(rest);
  if (cmd == "dump") return cli::runDump(rest);
  if (cmd == "devices") return cli::runDevices(rest);
  if (cmd == "bench") return cli::runBench(rest);
  if (cmd == "import") return cli::runImport(rest);
  if (cmd.starts_with("-"))
    return cli::fail(error(Loc{}, "unknown flag '" + cmd + "' (see kiln --help)"));
  return cli::fail(error(Loc{}, "unknown command '" + cmd +
                                    "' (commands: opt, import, compile, run, bench, dump, "
                                    "devices)"));
}

} // namespace

int main(int argc, char** argv) {
  try {
    int rc = dispatch(std::vector<std::string>(argv + 1, argv + argc));
    // With KILN_VULKAN_VALIDATION=1 (as the tests run it) a message of the validation layer,
    // printed as it came, fails the command.
    if (uint64_t n = kiln::hal::vulkanValidationMessages(); n && rc == 0)
      rc = kiln::cli::fail(
          kiln::error(kiln::Loc::named("vulkan"), "the Vulkan validation layer reported " +
                                                      std::to_string(n) + " messages (above)"));
    return rc;
  } catch (const std::exception& e) {
    return kiln::cli::fail(kiln::error(kiln::Loc{}, std::string("internal error: ") + e.what()));
  } catch (...) {
    return kiln::cli::fail(kiln::error(kiln::Loc{}, "internal error: unknown exception"));
  }
}
