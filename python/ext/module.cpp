// kiln.Module and kiln.Function (module.h).
#include "module.h"

#include <chrono>
#include <optional>

#include "errors.h"
#include "ir/interp/interp.h"
#include "results.h"
#include "runtime/module_format.h"

namespace kiln::python {

struct ModuleState {
  std::unique_ptr<RuntimeModule> runtime;
  std::string placementReport;
  std::map<std::string, FunctionInfo> functions; // by name; the addresses stay put
  std::mutex mu;                                 // one call at a time; guards stats too
  CallStats stats;
};

namespace {

FunctionInfo describe(const std::string& name, const Func& f) {
  FunctionInfo info;
  info.name = name;
  info.func = &f;
  info.donors.assign(f.resultTypes().size(), -1);
  for (size_t i = 0; i < f.numArgs(); ++i) {
    ArgSpec a;
    a.index = i;
    a.name = f.arg(i)->name().empty() ? "arg" + std::to_string(i) : f.arg(i)->name();
    a.type = f.arg(i)->type();
    if (std::optional<size_t> r = f.argDonation(i); r && *r < info.donors.size()) {
      a.donated = true;
      info.donors[*r] = static_cast<int>(i);
    }
    info.args.push_back(std::move(a));
  }
  return info;
}

py::tuple shapeTuple(const Type& t) {
  py::tuple shape(static_cast<size_t>(t.rank()));
  for (int64_t d = 0; d < t.rank(); ++d) {
    const Dim& dim = t.dim(d);
    if (dim.isUnknown())
      shape[d] = py::none();
    else if (dim.isStatic())
      shape[d] = py::int_(dim.value());
    else
      shape[d] = py::str(dim.expr().str());
  }
  return shape;
}

TensorSpec specOf(const std::string& name, const Type& t) {
  return TensorSpec{name, std::string(elemTypeName(t.elem())), shapeTuple(t), std::nullopt,
                    t.str()};
}

std::string argList(const FunctionInfo& info) {
  std::string s;
  for (const ArgSpec& a : info.args) s += (s.empty() ? "" : ", ") + a.name;
  return s;
}

} // namespace

std::string Signature::str() const {
  std::string s = "@" + name + "(";
  for (size_t i = 0; i < args.size(); ++i) {
    s += (i ? ", %" : "%") + args[i].name + ": " + args[i].type;
    if (args[i].donatedTo) s += " donate " + std::to_string(*args[i].donatedTo);
  }
  s += ") -> (";
  for (size_t i = 0; i < results.size(); ++i) s += (i ? ", " : "") + results[i].type;
  return s + ")";
}

BoundArgs Function::bind(const py::args& args, const py::kwargs& kwargs) const {
  const FunctionInfo& f = *info_;
  size_t n = f.args.size();
  std::string callee = f.name + "()";
  if (args.size() > n)
    throw py::type_error(callee + " takes " + std::to_string(n) + " argument" +
                         (n == 1 ? "" : "s") + " (" + argList(f) + "), got " +
                         std::to_string(args.size()));
  std::vector<py::handle> values(n);
  for (size_t i = 0; i < args.size(); ++i) values[i] = args[i];
  for (auto [key, value] : kwargs) {
    std::string k = py::str(key).cast<std::string>();
    size_t i = 0;
    while (i < n && f.args[i].name != k) ++i;
    if (i == n)
      throw py::type_error(callee + " got an unexpected keyword argument '" + k +
                           "' (its arguments: " + argList(f) + ")");
    if (values[i]) throw py::type_error(callee + " got multiple values for argument '" + k + "'");
    values[i] = value;
  }
  for (size_t i = 0; i < n; ++i)
    if (!values[i])
      throw py::type_error(callee + " missing argument '" + f.args[i].name + "' (" +
                           std::to_string(i) + "); it takes " + std::to_string(n) + " (" +
                           argList(f) + ")");
  BoundArgs bound;
  bound.tensors.reserve(n);
  for (size_t i = 0; i < n; ++i) bindArgument(f.name, f.args[i], values[i], bound);
  // Symbols: consistent across arguments, in range, divisible (the executor's own check).
  SymbolBinding symbols;
  Status s = bindArguments(*f.func, bound.tensors, symbols);
  if (!s.ok()) throw py::value_error(callee + ": " + message(s.diags()));
  return bound;
}

py::object Function::call(const py::args& args, const py::kwargs& kwargs, bool asTorch) const {
  BoundArgs bound = bind(args, kwargs);
  std::optional<Result<std::vector<HostTensor>>> out;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(state_->mu);
    out.emplace(state_->runtime->run(info_->name, bound.tensors));
    state_->stats = state_->runtime->lastStats();
  }
  if (!out->ok()) raise(out->diags());
  return resultsToPython(out->take(), info_->donors, bound, asTorch);
}

std::vector<double> Function::bench(const py::args& args, const py::kwargs& kwargs, int repetitions,
                                    int warmup) const {
  if (repetitions < 1) throw py::value_error("bench: repetitions must be at least 1");
  if (warmup < 0) throw py::value_error("bench: warmup must not be negative");
  BoundArgs bound = bind(args, kwargs);
  std::vector<double> seconds;
  std::optional<Diags> failure;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(state_->mu);
    for (int i = 0; i < warmup + repetitions && !failure; ++i) {
      auto start = std::chrono::steady_clock::now();
      auto out = state_->runtime->run(info_->name, bound.tensors);
      auto end = std::chrono::steady_clock::now();
      if (!out.ok()) failure = out.diags();
      if (i >= warmup) seconds.push_back(std::chrono::duration<double>(end - start).count());
    }
    state_->stats = state_->runtime->lastStats();
  }
  if (failure) raise(*failure);
  return seconds;
}

Signature Function::signature() const {
  const Func& f = *info_->func;
  Signature s;
  s.name = info_->name;
  for (const ArgSpec& a : info_->args) {
    TensorSpec t = specOf(a.name, a.type);
    t.donatedTo = f.argDonation(a.index);
    s.args.push_back(std::move(t));
  }
  for (const Type& t : f.resultTypes()) s.results.push_back(specOf("", t));
  return s;
}

PyModule::PyModule(std::unique_ptr<RuntimeModule> runtime, std::string placementReport)
    : state_(std::make_shared<ModuleState>()) {
  state_->runtime = std::move(runtime);
  state_->placementReport = std::move(placementReport);
  for (const std::string& name : state_->runtime->functions())
    if (const Func* f = state_->runtime->signature(name))
      state_->functions.emplace(name, describe(name, *f));
}

std::vector<std::string> PyModule::functionNames() const { return state_->runtime->functions(); }

Function PyModule::function(const std::string& name) const {
  auto it = state_->functions.find(name);
  if (it == state_->functions.end()) {
    std::string names;
    for (const std::string& n : functionNames()) names += (names.empty() ? "" : ", ") + n;
    throw py::key_error("no function '" + name + "' in the module (functions: " + names + ")");
  }
  return Function(state_, &it->second);
}

Function PyModule::entry() const {
  const auto& names = functionNames();
  if (state_->functions.count("main") || names.size() != 1) return function("main");
  return function(names[0]);
}

void PyModule::save(const std::string& path) const {
  unwrap(writeProgramFile(path, state_->runtime->program()));
}

std::string PyModule::report(const std::string& kind) const {
  const Program& p = state_->runtime->program();
  if (kind == "placement") {
    if (state_->placementReport.empty())
      throw KilnError("kiln: error: the placement report is made when a model is compiled; "
                      "this module was loaded from a .kmod file");
    return state_->placementReport;
  }
  if (kind == "schedule") return printSchedule(p);
  if (kind == "memory") {
    std::string s;
    for (const FunctionStats& f : p.stats) {
      s += "@" + f.name + ": " + std::to_string(f.dispatches) + " dispatches; peak memory " +
           std::to_string(f.peakBytes) + " bytes (" + f.peakExpr + "), sum of buffers " +
           std::to_string(f.totalBytes) + " bytes, weights " + std::to_string(f.weightBytes) +
           " bytes";
      if (!f.boundAt.empty()) s += ", at " + f.boundAt;
      s += "\n";
    }
    return s;
  }
  throw py::value_error("report: unknown kind '" + kind +
                        "' (expected 'placement', 'schedule' or 'memory')");
}

uint64_t PyModule::peakMemory(const std::map<std::string, int64_t>& symbols,
                              const std::string& function) const {
  SymbolBinding values(symbols.begin(), symbols.end());
  Result<FunctionStats> r = memoryAt(state_->runtime->program(), function, values);
  if (!r.ok()) throw py::value_error("peak_memory: " + message(r.diags()));
  return r->peakBytes;
}

py::dict PyModule::symbols() const {
  py::dict d;
  for (const auto& [name, info] : state_->runtime->program().host->symbols().all())
    d[py::str(name)] = py::make_tuple(info.lo, info.hi);
  return d;
}

std::vector<std::string> PyModule::devices() const { return state_->runtime->program().devices; }

py::dict PyModule::lastStats() const {
  CallStats stats;
  {
    py::gil_scoped_release nogil; // a call in flight holds the mutex without the GIL
    std::lock_guard<std::mutex> lock(state_->mu);
    stats = state_->stats;
  }
  py::dict d;
  d["dispatches"] = stats.dispatches;
  d["peak_bytes"] = stats.peakBytes;
  return d;
}

} // namespace kiln::python
