// Ctx: node inputs/outputs, typed attributes, op creation with import-time folding.
#include "frontends/onnx/context.h"

#include "frontends/onnx/tensor.h"
#include "ir/interp/interp.h"

namespace kiln::onnx {

// Names from a damaged file may hold any bytes; diagnostics show them as '?'.
std::string printable(const std::string& s) {
  std::string out;
  for (char ch : s) out += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
  return out;
}

Ctx::Ctx(Module& m, Func& f, std::string file, const ImportOptions& opts, int opset)
    : module_(m), func_(f), builder_(&f), file_(std::move(file)), opts_(opts), opset_(opset) {}

void Ctx::setNode(const pb::NodeProto* node) {
  node_ = node;
  builder_.setLoc(loc());
}

Loc Ctx::loc() const {
  if (!node_) return Loc::named(file_);
  std::string name =
      node_->name().empty() && node_->output_size() > 0 ? node_->output(0) : node_->name();
  return Loc::named(file_ + ": node '" + printable(name) + "' (" + printable(node_->op_type()) +
                    ")");
}

Diag Ctx::err(const std::string& message) const { return error(loc(), message); }

size_t Ctx::numInputs() const {
  auto n = static_cast<size_t>(node_->input_size());
  while (n > 0 && node_->input(static_cast<int>(n - 1)).empty()) --n;
  return n;
}

bool Ctx::hasInput(size_t i) const {
  return i < numInputs() && !node_->input(static_cast<int>(i)).empty();
}

Result<Val> Ctx::input(size_t i) const {
  if (!hasInput(i))
    return err("input " + std::to_string(i) + " is missing (the node has " +
               std::to_string(numInputs()) + ")");
  const std::string& name = node_->input(static_cast<int>(i));
  auto it = values.find(name);
  if (it == values.end())
    return err("input '" + name +
               "' is not defined by an earlier node, an input or an "
               "initializer");
  return it->second;
}

void Ctx::setOutput(size_t i, Val v) {
  if (i >= numOutputs()) return;
  const std::string& name = node_->output(static_cast<int>(i));
  if (name.empty()) return;
  if (v.v->name().empty() && !v.v->isArg()) v.v->setName(name);
  values[name] = std::move(v);
}

const pb::AttributeProto* Ctx::attr(const std::string& name) const {
  for (const auto& a : node_->attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

namespace {
std::string kindName(pb::AttributeProto::AttributeType t) {
  return pb::AttributeProto::AttributeType_IsValid(t) ? pb::AttributeProto::AttributeType_Name(t)
                                                      : "unknown";
}
} // namespace

#define KILN_ATTR_KIND(a, want)                                                                    \
  if ((a)->type() != pb::AttributeProto::want && (a)->type() != pb::AttributeProto::UNDEFINED)     \
    return err("attribute '" + name + "' must be " #want ", got " + kindName((a)->type()));

Result<int64_t> Ctx::attrInt(const std::string& name, int64_t fallback) const {
  const pb::AttributeProto* a = attr(name);
  if (!a) return fallback;
  KILN_ATTR_KIND(a, INT);
  return a->i();
}

Result<double> Ctx::attrFloat(const std::string& name, double fallback) const {
  const pb::AttributeProto* a = attr(name);
  if (!a) return fallback;
  KILN_ATTR_KIND(a, FLOAT);
  return static_cast<double>(a->f());
}

Result<std::string> Ctx::attrStr(const std::string& name, const std::string& fallback) const {
  const pb::AttributeProto* a = attr(name);
  if (!a) return fallback;
  KILN_ATTR_KIND(a, STRING);
  return a->s();
}

Result<std::vector<int64_t>> Ctx::attrInts(const std::string& name,
                                           std::vector<int64_t> fallback) const {
  const pb::AttributeProto* a = attr(name);
  if (!a) return fallback;
  KILN_ATTR_KIND(a, INTS);
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

Result<std::vector<double>> Ctx::attrFloats(const std::string& name) const {
  const pb::AttributeProto* a = attr(name);
  if (!a) return std::vector<double>{};
  KILN_ATTR_KIND(a, FLOATS);
  return std::vector<double>(a->floats().begin(), a->floats().end());
}

Result<HostTensor> Ctx::attrTensor(const std::string& name) const {
  const pb::AttributeProto* a = attr(name);
  if (!a) return err("attribute '" + name + "' is missing");
  KILN_ATTR_KIND(a, TENSOR);
  return tensorFromProto(a->t(), "", loc());
}

#undef KILN_ATTR_KIND

Result<Val> Ctx::op(OpKind kind, const std::vector<Val>& operands, Attrs attrs,
                    std::vector<Type> types) {
  std::vector<Value*> vs;
  bool known = true;
  for (const Val& o : operands) {
    vs.push_back(o.v);
    known = known && o.value.has_value();
  }
  auto created = builder_.create(kind, vs, std::move(attrs), std::move(types));
  if (!created.ok()) {
    Diag d = err("cannot convert: " + created.diags().str());
    return d;
  }
  Op* op = *created;
  Val out{op->result(0), std::nullopt, std::nullopt};
  std::optional<int64_t> n = op->result(0)->type().numElements();
  if (!known || kind == OpKind::Weight || op->numResults() != 1 || !n || *n > foldLimit) return out;
  std::vector<HostTensor> in;
  for (const Val& o : operands) in.push_back(*o.value);
  auto folded = evalOp(*op, in, SymbolBinding{}, nullptr);
  if (!folded.ok()) return folded.takeDiags();
  func_.erase(op);
  // A large folded value (a transposed weight) stays out of the IR text.
  if (*n > opts_.inlineLimit)
    return weight(node_ && node_->output_size() ? node_->output(0) : "folded", (*folded)[0]);
  return constant((*folded)[0]);
}

Result<Val> Ctx::weight(const std::string& onnxName, HostTensor t) {
  std::string name = identifier(onnxName, "w");
  while (pendingWeights.count(name)) name += "_";
  Type type = Type::tensor(t.elem(), t.shape());
  if (subgraphDepth > 0) subgraphWeightBytes += static_cast<int64_t>(t.byteSize());
  Loc l = node_ ? loc() : Loc::named(file_ + ": initializer '" + onnxName + "'");
  pendingWeights.emplace(
      name, std::make_pair(WeightDecl{name, type, opts_.weightsFile, name, l, std::nullopt}, t));
  Attrs a;
  a.set("name", name);
  Op* op = builder_.createUnchecked(OpKind::Weight, {}, std::move(a), {type});
  return Val{op->result(0), std::move(t), std::nullopt};
}

std::string identifier(const std::string& name, const std::string& fallback) {
  std::string out;
  for (char ch : name) {
    bool good = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                ch == '_';
    out += good ? ch : '_';
  }
  if (out.empty()) out = fallback;
  if (out[0] >= '0' && out[0] <= '9') out = "_" + out;
  return out;
}

Val Ctx::constant(HostTensor t) {
  Value* v = builder_.constant(t);
  return Val{v, std::move(t), std::nullopt};
}

Val Ctx::scalar(ElemType elem, double v) {
  HostTensor t(elem, {});
  t.setF(0, v);
  return constant(std::move(t));
}

Result<Val> Ctx::cast(const Val& x, ElemType elem) {
  if (x.elem() == elem) return x;
  Attrs a;
  a.set("to", elem);
  KILN_TRY(Val out, op(OpKind::Cast, {x}, std::move(a)));
  if (!out.value && x.sym && !isBool(elem) && !isFloat(elem)) out.sym = x.sym;
  return out;
}

Result<HostTensor> Ctx::constInput(size_t i, const std::string& what) const {
  KILN_TRY(Val v, input(i));
  if (!v.value)
    return err(what + " (input '" + node_->input(static_cast<int>(i)) +
               "') depends on run-time data; kiln needs it at compile time");
  return *v.value;
}

Result<std::vector<int64_t>> Ctx::constInts(size_t i, const std::string& what) const {
  KILN_TRY(HostTensor t, constInput(i, what));
  if (!isInteger(t.elem()) || t.rank() > 1)
    return err(what + " must be a 0-D or 1-D integer tensor");
  std::vector<int64_t> out;
  for (int64_t k = 0; k < t.numElements(); ++k) out.push_back(t.getI(k));
  return out;
}

std::optional<std::vector<SymExpr>> Ctx::symOf(const Val& v) {
  if (v.sym) return v.sym;
  if (!v.value || !isInteger(v.value->elem()) || v.value->rank() > 1) return std::nullopt;
  std::vector<SymExpr> out;
  for (int64_t k = 0; k < v.value->numElements(); ++k)
    out.push_back(SymExpr::constant(v.value->getI(k)));
  return out;
}

Result<std::vector<SymExpr>> Ctx::symInts(size_t i, const std::string& what) const {
  KILN_TRY(Val v, input(i));
  if (auto s = symOf(v)) return *s;
  return err(what + " (input '" + node_->input(static_cast<int>(i)) +
             "') depends on run-time data; kiln needs it at compile time");
}

HostTensor i64Tensor(const std::vector<int64_t>& v) {
  HostTensor t(ElemType::I64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.setI(static_cast<int64_t>(i), v[i]);
  return t;
}

Result<SymExpr> dimExpr(const Ctx& c, const Type& t, int64_t axis) {
  const Dim& d = t.dim(axis);
  if (d.isUnknown()) return c.err("dim " + std::to_string(axis) + " of " + t.str() + " is unknown");
  return d.expr();
}

Result<int64_t> normAxis(const Ctx& c, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return c.err("axis " + std::to_string(axis) + " is out of range for rank " +
                 std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

Result<Val> reshapeTo(Ctx& c, const Val& x, const Shape& shape) {
  if (x.type().shape() == shape) return x;
  KILN_TRY(Val out, c.op(OpKind::Reshape, {x}, {}, {Type(x.elem(), shape)}));
  if (!out.value && x.sym && shape.size() <= 1) out.sym = x.sym;
  return out;
}

Result<Val> sliceAxis(Ctx& c, const Val& x, int64_t axis, int64_t start, int64_t end) {
  Attrs a;
  a.set("starts", std::vector<int64_t>{start});
  a.set("ends", std::vector<int64_t>{end});
  a.set("axes", std::vector<int64_t>{axis});
  a.set("steps", std::vector<int64_t>{1});
  return c.op(OpKind::Slice, {x}, std::move(a));
}

Result<Val> broadcastTo(Ctx& c, const Val& x, const Shape& shape) {
  if (x.type().shape() == shape) return x;
  return c.op(OpKind::Broadcast, {x}, {}, {Type(x.elem(), shape)});
}

} // namespace kiln::onnx
