// The dispatch profile behind `kiln bench --profile` and `kiln run --profile`: the time of
// every dispatch a device runs (hal::Device::setProfiler), summed per kernel and grid over
// the calls it covers, and the table that prints it, slowest first. The executor fills it
// (Executor::enableProfile) and names each kernel's strategy and output; with no profile
// set a device times nothing.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/hal.h"

namespace kiln {

struct ProfileRow {
  std::string kernel;   // its name in the executable
  std::string strategy; // the lowering strategy that made it, or how it runs
  std::string shape;    // its first output, such as 1x64x56x56xf32
  hal::Workgroups grid{};
  uint64_t calls = 0;
  double seconds = 0;
};

class DispatchProfile : public hal::DispatchProfiler {
public:
  // What the table shows of kernel `kernel` of `exe` beside its name.
  void describe(const hal::Executable& exe, size_t kernel, std::string strategy, std::string shape);
  void record(const hal::Executable& exe, size_t kernel, const hal::Workgroups& workgroups,
              double seconds) override;
  // Forgets the times (not the descriptions).
  void clear() { times_.clear(); }
  // One row per kernel and grid, by total time, largest first.
  std::vector<ProfileRow> rows() const;

private:
  using Key = std::tuple<const hal::Executable*, size_t, hal::Workgroups>;
  std::map<std::pair<const hal::Executable*, size_t>, std::pair<std::string, std::string>>
      described_;
  std::map<Key, std::pair<uint64_t, double>> times_; // calls, seconds
};

// The table: a summary line (`calls` executor calls, kernel time per call), then
// `| kernel | strategy | shape | grid | calls | total ms | % |`, one row per ProfileRow.
std::string formatProfile(const std::vector<ProfileRow>& rows, uint64_t calls);

} // namespace kiln
