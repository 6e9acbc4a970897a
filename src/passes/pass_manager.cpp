// PLACEHOLDER (replaced by the pass-manager work).
#include "passes/pass_manager.h"

namespace kiln {
const std::vector<PassInfo>& registeredPasses() { static std::vector<PassInfo> v; return v; }
const PassInfo* lookupPass(const std::string&) { return nullptr; }
const std::vector<PipelineInfo>& registeredPipelines() { static std::vector<PipelineInfo> v; return v; }
Status PassManager::addPipeline(const std::string&) { return error(Loc{}, "not implemented yet"); }
Status PassManager::run(Module&, std::ostream&) { return error(Loc{}, "not implemented yet"); }
} // namespace kiln
