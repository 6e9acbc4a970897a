// The placement report and the Graphviz picture (see placement_report.h).
#include "passes/placement_report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "analysis/cost.h"
#include "ir/text/lexer.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"

namespace kiln {

namespace {

// Value names as the printer writes them: arguments by name, op results %0, %1, ...
std::unordered_map<const Value*, std::string> valueNames(const Func& f) {
  std::unordered_map<const Value*, std::string> names;
  for (size_t i = 0; i < f.numArgs(); ++i)
    names[f.arg(i)] =
        "%" + (f.arg(i)->name().empty() ? "arg" + std::to_string(i) : f.arg(i)->name());
  size_t next = 0;
  for (const auto& op : f.ops())
    for (size_t r = 0; r < op->numResults(); ++r)
      names[op->result(r)] = "%" + std::to_string(next++);
  return names;
}

bool isParameter(const Op& op) {
  return op.kind() == OpKind::Weight || op.kind() == OpKind::Constant;
}

// Clones of one parameter share its name (affinity copies names, attributes and location),
// so the report groups them; distinct constants never share one.
std::string paramName(const Module& m, const Op& op) {
  if (op.kind() == OpKind::Weight) {
    std::string name = op.attrs().getStr("name");
    const WeightDecl* w = m.lookupWeight(name);
    if (w && w->shard)
      return "weight @" + name + " (shard " + std::to_string(w->shard->index) + " of " +
             std::to_string(w->shard->count) + " along dim " + std::to_string(w->shard->axis) +
             " of \"" + w->tensor + "\")";
    return "weight @" + name;
  }
  if (!op.result()->name().empty()) return "constant %" + op.result()->name();
  if (!op.loc().empty()) return "constant at " + op.loc().str();
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(op.attrs().hash()));
  return "constant " + op.result()->type().str() + " #" + hash;
}

size_t deviceIndex(const Module& m, const DeviceTarget& t) {
  for (size_t i = 0; i < m.devices().size(); ++i)
    if (m.devices()[i].target == t) return i;
  return 0;
}

struct DeviceStats {
  size_t ops = 0;
  int64_t flops = 0;
  int64_t paramBytes = 0;
  int64_t live = 0;
  int64_t peak = 0;
};

void funcReport(const Module& m, const Func& f, std::string& out) {
  const SymbolTable& syms = m.symbols();
  auto names = valueNames(f);
  std::vector<DeviceStats> dev(m.devices().size());
  auto at = [&](const std::optional<DeviceTarget>& d) -> DeviceStats& {
    return dev[deviceIndex(m, *d)];
  };
  // Remaining uses per value, to free it after its last use.
  std::unordered_map<const Value*, size_t> remaining;
  auto track = [&](const Value* v) { remaining[v] = v->uses().size(); };
  auto alloc = [&](DeviceStats& s, int64_t bytes) {
    s.live += bytes;
    s.peak = std::max(s.peak, s.live);
  };
  // Parameters and arguments are resident from the start.
  for (size_t i = 0; i < f.numArgs(); ++i) {
    alloc(at(f.argDevice(i)), valueBytes(*f.arg(i), syms));
    track(f.arg(i));
  }
  std::map<std::string, std::vector<std::string>> params; // name -> devices
  std::map<std::string, int64_t> paramBytes;
  for (const auto& op : f.ops())
    if (isParameter(*op)) {
      int64_t b = valueBytes(*op->result(), syms);
      alloc(at(op->device()), b);
      at(op->device()).paramBytes += b;
      params[paramName(m, *op)].push_back(op->device()->str());
      paramBytes[paramName(m, *op)] = b;
    }
  std::string transfers, collectives;
  size_t numTransfers = 0, numCollectives = 0;
  int64_t transferBytes = 0, collectiveBytes = 0;
  for (const auto& op : f.ops()) {
    if (op->has(kTerminator)) break;
    if (op->has(kCollective)) {
      // Each device contributes its operand and receives its result.
      std::string devices;
      int64_t in = 0;
      for (size_t r = 0; r < op->numResults(); ++r) {
        DeviceStats& s = at(collectiveDevice(*op, r));
        alloc(s, valueBytes(*op->result(r), syms));
        track(op->result(r));
        in += valueBytes(*op->operand(r), syms);
        devices += (devices.empty() ? "" : ", ") + collectiveDevice(*op, r)->str();
      }
      ++numCollectives;
      collectiveBytes += in;
      std::string how = op->attrs().has("reduce") ? " " + op->attrs().getStr("reduce") : "";
      if (op->attrs().has("axis")) how += " axis " + std::to_string(op->attrs().getInt("axis"));
      collectives += "  " + names[op->result(0)] + " " + std::string(op->name()) + how + " : " +
                     op->operand(0)->type().str() + " -> " + op->result(0)->type().str() + "  " +
                     std::to_string(in) + " bytes  over " + devices + "\n";
      for (const Value* v : op->operands()) {
        if (v->isArg() || isParameter(*v->def())) continue;
        if (--remaining[v] == 0) at(deviceOf(v)).live -= valueBytes(*v, syms);
      }
      continue;
    }
    DeviceStats& s = at(op->device());
    ++s.ops;
    s.flops += opCost(*op, syms).flops;
    for (size_t r = 0; r < op->numResults(); ++r) {
      if (isParameter(*op)) continue;
      alloc(s, valueBytes(*op->result(r), syms));
      track(op->result(r));
      if (!op->result(r)->hasUses()) s.live -= valueBytes(*op->result(r), syms); // dead
    }
    if (op->kind() == OpKind::Transfer) {
      const Value* v = op->operand(0);
      int64_t b = valueBytes(*v, syms);
      ++numTransfers;
      transferBytes += b;
      std::string from = v->isArg() ? "argument" : std::string(v->def()->name());
      transfers += "  " + names[v] + " (" + from + ") : " + v->type().str() + "  " +
                   std::to_string(b) + " bytes  " + deviceOf(v)->str() + " -> " +
                   op->device()->str() + "\n";
    }
    // Operands whose last use this was are freed (parameters stay resident).
    for (const Value* v : op->operands()) {
      if (v->isArg() || isParameter(*v->def())) continue;
      if (--remaining[v] == 0) at(deviceOf(v)).live -= valueBytes(*v, syms);
    }
  }
  out += "placement of @" + f.name() + "\n";
  for (size_t i = 0; i < dev.size(); ++i) {
    const DeviceStats& s = dev[i];
    out += "device " + m.devices()[i].target.str() + ": " + std::to_string(s.ops) + " ops, " +
           std::to_string(s.flops) + " flops, " + std::to_string(s.paramBytes) +
           " weight bytes, peak memory " + std::to_string(s.peak) + " bytes\n";
  }
  out += "transfers: " + std::to_string(numTransfers) + " (" + std::to_string(transferBytes) +
         " bytes)\n" + transfers;
  if (numCollectives)
    out += "collectives: " + std::to_string(numCollectives) + " (" +
           std::to_string(collectiveBytes) + " bytes in)\n" + collectives;
  out += "parameters: " + std::to_string(params.size()) + "\n";
  for (auto& [name, devices] : params) {
    std::sort(devices.begin(), devices.end());
    std::string list;
    for (const std::string& d : devices) list += (list.empty() ? "" : ", ") + d;
    out += "  " + name + "  " + std::to_string(paramBytes[name]) + " bytes  on " + list +
           (devices.size() > 1 ? "  (cloned)" : "") + "\n";
  }
}

const char* const kPalette[] = {"#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3",
                                "#fdb462", "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd"};

std::string dotEscape(const std::string& s) {
  std::string q;
  for (char c : s) q += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  return q;
}

std::string dotQuote(const std::string& s) { return "\"" + dotEscape(s) + "\""; }

// A two-line label: what the node is, and its device.
std::string dotLabel(const std::string& what, const DeviceTarget& d) {
  return "\"" + dotEscape(what) + "\\n" + d.str() + "\"";
}

} // namespace

Result<std::string> placementReport(const Module& m) {
  KILN_CHECK(verifyPlacement(m));
  std::string out;
  for (const auto& f : m.funcs()) funcReport(m, *f, out);
  return out;
}

Result<std::string> placementDot(const Module& m) {
  KILN_CHECK(verifyPlacement(m));
  std::string out;
  for (const auto& f : m.funcs()) {
    auto names = valueNames(*f);
    std::unordered_map<const Value*, std::string> node;
    out += "digraph " + dotQuote(f->name()) + " {\n  node [shape=box, style=filled];\n";
    for (size_t i = 0; i < m.devices().size(); ++i)
      out +=
          "  // " + m.devices()[i].target.str() + ": " + kPalette[i % std::size(kPalette)] + "\n";
    auto colour = [&](const std::optional<DeviceTarget>& d) {
      return kPalette[deviceIndex(m, *d) % std::size(kPalette)];
    };
    for (size_t i = 0; i < f->numArgs(); ++i) {
      std::string id = "a" + std::to_string(i);
      node[f->arg(i)] = id;
      out += "  " + id + " [label=" + dotLabel(names[f->arg(i)], *f->argDevice(i)) +
             ", fillcolor=" + dotQuote(colour(f->argDevice(i))) + ", shape=ellipse];\n";
    }
    size_t n = 0;
    for (const auto& op : f->ops()) {
      std::string id = "n" + std::to_string(n++);
      for (size_t r = 0; r < op->numResults(); ++r) node[op->result(r)] = id;
      std::string label = std::string(op->name());
      if (op->numResults()) label = names[op->result()] + " = " + label;
      if (op->has(kTerminator)) {
        out += "  " + id + " [label=\"return\", style=solid];\n";
      } else if (op->has(kCollective)) {
        out += "  " + id + " [label=" + dotQuote(label) +
               ", shape=hexagon, fillcolor=" + dotQuote(colour(collectiveDevice(*op, 0))) + "];\n";
      } else {
        out += "  " + id + " [label=" + dotLabel(label, *op->device()) +
               ", fillcolor=" + dotQuote(colour(op->device())) + "];\n";
      }
      for (const Value* v : op->operands())
        out += "  " + node[v] + " -> " + id +
               (op->kind() == OpKind::Transfer ? " [style=dashed, penwidth=2]" : "") + ";\n";
    }
    out += "}\n";
  }
  return out;
}

} // namespace kiln
