// Mutation of the IR that keeps use lists exact.
#include "ir/core/ir.h"

#include <algorithm>

namespace kiln {

void Value::replaceAllUsesWith(Value* other) {
  if (other == this) return;
  while (!uses_.empty()) {
    Use u = uses_.back();
    u.user->setOperand(u.operandIndex, other);
  }
}

Op::Op(OpKind kind, std::vector<Type> resultTypes, Attrs attrs, Loc loc)
    : kind_(kind), attrs_(std::move(attrs)), loc_(std::move(loc)) {
  for (size_t i = 0; i < resultTypes.size(); ++i) {
    auto v = std::make_unique<Value>();
    v->type_ = std::move(resultTypes[i]);
    v->def_ = this;
    v->index_ = static_cast<unsigned>(i);
    results_.push_back(std::move(v));
  }
}

Op::~Op() { dropOperands(); }

Func* Op::parent() const { return block_ ? block_->func() : nullptr; }

Op* Op::parentOp() const { return block_ ? block_->parentOp() : nullptr; }

Block* Op::addRegion() {
  regions_.push_back(std::make_unique<Block>(this, nullptr));
  return regions_.back().get();
}

Block::~Block() { dropAllReferences(); }

Value* Block::addArg(Type type) {
  auto v = std::make_unique<Value>();
  v->type_ = std::move(type);
  v->blockOf_ = this;
  v->index_ = static_cast<unsigned>(args_.size());
  args_.push_back(std::move(v));
  return args_.back().get();
}

Func* Block::func() const { return parentOp_ ? parentOp_->parent() : func_; }

bool Block::isWithin(const Block* other) const {
  for (const Block* b = this; b; b = b->parentOp_ ? b->parentOp_->block() : nullptr)
    if (b == other) return true;
  return false;
}

Op* Block::terminator() const {
  if (ops_.empty() || !ops_.back()->has(kTerminator)) return nullptr;
  return ops_.back().get();
}

Op* Block::insert(std::unique_ptr<Op> op, Op* before) {
  Op* raw = op.get();
  raw->block_ = this;
  auto where = before ? before->pos_ : ops_.end();
  raw->pos_ = ops_.insert(where, std::move(op));
  return raw;
}

void Block::erase(Op* op) {
  op->dropOperands();
  ops_.erase(op->pos_);
}

void Block::move(Op* op, Op* before) {
  auto where = before ? before->pos_ : ops_.end();
  ops_.splice(where, ops_, op->pos_);
}

std::vector<Op*> Block::opsSnapshot() const {
  std::vector<Op*> out;
  out.reserve(ops_.size());
  for (const auto& op : ops_) out.push_back(op.get());
  return out;
}

void Block::dropAllReferences() {
  for (auto& op : ops_) {
    op->dropOperands();
    for (auto& r : op->regions_) r->dropAllReferences();
  }
}
void Value::removeUse(Op* user, unsigned index) {
  auto it = std::find(uses_.begin(), uses_.end(), Use{user, index});
  if (it != uses_.end()) uses_.erase(it);
}

void Op::setOperand(size_t i, Value* v) {
  if (operands_[i]) operands_[i]->removeUse(this, static_cast<unsigned>(i));
  operands_[i] = v;
  if (v) v->uses_.push_back({this, static_cast<unsigned>(i)});
}

void Op::addOperand(Value* v) {
  operands_.push_back(nullptr);
  setOperand(operands_.size() - 1, v);
}

void Op::setOperands(const std::vector<Value*>& vs) {
  dropOperands();
  for (Value* v : vs) addOperand(v);
}

void Op::dropOperands() {
  for (size_t i = 0; i < operands_.size(); ++i)
    if (operands_[i]) operands_[i]->removeUse(this, static_cast<unsigned>(i));
  operands_.clear();
}

// Ops are destroyed after every use is dropped, so no op touches a freed value.
Func::~Func() { body_.dropAllReferences(); }

Value* Func::addArg(Type type, std::string name) {
  auto v = std::make_unique<Value>();
  v->type_ = std::move(type);
  v->argOf_ = this;
  v->index_ = static_cast<unsigned>(args_.size());
  v->name_ = std::move(name);
  args_.push_back(std::move(v));
  return args_.back().get();
}

std::optional<DeviceTarget> Func::argDevice(size_t i) const {
  return i < argDevices_.size() ? argDevices_[i] : std::nullopt;
}

std::optional<size_t> Func::argDonation(size_t i) const {
  return i < argDonations_.size() ? argDonations_[i] : std::nullopt;
}

void Func::setArgDonation(size_t i, std::optional<size_t> result) {
  if (argDonations_.size() <= i) argDonations_.resize(i + 1);
  argDonations_[i] = result;
}

void Func::setArgDevice(size_t i, std::optional<DeviceTarget> d) {
  if (argDevices_.size() <= i) argDevices_.resize(i + 1);
  argDevices_[i] = std::move(d);
}

std::optional<DeviceTarget> Func::resultDevice(size_t i) const {
  return i < resultDevices_.size() ? resultDevices_[i] : std::nullopt;
}

void Func::setResultDevice(size_t i, std::optional<DeviceTarget> d) {
  if (resultDevices_.size() <= i) resultDevices_.resize(i + 1);
  resultDevices_[i] = std::move(d);
}

Op* Func::insert(std::unique_ptr<Op> op, Op* before) {
  return (before ? before->block() : &body_)->insert(std::move(op), before);
}

void Func::erase(Op* op) { op->block()->erase(op); }

void Func::move(Op* op, Op* before) {
  Block* from = op->block();
  Block* to = before ? before->block() : &body_;
  if (from == to) return from->move(op, before);
  // Across blocks: splice between the two lists.
  auto where = before ? before->pos_ : to->ops_.end();
  to->ops_.splice(where, from->ops_, op->pos_);
  op->block_ = to;
}

bool isLoweredKernel(const Func& k) {
  for (const auto& op : k.ops())
    if (op->info().level == OpLevel::Kernel) return true;
  return k.numArgs() > 0 && k.arg(0)->type().isBuffer();
}

bool uninitAlloc(const Op& op) {
  return op.kind() == OpKind::Alloc && op.attrs().has("uninit") && op.attrs().getInt("uninit");
}

std::set<std::string> kernelFunctions(const Module& m) {
  std::set<std::string> out;
  for (const auto& f : m.funcs())
    for (const auto& op : f->ops())
      if (op->kind() == OpKind::Launch || op->kind() == OpKind::Dispatch)
        out.insert(op->attrs().getStr("kernel"));
  return out;
}

Func* Module::addFunc(std::unique_ptr<Func> f) {
  f->parent_ = this;
  funcs_.push_back(std::move(f));
  return funcs_.back().get();
}

std::unique_ptr<Func> Module::replaceFunc(Func* old, std::unique_ptr<Func> f) {
  for (auto& slot : funcs_)
    if (slot.get() == old) {
      f->parent_ = this;
      std::swap(slot, f);
      return f;
    }
  return nullptr;
}

std::unique_ptr<Func> Module::removeFunc(Func* f) {
  for (auto it = funcs_.begin(); it != funcs_.end(); ++it)
    if (it->get() == f) {
      std::unique_ptr<Func> out = std::move(*it);
      funcs_.erase(it);
      return out;
    }
  return nullptr;
}

Func* Module::lookupFunc(std::string_view name) const {
  for (const auto& f : funcs_)
    if (f->name() == name) return f.get();
  return nullptr;
}

Status Module::addWeight(WeightDecl w) {
  if (const WeightDecl* prev = lookupWeight(w.name)) {
    Diag d = error(w.loc, "weight @" + w.name + " is declared twice");
    d.notes.push_back(note(prev->loc, "first declared here"));
    return d;
  }
  weights_.push_back(std::move(w));
  return ok();
}

void Module::removeWeight(std::string_view name) {
  std::erase_if(weights_, [&](const WeightDecl& w) { return w.name == name; });
  weightData_.erase(std::string(name));
}

const WeightDecl* Module::lookupWeight(std::string_view name) const {
  for (const WeightDecl& w : weights_)
    if (w.name == name) return &w;
  return nullptr;
}

Status Module::addDevice(DeviceDecl d) {
  const DeviceDecl* prev = d.name.empty() ? nullptr : lookupDevice(d.name);
  if (prev) {
    Diag e = error(d.loc, "device @" + d.name + " is declared twice");
    e.notes.push_back(note(prev->loc, "first declared here"));
    return e;
  }
  if ((prev = findDevice(d.target))) {
    Diag e = error(d.loc, "device " + d.target.str() + " is declared twice");
    e.notes.push_back(note(prev->loc, "first declared here"));
    return e;
  }
  if (devices_.size() >= kMaxDevices)
    return error(d.loc, "too many devices: kiln handles at most " + std::to_string(kMaxDevices));
  devices_.push_back(std::move(d));
  return ok();
}

const DeviceDecl* Module::lookupDevice(std::string_view name) const {
  for (const DeviceDecl& d : devices_)
    if (!d.name.empty() && d.name == name) return &d;
  return nullptr;
}

const DeviceDecl* Module::findDevice(const DeviceTarget& t) const {
  for (const DeviceDecl& d : devices_)
    if (d.target == t) return &d;
  return nullptr;
}

} // namespace kiln
