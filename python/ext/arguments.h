// Python values to the HostTensors a call binds: numpy arrays, anything with the buffer
// protocol, Python scalars and lists, and DLPack producers (torch tensors). Memory is shared,
// not copied, wherever the value's memory is a dense C-order tensor on the CPU; a donated
// argument must be such memory and writable, since the call writes its result there.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "ir/core/host_tensor.h"
#include "ir/core/types.h"

namespace kiln::python {

namespace py = pybind11;

// What the signature says about one argument.
struct ArgSpec {
  std::string name; // the IR name, or "argN" when it has none
  size_t index = 0;
  Type type;
  bool donated = false;
};

// The inputs of one call and what keeps their memory alive until it returns: the Python
// objects (arrays made by conversion included) and the DLPack tensors taken from producers.
class BoundArgs {
public:
  BoundArgs() = default;
  BoundArgs(const BoundArgs&) = delete;
  BoundArgs& operator=(const BoundArgs&) = delete;
  BoundArgs(BoundArgs&&) = default;
  ~BoundArgs();

  std::vector<HostTensor> tensors;
  // Per argument, the caller's object whose memory the tensor is (for a donated argument:
  // the object that holds the result after the call), else None.
  std::vector<py::object> owners;
  std::vector<py::object> keepAlive;
  std::vector<void*> dlpack; // DLManagedTensor*, released (under the GIL) by the destructor
};

// Converts argument `spec` of `function`; raises TypeError (element type, kind of value) or
// ValueError (rank, static dims, a donated argument that cannot be written in place).
void bindArgument(const std::string& function, const ArgSpec& spec, py::handle value,
                  BoundArgs& out);

// The numpy dtype of an element type (bf16: uint16, its bits).
py::dtype numpyDtype(ElemType t);

} // namespace kiln::python
