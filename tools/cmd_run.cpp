// `kiln run`: run one function of a module on a device, with inputs from .npy files or
// literals, writing or printing its results. A .kmod runs as it is; a .kir (or stdin) is
// compiled in memory first, so both go through the same executor. Under mpirun each process
// (rank) runs its share of the module's devices (docs/distributed.md).
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli.h"
#include "runtime/dist/transport.h"
#include "runtime/executor.h"

namespace kiln::cli {

const char* const kRunHelp = R"(usage: kiln run FILE.kmod|FILE.kir|MODEL.onnx|- [flags]

Runs one function of a module and prints or writes its results. A .kir file (or stdin)
is compiled in memory first; a .kmod file runs as compiled.

  --device=KIND[N]      device to run on (default cpu[0], ref[0] in builds without LLVM;
                        for a .kmod, the device it was
                        compiled for; see kiln devices). For a source model it is
                        repeatable, as in kiln compile: the devices to place it on
  --devices=auto        (source models) declare every device the program references
  --place=PATTERN=DEV   (source models) pin matching ops to DEV (repeatable)
  --partition=SPEC      (source models) pipeline:P, tensor:T or pipeline:P,tensor:T
                        (docs/devices.md, docs/distributed.md)
  --shard=PATTERN=SHARDING  (source models) with tensor:T, pin the results' sharding:
                        `replicated` or `split:D` (repeatable)
  --function=NAME       function to run (default: main, else the only function)
  --donate=[@FUNC:]ARG[:RESULT]  (source models) write result RESULT over argument ARG
                        (a name or index) in place; RESULT defaults to the one result of
                        ARG's type (repeatable; docs/donation.md)
  --no-attention        (source models) keep softmax(Q.K^T).V chains as they are, as for
                        kiln compile
  --input=@FILE.npy     next argument from a .npy file (repeatable, in argument order)
  --input=LITERAL       next argument from a literal: 2x3xf32=1 2 3 4 5 6, f32=7,
                        4xi64=0 (one value fills all), nan/inf/-inf, true/false for i1
  --output=@FILE.npy    write the next result to FILE.npy (repeatable, in result order)
  --output-dir=DIR      write result i to DIR/i.npy (DIR is created if missing)
  --cpu-threads=N       threads of the cpu device (default KILN_CPU_THREADS, else every core)
  --profile             time every dispatch and print a table of kernels by time after the
                        results (as kiln bench --profile)
  --mpi                 run over the ranks of an MPI job, each rank on its share of the
                        module's devices (docs/distributed.md); implied when mpirun started
                        more than one process (OMPI_COMM_WORLD_SIZE or PMI_SIZE > 1).
                        Rank 0 reads the inputs and alone writes or prints the results
  --mpi-timeout=SECONDS how long a rank waits for another before it fails (default
                        KILN_MPI_TIMEOUT, else 60)
  -h, --help            show this help

Without --output or --output-dir each result is printed as `result[i]: tensor<...> [...]`.
)";

int runRun(const std::vector<std::string>& args) {
  static const std::vector<FlagSpec> specs = withPlacementFlags({
      {"function", true, false, ""},
      {"donate", true, true, ""},
      {"no-attention", false, false, ""},
      {"input", true, true, ""},
      {"output", true, true, ""},
      {"output-dir", true, false, ""},
      {"cpu-threads", true, false, ""},
      {"profile", false, false, ""},
      {"mpi", false, false, ""},
      {"mpi-timeout", true, false, ""},
  });
  auto parsed = parseArgs(args, specs, "run");
  if (!parsed.ok()) return fail(parsed.diags());
  const ParsedArgs& a = *parsed;
  if (a.help) {
    std::cout << kRunHelp;
    return 0;
  }
  if (a.positional.size() != 1)
    return fail(error(Loc{}, "kiln run needs exactly one input file (or - for stdin), got " +
                                 std::to_string(a.positional.size())));
  if (Status t = applyCpuThreadsFlag(a); !t.ok()) return fail(t.diags());
  auto placement = placementFlags(*parsed);
  if (!placement.ok()) return fail(placement.diags());
  const std::vector<std::string>& devices = placement->devices.devices;
  bool kmod = isModuleFile(a.positional[0]);
  if (kmod && (devices.size() > 1 || placement->devices.autoDeclare || !placement->place.empty() ||
               placement->stages || placement->tensor > 1 || !placement->shard.empty()))
    return fail(error(Loc::named(a.positional[0]),
                      "a .kmod runs as it was compiled; --devices, --place, --partition and "
                      "more than one --device apply to source models"));
  std::string device = defaultDeviceName();
  if (devices.size() == 1) {
    auto id = checkDevice(devices[0]);
    if (!id.ok()) return fail(id.diags());
    device = id->str();
  }
  if (a.has("output") && a.has("output-dir"))
    return fail(error(Loc{}, "--output and --output-dir cannot be combined"));
  for (const std::string& o : a.all("output"))
    if (!o.starts_with("@") || o.size() < 2)
      return fail(error(Loc::named("--output"), "expected @FILE.npy, got '" + o + "'"));

  // A source model's entry must take as many inputs as were given; checked before the
  // compile, which can take seconds.
  size_t given = a.all("input").size();
  auto checkArity = [&](const Module& m) -> Status {
    std::vector<std::string> names;
    for (const auto& f : m.funcs()) names.push_back(f->name());
    // A module that already holds kernel functions has fewer entries than functions: no
    // choice here leaves the choice (and its error) to the compiled program's entries.
    auto name = pickEntry(names, a.get("function"));
    if (!name.ok()) return ok();
    const Func* f = m.lookupFunc(*name);
    if (f->numArgs() != given)
      return error(f->loc(), "@" + f->name() + " takes " + std::to_string(f->numArgs()) +
                                 " inputs, got " + std::to_string(given));
    return ok();
  };
  auto program = loadProgramInput(a.positional[0], *placement, a.all("donate"),
                                  !a.has("no-attention"), checkArity);
  if (!program.ok()) return fail(program.diags());
  auto entry = pickEntry(**program, a.get("function"));
  if (!entry.ok()) return fail(entry.diags());
  const Func& f = *(*program)->entry(*entry);
  size_t numResults = f.resultTypes().size();
  if (a.has("output") && a.all("output").size() != numResults)
    return fail(error(Loc::named("--output"),
                      "@" + f.name() + " returns " + std::to_string(numResults) +
                          (numResults == 1 ? " result but " : " results but ") +
                          std::to_string(a.all("output").size()) + " --output files were given"));

  ExecutorOptions execOpts;
  if (a.has("mpi") || a.has("mpi-timeout") || dist::launchedByMpi()) {
    double timeout = 0;
    if (a.has("mpi-timeout")) {
      char* end = nullptr;
      timeout = std::strtod(a.get("mpi-timeout").c_str(), &end);
      if (*end || !(timeout > 0) || timeout > 1e9)
        return fail(error(Loc::named("--mpi-timeout"), "expected a number of seconds greater "
                                                       "than 0, got '" +
                                                           a.get("mpi-timeout") + "'"));
    }
    auto transport = dist::openMpi(nullptr, timeout);
    if (!transport.ok()) return fail(transport.diags());
    execOpts.transport = *transport;
  }
  // From here on a failure may be this rank's alone: it ends every rank, so none waits for it.
  auto failRank = [&](const Diags& d) {
    if (execOpts.transport && execOpts.transport->size() > 1) execOpts.transport->abort(d);
    return fail(d);
  };
  bool rank0 = !execOpts.transport || execOpts.transport->rank() == 0;
  Result<std::vector<HostTensor>> inputs = std::vector<HostTensor>{}; // rank 0's alone
  if (rank0) inputs = loadInputTensors(a.all("input"));
  if (!inputs.ok()) return failRank(inputs.diags());

  if (devices.size() == 1 && kmod)
    execOpts.device = *hal::parseDeviceId(device, Loc::named("--device"));
  auto executor = Executor::create(*program, execOpts);
  if (!executor.ok()) return failRank(executor.diags());
  if (a.has("profile"))
    if (Status p = (*executor)->enableProfile(true); !p.ok()) return failRank(p.diags());
  auto results = (*executor)->call(*entry, *inputs);
  if (!results.ok()) return failRank(results.diags());
  if (!rank0) return 0;

  if (a.has("output")) {
    for (size_t i = 0; i < results->size(); ++i)
      if (Status s = writeNpy(a.all("output")[i].substr(1), (*results)[i]); !s.ok())
        return fail(s.diags());
  } else if (a.has("output-dir")) {
    std::filesystem::path dir(a.get("output-dir"));
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
      return fail(error(Loc::named(dir.string()), "cannot create directory: " + ec.message()));
    for (size_t i = 0; i < results->size(); ++i)
      if (Status s = writeNpy((dir / (std::to_string(i) + ".npy")).string(), (*results)[i]);
          !s.ok())
        return fail(s.diags());
  } else {
    for (size_t i = 0; i < results->size(); ++i)
      std::cout << "result[" << i << "]: " << formatTensor((*results)[i]) << "\n";
  }
  if (a.has("profile"))
    std::cout << formatProfile((*executor)->profile().rows(), (*executor)->profiledCalls());
  return 0;
}

} // namespace kiln::cli
