// The kiln command-line tool: dispatches to subcommands and keeps every failure a
// diagnostic with exit status 1 (no exception leaves main).
#include <exception>
#include <iostream>

#include "cli.h"
#include "kiln_version.h"

namespace {

const char* const kHelp = R"(usage: kiln COMMAND [flags]

commands:
  opt    parse, verify, transform and print a .kir module
  run    run a function of a .kir module or an .onnx model on a device
  import convert an ONNX model to a .kir module and a weights file

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
  if (cmd == "import") return cli::runImport(rest);
  if (cmd.starts_with("-"))
    return cli::fail(error(Loc{}, "unknown flag '" + cmd + "' (see kiln --help)"));
  return cli::fail(error(Loc{}, "unknown command '" + cmd + "' (commands: opt, run, import)"));
}

} // namespace

int main(int argc, char** argv) {
  try {
    return dispatch(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    return kiln::cli::fail(kiln::error(kiln::Loc{}, std::string("internal error: ") + e.what()));
  } catch (...) {
    return kiln::cli::fail(kiln::error(kiln::Loc{}, "internal error: unknown exception"));
  }
}
