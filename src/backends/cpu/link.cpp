// linkSharedObject: lld (Debian's liblld-19) in-process, through files in a private
// temporary directory that is removed afterwards. lld is not re-entrant; one link runs at
// a time.
#include <lld/Common/Driver.h>
#include <llvm/Support/raw_ostream.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unistd.h>

#include "backends/cpu/cpu_backend.h"

LLD_HAS_DRIVER(elf)

namespace kiln::cpu {

namespace {

Status writeFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) return error(Loc::named(path), "cannot write the CPU backend's temporary file");
  return ok();
}

struct TempDir {
  std::string path;
  ~TempDir() {
    if (path.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

} // namespace

Result<std::string> linkSharedObject(const std::vector<std::string>& objects) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::string base = (std::filesystem::temp_directory_path() / "kiln-link-XXXXXX").string();
  TempDir dir;
  if (!mkdtemp(base.data()))
    return error(Loc::named("<cpu backend>"), "cannot create a temporary directory for linking");
  dir.path = base;
  std::string out = dir.path + "/kernels.so";
  std::vector<std::string> paths;
  for (size_t i = 0; i < objects.size(); ++i) {
    paths.push_back(dir.path + "/kernel" + std::to_string(i) + ".o");
    KILN_CHECK(writeFile(paths.back(), objects[i]));
  }
  std::vector<const char*> args = {
      "ld.lld",           "-shared", "--eh-frame-hdr",  "-z", "noexecstack", "-z", "now",
      "--hash-style=gnu", "-soname", "kiln-kernels.so", "-o", out.c_str()};
  for (const std::string& p : paths) args.push_back(p.c_str());
#ifdef KILN_CLANG_RT_BUILTINS
  if (std::filesystem::exists(KILN_CLANG_RT_BUILTINS)) args.push_back(KILN_CLANG_RT_BUILTINS);
#endif
  std::string diag;
  llvm::raw_string_ostream os(diag), es(diag);
  lld::Result r = lld::lldMain(args, os, es, {{lld::Gnu, &lld::elf::link}});
  if (r.retCode != 0)
    return error(Loc::named("<cpu backend>"), "lld failed to link the kernels: " + os.str());
  std::ifstream in(out, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in) return error(Loc::named("<cpu backend>"), "cannot read the linked shared object");
  return ss.str();
}

} // namespace kiln::cpu
