// kiln-mpi-transport SCENARIO: the MPI transport (runtime/dist) under mpirun, one scenario a
// run; tests/lit/mpi/transport.kir runs each with 2 and 4 ranks and checks what they print.
//
//   basic     send/recv around the ring, broadcast, checkSame of equal values, exchangeAll
//             over every rank and over ranks 0 and the last (blocks of different sizes),
//             Ranks::gatherBlocks over 4 devices, device ownership
//   mismatch  checkSame where rank 1 differs: every rank gets the error naming it
//   timeout   rank 0 waits for a message rank 1 never sends (run with KILN_MPI_TIMEOUT=1)
//   idle      opens the transport, then does nothing for 60 s: a stuck rank beside kiln run
//
// Each rank prints "rank R: ..." lines; a failed expectation prints "rank R: FAILED ..." and
// exits 1.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>

#include "runtime/dist/ranks.h"
#include "runtime/dist/transport.h"

using namespace kiln;
using namespace kiln::dist;

namespace {

int rankOf = -1;

[[noreturn]] void failed(const std::string& what) {
  std::printf("rank %d: FAILED %s\n", rankOf, what.c_str());
  std::fflush(stdout);
  std::exit(1);
}

void expect(bool cond, const std::string& what) {
  if (!cond) failed(what);
}

void expectOk(const Status& s, const std::string& what) {
  if (!s.ok()) failed(what + ": " + s.diags().str());
}

// A block whose bytes say whose it is: n bytes of (seed + i).
std::vector<uint8_t> block(int seed, size_t n) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + static_cast<int>(i));
  return b;
}

int basic(Transport& t) {
  int r = t.rank(), n = t.size();
  Wait wait{Loc::named("test"), "basic"};
  // Around the ring: each sends to the next, receives from the previous.
  std::vector<uint8_t> out = block(r, 1000), in(1000);
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  expectOk(t.exchange({{next, 5, out.data(), out.size()}}, {{prev, 5, in.data(), in.size()}}, wait),
           "ring");
  expect(in == block(prev, 1000), "ring: the block of rank " + std::to_string(prev));
  // send and recv, rank 0 to the last rank.
  if (r == 0) expectOk(t.send(n - 1, 6, out.data(), out.size(), wait), "send");
  if (r == n - 1) {
    expectOk(t.recv(0, 6, in.data(), in.size(), wait), "recv");
    expect(in == block(0, 1000), "recv: rank 0's block");
  }
  // Broadcast from the last rank.
  uint64_t v = r == n - 1 ? 0x1234567890ull : 0;
  expectOk(t.broadcast(n - 1, &v, sizeof v, wait), "broadcast");
  expect(v == 0x1234567890ull, "broadcast value");
  expectOk(t.checkSame(42, wait), "checkSame of equal values");
  std::printf("rank %d: point-to-point, broadcast and checkSame ok\n", r);

  // exchangeAll over every rank, blocks of different sizes (rank r: 10 * r + 1 bytes).
  std::vector<int> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  auto blocks = exchangeAll(t, all, block(100 + r, 10 * static_cast<size_t>(r) + 1), 7, wait);
  expectOk(blocks.ok() ? ok() : Status(blocks.diags()), "exchangeAll");
  for (int p = 0; p < n; ++p)
    expect((*blocks)[static_cast<size_t>(p)] == block(100 + p, 10 * static_cast<size_t>(p) + 1),
           "exchangeAll: the block of rank " + std::to_string(p));
  // Over ranks 0 and the last only, the last one first.
  if (r == 0 || r == n - 1) {
    auto two = exchangeAll(t, {n - 1, 0}, block(200 + r, 3), 8, wait);
    expectOk(two.ok() ? ok() : Status(two.diags()), "exchangeAll of two ranks");
    expect(two->size() == 2 && (*two)[0] == block(200 + n - 1, 3) && (*two)[1] == block(200, 3),
           "exchangeAll of two ranks: participant order");
  }
  std::printf("rank %d: exchangeAll ok\n", r);

  // Ranks over a module of 4 devices: ownership, and the blocks of a collective.
  Program program;
  program.devices = {"ref[0]", "ref[1]", "ref[2]", "ref[3]"};
  auto ranks = Ranks::create(std::shared_ptr<Transport>(&t, [](Transport*) {}), program);
  expectOk(ranks.ok() ? ok() : Status(ranks.diags()), "Ranks::create");
  std::vector<hal::DeviceId> devices;
  for (int d = 0; d < 4; ++d) devices.push_back(DeviceTarget{"ref", d});
  std::string owners;
  for (const hal::DeviceId& d : devices) owners += " " + std::to_string((*ranks)->owner(d));
  std::vector<std::vector<uint8_t>> local(4);
  for (size_t d = 0; d < 4; ++d)
    if ((*ranks)->isLocal(devices[d])) local[d] = block(static_cast<int>(50 + d), 4 + d);
  auto gathered = (*ranks)->gatherBlocks(devices, local, 9, wait);
  expectOk(gathered.ok() ? ok() : Status(gathered.diags()), "gatherBlocks");
  for (size_t d = 0; d < 4; ++d)
    expect((*gathered)[d] == block(static_cast<int>(50 + d), 4 + d),
           "gatherBlocks: block " + std::to_string(d));
  std::printf("rank %d: devices owned by ranks%s; gatherBlocks ok\n", r, owners.c_str());
  return 0;
}

int mismatch(Transport& t) {
  Status s = t.checkSame(t.rank() == 1 ? 7 : 5, Wait{Loc::named("test"), "the value"});
  expect(!s.ok(), "checkSame accepted different values");
  std::printf("rank %d: %s", t.rank(), s.diags().str().c_str());
  return 0;
}

int timeout(Transport& t) {
  if (t.rank() != 0) return 0; // never sends
  uint64_t v = 0;
  Status s = t.recv(1, 3, &v, sizeof v, Wait{Loc::named("test"), "a message from rank 1"});
  expect(!s.ok(), "a receive that nobody sends completed");
  std::printf("%s", s.diags().str().c_str());
  // The transport refuses more work once a wait timed out.
  Status again = t.send(1, 3, &v, sizeof v, Wait{Loc::named("test"), "another message"});
  expect(!again.ok(), "the transport was used after a timeout");
  std::printf("%s", again.diags().str().c_str());
  return 0;
}

// Stands for a stuck rank: the other ranks must give up on it and end the job.
int idle() {
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  std::string scenario = argc == 2 ? argv[1] : "";
  auto t = openMpi();
  if (!t.ok()) {
    std::fputs(t.diags().str().c_str(), stderr);
    return 1;
  }
  rankOf = (*t)->rank();
  if ((*t)->size() < 2) failed("run with at least 2 ranks");
  int rc = scenario == "basic"      ? basic(**t)
           : scenario == "mismatch" ? mismatch(**t)
           : scenario == "timeout"  ? timeout(**t)
           : scenario == "idle"     ? idle()
                                    : (failed("unknown scenario '" + scenario + "'"), 1);
  std::fflush(stdout);
  return rc;
}
