// CpuPayload serialization (temporary minimal version; the cpu driver's is authoritative).
#include "runtime/cpu/payload.h"

#include <cpuid.h>
#include <cstring>

namespace kiln::cpu {

const std::vector<std::string>& checkableCpuFeatures() {
  static const std::vector<std::string> f = {"sse4.2",  "avx",      "avx2",     "fma",     "f16c",
                                             "avx512f", "avx512bw", "avx512dq", "avx512vl"};
  return f;
}

bool hostHasCpuFeature(const std::string&) { return true; }

namespace {
void put(std::string& out, const std::string& s) {
  uint64_t n = s.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += s;
}
struct Reader {
  const std::string& s;
  size_t at = 0;
  bool bad = false;
  std::string get() {
    uint64_t n = 0;
    if (s.size() - at < 8) {
      bad = true;
      return {};
    }
    std::memcpy(&n, s.data() + at, 8);
    at += 8;
    if (n > s.size() - at) {
      bad = true;
      return {};
    }
    std::string r = s.substr(at, n);
    at += n;
    return r;
  }
};
} // namespace

std::string serializeCpuPayload(const CpuPayload& p) {
  std::string out = "KILNCPU1";
  put(out, p.cpu);
  put(out, std::to_string(p.features.size()));
  for (const auto& f : p.features) put(out, f);
  put(out, p.ir);
  put(out, std::to_string(p.kernels.size()));
  for (const auto& k : p.kernels) {
    put(out, k.name);
    put(out, k.lowered ? "1" : "0");
    put(out, k.symbol);
    put(out, std::to_string(k.symbols.size()));
    for (const auto& s : k.symbols) put(out, s);
  }
  put(out, p.sharedObject);
  return out;
}

Result<CpuPayload> parseCpuPayload(const std::string& bytes) {
  if (bytes.compare(0, 8, "KILNCPU1") != 0)
    return error(Loc::named("<cpu executable>"), "bad magic");
  Reader r{bytes, 8};
  CpuPayload p;
  p.cpu = r.get();
  size_t nf = std::stoul("0" + r.get());
  for (size_t i = 0; i < nf && !r.bad; ++i) p.features.push_back(r.get());
  p.ir = r.get();
  size_t nk = std::stoul("0" + r.get());
  for (size_t i = 0; i < nk && !r.bad; ++i) {
    CpuKernelInfo k;
    k.name = r.get();
    k.lowered = r.get() == "1";
    k.symbol = r.get();
    size_t ns = std::stoul("0" + r.get());
    for (size_t j = 0; j < ns && !r.bad; ++j) k.symbols.push_back(r.get());
    p.kernels.push_back(k);
  }
  p.sharedObject = r.get();
  if (r.bad) return error(Loc::named("<cpu executable>"), "truncated");
  return p;
}

} // namespace kiln::cpu
