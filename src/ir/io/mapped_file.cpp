// mapFile: open, check, mmap, close; the mapping outlives the descriptor.
#include "ir/io/mapped_file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kiln {

Result<MappedFile> mapFile(const std::string& path) {
  Loc loc = Loc::named(path);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error(loc, std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return error(loc, "not a regular file");
  }
  MappedFile file;
  file.size = static_cast<uint64_t>(st.st_size);
  if (file.size == 0) {
    ::close(fd);
    return file;
  }
  void* base = ::mmap(nullptr, file.size, PROT_READ, MAP_PRIVATE, fd, 0);
  int mapErrno = errno;
  ::close(fd);
  if (base == MAP_FAILED) return error(loc, std::string("cannot map: ") + std::strerror(mapErrno));
  uint64_t size = file.size;
  file.mapping = std::shared_ptr<const void>(
      base, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  file.data = static_cast<const uint8_t*>(base);
  return file;
}

} // namespace kiln
