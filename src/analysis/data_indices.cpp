// dataDependentIndices (see data_indices.h).
#include "analysis/data_indices.h"

namespace kiln {

std::unordered_set<const Value*> dataDependentIndices(const Func& kernel) {
  std::unordered_set<const Value*> data;
  auto isData = [&](const Value* x) { return data.count(x) != 0; };
  walkOps(kernel, [&](const Op& op) {
    if (op.kind() == OpKind::For) {
      const Block& body = *op.region(0);
      if (isData(op.operand(0)) || isData(op.operand(1)) || isData(op.operand(2)))
        data.insert(body.arg(0));
      for (size_t a = 1; a < body.numArgs(); ++a)
        if (body.arg(a)->type().isIndex()) data.insert(body.arg(a));
    }
    for (size_t r = 0; r < op.numResults(); ++r) {
      const Value* res = op.result(r);
      if (!res->type().isIndex()) continue;
      bool d =
          op.numRegions() > 0 || (op.kind() == OpKind::ICast && !op.operand(0)->type().isIndex());
      for (const Value* x : op.operands()) d = d || isData(x);
      if (d) data.insert(res);
    }
  });
  return data;
}

} // namespace kiln
