// Running a compiled module with the runtime library alone (libkiln-runtime: no compiler
// pass, no LLVM): load a .kmod, call @main with a 2-element f32 input, print the result.
//
//   kiln-run-only-example MODULE.kmod
#include <iostream>

#include "kiln/runtime.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: kiln-run-only-example MODULE.kmod\n";
    return 1;
  }
  auto module = kiln::RuntimeModule::open(argv[1]);
  if (!module.ok()) {
    std::cerr << module.diags().str();
    return 1;
  }
  kiln::HostTensor x(kiln::ElemType::F32, {2});
  x.setF(0, 1.5);
  x.setF(1, -2);
  auto outs = (*module)->run("main", {x});
  if (!outs.ok()) {
    std::cerr << outs.diags().str();
    return 1;
  }
  std::cout << "@main -> " << (*outs)[0].getF(0) << ", " << (*outs)[0].getF(1) << "\n";
  return (*outs)[0].getF(0) == -1.5 && (*outs)[0].getF(1) == 2 ? 0 : 1;
}
