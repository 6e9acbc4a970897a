// applyDonations: parses --donate specs and records them on the functions' arguments.
#include "analysis/donation_specs.h"

#include <algorithm>
#include <set>

namespace kiln {

namespace {

bool allDigits(const std::string& s) {
  return !s.empty() && s.size() < 10 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

Result<Func*> donationFunc(Module& m, const std::string& name, const Loc& loc) {
  std::set<std::string> kernels = kernelFunctions(m);
  std::vector<Func*> entries;
  for (const auto& f : m.funcs())
    if (!kernels.count(f->name())) entries.push_back(f.get());
  if (!name.empty()) {
    for (Func* f : entries)
      if (f->name() == name) return f;
    return error(loc, "no function @" + name + " in the module");
  }
  for (Func* f : entries)
    if (f->name() == "main") return f;
  if (entries.size() == 1) return entries[0];
  return error(loc, "the module has " + std::to_string(entries.size()) +
                        " functions and none is @main; name one: --donate=@FUNC:ARG");
}

Status applyOne(Module& m, const std::string& spec) {
  Loc loc = Loc::named("--donate=" + spec);
  std::string rest = spec, fname;
  if (rest.starts_with("@")) {
    size_t colon = rest.find(':');
    if (colon == std::string::npos || colon == 1) return error(loc, "expected @FUNC:ARG[:RESULT]");
    fname = rest.substr(1, colon - 1);
    rest = rest.substr(colon + 1);
  }
  std::optional<size_t> result;
  if (size_t colon = rest.rfind(':');
      colon != std::string::npos && allDigits(rest.substr(colon + 1))) {
    result = std::stoul(rest.substr(colon + 1));
    rest = rest.substr(0, colon);
  }
  if (rest.starts_with("%")) rest = rest.substr(1);
  if (rest.empty()) return error(loc, "expected an argument name or index: [@FUNC:]ARG[:RESULT]");
  KILN_TRY(Func * f, donationFunc(m, fname, loc));
  std::optional<size_t> arg;
  for (size_t i = 0; i < f->numArgs() && !arg; ++i)
    if (f->arg(i)->name() == rest) arg = i;
  if (!arg && allDigits(rest)) {
    size_t i = std::stoul(rest);
    if (i >= f->numArgs())
      return error(loc, "@" + f->name() + " has " + std::to_string(f->numArgs()) + " arguments");
    arg = i;
  }
  if (!arg) return error(loc, "@" + f->name() + " has no argument %" + rest);
  const Type& t = f->arg(*arg)->type();
  std::vector<bool> taken(f->resultTypes().size(), false);
  for (size_t i = 0; i < f->numArgs(); ++i)
    if (auto r = f->argDonation(i); r && *r < taken.size() && i != *arg) taken[*r] = true;
  if (!result) {
    std::vector<size_t> fits;
    for (size_t r = 0; r < f->resultTypes().size(); ++r)
      if (!taken[r] && f->resultTypes()[r].str() == t.str()) fits.push_back(r);
    if (fits.size() != 1) {
      std::string list;
      for (size_t r : fits) list += (list.empty() ? "" : ", ") + std::to_string(r);
      return error(loc, fits.empty() ? "@" + f->name() + " has no result of type " + t.str() +
                                           " to donate %" + rest + " to"
                                     : "results " + list + " of @" + f->name() + " have type " +
                                           t.str() + "; name one: --donate=" + spec + ":RESULT");
    }
    result = fits[0];
  }
  if (auto prev = f->argDonation(*arg); prev && *prev != *result)
    return error(loc, "argument %" + rest + " of @" + f->name() + " is already donated to result " +
                          std::to_string(*prev));
  f->setArgDonation(*arg, *result);
  return ok();
}

} // namespace

Status applyDonations(Module& m, const std::vector<std::string>& specs) {
  for (const std::string& s : specs) KILN_CHECK(applyOne(m, s));
  return ok();
}

} // namespace kiln
