// PLACEHOLDER (replaced by the interpreter work).
#include "ir/interp.h"

namespace kiln {
Result<std::vector<HostTensor>> interpret(const Func&, const std::vector<HostTensor>&, WeightStore&) { return error(Loc{}, "not implemented yet"); }
Result<std::vector<HostTensor>> evalOp(const Op&, const std::vector<HostTensor>&, const SymbolBinding&, WeightStore*) { return error(Loc{}, "not implemented yet"); }
} // namespace kiln
