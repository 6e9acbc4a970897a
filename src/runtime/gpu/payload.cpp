// The GPU executable's payload container: magic "KILNGPU1", the target (string), a u64 image
// count, then per image: arch (string), kind (u8), code (string), a u64 kernel count and per
// kernel, in GpuKernelInfo's field order:
//   name, entry                strings
//   args                       u64 count, then per argument its element type's name, u64 rank,
//                              u8 written
//   symbols                    u64 count, then strings
//   workgroupSize              3 x u32, each >= 1, product <= 1024
//   staticSharedBytes, dynamicSharedBytes, subgroupSize   u32 each
//   kernargBytes               u64, equal to kernargBytes(args, symbols)
//   stats                      u32 vgprs, u32 sgprs, u32 privateBytes, u8 spills
// All little-endian (payload_io.h).
#include "runtime/gpu/payload.h"

#include <cstring>

#include "runtime/payload_io.h"

namespace kiln::gpu {

namespace {

using namespace payload_io;

constexpr char kMagic[] = "KILNGPU1";
constexpr size_t kMagicBytes = 8;
constexpr uint64_t kMaxRank = 64;
constexpr uint64_t kMaxWorkgroupThreads = 1024;

Loc where() { return Loc::named("<gpu executable>"); }

} // namespace

uint64_t kernargBytes(const std::vector<GpuArgInfo>& args, size_t symbols) {
  uint64_t words = args.size() + symbols + 1;
  for (const GpuArgInfo& a : args) words += static_cast<uint64_t>(a.rank);
  return 8 * words;
}

std::string serializeGpuPayload(const GpuPayload& p) {
  std::string out(kMagic, kMagicBytes);
  putStr(out, p.target);
  putU64(out, p.images.size());
  for (const GpuImage& img : p.images) {
    putStr(out, img.arch);
    putU8(out, static_cast<uint8_t>(img.kind));
    putStr(out, img.code);
    putU64(out, img.kernels.size());
    for (const GpuKernelInfo& k : img.kernels) {
      putStr(out, k.name);
      putStr(out, k.entry);
      putU64(out, k.args.size());
      for (const GpuArgInfo& a : k.args) {
        putStr(out, std::string(elemTypeName(a.elem)));
        putU64(out, static_cast<uint64_t>(a.rank));
        putU8(out, a.written ? 1 : 0);
      }
      putStrList(out, k.symbols);
      for (uint32_t w : k.workgroupSize) putU32(out, w);
      putU32(out, k.staticSharedBytes);
      putU32(out, k.dynamicSharedBytes);
      putU32(out, k.subgroupSize);
      putU64(out, k.kernargBytes);
      putU32(out, k.stats.vgprs);
      putU32(out, k.stats.sgprs);
      putU32(out, k.stats.privateBytes);
      putU8(out, k.stats.spills ? 1 : 0);
    }
  }
  return out;
}

namespace {

Result<GpuKernelInfo> parseKernel(Reader& r) {
  GpuKernelInfo k;
  KILN_TRY(k.name, r.str("a kernel name"));
  KILN_TRY(k.entry, r.str("a kernel's entry point"));
  if (k.entry.empty()) return r.bad("kernel '" + k.name + "' has no entry point");
  KILN_TRY(uint64_t args, r.count("a kernel's arguments", 8 * 2 + 1));
  for (uint64_t a = 0; a < args; ++a) {
    KILN_TRY(std::string elem, r.str("an argument's element type"));
    std::optional<ElemType> t = parseElemType(elem);
    if (!t) return r.bad("kernel '" + k.name + "' has an argument of unknown type '" + elem + "'");
    KILN_TRY(uint64_t rank, r.u64("an argument's rank"));
    if (rank > kMaxRank)
      return r.bad("kernel '" + k.name + "' has an argument of rank " + std::to_string(rank));
    KILN_TRY(uint8_t written, r.u8("an argument's written flag"));
    if (written > 1) return r.bad("kernel '" + k.name + "' has a bad written flag");
    k.args.push_back({*t, static_cast<int64_t>(rank), written == 1});
  }
  KILN_TRY(k.symbols, r.strList("a kernel's push constants"));
  uint64_t threads = 1;
  for (uint32_t& w : k.workgroupSize) {
    KILN_TRY(w, r.u32("a workgroup size"));
    if (w == 0 || w > kMaxWorkgroupThreads)
      return r.bad("kernel '" + k.name + "' has a workgroup side of " + std::to_string(w));
    threads *= w;
  }
  if (threads > kMaxWorkgroupThreads)
    return r.bad("kernel '" + k.name + "' has " + std::to_string(threads) +
                 " threads per workgroup (at most " + std::to_string(kMaxWorkgroupThreads) + ")");
  KILN_TRY(k.staticSharedBytes, r.u32("a kernel's static shared memory"));
  KILN_TRY(k.dynamicSharedBytes, r.u32("a kernel's dynamic shared memory"));
  KILN_TRY(k.subgroupSize, r.u32("a kernel's subgroup size"));
  if (k.subgroupSize != 0 && k.subgroupSize != 32 && k.subgroupSize != 64)
    return r.bad("kernel '" + k.name + "' assumes subgroups of " + std::to_string(k.subgroupSize));
  KILN_TRY(k.kernargBytes, r.u64("a kernel's kernarg size"));
  if (k.kernargBytes != kernargBytes(k.args, k.symbols.size()))
    return r.bad("kernel '" + k.name + "' declares " + std::to_string(k.kernargBytes) +
                 " kernarg bytes; its arguments take " +
                 std::to_string(kernargBytes(k.args, k.symbols.size())));
  KILN_TRY(k.stats.vgprs, r.u32("a kernel's register count"));
  KILN_TRY(k.stats.sgprs, r.u32("a kernel's register count"));
  KILN_TRY(k.stats.privateBytes, r.u32("a kernel's private bytes"));
  KILN_TRY(uint8_t spills, r.u8("a kernel's spill flag"));
  if (spills > 1) return r.bad("kernel '" + k.name + "' has a bad spill flag");
  k.stats.spills = spills == 1;
  return k;
}

} // namespace

Result<GpuPayload> parseGpuPayload(const std::string& bytes) {
  if (bytes.size() < kMagicBytes || std::memcmp(bytes.data(), kMagic, kMagicBytes) != 0)
    return error(where(), "not a GPU executable payload of this version (no KILNGPU1 header); "
                          "recompile it with this version of kiln");
  Reader r(bytes, kMagicBytes, where());
  GpuPayload p;
  KILN_TRY(p.target, r.str("the target"));
  if (p.target != "amdgpu" && p.target != "cuda")
    return r.bad("the payload is for target '" + p.target + "', not amdgpu or cuda");
  // An image takes at least its two strings' lengths, its kind and its kernel count (a
  // module whose work all runs on the host has one image with no code and no kernels).
  KILN_TRY(uint64_t images, r.count("the image list", 8 * 3 + 1));
  for (uint64_t i = 0; i < images; ++i) {
    GpuImage img;
    KILN_TRY(img.arch, r.str("an image's architecture"));
    KILN_TRY(uint8_t kind, r.u8("an image's code kind"));
    if (kind != uint8_t(GpuCodeKind::HsaCodeObject) && kind != uint8_t(GpuCodeKind::Ptx))
      return r.bad("image '" + img.arch + "' has an unknown code kind " + std::to_string(kind));
    img.kind = GpuCodeKind(kind);
    if ((img.kind == GpuCodeKind::Ptx) != (p.target == "cuda"))
      return r.bad("image '" + img.arch + "' holds code of the wrong kind for target " + p.target);
    KILN_TRY(img.code, r.str("an image's code"));
    KILN_TRY(uint64_t kernels, r.count("an image's kernel list", 8 * 6));
    for (uint64_t k = 0; k < kernels; ++k) {
      KILN_TRY(GpuKernelInfo info, parseKernel(r));
      img.kernels.push_back(std::move(info));
    }
    if (!p.images.empty()) {
      const GpuImage& first = p.images.front();
      bool same = first.kernels.size() == img.kernels.size();
      for (size_t k = 0; same && k < img.kernels.size(); ++k)
        same = first.kernels[k].name == img.kernels[k].name;
      if (!same)
        return r.bad("images '" + first.arch + "' and '" + img.arch +
                     "' do not hold the same kernels");
      for (const GpuImage& other : p.images)
        if (other.arch == img.arch) return r.bad("two images for arch '" + img.arch + "'");
    }
    if (!img.kernels.empty() && img.code.empty())
      return r.bad("image '" + img.arch + "' has kernels but no code");
    p.images.push_back(std::move(img));
  }
  if (r.remaining() != 0)
    return r.bad("the payload has " + std::to_string(r.remaining()) +
                 " bytes after its last field");
  return p;
}

Result<const GpuImage*> imageForArch(const GpuPayload& p, const std::string& arch,
                                     const std::string& device) {
  std::string have;
  for (const GpuImage& img : p.images) {
    if (img.arch == arch) return &img;
    have += (have.empty() ? "" : ", ") + img.arch;
  }
  return error(
      Loc::named(device),
      "this module's " + p.target + " code was compiled for " +
          (have.empty() ? std::string("no architecture") : have) + "; " + device + " is " + arch +
          " (recompile with --target=" + (p.target == "cuda" ? "cuda:" : "amdgpu:") + arch + ")");
}

} // namespace kiln::gpu
