// validateSpirv and disassembleSpirv: SPIRV-Tools' validator and disassembler.
#include <atomic>

#include <spirv-tools/libspirv.hpp>

#include "backends/spirv/spirv_backend.h"

namespace kiln::spirv {

namespace {
std::atomic<uint64_t> gValidated{0};
} // namespace

uint64_t spirvModulesValidated() { return gValidated.load(); }

Status validateSpirv(const std::vector<uint32_t>& words, const Func& kernel) {
  spvtools::SpirvTools tools(SPV_ENV_VULKAN_1_2);
  std::string messages;
  tools.SetMessageConsumer(
      [&](spv_message_level_t, const char*, const spv_position_t& at, const char* message) {
        if (!messages.empty()) messages += "; ";
        messages += message;
        messages += " (word " + std::to_string(at.index) + ")";
      });
  spvtools::ValidatorOptions options;
  if (tools.Validate(words.data(), words.size(), options)) {
    ++gValidated;
    return ok();
  }
  return error(kernel.loc(), "internal: the SPIR-V emitted for kernel @" + kernel.name() +
                                 " does not validate: " + messages);
}

Result<std::string> disassembleSpirv(const std::vector<uint32_t>& words) {
  spvtools::SpirvTools tools(SPV_ENV_VULKAN_1_2);
  std::string text, messages;
  tools.SetMessageConsumer([&](spv_message_level_t, const char*, const spv_position_t&,
                               const char* message) { messages += message; });
  if (!tools.Disassemble(words, &text,
                         SPV_BINARY_TO_TEXT_OPTION_FRIENDLY_NAMES |
                             SPV_BINARY_TO_TEXT_OPTION_INDENT))
    return error(Loc::named("spirv"), "cannot disassemble: " + messages);
  return text;
}

} // namespace kiln::spirv
