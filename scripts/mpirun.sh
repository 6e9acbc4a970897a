#!/bin/sh
# mpirun as kiln's tests and docs run it: scripts/mpirun.sh -np 4 kiln run two.kmod ...
#
# - Open MPI refuses to run as root (CI and containers are root) unless both variables say so.
# - --oversubscribe: more ranks than cores (CI has 2 cores; the tests start 4 ranks), and
#   --bind-to none so that those ranks are not pinned to the same cores.
# - Local ranks talk through shared memory (vader) with its single-copy mechanism off: the
#   default one (CMA) needs ptrace rights that containers usually lack.
# - The whole job is killed after KILN_MPIRUN_TIMEOUT seconds (default 120), so a test never
#   hangs whatever happens.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec timeout --kill-after=5 "${KILN_MPIRUN_TIMEOUT:-120}" \
  mpirun --oversubscribe --bind-to none --mca btl self,vader \
  --mca btl_vader_single_copy_mechanism none "$@"
