// kiln-mpi-capi MODULE.kmod: the C API over MPI (kiln_module_load_mpi) under mpirun, on a
// communicator the program made itself. MODULE is examples/embed/model.kir compiled over two
// devices (tests/lit/mpi/capi.kir): y = relu(x * 2 + 1) and sum(y) of x = [1, -5, 0.5].
// Rank 0 must get both results, the other ranks none; a wrong call fails on every rank.
#include <mpi.h>

#include <cstdio>

#include "kiln/kiln.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (argc != 2) {
    std::fprintf(stderr, "usage: kiln-mpi-capi MODULE.kmod\n");
    return 1;
  }
  kiln_module* m = kiln_module_load_mpi(argv[1], &comm);
  if (!m) {
    std::fputs(kiln_last_error(), stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int rank = kiln_module_rank(m);
  float data[3] = {1.0f, -5.0f, 0.5f};
  kiln_tensor in = {KILN_F32, 1, {3}, data, sizeof data};
  kiln_tensor* out = nullptr;
  size_t n = 0;
  if (kiln_module_run(m, "main", &in, 1, &out, &n) != 0) kiln_module_abort(m);
  if (rank == 0) {
    float sum = *static_cast<const float*>(out[1].data);
    std::printf("rank 0: %zu outputs, y[0] = %g, sum = %g\n", n,
                static_cast<const float*>(out[0].data)[0], sum);
    if (n != 2 || sum != 5.0f) return 1; // relu(3) + relu(-9) + relu(2)
  } else {
    std::printf("rank %d: %zu outputs\n", rank, n);
    if (n != 0) return 1;
  }
  kiln_tensors_free(out, n);
  // Every rank sees rank 0's input count, so every rank refuses the call; none waits.
  if (kiln_module_run(m, "main", &in, 0, &out, &n) == 0) return 1;
  std::printf("rank %d: wrong input count refused: %s", rank, kiln_last_error());
  kiln_module_free(m);
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return 0;
}
