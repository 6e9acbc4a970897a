// resolveJobs (parallel.h).
#include "backends/parallel.h"

namespace kiln {

unsigned resolveJobs(unsigned jobs) {
  if (jobs > 0) return jobs;
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? hw : 1;
}

} // namespace kiln
