// Builder: creates ops with result types computed by the shape rules.
//
//   Builder b(func);                       // appends at the end of func
//   Value* y = b.add(x, b.constant(1.0f)); // convenience wrappers for common ops
//   Value* z = *b.create(OpKind::Softmax, {y}, attrs);
//
// create() returns diagnostics instead of building an op whose operands do not fit.
#pragma once

#include "ir/core/ir.h"

namespace kiln {

class Builder {
public:
  explicit Builder(Func* func, Op* insertBefore = nullptr) : func_(func), before_(insertBefore) {}

  void setInsertionPoint(Op* before) { before_ = before; }
  // Appends to `block` (a region of an op of this function; null: the function's body).
  void setInsertionBlock(Block* block) {
    block_ = block;
    before_ = nullptr;
  }
  Block* insertionBlock() const { return block_; }
  Op* insertionPoint() const { return before_; }
  void setLoc(Loc loc) { loc_ = std::move(loc); }
  // Device of the ops created from now on (unset: none).
  void setDevice(std::optional<DeviceTarget> d) { device_ = std::move(d); }
  Func* func() const { return func_; }

  // Generic creation with inferred result types. Ops whose result type cannot be inferred
  // from operands and attributes (reshape, broadcast, constant, iota, range, weight) take
  // it from `resultTypes`.
  Result<Op*> create(OpKind kind, const std::vector<Value*>& operands, Attrs attrs = {},
                     std::vector<Type> resultTypes = {});
  // Creates without inference: the caller vouches for the result types (the parser does,
  // and the verifier checks afterwards).
  Op* createUnchecked(OpKind kind, const std::vector<Value*>& operands, Attrs attrs,
                      std::vector<Type> resultTypes);

  Value* constant(HostTensor value);
  Value* scalar(ElemType elem, double v);

private:
  Func* func_;
  Op* before_;
  Block* block_ = nullptr;
  Loc loc_;
  std::optional<DeviceTarget> device_;
};

} // namespace kiln
