// How kiln's failures reach Python: diagnostics become kiln.Error (a RuntimeError whose
// message is the diagnostic text with its location); a wrong argument is a TypeError or
// ValueError raised by pybind11's py::type_error / py::value_error.
#pragma once

#include <stdexcept>
#include <string>

#include "ir/core/diag.h"

namespace kiln::python {

// Translated to kiln.Error by the module's exception translator.
class KilnError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// The diagnostics as one message, without the trailing newline.
std::string message(const Diags& d);
[[noreturn]] void raise(const Diags& d);

// The value of a Result, or kiln.Error with its diagnostics.
template <typename T> T unwrap(Result<T> r) {
  if (!r.ok()) raise(r.diags());
  return r.take();
}
inline void unwrap(const Status& s) {
  if (!s.ok()) raise(s.diags());
}

} // namespace kiln::python
