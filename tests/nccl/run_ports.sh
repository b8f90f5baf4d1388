#!/usr/bin/env bash
# Programs written for NCCL, built against tbcoll with only the include path and the link line changed
# (-I include/tbcoll/nccl, where <nccl.h> is tbcoll's, and -ltbcoll), run and checked: one process driving 4 ranks
# through ncclCommInitAll and groups, nccl-tests' all-reduce loop under mpirun, and an engine's grouped calls.
#   tests/nccl/run_ports.sh SOURCE_DIR BUILD_DIR WORK_DIR
# Exit 77 (skipped) when mpicc or mpirun is missing, after the program that needs neither ran.
set -euo pipefail
src=$1 build=$2 work=$3
here=$src/tests/nccl
rm -rf "$work"
mkdir -p "$work"
flags=(-I"$src/include/tbcoll/nccl" -I"$src/include" -L"$build" -ltbcoll -Wl,-rpath,"$build")
fail() { echo "run_ports: FAIL: $*" >&2; exit 1; }
run() {  # NAME COMMAND...: runs it, shows its output, and wants "Success: 0 wrong"
  local name=$1
  shift
  timeout 180 "$@" > "$work/$name.txt" 2>&1 || { cat "$work/$name.txt" >&2; fail "$name exited with an error"; }
  cat "$work/$name.txt"
  grep -q '^Success: 0 wrong' "$work/$name.txt" || fail "$name did not print 'Success: 0 wrong'"
}

cc -std=c99 -Wall -Wextra -Werror "$here/single_process.c" -o "$work/single_process" "${flags[@]}" ||
  fail "single_process.c does not build"
run single_process "$work/single_process"

if ! command -v mpicc > /dev/null || ! command -v mpicxx > /dev/null || ! command -v mpirun > /dev/null; then
  echo "run_ports: mpicc, mpicxx or mpirun missing (tools/setup.sh installs libopenmpi-dev): MPI programs skipped"
  exit 77
fi
mpicc -std=c99 -Wall -Wextra -Werror "$here/mpi_allreduce.c" -o "$work/mpi_allreduce" "${flags[@]}" ||
  fail "mpi_allreduce.c does not build"
mpicxx -std=c++17 -Wall -Wextra -Werror -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX "$here/engine.cc" -o "$work/engine" "${flags[@]}" || fail "engine.cc does not build"
mpi=(mpirun --allow-run-as-root --oversubscribe --mca btl self,tcp)
run mpi_allreduce "${mpi[@]}" -np 3 "$work/mpi_allreduce"
run engine "${mpi[@]}" -np 3 "$work/engine"
run engine_4 "${mpi[@]}" -np 4 "$work/engine"
echo "run_ports: PASS (3 NCCL programs built with -I include/tbcoll/nccl -ltbcoll, run, results checked)"
