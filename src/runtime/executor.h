// Executor: runs a Program's entry functions on its devices. Load once, call many times:
// devices are opened, executables loaded and each entry function prepared when the executor is
// created; weights are uploaded to a device on first use and kept there for later calls.
//
// Preparing turns a host function into a flat list of steps: device indices, the (executable,
// kernel ordinal) of each launch, its grid and push constants as parsed symbolic expressions,
// and operand slot indices, so a call looks nothing up by name. A call binds the symbols from
// the inputs' shapes (count, element types, shapes, symbol ranges and divisibility are checked
// first), then runs the steps: `alloc_buffer` allocates, `transfer_to` uploads or copies,
// `launch` evaluates its grid and push constants and records a dispatch into the device's
// pending command buffer, `free` releases a buffer after submitting the pending work that may
// read it, `wait` submits the pending work and waits on the device's timeline semaphore,
// `return` waits for every device and reads the results back. `bind_symbol` reads a
// data-dependent dim back and binds it (buffers allocated before at the top of its range take
// their real shape); `run_loop` reads its operands back and runs the body function's own
// steps once per iteration (run(), nested), then writes the carried values into its output
// buffers. One executor runs one call at a time.
//
// Donation (`%cache: ... donate 1`, docs/donation.md): the call writes result 1 into argument
// %cache's storage. When the argument's tensor is writable (HostTensor::writable) and the
// device can use its memory (ref and cpu: host memory aligned to 64 bytes, which every
// HostTensor kiln allocates is), the kernels work on the caller's memory directly: no upload,
// no read-back, and result 1 is returned sharing the argument's storage. Otherwise the
// argument is uploaded as usual and, when writable, the result is copied back into it, so
// either way a writable donated argument holds the result after the call. A read-only one
// (HostTensor::view, such as an mmap'ed .npy file) is left unchanged. A call that fails may
// leave a donated argument bound in place partly written.
//
// Over ranks (ExecutorOptions::transport, docs/distributed.md): each process runs the
// steps on its own devices only (runtime/dist/ranks.h says how devices map to ranks and how
// buffers cross them); rank 0's inputs are used and only rank 0 gets results.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/core/host_tensor.h"
#include "ir/io/weights.h"
#include "runtime/hal.h"
#include "runtime/profile.h"
#include "runtime/program.h"

namespace kiln {

namespace dist {
class Transport;
class Ranks;
} // namespace dist

struct ExecutorOptions {
  // Runs every device of the program on this one instead (kiln run --device=...).
  std::optional<hal::DeviceId> device;
  // Binds an argument's memory itself as the device buffer, without an upload, when the
  // device can use it (hal::Device::importHost: host memory aligned to 64 bytes on ref, sim
  // and cpu). Kernels only read it; such memory is not counted in CallStats::peakBytes. The
  // caller keeps the inputs unchanged until the call returns (the Python package does).
  bool readInputsInPlace = false;
  // Runs the program with the other ranks of this transport (dist::openMpi): the module's
  // devices are split evenly over the ranks and each rank opens and runs its own. Every rank
  // must create the executor and make the same calls; rank 0's inputs are the call's
  // inputs and only rank 0 gets the results (the others get none). Donated arguments are
  // not written in place.
  std::shared_ptr<dist::Transport> transport;
};

struct CallStats {
  uint64_t dispatches = 0;
  uint64_t peakBytes = 0;       // the devices' largest allocation total during the call
  uint64_t collectiveBytes = 0; // bytes the call's collectives took in (each device's input)
};

class Executor {
public:
  static Result<std::unique_ptr<Executor>> create(std::shared_ptr<const Program> program,
                                                  const ExecutorOptions& opts = {});
  ~Executor();

  const Program& program() const { return *program_; }
  // This process's rank under ExecutorOptions::transport (0 without one).
  int rank() const;
  Result<std::vector<HostTensor>> call(const std::string& function,
                                       const std::vector<HostTensor>& inputs);
  const CallStats& lastStats() const { return stats_; }
  // Times every dispatch of the following calls into profile() (kiln bench --profile), or
  // stops (on = false). An error when a device of the program cannot time dispatches.
  Status enableProfile(bool on);
  // The dispatches timed since enableProfile(true), and the calls they were made in.
  const DispatchProfile& profile() const { return profile_; }
  uint64_t profiledCalls() const { return profiledCalls_; }

private:
  struct DeviceState;
  struct Step;
  struct Plan;
  Executor();
  Result<size_t> deviceIndex(const std::string& spec, const Loc& loc);
  Status flushDevice(size_t d);
  Result<std::unique_ptr<Plan>> prepare(const Func& f);
  Result<std::vector<HostTensor>> run(const Func& f, Plan& plan,
                                      const std::vector<HostTensor>& inputs, int depth);
  Result<hal::Buffer*> weightBuffer(const std::string& name, size_t device, const Loc& loc);
  bool runsHere(const Plan& plan, const Step& st) const;

  std::shared_ptr<const Program> program_;
  ExecutorOptions opts_;
  std::vector<std::unique_ptr<DeviceState>> devices_; // another rank's: no device
  std::unique_ptr<dist::Ranks> ranks_;                // with a transport
  std::map<std::string, size_t> deviceByName_;
  std::map<std::string, std::unique_ptr<Plan>> plans_; // by entry function
  std::unique_ptr<WeightStore> weightStore_;
  std::map<std::pair<std::string, size_t>, std::unique_ptr<hal::Buffer>> weightBuffers_;
  std::vector<std::unique_ptr<hal::Buffer>> constantBuffers_; // load_constant's, once each
  CallStats stats_;
  DispatchProfile profile_;
  bool profiling_ = false;
  uint64_t profiledCalls_ = 0;
};

} // namespace kiln
