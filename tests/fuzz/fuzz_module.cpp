// libFuzzer target for the .kmod loader: any bytes must be refused with diagnostics or
// load into a program whose executor can be created (devices opened, executables parsed)
// without a crash, a sanitizer report or a hang.
//
// Checksums would stop the fuzzer at the first section, so every input is also tried
// resealed (header and section checksums recomputed as the writer would): the fuzzer then
// reaches the meta JSON, the weight index and the host program's text.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <xxhash.h>

#include "runtime/executor.h"
#include "runtime/module_format.h"

namespace {

uint64_t getU64(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

void putU64(std::string& s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// Recomputes every checksum and the file size in place, where the layout allows it.
void reseal(std::string& b) {
  if (b.size() < 64) return;
  uint32_t count = static_cast<uint8_t>(b[12]) | (static_cast<uint8_t>(b[13]) << 8);
  if (count > 64 || 64 + 48 * size_t(count) > b.size()) return;
  putU64(b, 16, b.size());
  for (uint32_t i = 0; i < count; ++i) {
    size_t e = 64 + 48 * size_t(i);
    uint64_t off = getU64(b, e + 8), size = getU64(b, e + 16);
    if (off <= b.size() && size <= b.size() - off)
      putU64(b, e + 24, XXH3_64bits(b.data() + off, size));
  }
  putU64(b, 24, 0);
  putU64(b, 24, XXH3_64bits(b.data(), 64 + 48 * size_t(count)));
}

} // namespace

static void tryLoad(std::shared_ptr<std::string> bytes) {
  auto program = kiln::loadProgram(*bytes, bytes, "fuzz.kmod", ".");
  if (!program.ok()) return;
  auto executor = kiln::Executor::create(std::make_shared<const kiln::Program>(program.take()));
  (void)executor;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string raw(reinterpret_cast<const char*>(data), size);
  tryLoad(std::make_shared<std::string>(raw));
  reseal(raw);
  tryLoad(std::make_shared<std::string>(raw));
  return 0;
}
