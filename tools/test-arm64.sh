#!/usr/bin/env bash
# arm64 without an arm64 machine: cross-compiles tbcoll and its test binaries with Debian's g++-aarch64-linux-gnu
# into build-arm64 and runs, under qemu-aarch64 (qemu-user), the reduce kernel tests (the NEON kernels against the
# portable ones, every dtype and op) and the shared-memory transport's queue, fast-path and collective tests with
# ranks as threads. Real processes are out of reach here (spawning arm64 processes needs binfmt_misc).
# A unity build (batches of sources as one translation unit, as tools/test-sanitizers.sh explains).
#
# qemu-user gives arm64 code x86's stronger memory ordering: this finds what does not build or compute right on
# arm64, not a missing acquire/release (TSan on x86 does that).
#
#   tools/test-arm64.sh    (after tools/setup.sh); ends with the runner's summary line; non-zero exit on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-arm64
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
  -DTBCOLL_BUILD_EXAMPLES=OFF -DTBCOLL_WITH_PYTHON=OFF -DTBCOLL_BUILD_BENCHMARKS=OFF -DCMAKE_COMPILE_WARNING_AS_ERROR=ON -DCMAKE_UNITY_BUILD=ON "${launcher[@]}" \
  > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; echo "arm64: FAIL (configure)"; exit 1; }
if ! cmake --build "$build" -j 2 --target tbcoll_unit_tests tbcoll_collective_tests > "$build.build.log" 2>&1; then
  grep -E 'error|warning' "$build.build.log" | head -40
  echo "arm64: FAIL (build; see $build.build.log)"
  exit 1
fi
file "$build/tests/tbcoll_unit_tests" | grep -q 'ARM aarch64' || { echo "arm64: FAIL (not an arm64 binary)"; exit 1; }

# One qemu per binary (ctest would start one per test: ten times slower).
run() {
  local name=$1 binary=$2 filter=$3
  local log="$build/$name.log"
  local status=0
  qemu-aarch64 "$build/tests/$binary" --gtest_filter="$filter" --gtest_brief=1 > "$log" 2>&1 || status=$?
  grep -E '^\[  (FAILED|PASSED) ' "$log" | sed "s/^/$name: /" || true
  local passed
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\./\1/p' "$log")
  if [ "$status" -ne 0 ] || [ -z "$passed" ] || [ "$passed" -eq 0 ]; then
    echo "arm64: $name failed (exit $status; $log)"
    return 1
  fi
  total=$((total + passed))
}
total=0
failed=0
run reduce tbcoll_unit_tests 'Reduce*:AllDtypesOpsIsas/*' || failed=1
shm_sweep='TransportsAndSizes/Sweep.AllCollectives/shm_2:TransportsAndSizes/Sweep.AllCollectives/shm_3'
run shm tbcoll_collective_tests "Collectives.Shm*:Transports/*/1:$shm_sweep" || failed=1
if [ $failed -ne 0 ]; then
  echo "arm64: FAIL [  FAILED  ] under qemu-aarch64"
  exit 1
fi
echo "arm64: PASS [  PASSED  ] $total tests under qemu-aarch64 (reduce kernels; shm queues, fast paths, collectives)"
