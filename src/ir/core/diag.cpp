// Formatting of diagnostics.
#include "ir/core/diag.h"

namespace kiln {

std::string Loc::str() const {
  if (file.empty()) return "kiln";
  if (line == 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(col);
}

static const char* severityName(Severity s) {
  switch (s) {
  case Severity::Error: return "error";
  case Severity::Warning: return "warning";
  case Severity::Note: return "note";
  }
  return "error";
}

std::string Diag::str() const {
  std::string out = loc.str() + ": " + severityName(severity) + ": " + message + "\n";
  for (const Diag& n : notes) out += n.str();
  return out;
}

Diag error(Loc loc, std::string message) {
  return Diag{Severity::Error, std::move(loc), std::move(message), {}};
}

Diag note(Loc loc, std::string message) {
  return Diag{Severity::Note, std::move(loc), std::move(message), {}};
}

bool Diags::hasErrors() const {
  for (const Diag& d : list)
    if (d.severity == Severity::Error) return true;
  return false;
}

std::string Diags::str() const {
  std::string out;
  for (const Diag& d : list) out += d.str();
  return out;
}

} // namespace kiln
