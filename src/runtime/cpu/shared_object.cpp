// SharedObject: memfd_create + write + dlopen("/proc/self/fd/N"), or a temporary file when
// memfd is unavailable (old kernels, seccomp). The file stays while the object is loaded:
// glibc treats a dlopen of a path it already has loaded as the same library, so a reused
// name ("/proc/self/fd/5" again) would return the previous code.
#include "runtime/cpu/shared_object.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace kiln::hal::cpu {

namespace {

bool writeAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// dlerror's state is per thread, but dlopen/dlsym + dlerror pairs must not interleave with
// another thread's on the same thread; a lock keeps the messages paired with their calls.
std::mutex& dlMutex() {
  static std::mutex mu;
  return mu;
}

std::string dlMessage() {
  const char* e = dlerror();
  return e ? e : "unknown dynamic loader error";
}

} // namespace

Result<std::unique_ptr<SharedObject>> SharedObject::load(const std::string& image,
                                                         const Loc& where) {
  if (image.size() < 4 || std::memcmp(image.data(),
                                      "\x7f"
                                      "ELF",
                                      4) != 0)
    return error(where, "the executable's code is not an ELF shared object");
  std::string path;
  int fd = memfd_create("kiln-cpu-code", MFD_CLOEXEC);
  if (fd >= 0) {
    path = "/proc/self/fd/" + std::to_string(fd);
  } else {
    const char* tmp = std::getenv("TMPDIR");
    std::string name = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-cpu-XXXXXX";
    fd = mkstemp(name.data());
    if (fd < 0)
      return error(where, std::string("cannot create a file for the executable's code: ") +
                              std::strerror(errno));
    path = name;
  }
  bool written = writeAll(fd, image);
  int writeErrno = errno;
  void* handle = nullptr;
  std::string why;
  if (written) {
    std::lock_guard<std::mutex> lock(dlMutex());
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) why = dlMessage();
  }
  bool memfd = path.rfind("/proc/self/fd/", 0) == 0;
  if (!memfd || !handle) {
    ::close(fd);
    fd = -1;
  }
  if (!memfd && !handle) ::unlink(path.c_str());
  if (!written)
    return error(where,
                 std::string("cannot write the executable's code: ") + std::strerror(writeErrno));
  if (!handle) return error(where, "cannot load the executable's code: " + why);
  return std::unique_ptr<SharedObject>(new SharedObject(handle, fd, memfd ? "" : path));
}

SharedObject::~SharedObject() {
  std::lock_guard<std::mutex> lock(dlMutex());
  dlclose(handle_);
  if (fd_ >= 0) ::close(fd_);
  if (!tempFile_.empty()) ::unlink(tempFile_.c_str());
}

Result<void*> SharedObject::symbol(const std::string& name, const Loc& where) const {
  std::lock_guard<std::mutex> lock(dlMutex());
  dlerror();
  void* p = dlsym(handle_, name.c_str());
  if (!p)
    return error(where, "the executable's code has no entry point '" + name + "': " + dlMessage());
  return p;
}

} // namespace kiln::hal::cpu
