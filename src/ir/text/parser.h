// Parser: reads the text form into a Module.
//
// Errors are `file:line:col: error: message`. Ops get the location of their first
// token unless the text carries an explicit `loc(...)`. The result is parsed but not
// verified beyond what parsing needs (names resolve, counts and attribute kinds fit the
// op table); callers run the verifier.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "ir/core/ir.h"

namespace kiln {

Result<std::unique_ptr<Module>> parseModule(std::string_view text, const std::string& filename);
// Reads the file (an unreadable file is an error) and sets Module::baseDir to its folder.
Result<std::unique_ptr<Module>> parseModuleFile(const std::string& path);

} // namespace kiln
