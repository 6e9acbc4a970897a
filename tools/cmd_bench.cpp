// `kiln bench`: times repeated calls of a loaded module (load once, run many).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "cli.h"
#include "runtime/dist/transport.h"
#include "runtime/executor.h"

namespace kiln::cli {

const char* const kBenchHelp = R"(usage: kiln bench FILE.kmod|FILE.kir|- [flags]

Loads a module once, then calls functions repeatedly and prints, per function, the
median time and the spread (min, max, and the 10th to 90th percentile range). Under
mpirun each rank runs its share of the module's devices and rank 0 prints.

  --function=NAME       function to time (repeatable; default main, else the only one)
  --input=@FILE.npy     next argument (repeatable), as for kiln run
  --input=LITERAL
  --device=KIND[N]      device to run on (default cpu[0], ref[0] in builds without LLVM)
  --donate=[@FUNC:]ARG[:RESULT]  (source models) write a result over an argument in place,
                        as for kiln compile; the same input tensors are updated call after call
  --no-attention        (source models) keep softmax(Q.K^T).V chains as they are
  --repetitions=N       timed calls per function (default 10)
  --warmup=N            untimed calls before them (default 1)
  --warmup-ms=T         then more untimed calls until T milliseconds have passed (default 0):
                        short kernels run on cold cores and caches for their first calls
  --cpu-threads=N       threads of the cpu device (default KILN_CPU_THREADS, else every core)
  --profile             time every dispatch of the timed calls and print, per function, a
                        table of kernels by total time: kernel, strategy, output shape,
                        grid, calls, total ms, % (every device; docs/cli.md)
  -h, --help            show this help
)";

namespace {

Result<int64_t> count(const ParsedArgs& a, const std::string& flag, int64_t fallback) {
  if (!a.has(flag)) return fallback;
  const std::string v = a.get(flag);
  if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
    return error(Loc::named("--" + flag), "expected a count from 0 to 999999999, got '" + v + "'");
  return std::stoll(v);
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", seconds * 1e3);
  return buf;
}

} // namespace

int runBench(const std::vector<std::string>& args) {
  static const std::vector<FlagSpec> specs = {
      {"function", true, true, ""},   {"input", true, true, ""},
      {"device", true, false, ""},    {"repetitions", true, false, ""},
      {"warmup", true, false, ""},    {"cpu-threads", true, false, ""},
      {"donate", true, true, ""},     {"no-attention", false, false, ""},
      {"warmup-ms", true, false, ""}, {"profile", false, false, ""},
  };
  auto parsed = parseArgs(args, specs, "bench");
  if (!parsed.ok()) return fail(parsed.diags());
  const ParsedArgs& a = *parsed;
  if (a.help) {
    std::cout << kBenchHelp;
    return 0;
  }
  if (a.positional.size() != 1)
    return fail(error(Loc{}, "kiln bench needs exactly one input file (or - for stdin), got " +
                                 std::to_string(a.positional.size())));
  auto reps = count(a, "repetitions", 10);
  if (!reps.ok()) return fail(reps.diags());
  auto warmup = count(a, "warmup", 1);
  if (!warmup.ok()) return fail(warmup.diags());
  auto warmupMs = count(a, "warmup-ms", 0);
  if (!warmupMs.ok()) return fail(warmupMs.diags());
  if (*reps < 1) return fail(error(Loc::named("--repetitions"), "needs at least 1"));
  if (Status t = applyCpuThreadsFlag(a); !t.ok()) return fail(t.diags());
  std::string device = defaultDeviceName();
  if (a.has("device")) {
    auto id = checkDevice(a.get("device"));
    if (!id.ok()) return fail(id.diags());
    device = id->str();
  }
  PlacementOptions placement;
  placement.devices.devices = {device};
  auto program =
      loadProgramInput(a.positional[0], placement, a.all("donate"), !a.has("no-attention"));
  if (!program.ok()) return fail(program.diags());
  std::vector<std::string> functions;
  for (const std::string& f : a.all("function")) {
    auto e = pickEntry(**program, f);
    if (!e.ok()) return fail(e.diags());
    functions.push_back(*e);
  }
  if (functions.empty()) {
    auto e = pickEntry(**program, "");
    if (!e.ok()) return fail(e.diags());
    functions.push_back(*e);
  }
  ExecutorOptions opts;
  // Under mpirun every rank runs its devices' share of each call; rank 0 reads the inputs
  // and prints the times (each call's time includes waiting for the other ranks).
  if (dist::launchedByMpi()) {
    auto transport = dist::openMpi(nullptr, 0);
    if (!transport.ok()) return fail(transport.diags());
    opts.transport = *transport;
  }
  auto failRank = [&](const Diags& d) {
    if (opts.transport && opts.transport->size() > 1) opts.transport->abort(d);
    return fail(d);
  };
  bool rank0 = !opts.transport || opts.transport->rank() == 0;
  Result<std::vector<HostTensor>> inputs = std::vector<HostTensor>{};
  if (rank0) inputs = loadInputTensors(a.all("input"));
  if (!inputs.ok()) return failRank(inputs.diags());
  if (a.has("device") && isModuleFile(a.positional[0]))
    opts.device = *hal::parseDeviceId(device, Loc::named("--device"));
  auto executor = Executor::create(*program, opts);
  if (!executor.ok()) return failRank(executor.diags());

  for (const std::string& f : functions) {
    auto warmStart = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < *warmup || std::chrono::steady_clock::now() - warmStart <
                                           std::chrono::milliseconds(*warmupMs);
         ++i) {
      auto r = (*executor)->call(f, *inputs);
      if (!r.ok()) return failRank(r.diags());
    }
    if (a.has("profile"))
      if (Status p = (*executor)->enableProfile(true); !p.ok()) return failRank(p.diags());
    std::vector<double> times;
    for (int64_t i = 0; i < *reps; ++i) {
      auto start = std::chrono::steady_clock::now();
      auto r = (*executor)->call(f, *inputs);
      auto end = std::chrono::steady_clock::now();
      if (!r.ok()) return failRank(r.diags());
      times.push_back(std::chrono::duration<double>(end - start).count());
    }
    if (!rank0) continue;
    std::sort(times.begin(), times.end());
    auto at = [&](double q) { return times[static_cast<size_t>(q * (times.size() - 1) + 0.5)]; };
    std::cout << "@" << f << ": median " << ms(at(0.5)) << ", min " << ms(times.front()) << ", max "
              << ms(times.back()) << ", p10-p90 " << ms(at(0.1)) << " - " << ms(at(0.9)) << " ("
              << *reps << " repetitions, " << *warmup << " warmup, "
              << (*executor)->lastStats().dispatches << " dispatches, peak device memory "
              << (*executor)->lastStats().peakBytes << " bytes"
              << ((*executor)->lastStats().collectiveBytes
                      ? ", " + std::to_string((*executor)->lastStats().collectiveBytes) +
                            " bytes into collectives per call"
                      : std::string())
              << (opts.transport ? ", " + std::to_string(opts.transport->size()) + " MPI ranks"
                                 : std::string())
              << ")\n";
    if (a.has("profile")) {
      std::cout << formatProfile((*executor)->profile().rows(), (*executor)->profiledCalls());
      (void)(*executor)->enableProfile(false);
    }
  }
  return 0;
}

} // namespace kiln::cli
