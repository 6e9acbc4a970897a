// Flag parsing, module loading and diagnostic output shared by the kiln subcommands.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

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
  std::ofstream out(path, std::ios::binary);
  if (out) out << text;
  out.close();
  if (!out) return error(Loc::named(path), std::string("cannot write: ") + std::strerror(errno));
  return ok();
}

// The library names API concepts where a diagnostic has no source location (`target`,
// `device`, `function`, `pipeline`); the CLI names the flag the user typed instead.
static Diags asFlags(Diags diags) {
  static const std::map<std::string, std::string> flags = {{"target", "--target"},
                                                           {"device", "--device"},
                                                           {"function", "--function"},
                                                           {"pipeline", "--pass"}};
  auto rename = [&](Loc& loc) {
    auto it = loc.line == 0 ? flags.find(loc.file) : flags.end();
    if (it != flags.end()) loc.file = it->second;
  };
  for (Diag& d : diags.list) {
    rename(d.loc);
    for (Diag& n : d.notes) rename(n.loc);
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
