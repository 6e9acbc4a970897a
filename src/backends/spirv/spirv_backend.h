// The SPIR-V emitter: one lowered kernel (kernel IR) -> one SPIR-V module for Vulkan with
// a single GLCompute entry point, written word by word (module_builder.h), validated by
// SPIRV-Tools for the Vulkan environment before anything uses it.
//
// What the module holds, kernel IR -> SPIR-V:
//   kernel argument i      storage buffer, set 0 binding i (runtime array of the element's
//                          storage form; NonWritable when the kernel never stores to it)
//   symbol                 a member of the push-constant block (pushConstantSymbols order)
//   workgroup_id/local_id  WorkgroupId / LocalInvocationId
//   alloc (shared)         a Workgroup array, zeroed by the workgroup at the start
//   alloc (private)        a Function array, zeroed where the alloc runs
//   for / if               OpLoopMerge / OpSelectionMerge constructs, carried values and
//                          results as OpPhi
//   masked_load/_store     a selection construct around the access
//   barrier                OpControlBarrier (workgroup scope, workgroup memory)
//   lane_id, subgroup_*    SubgroupLocalInvocationId, GroupNonUniform arithmetic/shuffle,
//                          with the pipeline's subgroup size required to be the kernel's
//   compute / icast        the interpreter's semantics (emit_scalar.cpp)
#pragma once

#include <string>
#include <vector>

#include "ir/core/ir.h"
#include "runtime/vulkan/payload.h"
#include "target/target.h"

namespace kiln::spirv {

struct SpirvTarget {
  TargetDesc desc;               // limits and element types (target/target.h)
  uint32_t version = 0x00010300; // SPIR-V 1.3 (Vulkan 1.1 and later)
};

// The kernel as a validated module plus everything the payload says about it.
Result<vulkan::VulkanKernelInfo> emitSpirvKernel(const Func& kernel, const SymbolTable& syms,
                                                 const SpirvTarget& target);

// Runs SPIRV-Tools' validator for Vulkan 1.2; a failure is an internal error at `kernel`'s
// location naming the kernel and the validator's message.
Status validateSpirv(const std::vector<uint32_t>& words, const Func& kernel);
// Modules validateSpirv has passed in this process (the conformance runner reports it).
uint64_t spirvModulesValidated();

// The module's disassembly (spirv-dis's text form).
Result<std::string> disassembleSpirv(const std::vector<uint32_t>& words);

} // namespace kiln::spirv
