// The MPI transport (builds with MPI only; no_mpi.cpp stands in otherwise). It works on a
// duplicate of the communicator it is given, with MPI_ERRORS_RETURN, so that its messages
// never mix with the embedder's and an MPI error becomes a diagnostic. Every call is
// non-blocking (MPI_Isend, MPI_Irecv, MPI_Ibcast, MPI_Iallgather, MPI_Comm_idup) and waited
// for by polling MPI_Test up to the deadline, so nothing blocks for longer than the timeout.
// The C API only: not Open MPI's or MPICH's deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "runtime/dist/transport.h"

namespace kiln::dist {

bool haveMpi() { return true; }

namespace {

// MPI counts are ints: larger messages go as several messages of at most this many bytes.
constexpr uint64_t kChunk = uint64_t{1} << 30;

std::string mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

void finalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// Polls `reqs` until all completed or `timeout` seconds passed. On a timeout, `peers[i]` of
// the first request still pending says whom we waited for (-1: "the other ranks").
Status waitAll(std::vector<MPI_Request>& reqs, const std::vector<int>& peers, double timeout,
               int self, const Wait& wait) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
  // Spin briefly for fast replies, then sleep: ranks often outnumber cores.
  for (unsigned polls = 0;; ++polls) {
    int done = 0;
    int rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS)
      return error(wait.loc,
                   "rank " + std::to_string(self) + ": " + wait.what + ": " + mpiError(rc));
    if (done) return ok();
    if (Clock::now() >= deadline) break;
    if (polls > 64)
      std::this_thread::sleep_for(std::chrono::microseconds(polls > 1000 ? 1000 : 50));
  }
  std::string whom = "the other ranks", which = "one of them";
  for (size_t i = 0; i < reqs.size(); ++i) {
    int done = 0;
    if (reqs[i] != MPI_REQUEST_NULL &&
        MPI_Test(&reqs[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
      if (peers[i] >= 0) whom = "rank " + std::to_string(peers[i]), which = "that rank";
      break;
    }
  }
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", timeout);
  return error(wait.loc, "rank " + std::to_string(self) + ": waited " + secs + " s for " + whom +
                             " in " + wait.what + "; " + which + " failed or is stuck");
}

class MpiTransport final : public Transport {
public:
  MpiTransport(MPI_Comm comm, double timeout) : comm_(comm), timeout_(timeout) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiTransport() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  double timeoutSeconds() const override { return timeout_; }

  Status exchange(const std::vector<Message>& sends, const std::vector<Message>& recvs,
                  const Wait& wait) override {
    KILN_CHECK(usable(wait));
    std::vector<MPI_Request> reqs;
    std::vector<int> peers;
    auto post = [&](const Message& m, bool isSend) -> Status {
      if (m.peer < 0 || m.peer >= size_)
        return error(wait.loc, prefix() + wait.what + ": no rank " + std::to_string(m.peer));
      auto* p = static_cast<char*>(m.data);
      for (uint64_t off = 0; off < m.bytes || (off == 0 && m.bytes == 0);) {
        int n = static_cast<int>(std::min(kChunk, m.bytes - off));
        MPI_Request r;
        int rc = isSend ? MPI_Isend(p + off, n, MPI_BYTE, m.peer, m.tag, comm_, &r)
                        : MPI_Irecv(p + off, n, MPI_BYTE, m.peer, m.tag, comm_, &r);
        if (rc != MPI_SUCCESS) return error(wait.loc, prefix() + wait.what + ": " + mpiError(rc));
        reqs.push_back(r);
        peers.push_back(m.peer);
        if (m.bytes == 0) break;
        off += static_cast<uint64_t>(n);
      }
      return ok();
    };
    for (const Message& m : sends) KILN_CHECK(post(m, true));
    for (const Message& m : recvs) KILN_CHECK(post(m, false));
    return finish(reqs, peers, wait);
  }

  Status broadcast(int root, void* data, uint64_t bytes, const Wait& wait) override {
    KILN_CHECK(usable(wait));
    std::vector<MPI_Request> reqs;
    auto* p = static_cast<char*>(data);
    for (uint64_t off = 0; off < bytes; off += kChunk) {
      MPI_Request r;
      int n = static_cast<int>(std::min(kChunk, bytes - off));
      if (int rc = MPI_Ibcast(p + off, n, MPI_BYTE, root, comm_, &r); rc != MPI_SUCCESS)
        return error(wait.loc, prefix() + wait.what + ": " + mpiError(rc));
      reqs.push_back(r);
    }
    return finish(reqs, std::vector<int>(reqs.size(), root), wait);
  }

  Result<std::vector<uint64_t>> allGather(uint64_t value, const Wait& wait) override {
    KILN_CHECK(usable(wait));
    std::vector<uint64_t> all(static_cast<size_t>(size_));
    std::vector<MPI_Request> reqs(1);
    if (int rc =
            MPI_Iallgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm_, &reqs[0]);
        rc != MPI_SUCCESS)
      return error(wait.loc, prefix() + wait.what + ": " + mpiError(rc));
    KILN_CHECK(finish(reqs, {-1}, wait));
    return all;
  }

  [[noreturn]] void abort(const Diags& why) override {
    Diags d = why;
    d.add(note(Loc{}, "rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                          " failed; ending every rank"));
    std::fputs(d.str().c_str(), stderr);
    std::fflush(stderr);
    std::fflush(stdout);
    MPI_Abort(comm_, 1);
    std::_Exit(1); // MPI_Abort does not return; this is for implementations that do
  }

private:
  // After a timeout, requests may still be pending on buffers that are gone: refuse.
  Status usable(const Wait& wait) const {
    if (!broken_) return ok();
    return error(wait.loc,
                 prefix() + wait.what +
                     ": an earlier wait of this rank timed out; the transport is unusable");
  }
  Status finish(std::vector<MPI_Request>& reqs, const std::vector<int>& peers, const Wait& wait) {
    Status s = waitAll(reqs, peers, timeout_, rank_, wait);
    if (!s.ok()) broken_ = true;
    return s;
  }

  MPI_Comm comm_;
  double timeout_;
  int rank_ = 0;
  int size_ = 1;
  bool broken_ = false;
};

} // namespace

Result<std::shared_ptr<Transport>> openMpi(const void* comm, double timeoutSeconds) {
  Loc loc = Loc::named("mpi");
  if (timeoutSeconds <= 0) {
    KILN_TRY(timeoutSeconds, timeoutFromEnv());
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  MPI_Comm base = MPI_COMM_WORLD;
  if (comm) {
    if (!initialized)
      return error(loc, "a communicator was passed in but MPI is not initialised (call "
                        "MPI_Init first, or pass none and let kiln initialise MPI)");
    base = *static_cast<const MPI_Comm*>(comm);
  } else if (!initialized) {
    int provided = 0;
    if (int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
        rc != MPI_SUCCESS)
      return error(loc, "MPI_Init_thread failed: " + mpiError(rc));
    std::atexit(finalizeAtExit);
  }
  MPI_Comm dup;
  std::vector<MPI_Request> reqs(1);
  if (int rc = MPI_Comm_idup(base, &dup, &reqs[0]); rc != MPI_SUCCESS)
    return error(loc, "MPI_Comm_idup failed: " + mpiError(rc));
  int self = 0;
  MPI_Comm_rank(base, &self);
  KILN_CHECK(waitAll(reqs, {-1}, timeoutSeconds, self, Wait{loc, "starting the transport"}));
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  return std::shared_ptr<Transport>(std::make_shared<MpiTransport>(dup, timeoutSeconds));
}

} // namespace kiln::dist
