// Transport: how the processes (ranks) that run one module together talk. The executor runs
// a module over several ranks through it (runtime/dist/ranks.h, docs/distributed.md); MPI is
// the one implementation (mpi_transport.cpp, in builds with MPI).
//
// Every wait is bounded: a peer that does not answer within timeoutSeconds() makes the call
// fail with "rank R: waited T s for rank P in WHAT; that rank failed or is stuck", located
// at the Wait's loc, instead of hanging. Only abort() ends the process.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/core/diag.h"

namespace kiln::dist {

// What a wait is for, for its timeout error: `loc` (the host op, or a named place) and
// `what` ("transfer_to ref[0] -> ref[1] (step 57)").
struct Wait {
  Loc loc;
  std::string what;
};

// One message of an exchange: `bytes` bytes to or from rank `peer` under `tag`.
struct Message {
  int peer = 0;
  int tag = 0;
  void* data = nullptr; // read for a send, written for a receive
  uint64_t bytes = 0;
};

class Transport {
public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual double timeoutSeconds() const = 0;

  // The primitives. exchange posts every send and receive at once and waits for all of
  // them, so two ranks that send to each other never wait on each other. Messages between
  // two ranks under one tag arrive in the order they were sent.
  virtual Status exchange(const std::vector<Message>& sends, const std::vector<Message>& recvs,
                          const Wait& wait) = 0;
  // `bytes` of `data` from `root` to every rank (every rank passes the same count).
  virtual Status broadcast(int root, void* data, uint64_t bytes, const Wait& wait) = 0;
  // Every rank's `value`, in rank order.
  virtual Result<std::vector<uint64_t>> allGather(uint64_t value, const Wait& wait) = 0;
  // Prints `why` (each line prefixed with this rank) to stderr and ends every rank of the
  // job with exit status 1. For a failure that the other ranks cannot know about.
  [[noreturn]] virtual void abort(const Diags& why) = 0;

  Status send(int to, int tag, const void* data, uint64_t bytes, const Wait& wait);
  Status recv(int from, int tag, void* data, uint64_t bytes, const Wait& wait);
  // Every rank must pass the same `value`; else every rank gets an error naming the ranks
  // that differ from rank 0 and their values ("the module differs between ranks: ...").
  Status checkSame(uint64_t value, const Wait& wait);
  // "rank R: " for messages that must say which process wrote them.
  std::string prefix() const { return "rank " + std::to_string(rank()) + ": "; }
};

// Every rank of `participants` (distinct ranks, the same list on each) passes its own block;
// each gets every participant's block, in participant order (its own included). Blocks may
// differ in size. Ranks not in `participants` do not call it. This is the exchange a
// collective host op needs when its buffers lie on several ranks: each rank sends its local
// operands to every other participant and receives theirs.
Result<std::vector<std::vector<uint8_t>>> exchangeAll(Transport& t,
                                                      const std::vector<int>& participants,
                                                      std::vector<uint8_t> mine, int tag,
                                                      const Wait& wait);

// KILN_MPI_TIMEOUT (seconds, > 0), else 60; an error for a value that is not a number > 0.
Result<double> timeoutFromEnv();

// Whether this kiln was built with MPI.
bool haveMpi();
// Whether the process was started by an MPI launcher with more than one rank
// (OMPI_COMM_WORLD_SIZE or PMI_SIZE > 1 in the environment).
bool launchedByMpi();
// An MPI transport over a duplicate of `*comm` (a const MPI_Comm*, here untyped so that this
// header needs no mpi.h), which MPI must have been initialised for; or, when `comm` is null,
// over MPI_COMM_WORLD, initialising MPI when nobody has (then finalised at exit).
// `timeoutSeconds` <= 0: timeoutFromEnv(). In a build without MPI: an error that says so.
Result<std::shared_ptr<Transport>> openMpi(const void* comm = nullptr, double timeoutSeconds = 0);

} // namespace kiln::dist
