// shape-infer: replaces `?` dims in result types by what the shape rules compute.
//
// Requires:    argument types without `?` dims (the rules start from them).
// Guarantees:  every result type the rules determine is filled in, in op order; every
//              dim that was already known agrees with the rules (a conflict is an error
//              naming the op); function result types are updated from `return`.
// Invalidates: types (users read the refined types of their operands).
//
//   %0 = add %x, %x : tensor<?xf32>    // %x: tensor<4xf32>
//   return %0                    =>    %0 = add %x, %x : tensor<4xf32>
//
// The rules (inferResultTypes, ir/core/shape_rules.h) are the same function the builder and
// the verifier use, so shape-infer cannot disagree with either.
#include "ir/core/shape_rules.h"
#include "passes/passes.h"

namespace kiln {

namespace {

// `declared` with each `?` dim taken from `inferred`; nullopt when a known dim, the rank
// or the element type disagrees.
std::optional<Type> refine(const Type& declared, const Type& inferred, const SymbolTable& syms) {
  if (declared.elem() != inferred.elem() || declared.rank() != inferred.rank()) return std::nullopt;
  Shape shape;
  for (int64_t i = 0; i < declared.rank(); ++i) {
    const Dim& d = declared.dim(i);
    const Dim& e = inferred.dim(i);
    if (d.isUnknown()) {
      shape.push_back(e);
    } else {
      if (!e.isUnknown() && d != e && !provablyEqual(d.expr(), e.expr(), syms)) return std::nullopt;
      shape.push_back(d);
    }
  }
  return Type(declared.elem(), std::move(shape));
}

Status inferOp(Op& op, const SymbolTable& syms) {
  std::vector<Type> operandTypes;
  for (Value* v : op.operands()) operandTypes.push_back(v->type());
  std::vector<Type> declared;
  for (size_t i = 0; i < op.numResults(); ++i) declared.push_back(op.result(i)->type());
  KILN_TRY(std::vector<Type> inferred,
           inferResultTypes(op.kind(), operandTypes, op.attrs(), declared, syms, op.loc()));
  if (inferred.size() != declared.size())
    return error(op.loc(), "shape-infer: '" + std::string(op.name()) + "' declares " +
                               std::to_string(declared.size()) + " results but its rule gives " +
                               std::to_string(inferred.size()));
  for (size_t i = 0; i < declared.size(); ++i) {
    std::optional<Type> t = refine(declared[i], inferred[i], syms);
    if (!t)
      return error(op.loc(), "shape-infer: '" + std::string(op.name()) + "' result " +
                                 std::to_string(i) + " is declared " + declared[i].str() +
                                 " but its operands give " + inferred[i].str());
    op.result(i)->setType(std::move(*t));
  }
  return ok();
}

Status inferFunc(Func& f, const SymbolTable& syms) {
  for (Op* op : f.opsSnapshot()) KILN_CHECK(inferOp(*op, syms));
  Op* ret = f.terminator();
  if (!ret) return error(f.loc(), "shape-infer: function @" + f.name() + " has no return");
  std::vector<Type> results = f.resultTypes();
  if (results.size() != ret->numOperands())
    return error(ret->loc(), "shape-infer: @" + f.name() + " declares " +
                                 std::to_string(results.size()) + " results but returns " +
                                 std::to_string(ret->numOperands()));
  for (size_t i = 0; i < results.size(); ++i) {
    std::optional<Type> t = refine(results[i], ret->operand(i)->type(), syms);
    if (!t)
      return error(ret->loc(), "shape-infer: @" + f.name() + " result " + std::to_string(i) +
                                   " is declared " + results[i].str() + " but returns " +
                                   ret->operand(i)->type().str());
    results[i] = std::move(*t);
  }
  f.setResultTypes(std::move(results));
  return ok();
}

class ShapeInferPass : public Pass {
public:
  Status run(Module& m) override {
    for (const auto& f : m.funcs()) KILN_CHECK(inferFunc(*f, m.symbols()));
    return ok();
  }
};

} // namespace

std::unique_ptr<Pass> createShapeInferPass() { return std::make_unique<ShapeInferPass>(); }

} // namespace kiln
