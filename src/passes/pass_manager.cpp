// PassManager: expands pipeline specs and runs passes with printing, verification and
// timing around each one.
#include "passes/pass_manager.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "ir/text/printer.h"
#include "ir/verify/verifier.h"

namespace kiln {

namespace {

// Named pipelines may name other pipelines; a cycle between them would never end.
constexpr int kMaxPipelineDepth = 8;

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

const PipelineInfo* lookupPipeline(const std::string& name) {
  for (const PipelineInfo& p : registeredPipelines())
    if (p.name == name) return &p;
  return nullptr;
}

std::string knownNames() {
  std::string passes, pipelines;
  for (const PassInfo& p : registeredPasses()) passes += (passes.empty() ? "" : ", ") + p.name;
  for (const PipelineInfo& p : registeredPipelines())
    pipelines += (pipelines.empty() ? "" : ", ") + p.name;
  return "known passes: " + passes + "; pipelines: " + pipelines;
}

// One item of a pipeline text: a name and the options in its braces.
struct Item {
  std::string name;
  PassOptions options;
};

Result<PassOptions> parseOptions(const std::string& name, const std::string& text) {
  PassOptions out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string kv = trim(text.substr(start, comma - start));
    start = comma + 1;
    size_t eq = kv.find('=');
    if (eq == std::string::npos || trim(kv.substr(0, eq)).empty())
      return error(Loc::named("pipeline"),
                   "option '" + kv + "' of '" + name + "' is not KEY=VALUE");
    out[trim(kv.substr(0, eq))] = trim(kv.substr(eq + 1));
  }
  return out;
}

// Splits "a,b{k=v,k2=v2},c" at the commas outside braces.
Result<std::vector<Item>> splitItems(const std::string& spec) {
  std::vector<Item> items;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t i = start;
    while (i < spec.size() && spec[i] != ',' && spec[i] != '{') ++i;
    Item item{trim(spec.substr(start, i - start)), {}};
    if (i < spec.size() && spec[i] == '{') {
      size_t close = spec.find('}', i);
      if (close == std::string::npos)
        return error(Loc::named("pipeline"), "'{' after '" + item.name + "' is never closed");
      KILN_TRY(item.options, parseOptions(item.name, spec.substr(i + 1, close - i - 1)));
      i = close + 1;
      while (i < spec.size() && (spec[i] == ' ' || spec[i] == '\t')) ++i;
      if (i < spec.size() && spec[i] != ',')
        return error(Loc::named("pipeline"),
                     "expected ',' after the options of '" + item.name + "' in '" + spec + "'");
    }
    if (item.name.empty())
      return error(Loc::named("pipeline"), "empty pass name in '" + spec + "'; " + knownNames());
    items.push_back(std::move(item));
    start = i + 1;
  }
  return items;
}

bool accepts(const PassInfo& p, const std::string& key) {
  return std::find(p.options.begin(), p.options.end(), key) != p.options.end();
}

std::string acceptedKeys(const PassInfo& p) {
  if (p.options.empty()) return "it takes no options";
  std::string keys;
  for (const std::string& k : p.options) keys += (keys.empty() ? "" : ", ") + k;
  return "it takes " + keys;
}

// Expands named pipelines into passes with their options: `given` are the options written
// on an enclosing pipeline (each goes to the passes that accept it).
Status expand(const std::string& spec, const PassOptions& given, int depth,
              std::vector<Item>& out) {
  if (depth > kMaxPipelineDepth)
    return error(Loc::named("pipeline"),
                 "pipelines nest deeper than " + std::to_string(kMaxPipelineDepth) + " levels");
  KILN_TRY(std::vector<Item> items, splitItems(spec));
  for (Item& item : items) {
    if (const PipelineInfo* p = lookupPipeline(item.name)) {
      PassOptions merged = given;
      for (const auto& [k, v] : item.options) merged[k] = v;
      size_t first = out.size();
      KILN_CHECK(expand(p->passes, merged, depth + 1, out));
      for (const auto& [k, v] : item.options) {
        bool used = false;
        for (size_t i = first; i < out.size(); ++i) used |= out[i].options.count(k) > 0;
        if (!used)
          return error(Loc::named("pipeline"),
                       "no pass of pipeline '" + item.name + "' takes the option '" + k + "'");
      }
    } else if (const PassInfo* info = lookupPass(item.name)) {
      for (const auto& [k, v] : item.options)
        if (!accepts(*info, k))
          return error(Loc::named("pipeline"), "pass '" + item.name + "' has no option '" + k +
                                                   "'; " + acceptedKeys(*info));
      for (const auto& [k, v] : given)
        if (accepts(*info, k) && !item.options.count(k)) item.options[k] = v;
      out.push_back(std::move(item));
    } else {
      return error(Loc::named("pipeline"), "unknown pass '" + item.name + "'; " + knownNames());
    }
  }
  return ok();
}

std::string formatMs(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%10.3f", ms);
  return buf;
}

} // namespace

Status PassManager::addPipeline(const std::string& spec) {
  std::vector<Item> items;
  KILN_CHECK(expand(spec, {}, 0, items));
  std::vector<Entry> created;
  for (Item& item : items) {
    const PassInfo* info = lookupPass(item.name);
    for (const auto& [k, v] : opts_.defaults)
      if (accepts(*info, k) && !item.options.count(k)) item.options[k] = v;
    Result<std::unique_ptr<Pass>> pass = info->create(item.options);
    if (!pass.ok()) {
      Diags d = pass.takeDiags();
      if (!d.list.empty())
        d.list.front().notes.push_back(note(Loc{}, "in the options of pass '" + item.name + "'"));
      return d;
    }
    created.push_back({item.name, pass.take()});
  }
  for (Entry& e : created) passes_.push_back(std::move(e));
  return ok();
}

void PassManager::addPass(std::string name, std::unique_ptr<Pass> pass) {
  passes_.push_back({std::move(name), std::move(pass)});
}

std::vector<std::string> PassManager::passNames() const {
  std::vector<std::string> names;
  for (const Entry& e : passes_) names.push_back(e.name);
  return names;
}

Status PassManager::run(Module& m, std::ostream& dump) {
  for (const std::string& name : opts_.printAfter)
    if (!lookupPass(name))
      return error(Loc::named("--print-after"), "unknown pass '" + name + "'; " + knownNames());

  std::vector<std::pair<std::string, double>> timings;
  for (const Entry& e : passes_) {
    const std::string& name = e.name;
    Pass* pass = e.pass.get();
    auto begin = std::chrono::steady_clock::now();
    Status st = ok();
    {
      ScopedPhase phase(opts_.timer, name);
      st = pass->run(m);
    }
    auto end = std::chrono::steady_clock::now();
    timings.emplace_back(name, std::chrono::duration<double, std::milli>(end - begin).count());
    if (!st.ok()) {
      Diags d = st.takeDiags();
      if (!d.list.empty()) d.list.front().notes.push_back(note(Loc{}, "in pass '" + name + "'"));
      return d;
    }
    if (opts_.printAfterAll || opts_.printAfter.count(name)) {
      std::string text = printModule(m);
      dump << "// ----- IR after " << name << " -----\n" << text;
      if (!text.empty() && text.back() != '\n') dump << '\n';
    }
    if (opts_.verifyEach) {
      Status v = verifyModule(m);
      if (!v.ok()) {
        Diag d = error(Loc::named("--verify-each"), "the IR is invalid after pass '" + name + "'");
        for (const Diag& cause : v.diags().list) d.notes.push_back(cause);
        return d;
      }
    }
  }

  if (opts_.timePasses) {
    double total = 0;
    dump << "// ----- pass timings -----\n";
    dump << "// pass                   ms\n";
    for (const auto& [name, ms] : timings) {
      dump << "// " << name << std::string(name.size() < 14 ? 14 - name.size() : 1, ' ')
           << formatMs(ms) << "\n";
      total += ms;
    }
    dump << "// total         " << formatMs(total) << "\n";
  }
  return ok();
}

} // namespace kiln
