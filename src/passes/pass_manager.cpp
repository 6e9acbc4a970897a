// PassManager: expands pipeline specs and runs passes with printing, verification and
// timing around each one.
#include "passes/pass_manager.h"

#include <chrono>
#include <cstdio>

#include "ir/printer.h"
#include "ir/verifier.h"

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

Status expand(const std::string& spec, int depth, std::vector<std::string>& out) {
  if (depth > kMaxPipelineDepth)
    return error(Loc::named("--pass"),
                 "pipelines nest deeper than " + std::to_string(kMaxPipelineDepth) + " levels");
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string::npos) comma = spec.size();
    std::string name = trim(spec.substr(start, comma - start));
    start = comma + 1;
    if (name.empty())
      return error(Loc::named("--pass"), "empty pass name in '" + spec + "'; " + knownNames());
    if (const PipelineInfo* p = lookupPipeline(name)) {
      KILN_CHECK(expand(p->passes, depth + 1, out));
    } else if (lookupPass(name)) {
      out.push_back(name);
    } else {
      return error(Loc::named("--pass"), "unknown pass '" + name + "'; " + knownNames());
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
  std::vector<std::string> names;
  KILN_CHECK(expand(spec, 0, names));
  names_.insert(names_.end(), names.begin(), names.end());
  return ok();
}

Status PassManager::run(Module& m, std::ostream& dump) {
  for (const std::string& name : opts_.printAfter)
    if (!lookupPass(name))
      return error(Loc::named("--print-after"), "unknown pass '" + name + "'; " + knownNames());

  std::vector<std::pair<std::string, double>> timings;
  for (const std::string& name : names_) {
    const PassInfo* info = lookupPass(name);
    if (!info) return error(Loc::named("--pass"), "unknown pass '" + name + "'; " + knownNames());
    std::unique_ptr<Pass> pass = info->create();
    auto begin = std::chrono::steady_clock::now();
    Status st = pass->run(m);
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
