// libFuzzer target for the ONNX importer: any bytes must either be rejected with
// diagnostics or import to a module that verifies and whose printed text parses back and
// prints byte-identically. A crash, a sanitizer report, or an imported module that fails
// either check is a bug. External data is off (no folder), so the target reads no files.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "frontends/onnx/import.h"
#include "ir/text/parser.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto imported = kiln::onnx::importBytes(bytes, "fuzz.onnx", "");
  if (!imported.ok()) return 0;
  if (!kiln::verifyModule(*imported->module).ok()) __builtin_trap();
  std::string printed = kiln::printModule(*imported->module);
  auto reparsed = kiln::parseModule(printed, "printed.kir");
  if (!reparsed.ok()) __builtin_trap();
  if (kiln::printModule(**reparsed) != printed) __builtin_trap();
  return 0;
}
