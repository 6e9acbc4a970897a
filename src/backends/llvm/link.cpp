// linkWithLld: lld (Debian's liblld-19) in-process, through files in a private temporary
// directory that is removed afterwards. lld is not re-entrant; one link runs at a time. The
// cpu backend links x86-64 shared objects with it, the amdgpu backend HSA code objects.
#include <lld/Common/Driver.h>
#include <llvm/Support/raw_ostream.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unistd.h>

#include "backends/llvm/machine.h"

LLD_HAS_DRIVER(elf)

namespace kiln::llvmgen {

namespace {

Status writeFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) return error(Loc::named(path), "cannot write a temporary file for linking");
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

Result<std::string> linkWithLld(const std::vector<std::string>& objects,
                                const std::vector<std::string>& flags,
                                const std::vector<std::string>& libraries,
                                const std::string& what) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::string base = (std::filesystem::temp_directory_path() / "kiln-link-XXXXXX").string();
  TempDir dir;
  if (!mkdtemp(base.data()))
    return error(Loc::named(what), "cannot create a temporary directory for linking");
  dir.path = base;
  std::string out = dir.path + "/linked";
  std::vector<std::string> paths;
  for (size_t i = 0; i < objects.size(); ++i) {
    paths.push_back(dir.path + "/kernel" + std::to_string(i) + ".o");
    KILN_CHECK(writeFile(paths.back(), objects[i]));
  }
  std::vector<const char*> args = {"ld.lld"};
  for (const std::string& f : flags) args.push_back(f.c_str());
  args.push_back("-o");
  args.push_back(out.c_str());
  for (const std::string& p : paths) args.push_back(p.c_str());
  for (const std::string& l : libraries) args.push_back(l.c_str());
  std::string diag;
  llvm::raw_string_ostream os(diag), es(diag);
  lld::Result r = lld::lldMain(args, os, es, {{lld::Gnu, &lld::elf::link}});
  if (r.retCode != 0) return error(Loc::named(what), "lld failed to link the kernels: " + os.str());
  std::ifstream in(out, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in) return error(Loc::named(what), "cannot read the linked code");
  return ss.str();
}

} // namespace kiln::llvmgen
