// PLACEHOLDER (replaced by the parser work).
#include "ir/parser.h"

namespace kiln {
Result<std::unique_ptr<Module>> parseModule(std::string_view, const std::string&) { return error(Loc{}, "not implemented yet"); }
Result<std::unique_ptr<Module>> parseModuleFile(const std::string&) { return error(Loc{}, "not implemented yet"); }
} // namespace kiln
