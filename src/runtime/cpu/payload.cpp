// The cpu executable's payload container: magic "KILNCPU2", then the fields of CpuPayload
// in declaration order. A string is a u64 little-endian length and its bytes; a list is a
// u64 count and its items; an argument is its element type's name and its rank (u64). Every length
// and count is checked against the bytes that remain, so a truncated or hostile payload is an
// error, not a read past the end or a huge allocation.
#include <cstring>

#include "runtime/cpu/payload.h"
#include "runtime/payload_io.h"

namespace kiln::cpu {

namespace {

constexpr char kMagic[] = "KILNCPU2";
constexpr size_t kMagicBytes = 8;

using namespace payload_io;

Diag bad(const std::string& message) { return error(Loc::named("<cpu executable>"), message); }

} // namespace

std::string serializeCpuPayload(const CpuPayload& p) {
  std::string out(kMagic, kMagicBytes);
  putStr(out, p.cpu);
  putStrList(out, p.features);
  putU64(out, p.kernels.size());
  for (const CpuKernelInfo& k : p.kernels) {
    putStr(out, k.name);
    putStr(out, k.symbol);
    putStrList(out, k.symbols);
    putU64(out, k.args.size());
    for (const CpuArgInfo& a : k.args) {
      putStr(out, std::string(elemTypeName(a.elem)));
      putU64(out, static_cast<uint64_t>(a.rank));
    }
  }
  putStr(out, p.sharedObject);
  return out;
}

Result<CpuPayload> parseCpuPayload(const std::string& bytes) {
  if (bytes.size() < kMagicBytes || std::memcmp(bytes.data(), kMagic, kMagicBytes) != 0)
    return bad("not a cpu executable payload of this version (no KILNCPU2 header); "
               "recompile it with this version of kiln");
  Reader r(bytes, kMagicBytes, Loc::named("<cpu executable>"));
  CpuPayload p;
  KILN_TRY(p.cpu, r.str("the CPU name"));
  KILN_TRY(p.features, r.strList("the feature list"));
  // A kernel takes at least its two strings' lengths and its two counts.
  KILN_TRY(uint64_t kernels, r.count("the kernel list", 8 * 4));
  for (uint64_t i = 0; i < kernels; ++i) {
    CpuKernelInfo k;
    KILN_TRY(k.name, r.str("a kernel name"));
    KILN_TRY(k.symbol, r.str("a kernel's entry point"));
    KILN_TRY(k.symbols, r.strList("a kernel's push constants"));
    KILN_TRY(uint64_t args, r.count("a kernel's arguments", 8 * 2));
    for (uint64_t a = 0; a < args; ++a) {
      KILN_TRY(std::string elem, r.str("an argument's element type"));
      std::optional<ElemType> t = parseElemType(elem);
      if (!t) return bad("kernel '" + k.name + "' has an argument of unknown type '" + elem + "'");
      KILN_TRY(uint64_t rank, r.u64("an argument's rank"));
      if (rank > 64)
        return bad("kernel '" + k.name + "' has an argument of rank " + std::to_string(rank));
      k.args.push_back({*t, static_cast<int64_t>(rank)});
    }
    p.kernels.push_back(std::move(k));
  }
  KILN_TRY(p.sharedObject, r.str("the shared object"));
  if (r.remaining() != 0)
    return bad("the payload has " + std::to_string(r.remaining()) + " bytes after its last field");
  return p;
}

} // namespace kiln::cpu
