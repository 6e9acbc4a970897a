// SharedObject: memfd_create + write + dlopen("/proc/self/fd/N"), or a temporary file when
// memfd is unavailable (old kernels, seccomp). The file stays while the object is loaded:
// glibc treats a dlopen of a path it already has loaded as the same library, so a reused
// name ("/proc/self/fd/5" again) would return the previous code.
#include "runtime/cpu/shared_object.h"

#include <dlfcn.h>
#include <elf.h>
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

// The image's ELF structure, checked before the dynamic loader sees it: a 64-bit
// little-endian x86-64 shared object whose program headers and segments lie inside it.
// (A module's sections are checksummed; this keeps a damaged image that still carries a
// valid checksum from reaching ld.so with offsets pointing outside the file.)
bool plausibleElf(const std::string& image) {
  if (image.size() < sizeof(Elf64_Ehdr) || std::memcmp(image.data(), ELFMAG, SELFMAG) != 0)
    return false;
  Elf64_Ehdr eh;
  std::memcpy(&eh, image.data(), sizeof eh);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
      eh.e_type != ET_DYN || eh.e_machine != EM_X86_64 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
      eh.e_phnum == 0 || eh.e_phoff > image.size() ||
      uint64_t(eh.e_phnum) * sizeof(Elf64_Phdr) > image.size() - eh.e_phoff)
    return false;
  for (uint16_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, image.data() + eh.e_phoff + i * sizeof(Elf64_Phdr), sizeof ph);
    if (ph.p_offset > image.size() || ph.p_filesz > image.size() - ph.p_offset ||
        ph.p_filesz > ph.p_memsz)
      return false;
  }
  return true;
}

} // namespace

Result<std::unique_ptr<SharedObject>> SharedObject::load(const std::string& image,
                                                         const Loc& where) {
  if (!plausibleElf(image))
    return error(where, "the executable's code is not an x86-64 ELF shared object");
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
