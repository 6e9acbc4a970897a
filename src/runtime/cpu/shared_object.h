// A shared object loaded from memory without LLVM: the image is written to a memfd (or, where
// memfd_create fails, an unlinked temporary file) and dlopen'ed with RTLD_NOW | RTLD_LOCAL.
// dlclose runs when the SharedObject dies.
#pragma once

#include <memory>
#include <string>

#include "ir/core/diag.h"

namespace kiln::hal::cpu {

class SharedObject {
public:
  // Errors (not an ELF image, dlopen failure with dlerror's text) are located at `where`.
  static Result<std::unique_ptr<SharedObject>> load(const std::string& image, const Loc& where);
  ~SharedObject();
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;

  // The address of an exported symbol; a missing one is an error with dlerror's text.
  Result<void*> symbol(const std::string& name, const Loc& where) const;

private:
  SharedObject(void* handle, int fd, std::string tempFile)
      : handle_(handle), fd_(fd), tempFile_(std::move(tempFile)) {}
  void* handle_;
  // The file stays while loaded (see shared_object.cpp): the memfd open, or the temporary
  // file linked.
  int fd_;
  std::string tempFile_;
};

} // namespace kiln::hal::cpu
