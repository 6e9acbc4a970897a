// SpirvBuilder: a SPIR-V module written word by word, in the section order the
// specification requires (capabilities, extensions, imports, memory model, entry points,
// execution modes, names, decorations, types/constants/globals, functions). Types and
// constants are declared once per distinct operand list, except structs, which are
// distinct types (each storage buffer's struct carries its own decorations).
//
// Opcodes and enums come from Debian's spirv-headers (spirv/unified1/spirv.hpp11); nothing
// here knows kiln's IR.
#pragma once

#include <spirv/unified1/spirv.hpp11>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::spirv {

using Id = uint32_t;
using Words = std::vector<uint32_t>;

class SpirvBuilder {
public:
  Id newId() { return next_++; }

  void capability(spv::Capability c);
  void extension(const std::string& name);
  Id glslImport(); // the GLSL.std.450 extended instruction set
  void entryPoint(Id fn, const std::string& name, const std::vector<Id>& interface);
  void localSize(Id fn, uint32_t x, uint32_t y, uint32_t z);
  // OpExecutionMode `mode` on `fn` with literal operands (e.g. a float width).
  void executionMode(Id fn, spv::ExecutionMode mode, const Words& operands);
  void name(Id id, std::string_view text);
  void decorate(Id id, spv::Decoration d, const Words& args = {});
  void memberDecorate(Id type, uint32_t member, spv::Decoration d, const Words& args = {});

  Id typeVoid();
  Id typeBool();
  Id typeInt(uint32_t width); // signedness 0: the opcodes say signed or unsigned
  // A signed integer type, for the operands and results of the signed conversions (some
  // drivers, Mesa 22 among them, choose sign or zero extension from the types' signedness
  // rather than from the opcode).
  Id typeSignedInt(uint32_t width);
  Id typeFloat(uint32_t width);
  Id typeVector(Id component, uint32_t count);
  Id typeArray(Id elem, uint32_t length);
  Id typeRuntimeArray(Id elem, uint32_t stride); // decorated with ArrayStride once
  Id typeStruct(const std::vector<Id>& members);
  Id typePointer(spv::StorageClass sc, Id pointee);
  Id typeFunction(Id result, const std::vector<Id>& params = {});

  Id constInt(Id type, uint64_t value); // width from the type (32 or 64 bits, or less)
  Id constFloat(Id type, double value);
  Id constBool(bool value);
  Id constNull(Id type);
  Id constComposite(Id type, const std::vector<Id>& parts);

  // A global variable (StorageBuffer, PushConstant, Input, Workgroup).
  Id globalVariable(Id pointerType, spv::StorageClass sc);

  // Function body: instructions appended in order (OpFunction ... OpFunctionEnd, labels).
  // Function-storage variables go to the first block, before any other instruction.
  void code(spv::Op op, const Words& operands);
  Id codeResult(spv::Op op, Id type, const Words& operands); // returns the fresh result id
  void codeResultId(spv::Op op, Id type, Id result, const Words& operands);
  // Words of the function body so far, and a later change to one (a phi's back-edge value).
  size_t codeSize() const { return functions_.size(); }
  void patch(size_t at, uint32_t word) { functions_[at] = word; }
  void functionVariableSection(Id pointerType, Id result, Id initializer);
  // Marks where the first block's variables go (call right after the entry OpLabel).
  void beginVariables() { variablesAt_ = functions_.size(); }

  Words finish(uint32_t version) const;

  // The bytes of a literal string as SPIR-V words (UTF-8, NUL-terminated, padded).
  static Words literalString(std::string_view s);

  const std::set<spv::Capability>& capabilities() const { return caps_; }
  const std::set<std::string>& extensions() const { return exts_; }

private:
  Id typeOrConstant(spv::Op op, const Words& operands, bool hasType = false);
  static void emit(Words& out, spv::Op op, const Words& operands);

  Id next_ = 1;
  std::set<spv::Capability> caps_;
  std::set<std::string> exts_;
  Id glsl_ = 0;
  Words entryPoints_, modes_, names_, decorations_, globals_, functions_, variables_;
  size_t variablesAt_ = 0;
  std::map<std::pair<uint32_t, Words>, Id> unique_;
  std::set<Id> strided_;
  std::map<Id, uint32_t> intWidth_, floatWidth_;
};

} // namespace kiln::spirv
