// A call's HostTensors back to Python: numpy arrays over kiln's memory (no copy), or torch
// tensors over the same memory with as_torch. A donated result is the caller's own object,
// which the call wrote into.
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

#include "arguments.h"
#include "ir/core/host_tensor.h"

namespace kiln::python {

namespace py = pybind11;

// `owner` (or None) is the caller's object whose memory `t` is.
py::object toPython(HostTensor t, py::object owner, bool asTorch);

// One Python value for a call's results: the value itself when there is one, else a tuple.
// `donors[i]` is the argument result i was donated from, or -1.
py::object resultsToPython(std::vector<HostTensor> results, const std::vector<int>& donors,
                           const BoundArgs& args, bool asTorch);

} // namespace kiln::python
