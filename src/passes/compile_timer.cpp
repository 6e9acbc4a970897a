// CompileTimer (compile_timer.h): phases, counts, per-kernel times and progress of a compile.
#include "passes/compile_timer.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace kiln {

size_t CompileTimer::openPhase(std::string name, size_t kernels) {
  Phase p;
  p.name = std::move(name);
  p.depth = static_cast<int>(stack_.size());
  p.begin = std::chrono::steady_clock::now();
  p.open = true;
  phases_.push_back(p);
  stack_.push_back(phases_.size() - 1);
  ProgressFn fn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = phases_.back().name;
    done_ = 0;
    total_ = kernels;
    fn = progress_;
  }
  if (fn) fn(phases_.back().name, 0, kernels);
  return phases_.size() - 1;
}

void CompileTimer::closePhase(size_t slot) {
  Phase& p = phases_[slot];
  if (!p.open) return;
  p.ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p.begin).count();
  p.open = false;
  auto it = std::find(stack_.begin(), stack_.end(), slot);
  if (it != stack_.end()) stack_.erase(it, stack_.end());
}

void CompileTimer::addPhase(std::string name, double ms) {
  Phase p;
  p.name = std::move(name);
  p.depth = static_cast<int>(stack_.size());
  p.ms = ms;
  phases_.push_back(std::move(p));
}

void CompileTimer::addCount(const std::string& name, int64_t n) {
  for (auto& [k, v] : counts_)
    if (k == name) {
      v += n;
      return;
    }
  counts_.emplace_back(name, n);
}

int64_t CompileTimer::count(const std::string& name) const {
  for (const auto& [k, v] : counts_)
    if (k == name) return v;
  return 0;
}

void CompileTimer::addKernel(std::string name, double optimizeMs, double codegenMs,
                             std::string group) {
  std::lock_guard<std::mutex> lock(mu_);
  kernels_.push_back({std::move(name), optimizeMs, codegenMs, std::move(group)});
}

void CompileTimer::kernelDone() {
  std::lock_guard<std::mutex> lock(mu_);
  ++done_;
  // Workers report one at a time, so the progress line never interleaves.
  if (progress_) progress_(current_, done_, total_);
}

namespace {

std::string row(double ms, double total, int depth, const std::string& name) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%11.1f %6.1f%%  ", ms, total > 0 ? 100.0 * ms / total : 0.0);
  return buf + std::string(2 * static_cast<size_t>(depth), ' ') + name + "\n";
}

} // namespace

std::string CompileTimer::table(size_t slowest) const {
  double total = 0;
  for (const Phase& p : phases_)
    if (p.depth == 0) total += p.ms;
  std::string out = "===== kiln compile: time per phase =====\n         ms  share  phase\n";
  for (const Phase& p : phases_) out += row(p.ms, total, p.depth, p.name);
  out += row(total, total, 0, "total");
  std::vector<Kernel> ks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ks = kernels_;
  }
  if (!ks.empty()) {
    double opt = 0, cg = 0;
    for (const Kernel& k : ks) {
      opt += k.optimizeMs;
      cg += k.codegenMs;
    }
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "LLVM time summed over %zu compiled kernels (all threads): optimize %.1f ms, "
                  "code generation %.1f ms\n",
                  ks.size(), opt, cg);
    out += buf;
    // Per group (in reverse name order: O3 before O2), when the kernels have groups.
    struct Sum {
      size_t kernels = 0;
      double optimizeMs = 0, codegenMs = 0;
    };
    std::map<std::string, Sum> groups;
    for (const Kernel& k : ks) {
      if (k.group.empty()) continue;
      Sum& g = groups[k.group];
      g.kernels += 1;
      g.optimizeMs += k.optimizeMs;
      g.codegenMs += k.codegenMs;
    }
    for (auto it = groups.rbegin(); it != groups.rend(); ++it) {
      std::snprintf(
          buf, sizeof buf, "  %s: %zu kernels, optimize %.1f ms, code generation %.1f ms\n",
          it->first.c_str(), it->second.kernels, it->second.optimizeMs, it->second.codegenMs);
      out += buf;
    }
    std::stable_sort(ks.begin(), ks.end(), [](const Kernel& a, const Kernel& b) {
      return a.optimizeMs + a.codegenMs > b.optimizeMs + b.codegenMs;
    });
    out += "slowest kernels:    optimize ms  codegen ms  kernel\n";
    for (size_t i = 0; i < ks.size() && i < slowest; ++i) {
      std::snprintf(buf, sizeof buf, "                  %13.1f %11.1f  ", ks[i].optimizeMs,
                    ks[i].codegenMs);
      out += buf + ks[i].name + "\n";
    }
  }
  for (const auto& [name, n] : counts_) out += name + ": " + std::to_string(n) + "\n";
  return out;
}

} // namespace kiln
