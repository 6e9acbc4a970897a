// SpirvBuilder (see module_builder.h).
#include "backends/spirv/module_builder.h"

#include <cstring>

namespace kiln::spirv {

void SpirvBuilder::emit(Words& out, spv::Op op, const Words& operands) {
  out.push_back(uint32_t(operands.size() + 1) << 16 | uint32_t(op));
  out.insert(out.end(), operands.begin(), operands.end());
}

Words SpirvBuilder::literalString(std::string_view s) {
  Words w((s.size() + 4) / 4, 0);
  std::memcpy(w.data(), s.data(), s.size());
  return w;
}

void SpirvBuilder::capability(spv::Capability c) { caps_.insert(c); }
void SpirvBuilder::extension(const std::string& name) { exts_.insert(name); }

Id SpirvBuilder::glslImport() {
  if (!glsl_) glsl_ = newId();
  return glsl_;
}

void SpirvBuilder::entryPoint(Id fn, const std::string& name, const std::vector<Id>& interface) {
  Words w = {uint32_t(spv::ExecutionModel::GLCompute), fn};
  Words s = literalString(name);
  w.insert(w.end(), s.begin(), s.end());
  w.insert(w.end(), interface.begin(), interface.end());
  emit(entryPoints_, spv::Op::OpEntryPoint, w);
}

void SpirvBuilder::localSize(Id fn, uint32_t x, uint32_t y, uint32_t z) {
  emit(modes_, spv::Op::OpExecutionMode, {fn, uint32_t(spv::ExecutionMode::LocalSize), x, y, z});
}

void SpirvBuilder::executionMode(Id fn, spv::ExecutionMode mode, const Words& operands) {
  Words w = {fn, uint32_t(mode)};
  w.insert(w.end(), operands.begin(), operands.end());
  emit(modes_, spv::Op::OpExecutionMode, w);
}

void SpirvBuilder::name(Id id, std::string_view text) {
  Words w = {id};
  Words s = literalString(text);
  w.insert(w.end(), s.begin(), s.end());
  emit(names_, spv::Op::OpName, w);
}

void SpirvBuilder::decorate(Id id, spv::Decoration d, const Words& args) {
  Words w = {id, uint32_t(d)};
  w.insert(w.end(), args.begin(), args.end());
  emit(decorations_, spv::Op::OpDecorate, w);
}

void SpirvBuilder::memberDecorate(Id type, uint32_t member, spv::Decoration d, const Words& args) {
  Words w = {type, member, uint32_t(d)};
  w.insert(w.end(), args.begin(), args.end());
  emit(decorations_, spv::Op::OpMemberDecorate, w);
}

// Types and constants: one id per (opcode, operands); constants carry their type first.
Id SpirvBuilder::typeOrConstant(spv::Op op, const Words& operands, bool hasType) {
  auto key = std::make_pair(uint32_t(op), operands);
  auto it = unique_.find(key);
  if (it != unique_.end()) return it->second;
  Id id = newId();
  Words w = operands;
  w.insert(w.begin() + (hasType ? 1 : 0), id);
  emit(globals_, op, w);
  unique_[key] = id;
  return id;
}

Id SpirvBuilder::typeVoid() { return typeOrConstant(spv::Op::OpTypeVoid, {}); }
Id SpirvBuilder::typeBool() { return typeOrConstant(spv::Op::OpTypeBool, {}); }
Id SpirvBuilder::typeInt(uint32_t width) {
  Id t = typeOrConstant(spv::Op::OpTypeInt, {width, 0});
  intWidth_[t] = width;
  return t;
}
Id SpirvBuilder::typeSignedInt(uint32_t width) {
  Id t = typeOrConstant(spv::Op::OpTypeInt, {width, 1});
  intWidth_[t] = width;
  return t;
}

Id SpirvBuilder::typeFloat(uint32_t width) {
  Id t = typeOrConstant(spv::Op::OpTypeFloat, {width});
  floatWidth_[t] = width;
  return t;
}
Id SpirvBuilder::typeVector(Id component, uint32_t count) {
  return typeOrConstant(spv::Op::OpTypeVector, {component, count});
}
Id SpirvBuilder::typeArray(Id elem, uint32_t length) {
  return typeOrConstant(spv::Op::OpTypeArray, {elem, constInt(typeInt(32), length)});
}
Id SpirvBuilder::typeRuntimeArray(Id elem, uint32_t stride) {
  Id t = typeOrConstant(spv::Op::OpTypeRuntimeArray, {elem});
  if (strided_.insert(t).second) decorate(t, spv::Decoration::ArrayStride, {stride});
  return t;
}
Id SpirvBuilder::typeStruct(const std::vector<Id>& members) {
  Id id = newId();
  Words w = {id};
  w.insert(w.end(), members.begin(), members.end());
  emit(globals_, spv::Op::OpTypeStruct, w);
  return id;
}
Id SpirvBuilder::typePointer(spv::StorageClass sc, Id pointee) {
  return typeOrConstant(spv::Op::OpTypePointer, {uint32_t(sc), pointee});
}
Id SpirvBuilder::typeFunction(Id result, const std::vector<Id>& params) {
  Words w = {result};
  w.insert(w.end(), params.begin(), params.end());
  return typeOrConstant(spv::Op::OpTypeFunction, w);
}

Id SpirvBuilder::constInt(Id type, uint64_t value) {
  // Two words for 64-bit types, one otherwise (bits above a narrower width cleared, as the
  // specification asks).
  auto it = intWidth_.find(type);
  uint32_t width = it == intWidth_.end() ? 32 : it->second;
  if (width == 64)
    return typeOrConstant(spv::Op::OpConstant, {type, uint32_t(value), uint32_t(value >> 32)},
                          true);
  uint64_t mask = width == 32 ? 0xffffffffu : (uint64_t(1) << width) - 1;
  return typeOrConstant(spv::Op::OpConstant, {type, uint32_t(value & mask)}, true);
}

Id SpirvBuilder::constFloat(Id type, double value) {
  auto it = floatWidth_.find(type);
  if (it != floatWidth_.end() && it->second == 64) {
    uint64_t bits;
    std::memcpy(&bits, &value, 8);
    return typeOrConstant(spv::Op::OpConstant, {type, uint32_t(bits), uint32_t(bits >> 32)}, true);
  }
  float f = static_cast<float>(value);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return typeOrConstant(spv::Op::OpConstant, {type, bits}, true);
}

Id SpirvBuilder::constBool(bool value) {
  return typeOrConstant(value ? spv::Op::OpConstantTrue : spv::Op::OpConstantFalse, {typeBool()},
                        true);
}

Id SpirvBuilder::constNull(Id type) {
  return typeOrConstant(spv::Op::OpConstantNull, {type}, true);
}

Id SpirvBuilder::constComposite(Id type, const std::vector<Id>& parts) {
  Words w = {type};
  w.insert(w.end(), parts.begin(), parts.end());
  return typeOrConstant(spv::Op::OpConstantComposite, w, true);
}

Id SpirvBuilder::globalVariable(Id pointerType, spv::StorageClass sc) {
  Id id = newId();
  emit(globals_, spv::Op::OpVariable, {pointerType, id, uint32_t(sc)});
  return id;
}

void SpirvBuilder::code(spv::Op op, const Words& operands) { emit(functions_, op, operands); }

Id SpirvBuilder::codeResult(spv::Op op, Id type, const Words& operands) {
  Id id = newId();
  Words w = {type, id};
  w.insert(w.end(), operands.begin(), operands.end());
  emit(functions_, op, w);
  return id;
}

void SpirvBuilder::codeResultId(spv::Op op, Id type, Id result, const Words& operands) {
  Words w = {type, result};
  w.insert(w.end(), operands.begin(), operands.end());
  emit(functions_, op, w);
}

void SpirvBuilder::functionVariableSection(Id pointerType, Id result, Id initializer) {
  Words w = {pointerType, result, uint32_t(spv::StorageClass::Function)};
  if (initializer) w.push_back(initializer);
  emit(variables_, spv::Op::OpVariable, w);
}

Words SpirvBuilder::finish(uint32_t version) const {
  Words out = {spv::MagicNumber, version, 0 /* generator */, next_, 0};
  for (spv::Capability c : caps_) emit(out, spv::Op::OpCapability, {uint32_t(c)});
  for (const std::string& e : exts_) emit(out, spv::Op::OpExtension, literalString(e));
  if (glsl_) {
    Words w = {glsl_};
    Words s = literalString("GLSL.std.450");
    w.insert(w.end(), s.begin(), s.end());
    emit(out, spv::Op::OpExtInstImport, w);
  }
  emit(out, spv::Op::OpMemoryModel,
       {uint32_t(spv::AddressingModel::Logical), uint32_t(spv::MemoryModel::GLSL450)});
  for (const Words* section : {&entryPoints_, &modes_, &names_, &decorations_, &globals_})
    out.insert(out.end(), section->begin(), section->end());
  out.insert(out.end(), functions_.begin(), functions_.begin() + long(variablesAt_));
  out.insert(out.end(), variables_.begin(), variables_.end());
  out.insert(out.end(), functions_.begin() + long(variablesAt_), functions_.end());
  return out;
}

} // namespace kiln::spirv
