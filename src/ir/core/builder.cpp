// Builder: typed op creation through the shape rules.
#include "ir/core/builder.h"

#include "ir/core/shape_rules.h"

namespace kiln {

Result<Op*> Builder::create(OpKind kind, const std::vector<Value*>& operands, Attrs attrs,
                            std::vector<Type> resultTypes) {
  std::vector<Type> operandTypes;
  operandTypes.reserve(operands.size());
  for (Value* v : operands) operandTypes.push_back(v->type());
  static const SymbolTable kNoSymbols;
  const SymbolTable& syms = func_->parent() ? func_->parent()->symbols() : kNoSymbols;
  KILN_TRY(std::vector<Type> types,
           inferResultTypes(kind, operandTypes, attrs, resultTypes, syms, loc_));
  return createUnchecked(kind, operands, std::move(attrs), std::move(types));
}

Op* Builder::createUnchecked(OpKind kind, const std::vector<Value*>& operands, Attrs attrs,
                             std::vector<Type> resultTypes) {
  auto op = std::make_unique<Op>(kind, std::move(resultTypes), std::move(attrs), loc_);
  for (Value* v : operands) op->addOperand(v);
  op->setDevice(device_);
  if (block_ && !before_) return block_->insert(std::move(op));
  return func_->insert(std::move(op), before_);
}

Value* Builder::constant(HostTensor value) {
  Type t = Type::tensor(value.elem(), value.shape());
  Attrs a;
  a.set("value", std::move(value));
  return createUnchecked(OpKind::Constant, {}, std::move(a), {std::move(t)})->result();
}

Value* Builder::scalar(ElemType elem, double v) {
  HostTensor t(elem, {});
  t.setF(0, v);
  return constant(std::move(t));
}

} // namespace kiln
