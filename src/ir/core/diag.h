// Diagnostics: every user-caused failure in kiln is a value of these types.
//
// A Diag carries a location, a severity, a message and notes. Functions that can
// fail on user input return Result<T> (a T or the diagnostics that explain why not);
// nothing in the library exits or aborts on bad input. The CLI prints diagnostics
// as `location: error: message` and exits 1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace kiln {

// Where something came from: a text position (file:line:col), or a name such as an
// ONNX node ("model.onnx: node 'x'") when there is no text. An empty Loc prints
// as "kiln" so that every message still starts with a location.
struct Loc {
  std::string file; // file path, or a free-form name when line == 0
  uint32_t line = 0;
  uint32_t col = 0;

  static Loc named(std::string name) { return Loc{std::move(name), 0, 0}; }
  bool empty() const { return file.empty(); }
  std::string str() const;
  bool operator==(const Loc&) const = default;
};

enum class Severity { Error, Warning, Note };

struct Diag {
  Severity severity = Severity::Error;
  Loc loc;
  std::string message;
  std::vector<Diag> notes;

  // "file:line:col: error: message" followed by one line per note.
  std::string str() const;
};

Diag error(Loc loc, std::string message);
Diag note(Loc loc, std::string message);

// A list of diagnostics; an operation failed when it holds at least one error.
struct Diags {
  std::vector<Diag> list;

  void add(Diag d) { list.push_back(std::move(d)); }
  void append(const Diags& other) { list.insert(list.end(), other.list.begin(), other.list.end()); }
  bool hasErrors() const;
  std::string str() const;
};

// A value or the diagnostics that explain why there is none. Constructing from a
// Diag or Diags makes a failed result.
template <typename T> class [[nodiscard]] Result {
public:
  Result(T value) : v_(std::move(value)) {}
  Result(Diag d) : v_(Diags{{std::move(d)}}) {}
  Result(Diags d) : v_(std::move(d)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& operator*() { return std::get<0>(v_); }
  const T& operator*() const { return std::get<0>(v_); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T take() { return std::move(std::get<0>(v_)); }
  const Diags& diags() const { return std::get<1>(v_); }
  Diags takeDiags() { return std::move(std::get<1>(v_)); }

private:
  std::variant<T, Diags> v_;
};

// Result for operations that produce nothing but may fail.
struct Ok {};
using Status = Result<Ok>;
inline Status ok() { return Ok{}; }

} // namespace kiln

// Propagates a failed Result out of the enclosing function:
//   KILN_TRY(auto x, parseThing(...));
#define KILN_CONCAT_(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_(a, b)
#define KILN_TRY_IMPL(tmp, decl, expr)                                                             \
  auto tmp = (expr);                                                                               \
  if (!tmp.ok()) return tmp.takeDiags();                                                           \
  decl = tmp.take()
#define KILN_TRY(decl, expr) KILN_TRY_IMPL(KILN_CONCAT(kiln_try_, __LINE__), decl, expr)
#define KILN_CHECK(expr)                                                                           \
  do {                                                                                             \
    auto kiln_check_ = (expr);                                                                     \
    if (!kiln_check_.ok()) return kiln_check_.takeDiags();                                         \
  } while (0)
