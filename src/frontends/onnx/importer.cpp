// The import driver: parses the ModelProto, checks the opset, turns graph inputs into
// @main's arguments (dim_param names into symbols), initializers into constants or weights,
// converts each node through the registry (convertNodes, which ops_control.cpp also runs on
// subgraphs), and returns the graph outputs.
#include <algorithm>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <map>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

#include "frontends/onnx/context.h"
#include "frontends/onnx/import.h"
#include "frontends/onnx/tensor.h"

namespace kiln::onnx {

namespace {

// Models older than opset 7 import where their ops mean what they mean at opset 7 (the
// converters reject the legacy attributes that changed meaning, such as broadcast axis).
constexpr int kMinOpset = 1;
constexpr int kMaxOpset = 17;

class Importer {
public:
  Importer(const std::string& name, const std::string& baseDir, const ImportOptions& opts)
      : name_(name), baseDir_(baseDir), opts_(opts) {}

  Result<Imported> run(pb::ModelProto& model);

private:
  Diag err(const std::string& message) const { return error(Loc::named(name_), message); }
  Result<int> findOpset(const pb::ModelProto& model);
  Result<SymExpr> symbolFor(const std::string& param, const std::string& fallback);
  Result<Type> typeOf(const pb::ValueInfoProto& vi);

  std::string name_, baseDir_;
  const ImportOptions& opts_;
  std::unique_ptr<Module> module_;
  Imported out_;
};

// The inputs of the DequantizeLinear nodes whose result is B of a MatMul or Gemm, directly
// or through Transpose nodes (Ctx::quantizedWeights).
std::set<std::string, std::less<>> quantizedWeights(const pb::GraphProto& g) {
  std::map<std::string, const pb::NodeProto*, std::less<>> producer;
  for (const auto& node : g.node())
    for (const auto& out : node.output()) producer[out] = &node;
  std::set<std::string, std::less<>> out;
  for (const auto& node : g.node()) {
    if ((node.op_type() != "MatMul" && node.op_type() != "Gemm") || node.input_size() < 2) continue;
    auto it = producer.find(node.input(1));
    // At most one step per node: a damaged graph may hold a cycle of Transposes.
    for (int steps = 0; it != producer.end() && it->second->op_type() == "Transpose" &&
                        it->second->input_size() > 0 && steps < g.node_size();
         ++steps)
      it = producer.find(it->second->input(0));
    if (it != producer.end() && it->second->op_type() == "DequantizeLinear" &&
        it->second->input_size() > 0)
      out.insert(it->second->input(0));
  }
  return out;
}

Result<int> Importer::findOpset(const pb::ModelProto& model) {
  int opset = -1;
  for (const auto& id : model.opset_import())
    if (id.domain().empty() || id.domain() == "ai.onnx") opset = static_cast<int>(id.version());
  if (opset < 0) {
    if (model.opset_import_size() != 0)
      return err("the model imports no version of the default ONNX domain");
    opset = 1; // IR version 2 models carry no opset_import: the first opset
  }
  if (opset < kMinOpset || opset > kMaxOpset)
    return err("opset " + std::to_string(opset) + " is not supported (kiln imports opsets " +
               std::to_string(kMinOpset) + " through " + std::to_string(kMaxOpset) + ")");
  return opset;
}

Result<SymExpr> Importer::symbolFor(const std::string& param, const std::string& fallback) {
  std::string sym = identifier(param, fallback);
  if (!module_->symbols().lookup(sym)) {
    SymbolInfo info{sym, 1, opts_.symbolMax, 1, Loc::named(name_)};
    if (auto it = opts_.symbolRanges.find(sym); it != opts_.symbolRanges.end()) {
      info.lo = it->second.first;
      info.hi = it->second.second;
    }
    KILN_CHECK(module_->symbols().declare(info));
  }
  return SymExpr::symbol(sym);
}

Result<Type> Importer::typeOf(const pb::ValueInfoProto& vi) {
  const pb::TypeProto& t = vi.type();
  if (!t.has_tensor_type()) {
    std::string kind = t.has_sequence_type()   ? "a sequence"
                       : t.has_optional_type() ? "an optional"
                       : t.has_map_type()      ? "a map"
                                               : "not a tensor";
    return err("graph value '" + vi.name() + "' is " + kind + "; kiln imports tensors only");
  }
  const auto& tt = t.tensor_type();
  std::optional<ElemType> elem = elemTypeOf(tt.elem_type());
  if (!elem)
    return err("graph value '" + vi.name() + "' has element type " + onnxTypeName(tt.elem_type()) +
               ", which kiln does not support");
  Shape shape;
  if (!tt.has_shape())
    return err("graph input '" + vi.name() + "' has no shape; kiln needs each input's rank");
  for (int i = 0; i < tt.shape().dim_size(); ++i) {
    const auto& d = tt.shape().dim(i);
    if (d.has_dim_value()) {
      if (d.dim_value() < 0)
        return err("graph input '" + vi.name() + "' has a negative dim " +
                   std::to_string(d.dim_value()));
      shape.push_back(Dim(d.dim_value()));
    } else {
      KILN_TRY(SymExpr s,
               symbolFor(d.dim_param(), identifier(vi.name(), "in") + "_d" + std::to_string(i)));
      shape.push_back(Dim(s));
    }
  }
  return Type(*elem, shape);
}

Result<Imported> Importer::run(pb::ModelProto& model) {
  if (!model.has_graph()) return err("the model has no graph");
  KILN_TRY(int opset, findOpset(model));
  module_ = std::make_unique<Module>();
  auto fn = std::make_unique<Func>("main", Loc::named(name_));
  Func* f = module_->addFunc(std::move(fn));
  Ctx c(*module_, *f, name_, opts_, opset);
  c.baseDir = baseDir_;
  pb::GraphProto& g = *model.mutable_graph();

  std::set<std::string> inits;
  for (const auto& t : g.initializer()) inits.insert(t.name());
  for (const auto& t : g.sparse_initializer())
    return err("sparse initializer '" + t.values().name() + "' is not supported");
  for (const auto& vi : g.input()) {
    if (inits.count(vi.name())) continue; // an input with a default: the initializer wins
    if (c.values.count(vi.name())) return err("graph input '" + vi.name() + "' is declared twice");
    if (auto it = opts_.constantInputs.find(vi.name()); it != opts_.constantInputs.end()) {
      c.values[vi.name()] = c.constant(it->second);
      continue;
    }
    KILN_TRY(Type t, typeOf(vi));
    Value* arg = f->addArg(t, identifier(vi.name(), "arg"));
    c.values[vi.name()] = Val{arg, std::nullopt, std::nullopt};
    out_.inputNames.push_back(vi.name());
  }
  for (const auto& [sym, range] : opts_.symbolRanges)
    if (!module_->symbols().lookup(sym))
      return err("a range is given for symbol '" + sym + "' but no input dim is named so");
  for (auto& t : *g.mutable_initializer()) KILN_CHECK(takeInitializer(c, t));

  c.quantizedWeights = quantizedWeights(g);

  KILN_CHECK(convertNodes(c, g));
  c.setNode(nullptr);

  std::vector<Value*> results;
  std::vector<Type> resultTypes;
  for (const auto& vi : g.output()) {
    auto it = c.values.find(vi.name());
    if (it == c.values.end()) return err("graph output '" + vi.name() + "' is never computed");
    results.push_back(it->second.v);
    resultTypes.push_back(it->second.v->type());
    out_.outputNames.push_back(vi.name());
  }
  Builder b(f);
  b.setLoc(Loc::named(name_));
  b.createUnchecked(OpKind::Return, results, {}, {});
  f->setResultTypes(resultTypes);

  // Shape computations that were resolved at import time leave dead ops behind (in @main
  // and in the bodies of host-side loops).
  for (const auto& fn : module_->funcs()) {
    std::vector<Op*> ops = fn->opsSnapshot();
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
      Op* op = *it;
      if (op->has(kSideEffects)) continue;
      bool used = false;
      for (size_t i = 0; i < op->numResults(); ++i) used = used || op->result(i)->hasUses();
      if (!used) fn->erase(op);
    }
  }
  // A loop unrolled in part before it had to run on the host side leaves the bodies of the
  // host-side loops inside it behind, as do loops whose results are dead: only the functions
  // a `loop` still reaches stay.
  std::set<const Func*> reached = {f};
  for (std::vector<const Func*> work = {f}; !work.empty();) {
    const Func* fn = work.back();
    work.pop_back();
    for (const auto& op : fn->ops())
      if (op->kind() == OpKind::Loop)
        if (const Func* body = module_->lookupFunc(op->attrs().getStr("body"));
            body && reached.insert(body).second)
          work.push_back(body);
  }
  std::vector<Func*> unreached;
  for (const auto& fn : module_->funcs())
    if (!reached.count(fn.get())) unreached.push_back(fn.get());
  for (Func* fn : unreached) module_->removeFunc(fn);

  for (const auto& fn : module_->funcs())
    for (const auto& op : fn->ops()) {
      if (op->kind() != OpKind::Weight) continue;
      // Weights are declared only when they survive folding and dead-op removal.
      auto it = c.pendingWeights.find(op->attrs().getStr("name"));
      if (it == c.pendingWeights.end() || out_.weights.count(it->first)) continue;
      KILN_CHECK(module_->addWeight(it->second.first));
      out_.weights[it->first] = it->second.second;
    }
  out_.module = std::move(module_);
  return std::move(out_);
}

} // namespace

Status convertNodes(Ctx& c, const pb::GraphProto& g) {
  const Registry& reg = registry();
  for (const auto& node : g.node()) {
    c.setNode(&node);
    if (!node.domain().empty() && node.domain() != "ai.onnx")
      return c.err("operator domain '" + node.domain() + "' is not supported");
    auto it = reg.find(node.op_type());
    if (it == reg.end())
      return c.err("operator " + printable(node.op_type()) + " is not supported by kiln");
    if (c.opset() < it->second.minOpset)
      return c.err("opset " + std::to_string(c.opset()) + " of " + node.op_type() +
                   " is not supported (kiln supports it from opset " +
                   std::to_string(it->second.minOpset) + ")");
    Status s = it->second.fn(c);
    if (!s.ok()) {
      Diags d = s.takeDiags();
      // Diagnostics from shared code carry other locations; keep the node's name first.
      if (!d.list.empty() && d.list[0].loc.file.find(": node '") == std::string::npos) {
        Diag top = c.err(d.list[0].message);
        for (size_t i = 1; i < d.list.size(); ++i) top.notes.push_back(d.list[i]);
        return top;
      }
      return d;
    }
    for (int i = 0; i < node.output_size(); ++i)
      if (!node.output(i).empty() && !c.values.count(node.output(i)) &&
          !c.emptySequences.count(node.output(i)))
        return c.err("output " + std::to_string(i) + " ('" + node.output(i) +
                     "') is not supported by kiln's converter");
  }
  return ok();
}

namespace {

Loc initializerLoc(const Ctx& c, const pb::TensorProto& t) {
  return Loc::named(c.file() + ": initializer '" + t.name() + "'");
}

Status bindInitializer(Ctx& c, const pb::TensorProto& t, HostTensor data) {
  if (data.numElements() <= c.options().inlineLimit) {
    c.values[t.name()] = c.constant(std::move(data));
    return ok();
  }
  KILN_TRY(Val v, c.weight(t.name(), std::move(data)));
  c.values[t.name()] = v;
  return ok();
}

} // namespace

Status addInitializer(Ctx& c, const pb::TensorProto& t) {
  KILN_TRY(HostTensor data, tensorFromProto(t, c.baseDir, initializerLoc(c, t)));
  return bindInitializer(c, t, std::move(data));
}

Status takeInitializer(Ctx& c, pb::TensorProto& t) {
  KILN_TRY(HostTensor data, takeTensorFromProto(t, c.baseDir, initializerLoc(c, t)));
  return bindInitializer(c, t, std::move(data));
}

namespace {

Diag tooLarge(const std::string& name) {
  return error(Loc::named(name), "the model is larger than 2 GiB; keep weights in external "
                                 "data files");
}

Diag notParsed(const std::string& name) {
  return error(Loc::named(name), "not a valid ONNX model (the protobuf does not parse; is the "
                                 "file truncated or corrupted?)");
}

} // namespace

Result<Imported> importBytes(std::string_view bytes, const std::string& name,
                             const std::string& baseDir, const ImportOptions& options) {
  pb::ModelProto model;
  if (bytes.size() > static_cast<size_t>(INT32_MAX)) return tooLarge(name);
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return notParsed(name);
  Importer imp(name, baseDir, options);
  return imp.run(model);
}

Result<Imported> importFile(const std::string& path, const ImportOptions& options) {
  // Parsed from the file as it is read, not from a copy of it in memory: with the raw_data
  // the importer moves into the weights, a model's weight bytes are held once.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error(Loc::named(path), "cannot open the file");
  std::unique_ptr<int, void (*)(int*)> closer(&fd, [](int* f) { ::close(*f); });
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > INT32_MAX) return tooLarge(path);
  pb::ModelProto model;
  {
    google::protobuf::io::FileInputStream in(fd, 1 << 20);
    bool parsed = model.ParseFromZeroCopyStream(&in);
    // A read error ends the stream as the end of the file would (a folder reads as empty).
    if (in.GetErrno() != 0)
      return error(Loc::named(path),
                   std::string("cannot read the file: ") + std::strerror(in.GetErrno()));
    if (!parsed) return notParsed(path);
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  Importer imp(path, dir.empty() ? "." : dir, options);
  return imp.run(model);
}

std::vector<std::string> supportedOps() {
  std::vector<std::string> out;
  for (const auto& [name, entry] : registry()) out.push_back(name);
  return out;
}

const Registry& registry() {
  static const Registry reg = [] {
    Registry r;
    registerElementwise(r);
    registerNn(r);
    registerReduce(r);
    registerShapeOps(r);
    registerMisc(r);
    registerLoss(r);
    registerQuant(r);
    registerRecurrent(r);
    registerSignal(r);
    registerControl(r);
    registerDataShaped(r);
    registerSequence(r);
    return r;
  }();
  return reg;
}

} // namespace kiln::onnx
