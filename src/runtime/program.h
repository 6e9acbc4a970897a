// Program: a compiled module in memory, as the compiler produces it and a .kmod file holds
// it, and as the executor runs it.
//
//   host           the host functions (entry points: alloc_buffer / launch / transfer_to /
//                  load_weight / wait / free, ending in return), the symbols with their
//                  ranges, and the weight declarations. A program compiled in memory keeps
//                  its kernel functions in the same module; they are never entry points.
//   executables    one per target: the payload a driver loads, opaque to the runtime (ref,
//                  sim: IR text, one function per kernel, kernel N is the N-th function;
//                  cpu: compiled code, plus a `ref` one with the kernels it did not lower)
//   weights        embedded weight data by name; weights not embedded are read (mmap) from
//                  the file their declaration names
//   stats          what the compiler computed per entry function (memory), for kiln dump
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/core/host_tensor.h"
#include "ir/core/ir.h"

namespace kiln {

struct ExecutableImage {
  std::string target;
  std::string payload;
};

// Bytes at the symbols' upper bounds, with the symbolic forms for display.
struct FunctionStats {
  std::string name;
  uint64_t dispatches = 0;
  uint64_t peakBytes = 0;   // largest live set of buffers at any point of the schedule
  uint64_t totalBytes = 0;  // sum of every buffer the schedule allocates
  uint64_t weightBytes = 0; // weights the function loads (kept resident, in both numbers)
  std::string peakExpr;     // the live set at the peak, symbolically
  std::string totalExpr;
  std::string boundAt; // "seq=4096" or "" when every dim is static
};

struct Program {
  std::shared_ptr<Module> host;
  std::vector<std::string> entries;
  std::vector<std::string> devices;
  std::vector<ExecutableImage> executables;
  std::map<std::string, HostTensor> embeddedWeights;
  std::vector<FunctionStats> stats;

  const Func* entry(const std::string& name) const {
    for (const std::string& e : entries)
      if (e == name) return host->lookupFunc(name);
    return nullptr;
  }
};

} // namespace kiln
