// kiln-gpu-compile-fuzz: compiles random programs for every GPU architecture of the LLVM
// backends, each compile in a child process, and fails on any child that does not end
// cleanly: a crash, an abort (an LLVM fatal error or assertion that escaped kiln's recovery),
// an exit code other than 0, a hang (60 s), or an error returned for a valid program (a
// kernel the backend cannot emit).
//
//   kiln-gpu-compile-fuzz [--seeds=N] [--first=S] [--ops=K] [--symbolic]
//                         [--targets=amdgpu:gfx90a,...]
//
// Programs come from graphgen (tests/fuzz/graphgen.h), seeds S .. S+N-1; each is lowered by
// the codegen pipeline for the target and its lowered kernels compiled to a code object or
// PTX (LlvmGpuBackend::compile, which reads the AMDGPU metadata back). Prints one line per
// failure (seed, target, why) and a summary; exits 1 when any failed.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/llvm/gpu_compile.h"
#include "graphgen.h"
#include "passes/codegen.h"
#include "passes/pass_manager.h"

using namespace kiln;

namespace {

std::string arg(int argc, char** argv, const std::string& name, const std::string& def) {
  std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind(prefix, 0) == 0) return argv[i] + prefix.size();
  return def;
}

bool flag(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--" + name) return true;
  return false;
}

// The child: 0 when the program compiled, 1 (with the error on stderr) otherwise.
int compileOne(uint64_t seed, int ops, bool symbolic, const std::string& target) {
  graphgen::Options o;
  o.seed = seed;
  o.numOps = ops;
  o.symbolic = symbolic;
  auto p = graphgen::generate(o);
  if (!p.ok()) {
    std::cerr << p.diags().str();
    return 1;
  }
  Module& m = *p->module;
  PassManager pm;
  Status s = pm.addPipeline("shape-infer,codegen{target=" + target + "}");
  std::ostringstream sink;
  if (s.ok()) s = pm.run(m, sink);
  if (!s.ok()) {
    std::cerr << s.diags().str();
    return 1;
  }
  std::vector<const Func*> kernels;
  for (const auto& f : m.funcs())
    if (isLoweredKernel(*f)) kernels.push_back(f.get());
  const TargetBackend* b = lookupTargetBackend(target.rfind("cuda:", 0) == 0 ? "cuda" : "amdgpu");
  if (!b) {
    std::cerr << "no backend for " << target << "\n";
    return 1;
  }
  llvmgen::GpuCompileOptions co;
  co.jobs = 1;
  auto img = dynamic_cast<const llvmgen::LlvmGpuBackend&>(*b).compile(m, kernels, target, co);
  if (!img.ok()) {
    std::cerr << img.diags().str();
    return 1;
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  uint64_t first = std::stoull(arg(argc, argv, "first", "1"));
  uint64_t seeds = std::stoull(arg(argc, argv, "seeds", "20"));
  int ops = std::stoi(arg(argc, argv, "ops", "12"));
  bool symbolic = flag(argc, argv, "symbolic");
  std::vector<std::string> targets;
  std::stringstream list(
      arg(argc, argv, "targets", "amdgpu:gfx90a,amdgpu:gfx942,amdgpu:gfx1100,cuda:sm_90"));
  for (std::string t; std::getline(list, t, ',');) targets.push_back(t);
  int failed = 0, runs = 0;
  for (uint64_t seed = first; seed < first + seeds; ++seed)
    for (const std::string& t : targets) {
      ++runs;
      int pipe[2];
      if (::pipe(pipe) != 0) return 2;
      std::fflush(nullptr);
      pid_t pid = fork();
      if (pid < 0) return 2;
      if (pid == 0) {
        ::close(pipe[0]);
        dup2(pipe[1], 2);
        alarm(60);
        std::_Exit(compileOne(seed, ops, symbolic, t));
      }
      ::close(pipe[1]);
      std::string err;
      char buf[4096];
      for (ssize_t n; (n = read(pipe[0], buf, sizeof buf)) > 0;) err.append(buf, size_t(n));
      ::close(pipe[0]);
      int status = 0;
      waitpid(pid, &status, 0);
      std::string why;
      if (WIFSIGNALED(status))
        why = std::string("killed by signal ") + std::to_string(WTERMSIG(status)) +
              (WTERMSIG(status) == SIGALRM ? " (over 60 s)" : "");
      else if (WEXITSTATUS(status) != 0)
        why = "exit " + std::to_string(WEXITSTATUS(status));
      if (why.empty()) continue;
      ++failed;
      std::cout << "FAIL seed " << seed << (symbolic ? " (symbolic)" : "") << " " << t << ": "
                << why << "\n"
                << err.substr(0, 2000) << "\n";
    }
  std::cout << runs - failed << " of " << runs << " compiles ended cleanly (" << seeds
            << " programs" << (symbolic ? ", symbolic" : "") << ", " << targets.size()
            << " GPU targets)\n";
  return failed ? 1 : 0;
}
