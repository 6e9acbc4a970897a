// The vulkan executable's payload container: magic "KILNSPV1", a u64 kernel count, then per
// kernel, in VulkanKernelInfo's field order:
//   name, entryPoint           strings (u64 length, bytes)
//   spirv                      u64 word count, then the words (u32 each)
//   bindings                   u64 count, then per binding u8 written (0 or 1), u64 maxBytes
//   push                       u64 count, then per value its symbol (string) and u8 type
//   workgroupSize              3 x u32, each >= 1
//   sharedMemoryBytes          u32
//   requiredSubgroupSize       u32 (0, or a power of two up to 128)
//   fullSubgroups              u8 (0 or 1)
//   capabilities               u64 count, then u32 each
//   extensions                 u64 count, then strings
// All little-endian. Every count is checked against the bytes that remain before anything is
// allocated for it, so a hostile payload is an error, not a read past the end or a huge
// allocation; the SPIR-V of each kernel is scanned (scanSpirv) and must agree with its fields.
#include "runtime/vulkan/payload.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "runtime/payload_io.h"

namespace kiln::vulkan {

namespace {

constexpr char kMagic[] = "KILNSPV1";
constexpr size_t kMagicBytes = 8;
// Far above any real kernel; they keep hostile numbers away from the driver.
constexpr uint64_t kMaxBindings = 1024;
constexpr uint64_t kMaxPush = 1024;
constexpr uint32_t kMaxWorkgroupSide = 1u << 16;

using namespace payload_io;

Diag bad(const std::string& message) { return error(Loc::named("<vulkan executable>"), message); }

// A SPIR-V literal string starting at word `at` of an instruction of `end` words; false when
// it has no terminating NUL inside the instruction.
bool spirvString(const std::vector<uint32_t>& w, size_t at, size_t end, std::string& out,
                 size_t& next) {
  out.clear();
  for (size_t i = at; i < end; ++i)
    for (int b = 0; b < 4; ++b) {
      char c = static_cast<char>((w[i] >> (8 * b)) & 0xff);
      if (c == 0) {
        next = i + 1;
        return true;
      }
      out.push_back(c);
    }
  return false;
}

bool contains(const std::vector<uint32_t>& v, uint32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

Status checkKernel(const VulkanKernelInfo& k) {
  std::string name = "kernel '" + k.name + "'";
  if (k.name.empty()) return bad("a kernel has no name");
  for (uint32_t s : k.workgroupSize)
    if (s < 1 || s > kMaxWorkgroupSide)
      return bad(name + " has workgroup size " + std::to_string(s) + " along an axis");
  uint32_t sg = k.requiredSubgroupSize;
  if (sg != 0 && (sg > 128 || (sg & (sg - 1)) != 0))
    return bad(name + " requires subgroup size " + std::to_string(sg) +
               ", not a power of two up to 128");
  if (k.fullSubgroups && sg == 0)
    return bad(name + " asks for full subgroups without a required subgroup size");
  KILN_TRY(SpirvModuleInfo m, scanSpirv(k.spirv, k.entryPoint));
  if (m.computeEntryPoints.size() != 1 || m.computeEntryPoints[0] != k.entryPoint)
    return bad(name + ": its SPIR-V must have exactly one GLCompute entry point, '" + k.entryPoint +
               "'");
  if (m.localSize != k.workgroupSize)
    return bad(name + ": the SPIR-V's LocalSize " + std::to_string(m.localSize[0]) + "x" +
               std::to_string(m.localSize[1]) + "x" + std::to_string(m.localSize[2]) +
               " is not the kernel's workgroup size " + std::to_string(k.workgroupSize[0]) + "x" +
               std::to_string(k.workgroupSize[1]) + "x" + std::to_string(k.workgroupSize[2]));
  for (uint32_t c : m.capabilities)
    if (!contains(k.capabilities, c))
      return bad(name + ": the SPIR-V declares capability " + capabilityName(c) +
                 ", which the kernel's capability list lacks");
  for (const std::string& e : m.extensions)
    if (std::find(k.extensions.begin(), k.extensions.end(), e) == k.extensions.end())
      return bad(name + ": the SPIR-V declares extension " + e +
                 ", which the kernel's extension list lacks");
  return ok();
}

} // namespace

uint32_t pushConstantBytes(const std::vector<VulkanPushConstant>& push,
                           std::vector<uint32_t>* offsets) {
  uint64_t at = 0;
  if (offsets) offsets->clear();
  for (const VulkanPushConstant& p : push) {
    uint64_t size = p.type == PushType::I64 ? 8 : 4;
    at = (at + size - 1) / size * size;
    if (offsets) offsets->push_back(static_cast<uint32_t>(at));
    at += size;
  }
  return static_cast<uint32_t>(at);
}

std::string capabilityName(uint32_t capability) {
  static const std::pair<uint32_t, const char*> names[] = {
      {1, "Shader"},
      {9, "Float16"},
      {10, "Float64"},
      {11, "Int64"},
      {12, "Int64Atomics"},
      {22, "Int16"},
      {39, "Int8"},
      {61, "GroupNonUniform"},
      {62, "GroupNonUniformVote"},
      {63, "GroupNonUniformArithmetic"},
      {64, "GroupNonUniformBallot"},
      {65, "GroupNonUniformShuffle"},
      {66, "GroupNonUniformShuffleRelative"},
      {67, "GroupNonUniformClustered"},
      {68, "GroupNonUniformQuad"},
      {4433, "StorageBuffer16BitAccess"},
      {4434, "UniformAndStorageBuffer16BitAccess"},
      {4435, "StoragePushConstant16"},
      {4448, "StorageBuffer8BitAccess"},
      {4449, "UniformAndStorageBuffer8BitAccess"},
      {4450, "StoragePushConstant8"},
      {4466, "SignedZeroInfNanPreserve"},
      {5345, "VulkanMemoryModel"},
      {5346, "VulkanMemoryModelDeviceScope"},
      {5347, "PhysicalStorageBufferAddresses"},
      {5357, "CooperativeMatrixNV"},
      {6022, "CooperativeMatrixKHR"},
  };
  for (const auto& [n, s] : names)
    if (n == capability) return s;
  return "#" + std::to_string(capability);
}

Result<SpirvModuleInfo> scanSpirv(const std::vector<uint32_t>& w, const std::string& entry) {
  constexpr uint32_t kSpirvMagic = 0x07230203;
  constexpr uint32_t kOpExtension = 10, kOpEntryPoint = 15, kOpExecutionMode = 16,
                     kOpCapability = 17, kGLCompute = 5, kLocalSize = 17;
  if (w.size() < 5 || w[0] != kSpirvMagic)
    return bad("a kernel's SPIR-V does not start with the SPIR-V magic number");
  SpirvModuleInfo info;
  info.version = w[1];
  uint32_t major = (w[1] >> 16) & 0xff, minor = (w[1] >> 8) & 0xff;
  if (major != 1 || minor > 6 || (w[1] & 0xff0000ff) != 0)
    return bad("a kernel's SPIR-V has version word " + std::to_string(w[1]) +
               " (this runtime reads SPIR-V 1.0 to 1.6)");
  if (w[3] == 0 || w[4] != 0) return bad("a kernel's SPIR-V has a bad id bound or schema");
  uint32_t entryId = 0;
  bool entryFound = false;
  for (size_t at = 5; at < w.size();) {
    uint32_t count = w[at] >> 16, op = w[at] & 0xffff;
    if (count == 0 || count > w.size() - at)
      return bad("a kernel's SPIR-V has an instruction of " + std::to_string(count) +
                 " words at word " + std::to_string(at) + " of " + std::to_string(w.size()));
    size_t end = at + count, next = 0;
    std::string s;
    if (op == kOpCapability && count == 2) {
      if (!contains(info.capabilities, w[at + 1])) info.capabilities.push_back(w[at + 1]);
    } else if (op == kOpExtension) {
      if (!spirvString(w, at + 1, end, s, next))
        return bad("a kernel's SPIR-V has an unterminated OpExtension name");
      info.extensions.push_back(s);
    } else if (op == kOpEntryPoint && count >= 4) {
      if (!spirvString(w, at + 3, end, s, next))
        return bad("a kernel's SPIR-V has an unterminated OpEntryPoint name");
      if (w[at + 1] == kGLCompute) {
        info.computeEntryPoints.push_back(s);
        if (s == entry) {
          entryId = w[at + 2];
          entryFound = true;
        }
      }
    } else if (op == kOpExecutionMode && count == 6 && entryFound && w[at + 1] == entryId &&
               w[at + 2] == kLocalSize) {
      info.localSize = {w[at + 3], w[at + 4], w[at + 5]};
    }
    at = end;
  }
  return info;
}

std::string serializeVulkanPayload(const VulkanPayload& p) {
  std::string out(kMagic, kMagicBytes);
  putU64(out, p.kernels.size());
  for (const VulkanKernelInfo& k : p.kernels) {
    putStr(out, k.name);
    putStr(out, k.entryPoint);
    putU64(out, k.spirv.size());
    for (uint32_t word : k.spirv) putU32(out, word);
    putU64(out, k.bindings.size());
    for (const VulkanBindingInfo& b : k.bindings) {
      putU8(out, b.written ? 1 : 0);
      putU64(out, b.maxBytes);
    }
    putU64(out, k.push.size());
    for (const VulkanPushConstant& c : k.push) {
      putStr(out, c.symbol);
      putU8(out, static_cast<uint8_t>(c.type));
    }
    for (uint32_t s : k.workgroupSize) putU32(out, s);
    putU32(out, k.sharedMemoryBytes);
    putU32(out, k.requiredSubgroupSize);
    putU8(out, k.fullSubgroups ? 1 : 0);
    putU64(out, k.capabilities.size());
    for (uint32_t c : k.capabilities) putU32(out, c);
    putU64(out, k.extensions.size());
    for (const std::string& e : k.extensions) putStr(out, e);
  }
  return out;
}

Result<VulkanPayload> parseVulkanPayload(const std::string& bytes) {
  if (bytes.size() < kMagicBytes || std::memcmp(bytes.data(), kMagic, kMagicBytes) != 0)
    return bad("not a vulkan executable payload of this version (no KILNSPV1 header); "
               "recompile it with this version of kiln");
  Reader r(bytes, kMagicBytes, Loc::named("<vulkan executable>"));
  VulkanPayload p;
  std::set<std::string> names;
  // A kernel takes at least its two strings' lengths, five counts and 21 bytes of fields.
  KILN_TRY(uint64_t kernels, r.count("the kernel list", 8 * 7 + 21, UINT64_MAX));
  for (uint64_t i = 0; i < kernels; ++i) {
    VulkanKernelInfo k;
    KILN_TRY(k.name, r.str("a kernel name"));
    KILN_TRY(k.entryPoint, r.str("a kernel's entry point"));
    KILN_TRY(uint64_t words, r.count("a kernel's SPIR-V", 4, UINT64_MAX));
    k.spirv.reserve(words);
    for (uint64_t w = 0; w < words; ++w) {
      KILN_TRY(uint32_t word, r.uint<uint32_t>("a SPIR-V word"));
      k.spirv.push_back(word);
    }
    KILN_TRY(uint64_t bindings, r.count("a kernel's bindings", 9, kMaxBindings));
    for (uint64_t b = 0; b < bindings; ++b) {
      VulkanBindingInfo info;
      KILN_TRY(info.written, r.flag("a binding's written flag"));
      KILN_TRY(info.maxBytes, r.uint<uint64_t>("a binding's size bound"));
      k.bindings.push_back(info);
    }
    KILN_TRY(uint64_t push, r.count("a kernel's push constants", 9, kMaxPush));
    for (uint64_t c = 0; c < push; ++c) {
      VulkanPushConstant pc;
      KILN_TRY(pc.symbol, r.str("a push constant's symbol"));
      KILN_TRY(uint8_t type, r.uint<uint8_t>("a push constant's type"));
      if (type != uint8_t(PushType::I32) && type != uint8_t(PushType::I64))
        return bad("kernel '" + k.name + "' has push constant '" + pc.symbol +
                   "' of unknown type " + std::to_string(type));
      pc.type = static_cast<PushType>(type);
      k.push.push_back(std::move(pc));
    }
    for (uint32_t& s : k.workgroupSize) {
      KILN_TRY(s, r.uint<uint32_t>("a workgroup size"));
    }
    KILN_TRY(k.sharedMemoryBytes, r.uint<uint32_t>("the shared memory size"));
    KILN_TRY(k.requiredSubgroupSize, r.uint<uint32_t>("the required subgroup size"));
    KILN_TRY(k.fullSubgroups, r.flag("the full-subgroups flag"));
    KILN_TRY(uint64_t caps, r.count("a kernel's capabilities", 4, UINT64_MAX));
    for (uint64_t c = 0; c < caps; ++c) {
      KILN_TRY(uint32_t cap, r.uint<uint32_t>("a capability"));
      k.capabilities.push_back(cap);
    }
    KILN_TRY(uint64_t exts, r.count("a kernel's extensions", 8, UINT64_MAX));
    for (uint64_t e = 0; e < exts; ++e) {
      KILN_TRY(std::string ext, r.str("an extension name"));
      k.extensions.push_back(std::move(ext));
    }
    KILN_CHECK(checkKernel(k));
    if (!names.insert(k.name).second) return bad("two kernels are named '" + k.name + "'");
    p.kernels.push_back(std::move(k));
  }
  if (r.remaining() != 0)
    return bad("the payload has " + std::to_string(r.remaining()) + " bytes after its last field");
  return p;
}

} // namespace kiln::vulkan
