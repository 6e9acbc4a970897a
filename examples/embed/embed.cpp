// Embedding kiln from C++: compile a model to module bytes (kiln/compiler.h), load them
// once (kiln/runtime.h), bind inputs from memory, run twice with different sizes, read
// the outputs. Exits 1 with the diagnostics when anything fails or a result is wrong.
//
//   kiln-embed-example MODEL.kir
#include <cstring>
#include <iostream>

#include "kiln/compiler.h"
#include "kiln/runtime.h"

namespace {

int fail(const kiln::Diags& d) {
  std::cerr << d.str();
  return 1;
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: kiln-embed-example MODEL.kir\n";
    return 1;
  }
  auto bytes = kiln::compileFileToBytes(argv[1]);
  if (!bytes.ok()) return fail(bytes.diags());
  auto module = kiln::RuntimeModule::fromBytes(bytes.take());
  if (!module.ok()) return fail(module.diags());

  for (int64_t n : {4, 2}) {
    const float data[4] = {-2.0f, -0.25f, 0.0f, 1.5f};
    kiln::HostTensor x(kiln::ElemType::F32, {n});
    std::memcpy(x.mutableData(), data, x.byteSize());
    auto outs = (*module)->run("main", {x});
    if (!outs.ok()) return fail(outs.diags());
    const auto* y = reinterpret_cast<const float*>((*outs)[0].data());
    float sum = *reinterpret_cast<const float*>((*outs)[1].data());
    std::cout << "n=" << n << ": y =";
    for (int64_t i = 0; i < n; ++i) std::cout << " " << y[i];
    std::cout << ", sum = " << sum << "\n";
    float want = n == 4 ? 5.5f : 0.5f;
    if (sum != want) {
      std::cerr << "kiln-embed-example: error: expected sum " << want << "\n";
      return 1;
    }
  }
  // A wrong input is an error value, not a crash.
  auto bad = (*module)->run("main", {kiln::HostTensor(kiln::ElemType::I32, {3})});
  if (bad.ok()) return 1;
  std::cout << "wrong input refused: " << bad.diags().str();
  return 0;
}
