// Ranks: what the executor needs to run one module over the ranks of a Transport, one
// process per group of devices (docs/distributed.md, "Running under MPI").
//
// The module's devices (Program::devices, in order of first use) are split into size()
// contiguous equal groups: rank r owns devices [r*D/N, (r+1)*D/N). Each rank opens only its
// own devices and runs only the steps on them; the executor asks owner()/isLocal() for each
// step and crosses ranks with the exchanges below:
//
//   start      checkModule: every rank must run the same module (its hash), else an error
//   each call  shareInputs: rank 0's inputs (element types, shapes, bytes) to every rank
//   transfer_to from another rank's device: sendBuffer on the source's rank (after flushing
//              that device), recvBuffer on the destination's, tagged with the step index
//   return     the results not on rank 0 are sent to rank 0, which returns them all; the
//              other ranks return no results
//   collective (a host op over N device buffers on several ranks): gatherBlocks sends a
//              rank's local blocks to every other participant and receives theirs
//              (exchangeAll in runtime/dist/transport.h); Executor::runsHere must say that
//              it runs on every participant
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ir/core/host_tensor.h"
#include "runtime/dist/transport.h"
#include "runtime/hal.h"
#include "runtime/program.h"

namespace kiln::dist {

class Ranks {
public:
  // An error when the module's devices do not split evenly over the ranks.
  static Result<std::unique_ptr<Ranks>> create(std::shared_ptr<Transport> transport,
                                               const Program& program);

  Transport& transport() { return *transport_; }
  int rank() const { return transport_->rank(); }
  // The rank that runs `device`; devices the module does not list run on rank 0.
  int owner(const hal::DeviceId& device) const;
  bool isLocal(const hal::DeviceId& device) const { return owner(device) == rank(); }
  // The ranks that own at least one of `devices`, ascending.
  std::vector<int> participants(const std::vector<hal::DeviceId>& devices) const;

  // Every rank checks that it runs the same module as the others.
  Status checkModule(const Program& program);
  // Rank 0's `inputs` to every rank: on rank 0 they are left as they are, on the others
  // they are replaced by rank 0's.
  Status shareInputs(std::vector<HostTensor>& inputs, const Loc& loc);
  // The whole of `buffer` to or from rank `peer`.
  Status sendBuffer(hal::Buffer& buffer, int to, int tag, const Wait& wait);
  Status recvBuffer(hal::Buffer& buffer, int from, int tag, const Wait& wait);

  // For a collective host op over buffers on `devices` (block i lies on devices[i]): this
  // rank passes the blocks of its own devices in `local` (the others' entries empty) and
  // gets every block. Every rank that owns one of `devices` calls it (participants()), the
  // others do not. Built on exchangeAll.
  Result<std::vector<std::vector<uint8_t>>> gatherBlocks(const std::vector<hal::DeviceId>& devices,
                                                         std::vector<std::vector<uint8_t>> local,
                                                         int tag, const Wait& wait);

  // A tag for step `step` of a host function (MPI tags are only guaranteed up to 32767;
  // messages between two ranks keep their order, so a tag that wraps still matches).
  static int tagOf(size_t step) { return static_cast<int>(step % 32000); }

  // For the failure tests: KILN_TEST_KILL_RANK=R and KILN_TEST_KILL_STEP=S (default 0) make
  // rank R kill itself with SIGKILL before step S of a call.
  void maybeKillAt(size_t step) const;

private:
  std::shared_ptr<Transport> transport_;
  std::vector<hal::DeviceId> devices_; // Program::devices
  int killStep_ = -1;
};

} // namespace kiln::dist
