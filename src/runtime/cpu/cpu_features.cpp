// Host CPU features through cpuid, in LLVM's spelling, for refusing a cpu executable whose
// code needs instructions this CPU lacks. AVX and AVX-512 also need the OS to save their
// register state (XCR0 through xgetbv): a CPU that has AVX-512 under an OS that does not
// enable it reports it as absent.
//
// KILN_CPU_DISABLE_FEATURES=avx512f,avx2 makes those features absent, so that the refusal
// can be tested (and a lower code level forced) on any machine.
#include <cstdlib>
#include <map>
#include <sstream>

#include "runtime/cpu/payload.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define KILN_CPU_X86 1
#endif

namespace kiln::cpu {

namespace {

// Where a feature's bit lives: cpuid leaf, subleaf, register (0..3 = eax, ebx, ecx, edx), bit;
// `os` is the XCR0 state the OS must enable for it (0: none).
struct FeatureBit {
  uint32_t leaf, subleaf;
  int reg, bit;
  uint64_t os;
};

constexpr uint64_t kAvxState = 0x6;     // XMM and YMM
constexpr uint64_t kAvx512State = 0xe6; // plus opmask, ZMM_Hi256, Hi16_ZMM

const std::map<std::string, FeatureBit>& featureTable() {
  enum { EAX, EBX, ECX, EDX };
  static const std::map<std::string, FeatureBit> table = {
      {"x87", {1, 0, EDX, 0, 0}},
      {"cx8", {1, 0, EDX, 8, 0}},
      {"cmov", {1, 0, EDX, 15, 0}},
      {"mmx", {1, 0, EDX, 23, 0}},
      {"fxsr", {1, 0, EDX, 24, 0}},
      {"sse", {1, 0, EDX, 25, 0}},
      {"sse2", {1, 0, EDX, 26, 0}},
      {"sse3", {1, 0, ECX, 0, 0}},
      {"pclmul", {1, 0, ECX, 1, 0}},
      {"ssse3", {1, 0, ECX, 9, 0}},
      {"fma", {1, 0, ECX, 12, kAvxState}},
      {"cx16", {1, 0, ECX, 13, 0}},
      {"sse4.1", {1, 0, ECX, 19, 0}},
      {"sse4.2", {1, 0, ECX, 20, 0}},
      {"crc32", {1, 0, ECX, 20, 0}},
      {"movbe", {1, 0, ECX, 22, 0}},
      {"popcnt", {1, 0, ECX, 23, 0}},
      {"aes", {1, 0, ECX, 25, 0}},
      {"xsave", {1, 0, ECX, 26, 0}},
      {"avx", {1, 0, ECX, 28, kAvxState}},
      {"f16c", {1, 0, ECX, 29, kAvxState}},
      {"rdrnd", {1, 0, ECX, 30, 0}},
      {"fsgsbase", {7, 0, EBX, 0, 0}},
      {"bmi", {7, 0, EBX, 3, 0}},
      {"avx2", {7, 0, EBX, 5, kAvxState}},
      {"bmi2", {7, 0, EBX, 8, 0}},
      {"avx512f", {7, 0, EBX, 16, kAvx512State}},
      {"evex512", {7, 0, EBX, 16, kAvx512State}},
      {"avx512dq", {7, 0, EBX, 17, kAvx512State}},
      {"rdseed", {7, 0, EBX, 18, 0}},
      {"adx", {7, 0, EBX, 19, 0}},
      {"avx512ifma", {7, 0, EBX, 21, kAvx512State}},
      {"clflushopt", {7, 0, EBX, 23, 0}},
      {"clwb", {7, 0, EBX, 24, 0}},
      {"avx512cd", {7, 0, EBX, 28, kAvx512State}},
      {"sha", {7, 0, EBX, 29, 0}},
      {"avx512bw", {7, 0, EBX, 30, kAvx512State}},
      {"avx512vl", {7, 0, EBX, 31, kAvx512State}},
      {"avx512vbmi", {7, 0, ECX, 1, kAvx512State}},
      {"avx512vbmi2", {7, 0, ECX, 6, kAvx512State}},
      {"gfni", {7, 0, ECX, 8, 0}},
      {"vaes", {7, 0, ECX, 9, kAvxState}},
      {"vpclmulqdq", {7, 0, ECX, 10, kAvxState}},
      {"avx512vnni", {7, 0, ECX, 11, kAvx512State}},
      {"avx512bitalg", {7, 0, ECX, 12, kAvx512State}},
      {"avx512vpopcntdq", {7, 0, ECX, 14, kAvx512State}},
      {"avx512fp16", {7, 0, EDX, 23, kAvx512State}},
      {"avxvnni", {7, 1, EAX, 4, kAvxState}},
      {"avx512bf16", {7, 1, EAX, 5, kAvx512State}},
      {"xsaveopt", {0xd, 1, EAX, 0, 0}},
      {"xsavec", {0xd, 1, EAX, 1, 0}},
      {"xsaves", {0xd, 1, EAX, 3, 0}},
      {"sahf", {0x80000001, 0, ECX, 0, 0}},
      {"lzcnt", {0x80000001, 0, ECX, 5, 0}},
      {"sse4a", {0x80000001, 0, ECX, 6, 0}},
      {"prfchw", {0x80000001, 0, ECX, 8, 0}},
      {"64bit", {0x80000001, 0, EDX, 29, 0}},
  };
  return table;
}

#ifdef KILN_CPU_X86
uint64_t osEnabledState() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  constexpr unsigned kOsXsave = 1u << 27;
  if (!(c & kOsXsave)) return 0;
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool cpuidHas(const FeatureBit& f) {
  unsigned r[4] = {0, 0, 0, 0};
  if (!__get_cpuid_count(f.leaf, f.subleaf, &r[0], &r[1], &r[2], &r[3])) return false;
  if (!((r[f.reg] >> f.bit) & 1u)) return false;
  static const uint64_t xcr0 = osEnabledState();
  return (xcr0 & f.os) == f.os;
}
#endif

bool disabledByEnv(const std::string& feature) {
  const char* env = std::getenv("KILN_CPU_DISABLE_FEATURES");
  if (!env) return false;
  std::stringstream list(env);
  std::string item;
  while (std::getline(list, item, ','))
    if (item == feature) return true;
  return false;
}

} // namespace

const std::vector<std::string>& checkableCpuFeatures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& [name, bit] : featureTable()) out.push_back(name);
    return out;
  }();
  return names;
}

bool hostHasCpuFeature(const std::string& feature) {
  auto it = featureTable().find(feature);
  if (it == featureTable().end() || disabledByEnv(feature)) return false;
#ifdef KILN_CPU_X86
  return cpuidHas(it->second);
#else
  return false;
#endif
}

std::string hostCpuModel() {
#ifdef KILN_CPU_X86
  unsigned r[12] = {};
  if (__get_cpuid_max(0x80000000, nullptr) >= 0x80000004) {
    for (unsigned i = 0; i < 3; ++i)
      __get_cpuid(0x80000002 + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
    std::string brand(reinterpret_cast<const char*>(r), sizeof(r));
    brand = brand.substr(0, brand.find('\0'));
    size_t first = brand.find_first_not_of(' ');
    size_t last = brand.find_last_not_of(' ');
    if (first != std::string::npos) return brand.substr(first, last - first + 1);
  }
#endif
  return "unknown CPU";
}

} // namespace kiln::cpu
