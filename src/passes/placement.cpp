// User placement and pipeline partitioning (see placement.h).
#include "passes/placement.h"

#include "passes/tensor_parallel.h"
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "analysis/cost.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"
#include "passes/affinity.h"
#include "passes/tensor_parallel.h"

namespace kiln {

namespace {

// One place in a function that names a device.
struct DeviceRef {
  DeviceTarget target;
  Loc loc;
  std::string what; // "op 'matmul' (%5)", "argument %x of @main", ...
  const Op* op = nullptr;
};

std::vector<DeviceRef> collectRefs(const Module& m) {
  std::vector<DeviceRef> refs;
  for (const auto& f : m.funcs()) {
    std::string fn = "@" + f->name();
    for (size_t i = 0; i < f->numArgs(); ++i)
      if (auto d = f->argDevice(i))
        refs.push_back({*d, f->loc(), "argument " + std::to_string(i) + " of " + fn});
    for (size_t i = 0; i < f->resultTypes().size(); ++i)
      if (auto d = f->resultDevice(i))
        refs.push_back({*d, f->loc(), "result " + std::to_string(i) + " of " + fn});
    for (const auto& op : f->ops())
      if (const auto& d = op->device())
        refs.push_back({*d, op->loc(), "op '" + std::string(op->name()) + "' in " + fn, op.get()});
  }
  return refs;
}

std::string declaredList(const Module& m) {
  std::string s;
  for (const DeviceDecl& d : m.devices()) s += (s.empty() ? "" : ", ") + d.target.str();
  return s.empty() ? "none" : s;
}

} // namespace

Status resolveDevices(Module& m, const DeviceOptions& opts) {
  for (const std::string& text : opts.devices) {
    Loc where = Loc::named("device=" + text);
    KILN_TRY(DeviceTarget t, parseDeviceTarget(text, where));
    if (!m.findDevice(t)) KILN_CHECK(m.addDevice(DeviceDecl{"", t, where}));
  }
  std::vector<DeviceRef> refs = collectRefs(m);
  if (opts.autoDeclare)
    for (const DeviceRef& r : refs)
      if (!m.findDevice(r.target))
        KILN_CHECK(m.addDevice(DeviceDecl{"", r.target, Loc::named("autoDeclare")}));
  Diags diags;
  std::vector<DeviceTarget> reported;
  for (const DeviceRef& r : refs) {
    if (m.findDevice(r.target)) continue;
    // One error per missing device, at its first reference; the rest are counted.
    bool seen = false;
    for (const DeviceTarget& t : reported) seen = seen || t == r.target;
    if (seen) continue;
    reported.push_back(r.target);
    size_t more = 0;
    for (const DeviceRef& o : refs) more += o.target == r.target ? 1 : 0;
    Diag d = error(r.loc, r.what + " runs on device " + r.target.str() +
                              ", which is not declared; declare device " + r.target.str());
    if (r.op) d.notes.push_back(note(r.op->loc(), "the op: " + printOp(*r.op)));
    if (more > 1)
      d.notes.push_back(note(r.loc, std::to_string(more - 1) + " more reference" +
                                        (more > 2 ? "s" : "") + " to " + r.target.str()));
    d.notes.push_back(note(r.loc, "declared devices: " + declaredList(m) +
                                      "; autoDeclare declares every device the program uses"));
    diags.add(std::move(d));
  }
  if (diags.hasErrors()) return diags;
  return ok();
}

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

namespace {

Result<DeviceTarget> placeDevice(const Module& m, const std::string& text, const Loc& where) {
  if (!text.empty() && text[0] == '@') {
    const DeviceDecl* d = m.lookupDevice(text.substr(1));
    if (!d) return error(where, "undeclared device " + text);
    return d->target;
  }
  KILN_TRY(DeviceTarget t, parseDeviceTarget(text, where));
  if (!m.findDevice(t))
    return error(where, "device " + t.str() + " is not declared; declare device " + t.str());
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
    Loc where = Loc::named("place=" + spec);
    size_t eq = spec.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      diags.add(error(where, "expected PATTERN=DEVICE, like 'blocks.1.*=ref[1]'"));
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
          other = prev->second.device.str() + " (placed by '" + prev->second.spec + "')";
        else if (prev == pinned.end() && op->device() && *op->device() != *dev)
          other = op->device()->str() + " (in the IR)";
        if (other) {
          Diag d = error(op->loc(), "op '" + std::string(op->name()) +
                                        "' is pinned to two devices: " + *other + " and " +
                                        dev->str() + " (placed by '" + spec + "')");
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

Result<PartitionSpec> parsePartitionSpec(const std::string& spec) {
  Loc where = Loc::named("partition=" + spec);
  PartitionSpec out;
  bool tensorSeen = false;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    std::string item =
        spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    size_t colon = item.find(':');
    std::string kind = item.substr(0, colon);
    if (colon == std::string::npos || (kind != "pipeline" && kind != "tensor"))
      return error(where, "expected pipeline:P, tensor:T or pipeline:P,tensor:T");
    if ((kind == "pipeline" && out.stages) || (kind == "tensor" && tensorSeen))
      return error(where, "'" + kind + "' is given twice");
    std::string n = item.substr(colon + 1);
    if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(n) < 1 || static_cast<size_t>(std::stoi(n)) > kMaxDevices)
      return error(where, "expected a count from 1 to " + std::to_string(kMaxDevices) + " after '" +
                              kind + ":'");
    if (kind == "pipeline")
      out.stages = std::stoi(n);
    else
      out.tensor = std::stoi(n), tensorSeen = true;
  }
  if (static_cast<size_t>(out.stages.value_or(1) * out.tensor) > kMaxDevices)
    return error(where, "pipeline stages times tensor-parallel devices exceeds " +
                            std::to_string(kMaxDevices) + " devices");
  return out;
}

namespace {

// Cut positions are indices into `work` (a cut at p ends a stage before work[p]). For each
// p, the bytes of values that would cross it: defined before p and used at or after p.
std::vector<int64_t> crossingBytes(const Module& m, const Func& f, const std::vector<Op*>& work) {
  std::unordered_map<const Op*, size_t> index;
  for (size_t i = 0; i < work.size(); ++i) index[work[i]] = i;
  std::vector<int64_t> delta(work.size() + 2, 0);
  auto interval = [&](const Value* v, size_t from) {
    size_t last = from;
    bool used = false;
    for (const Use& u : v->uses()) {
      size_t at = u.user->has(kTerminator) ? work.size() : index.count(u.user) ? index[u.user] : 0;
      if (at >= from) last = std::max(last, at), used = true;
    }
    if (!used || last <= from) return;
    int64_t bytes = valueBytes(*v, m.symbols());
    delta[from + 1] += bytes; // crosses cuts from+1 .. last
    delta[last + 1] -= bytes;
  };
  // An argument counts as defined before work[0]: it crosses every cut before its last use.
  for (size_t i = 0; i < f.numArgs(); ++i) interval(f.arg(i), 0);
  for (size_t i = 0; i < work.size(); ++i)
    for (size_t r = 0; r < work[i]->numResults(); ++r) interval(work[i]->result(r), i);
  std::vector<int64_t> cross(work.size() + 1, 0);
  int64_t run = 0;
  for (size_t p = 0; p <= work.size(); ++p) cross[p] = run += delta[p];
  return cross;
}

// Pins `f`'s unpinned, not-cheap ops to stages. Each boundary goes near its balanced point
// (k/stages of the total cost): among the cuts whose cost before them lies within a
// quarter stage of it, the one that moves the fewest bytes wins (in a transformer, the
// end of a block, where only the hidden state is live), then the most balanced.
void partitionFunc(const Module& m, Func& f, int stages, int stride) {
  std::vector<Op*> work;
  std::vector<double> before = {0}; // cost of work[0..p)
  for (const auto& op : f.ops()) {
    if (op->has(kTerminator) || op->device() || isCheapToClone(*op)) continue;
    work.push_back(op.get());
    before.push_back(before.back() + static_cast<double>(balanceCost(opCost(*op, m.symbols()))));
  }
  double total = before.back();
  std::vector<int64_t> cross = crossingBytes(m, f, work);
  std::vector<size_t> cuts = {0};
  for (int k = 1; k < stages; ++k) {
    double target = total * k / stages;
    double slack = total / stages / 4;
    size_t best = cuts.back();
    bool found = false;
    for (size_t p = cuts.back(); p <= work.size(); ++p) {
      if (before[p] < target - slack) continue;
      if (before[p] > target + slack) break;
      auto key = [&](size_t q) { return std::make_pair(cross[q], std::abs(before[q] - target)); };
      if (!found || key(p) < key(best)) best = p, found = true;
    }
    if (!found) // no cut within the slack (one huge op): the nearest one
      for (size_t p = cuts.back(); p <= work.size(); ++p)
        if (std::abs(before[p] - target) < std::abs(before[best] - target)) best = p;
    cuts.push_back(best);
  }
  cuts.push_back(work.size());
  for (size_t s = 0; s + 1 < cuts.size(); ++s)
    for (size_t i = cuts[s]; i < cuts[s + 1]; ++i)
      work[i]->setDevice(m.devices()[s * static_cast<size_t>(stride)].target);
}

} // namespace

Status partitionPipeline(Module& m, int stages, int stride) {
  size_t needed = static_cast<size_t>(stages) * static_cast<size_t>(std::max(stride, 1));
  if (stages < 1 || needed > m.devices().size()) {
    std::string msg = "a pipeline of " + std::to_string(stages) + " stages" +
                      (stride > 1 ? " of " + std::to_string(stride) + " devices each" : "") +
                      " needs " + std::to_string(needed) + " declared devices, found " +
                      std::to_string(m.devices().size());
    if (needed > m.devices().size() && !m.devices().empty()) {
      const DeviceTarget& last = m.devices().back().target;
      msg += "; declare device " + last.kind + "[" + std::to_string(last.ordinal + 1) + "] ...";
    } else if (m.devices().empty()) {
      msg += "; declare device ref[0] ...";
    }
    return error(Loc::named("partition=pipeline:" + std::to_string(stages)), msg);
  }
  for (const auto& f : m.funcs()) partitionFunc(m, *f, stages, std::max(stride, 1));
  return ok();
}

namespace {

// autoDeclare also declares the devices that the placement specs name (a malformed spec is left for
// applyPlacement to report).
Status declarePlacedDevices(Module& m, const std::vector<std::string>& specs) {
  for (const std::string& spec : specs) {
    size_t eq = spec.rfind('=');
    if (eq == std::string::npos || eq + 1 >= spec.size() || spec[eq + 1] == '@') continue;
    Result<DeviceTarget> t = parseDeviceTarget(spec.substr(eq + 1), Loc::named("place=" + spec));
    if (t.ok() && !m.findDevice(*t))
      KILN_CHECK(m.addDevice(DeviceDecl{"", *t, Loc::named("autoDeclare")}));
  }
  return ok();
}

} // namespace

Status placeModule(Module& m, const PlacementOptions& opts,
                   const std::function<Status(Module&)>& passes) {
  KILN_CHECK(resolveDevices(m, opts.devices));
  if (opts.devices.autoDeclare) KILN_CHECK(declarePlacedDevices(m, opts.place));
  if (!opts.place.empty()) KILN_CHECK(applyPlacement(m, opts.place));
  if (opts.tensor > 1) {
    // Checked first, so that a wrong device count names tensor parallelism.
    size_t n = m.devices().size();
    if (n < static_cast<size_t>(opts.tensor * opts.stages.value_or(1)))
      return error(Loc::named("partition"),
                   "tensor:" + std::to_string(opts.tensor) +
                       (opts.stages ? " with pipeline:" + std::to_string(*opts.stages) : "") +
                       " needs " + std::to_string(opts.tensor * opts.stages.value_or(1)) +
                       " declared devices, found " + std::to_string(n) +
                       "; declare them (--device, repeated)");
  }
  if (opts.stages) KILN_CHECK(partitionPipeline(m, *opts.stages, opts.tensor));
  if (passes) KILN_CHECK(passes(m));
  if (!opts.affinity) return ok();
  AffinityOptions affinityOpts;
  affinityOpts.allowTransfers = opts.allowTransfers;
  KILN_TRY([[maybe_unused]] AffinityStats stats, runAffinity(m, affinityOpts));
  if (opts.tensor > 1 || !opts.shard.empty()) {
    KILN_TRY([[maybe_unused]] TensorParallelStats tp, partitionTensor(m, opts.tensor, opts.shard));
  }
  return verifyModule(m);
}

} // namespace kiln
