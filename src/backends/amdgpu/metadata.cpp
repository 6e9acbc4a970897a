// readCodeObjectMetadata (see metadata.h): LLVM's ELF reader and MessagePack document.
#include "backends/amdgpu/metadata.h"

#include <llvm/BinaryFormat/ELF.h>
#include <llvm/BinaryFormat/MsgPackDocument.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Support/MemoryBuffer.h>

namespace kiln::amdgpu {

namespace {

Diag bad(const std::string& message) { return error(Loc::named("<amdgpu code object>"), message); }

uint64_t number(llvm::msgpack::MapDocNode& map, const char* key) {
  auto it = map.find(key);
  if (it == map.end()) return 0;
  llvm::msgpack::DocNode& n = it->second;
  if (n.getKind() == llvm::msgpack::Type::UInt) return n.getUInt();
  if (n.getKind() == llvm::msgpack::Type::Int) return static_cast<uint64_t>(n.getInt());
  return 0;
}

std::string text(llvm::msgpack::MapDocNode& map, const char* key) {
  auto it = map.find(key);
  if (it == map.end() || it->second.getKind() != llvm::msgpack::Type::String) return "";
  return it->second.getString().str();
}

Status readNote(llvm::StringRef desc, CodeObjectMetadata& out) {
  llvm::msgpack::Document doc;
  if (!doc.readFromBlob(desc, false) || doc.getRoot().getKind() != llvm::msgpack::Type::Map)
    return bad("the metadata note is not a MessagePack map");
  llvm::msgpack::MapDocNode& root = doc.getRoot().getMap();
  out.target = text(root, "amdhsa.target");
  if (auto v = root.find("amdhsa.version");
      v != root.end() && v->second.getKind() == llvm::msgpack::Type::Array)
    for (llvm::msgpack::DocNode& n : v->second.getArray())
      if (n.getKind() == llvm::msgpack::Type::UInt) out.version.push_back(n.getUInt());
  auto ks = root.find("amdhsa.kernels");
  if (ks == root.end() || ks->second.getKind() != llvm::msgpack::Type::Array)
    return bad("the metadata note lists no kernels");
  for (llvm::msgpack::DocNode& kn : ks->second.getArray()) {
    if (kn.getKind() != llvm::msgpack::Type::Map) return bad("a kernel's metadata is not a map");
    llvm::msgpack::MapDocNode& k = kn.getMap();
    KernelMetadata m;
    m.name = text(k, ".name");
    m.symbol = text(k, ".symbol");
    m.kernargBytes = number(k, ".kernarg_segment_size");
    m.ldsBytes = number(k, ".group_segment_fixed_size");
    m.privateBytes = number(k, ".private_segment_fixed_size");
    m.vgprs = static_cast<uint32_t>(number(k, ".vgpr_count"));
    m.sgprs = static_cast<uint32_t>(number(k, ".sgpr_count"));
    m.agprs = static_cast<uint32_t>(number(k, ".agpr_count"));
    m.vgprSpills = static_cast<uint32_t>(number(k, ".vgpr_spill_count"));
    m.sgprSpills = static_cast<uint32_t>(number(k, ".sgpr_spill_count"));
    m.wavefrontSize = static_cast<uint32_t>(number(k, ".wavefront_size"));
    m.maxFlatWorkgroupSize = static_cast<uint32_t>(number(k, ".max_flat_workgroup_size"));
    out.kernels.push_back(std::move(m));
  }
  return ok();
}

} // namespace

Result<CodeObjectMetadata> readCodeObjectMetadata(const std::string& elf) {
  auto buf =
      llvm::MemoryBuffer::getMemBuffer(llvm::StringRef(elf.data(), elf.size()), "code", false);
  auto file = llvm::object::ELF64LEObjectFile::create(buf->getMemBufferRef());
  if (!file) {
    std::string why = llvm::toString(file.takeError());
    return bad("not a 64-bit ELF file: " + why);
  }
  const llvm::object::ELF64LEFile& f = file->getELFFile();
  CodeObjectMetadata out;
  out.machine = f.getHeader().e_machine;
  if (out.machine != llvm::ELF::EM_AMDGPU)
    return bad("not an AMDGPU code object (e_machine " + std::to_string(out.machine) + ")");
  auto sections = f.sections();
  if (!sections) {
    std::string why = llvm::toString(sections.takeError());
    return bad("unreadable section table: " + why);
  }
  bool found = false;
  for (const auto& sh : *sections) {
    if (sh.sh_type != llvm::ELF::SHT_NOTE) continue;
    llvm::Error err = llvm::Error::success();
    for (const auto& note : f.notes(sh, err)) {
      if (note.getName() != "AMDGPU" || note.getType() != llvm::ELF::NT_AMDGPU_METADATA) continue;
      llvm::ArrayRef<uint8_t> d = note.getDesc(sh.sh_addralign);
      KILN_CHECK(readNote(llvm::StringRef(reinterpret_cast<const char*>(d.data()), d.size()), out));
      found = true;
    }
    if (err) {
      std::string why = llvm::toString(std::move(err));
      return bad("unreadable note section: " + why);
    }
  }
  if (!found) return bad("the code object has no AMDGPU metadata note");
  return out;
}

} // namespace kiln::amdgpu
