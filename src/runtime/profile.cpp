// DispatchProfile: dispatch times summed per kernel and grid, and their table.
#include "runtime/profile.h"

#include <algorithm>
#include <cstdio>

namespace kiln {

void DispatchProfile::describe(const hal::Executable& exe, size_t kernel, std::string strategy,
                               std::string shape) {
  described_[{&exe, kernel}] = {std::move(strategy), std::move(shape)};
}

void DispatchProfile::record(const hal::Executable& exe, size_t kernel,
                             const hal::Workgroups& workgroups, double seconds) {
  auto& [calls, total] = times_[Key{&exe, kernel, workgroups}];
  ++calls;
  total += seconds;
}

std::vector<ProfileRow> DispatchProfile::rows() const {
  std::vector<ProfileRow> out;
  for (const auto& [key, time] : times_) {
    const auto& [exe, kernel, grid] = key;
    ProfileRow r;
    r.kernel = kernel < exe->numKernels() ? exe->kernelName(kernel) : "?";
    if (auto it = described_.find({exe, kernel}); it != described_.end()) {
      r.strategy = it->second.first;
      r.shape = it->second.second;
    }
    if (r.strategy.empty()) r.strategy = exe->target() == "ref" ? "interpreter" : "-";
    r.grid = grid;
    r.calls = time.first;
    r.seconds = time.second;
    out.push_back(std::move(r));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const ProfileRow& a, const ProfileRow& b) { return a.seconds > b.seconds; });
  return out;
}

std::string formatProfile(const std::vector<ProfileRow>& rows, uint64_t calls) {
  double total = 0;
  uint64_t dispatches = 0;
  for (const ProfileRow& r : rows) total += r.seconds, dispatches += r.calls;
  char buf[256];
  std::string out;
  double perCall = calls ? total / static_cast<double>(calls) : 0;
  std::snprintf(buf, sizeof buf,
                "profile: %llu calls, %llu dispatches, %.3f ms in kernels per call\n",
                static_cast<unsigned long long>(calls), static_cast<unsigned long long>(dispatches),
                perCall * 1e3);
  out += buf;
  out += "| kernel | strategy | shape | grid | calls | total ms | % |\n";
  out += "|---|---|---|---|---:|---:|---:|\n";
  for (const ProfileRow& r : rows) {
    std::snprintf(buf, sizeof buf, "| %lldx%lldx%lld | %llu | %.3f | %.1f |\n",
                  static_cast<long long>(r.grid[0]), static_cast<long long>(r.grid[1]),
                  static_cast<long long>(r.grid[2]), static_cast<unsigned long long>(r.calls),
                  r.seconds * 1e3, total > 0 ? 100 * r.seconds / total : 0.0);
    out += "| " + r.kernel + " | " + r.strategy + " | " + (r.shape.empty() ? "-" : r.shape) + " " +
           buf;
  }
  return out;
}

} // namespace kiln
