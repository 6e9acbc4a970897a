// libFuzzer target for the text parser: any input must either be rejected with
// diagnostics or, when it parses and verifies, print to text that parses back and prints
// byte-identically. A crash, a sanitizer report or a round-trip mismatch is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ir/text/parser.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = kiln::parseModule(text, "fuzz.kir");
  if (!parsed.ok()) return 0;
  if (!kiln::verifyModule(**parsed).ok()) return 0;
  std::string printed = kiln::printModule(**parsed);
  auto reparsed = kiln::parseModule(printed, "printed.kir");
  if (!reparsed.ok()) __builtin_trap();
  if (kiln::printModule(**reparsed) != printed) __builtin_trap();
  return 0;
}
