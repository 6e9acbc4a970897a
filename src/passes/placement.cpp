// User placement and pipeline partitioning (see placement.h).
#include "passes/placement.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "ir/printer.h"
#include "passes/affinity.h"
#include "passes/cost.h"

namespace kiln {

bool globMatch(std::string_view p, std::string_view t) {
  // Iterative matcher with one backtrack point: linear-ish, no recursion on hostile input.
  size_t pi = 0, ti = 0, star = std::string_view::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == t[ti])) {
      ++pi, ++ti;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++, mark = ti;
    } else if (star != std::string_view::npos) {
      pi = star + 1, ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

namespace {

bool opMatches(const Op& op, std::string_view pattern) {
  if (globMatch(pattern, op.name())) return true;
  for (size_t r = 0; r < op.numResults(); ++r)
    if (!op.result(r)->name().empty() && globMatch(pattern, op.result(r)->name())) return true;
  if (op.loc().line == 0 && !op.loc().file.empty()) {
    const std::string& f = op.loc().file;
    if (globMatch(pattern, f)) return true;
    // "model.onnx: node 'name'" names the node between the quotes.
    size_t open = f.find("node '");
    size_t close = f.rfind('\'');
    if (open != std::string::npos && close > open + 6 &&
        globMatch(pattern, std::string_view(f).substr(open + 6, close - open - 6)))
      return true;
  }
  return op.kind() == OpKind::Weight && globMatch(pattern, op.attrs().getStr("name"));
}

Result<DeviceTarget> placeDevice(const Module& m, const std::string& text, const Loc& where) {
  if (!text.empty() && text[0] == '@') {
    const DeviceDecl* d = m.lookupDevice(text.substr(1));
    if (!d) return error(where, "undeclared device " + text);
    return d->target;
  }
  KILN_TRY(DeviceTarget t, parseDeviceTarget(text, where));
  if (!m.findDevice(t))
    return error(where, "device " + t.str() + " is not declared; add --device=" + t.str());
  return t;
}

} // namespace

Status applyPlacement(Module& m, const std::vector<std::string>& specs) {
  struct Pin {
    DeviceTarget device;
    std::string spec;
  };
  std::unordered_map<const Op*, Pin> pinned;
  Diags diags;
  for (const std::string& spec : specs) {
    Loc where = Loc::named("--place=" + spec);
    size_t eq = spec.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      diags.add(error(where, "expected --place=PATTERN=DEVICE, like --place='blocks.1.*=ref[1]'"));
      continue;
    }
    std::string pattern = spec.substr(0, eq);
    Result<DeviceTarget> dev = placeDevice(m, spec.substr(eq + 1), where);
    if (!dev.ok()) {
      diags.append(dev.diags());
      continue;
    }
    size_t matched = 0;
    for (const auto& f : m.funcs())
      for (const auto& op : f->ops()) {
        if (op->has(kTerminator) || !opMatches(*op, pattern)) continue;
        ++matched;
        auto prev = pinned.find(op.get());
        std::optional<std::string> other;
        if (prev != pinned.end() && prev->second.device != *dev)
          other = prev->second.device.str() + " (by --place=" + prev->second.spec + ")";
        else if (prev == pinned.end() && op->device() && *op->device() != *dev)
          other = op->device()->str() + " (in the IR)";
        if (other) {
          Diag d = error(op->loc(), "op '" + std::string(op->name()) +
                                        "' is pinned to two devices: " + *other + " and " +
                                        dev->str() + " (by --place=" + spec + ")");
          d.notes.push_back(note(op->loc(), "the op: " + printOp(*op)));
          diags.add(std::move(d));
          continue;
        }
        pinned[op.get()] = {*dev, spec};
        op->setDevice(*dev);
      }
    if (matched == 0) diags.add(error(where, "pattern '" + pattern + "' matches no op"));
  }
  if (diags.hasErrors()) return diags;
  return ok();
}

Result<int> parsePartitionSpec(const std::string& spec) {
  Loc where = Loc::named("--partition=" + spec);
  const std::string prefix = "pipeline:";
  if (spec.rfind(prefix, 0) != 0)
    return error(where, "expected --partition=pipeline:N (the only partitioning kiln has)");
  std::string n = spec.substr(prefix.size());
  if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(n) < 1)
    return error(where, "expected a stage count from 1 to " + std::to_string(kMaxDevices) +
                            " after 'pipeline:'");
  return std::stoi(n);
}

Status partitionPipeline(Module& m, int stages) {
  if (stages < 1 || static_cast<size_t>(stages) > m.devices().size()) {
    std::string msg = "--partition=pipeline:" + std::to_string(stages) + " needs " +
                      std::to_string(stages) + " declared devices, found " +
                      std::to_string(m.devices().size());
    if (static_cast<size_t>(stages) > m.devices().size() && !m.devices().empty()) {
      const DeviceTarget& last = m.devices().back().target;
      msg += "; add --device=" + last.kind + "[" + std::to_string(last.ordinal + 1) + "] ...";
    } else if (m.devices().empty()) {
      msg += "; add --device=ref[0] ...";
    }
    return error(Loc::named("--partition=pipeline:" + std::to_string(stages)), msg);
  }
  for (const auto& f : m.funcs()) {
    std::vector<Op*> work;
    std::vector<double> cost;
    double total = 0;
    for (const auto& op : f->ops()) {
      if (op->has(kTerminator) || op->device() || isCheapToClone(*op)) continue;
      work.push_back(op.get());
      cost.push_back(static_cast<double>(balanceCost(opCost(*op, m.symbols()))));
      total += cost.back();
    }
    // Op i goes to the stage its cost's midpoint falls in: stages are contiguous and each
    // holds about total / stages.
    double before = 0;
    for (size_t i = 0; i < work.size(); ++i) {
      double mid = before + cost[i] / 2;
      before += cost[i];
      int s = total > 0 ? static_cast<int>(std::floor(mid * stages / total)) : 0;
      s = std::clamp(s, 0, stages - 1);
      work[i]->setDevice(m.devices()[static_cast<size_t>(s)].target);
    }
  }
  return ok();
}

} // namespace kiln
