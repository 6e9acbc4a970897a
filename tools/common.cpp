// Flag parsing, module loading and diagnostic output shared by the kiln subcommands.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "cli.h"
#include "ir/text/parser.h"
#include "ir/verify/verifier.h"

namespace kiln::cli {

std::string ParsedArgs::get(const std::string& flag, const std::string& fallback) const {
  auto it = values.find(flag);
  return it == values.end() || it->second.empty() ? fallback : it->second.back();
}

const std::vector<std::string>& ParsedArgs::all(const std::string& flag) const {
  static const std::vector<std::string> none;
  auto it = values.find(flag);
  return it == values.end() ? none : it->second;
}

Result<ParsedArgs> parseArgs(const std::vector<std::string>& args,
                             const std::vector<FlagSpec>& specs, const std::string& command) {
  ParsedArgs out;
  bool flagsDone = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (flagsDone || a == "-" || a.empty() || a[0] != '-') {
      out.positional.push_back(a);
      continue;
    }
    if (a == "--") {
      flagsDone = true;
      continue;
    }
    if (a == "--help" || a == "-h") {
      out.help = true;
      continue;
    }
    std::string name = a, value;
    bool hasValue = false;
    if (a.starts_with("--")) {
      name = a.substr(2);
      if (size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        hasValue = true;
      }
    } else {
      name = a.substr(1);
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& s : specs)
      if (s.name == name || (!a.starts_with("--") && !s.shortName.empty() && s.shortName == name))
        spec = &s;
    if (!spec)
      return error(Loc{}, "unknown flag '" + a + "' for 'kiln " + command + "' (see kiln " +
                              command + " --help)");
    if (spec->takesValue && !hasValue) {
      if (i + 1 >= args.size()) return error(Loc{}, "flag '--" + spec->name + "' needs a value");
      value = args[++i];
    } else if (!spec->takesValue && hasValue) {
      return error(Loc{}, "flag '--" + spec->name + "' takes no value");
    }
    auto& slot = out.values[spec->name];
    if (!spec->repeatable && !slot.empty())
      return error(Loc{}, "flag '--" + spec->name + "' is given more than once");
    slot.push_back(value);
  }
  return out;
}

Result<std::unique_ptr<Module>> loadModule(const std::string& path) {
  std::unique_ptr<Module> m;
  if (path == "-") {
    std::ostringstream text;
    text << std::cin.rdbuf();
    KILN_TRY(m, parseModule(text.str(), "<stdin>"));
  } else {
    KILN_TRY(m, parseModuleFile(path));
  }
  KILN_CHECK(verifyModule(*m));
  return m;
}

Status writeTextFile(const std::string& path, const std::string& text) {
  if (path == "-") { // standard output, as for `kiln import -o -`
    std::cout << text << std::flush;
    if (!std::cout) return error(Loc::named("<stdout>"), "cannot write");
    return ok();
  }
  std::ofstream out(path, std::ios::binary);
  if (out) out << text;
  out.close();
  if (!out) return error(Loc::named(path), std::string("cannot write: ") + std::strerror(errno));
  return ok();
}

// The library names API concepts (passes/placement.h): a location `target`, `device`,
// `function`, `pipeline` or `autoDeclare` is an option, `device=SPEC`, `place=SPEC` or
// `partition=SPEC` an option holding that spec, "declare device KIND[N]" and `autoDeclare` in a
// message the fix. The CLI names the flag the user typed instead.
static Diags asFlags(Diags diags) {
  static const std::map<std::string, std::string> flags = {{"target", "--target"},
                                                           {"device", "--device"},
                                                           {"function", "--function"},
                                                           {"pipeline", "--pass"},
                                                           {"autoDeclare", "--devices=auto"}};
  static const std::vector<std::string> specs = {"device=", "place=", "partition="};
  static const std::vector<std::pair<std::string, std::string>> phrases = {
      {"declare device ", "add --device="}, {"autoDeclare", "--devices=auto"}};
  auto rename = [&](Diag& d) {
    Loc& loc = d.loc;
    if (loc.line == 0) {
      auto it = flags.find(loc.file);
      if (it != flags.end()) loc.file = it->second;
      for (const std::string& s : specs)
        if (loc.file.starts_with(s)) loc.file = "--" + loc.file;
    }
    for (const auto& [from, to] : phrases)
      for (size_t at = d.message.find(from); at != std::string::npos;
           at = d.message.find(from, at + to.size()))
        d.message.replace(at, from.size(), to);
  };
  for (Diag& d : diags.list) {
    rename(d);
    for (Diag& n : d.notes) rename(n);
  }
  return diags;
}

int fail(const Diags& diags) {
  std::cerr << asFlags(diags).str();
  std::cerr.flush();
  return 1;
}

int fail(const Diag& diag) { return fail(Diags{{diag}}); }

} // namespace kiln::cli
