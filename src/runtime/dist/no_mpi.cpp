// The transport's entry points in a build without MPI (meson -Dmpi=disabled, or no MPI
// found): asking for MPI is an error that says so.
#include "runtime/dist/transport.h"

namespace kiln::dist {

bool haveMpi() { return false; }

Result<std::shared_ptr<Transport>> openMpi(const void*, double) {
  return error(Loc::named("mpi"), "this kiln was built without MPI (install libopenmpi-dev and "
                                  "reconfigure with meson -Dmpi=enabled)");
}

} // namespace kiln::dist
