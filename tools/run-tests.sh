#!/usr/bin/env bash
# The README's test command, what CI runs (.ci/run): sets up, builds and runs the whole test suite, then the checks
# that keep tbcoll building and running where no CI machine is (macOS, arm64), each a stage that prints PASS or FAIL
# and its time:
#
#   suite        the whole ctest suite of ./build (Linux platform layer, GCC, libstdc++)
#   portability  no Linux-only call outside src/platform (tools/check-portability.sh)
#   posix        the generic POSIX platform layer: every test whose outcome the platform layer can change, the fault,
#                multihost, multiproc and soak tests included (tools/test-posix.sh -LE 'docs|install|rdma|abi|style')
#   clang        clang + libc++, warnings as errors, the fast tests but the docs' (tools/test-clang-libcxx.sh ...)
#   arm64        cross-compiled, reduce kernels and shm tests under qemu-aarch64 (tools/test-arm64.sh)
#   asan         ASan + UBSan: unit, collective (security included, sweeps up to 4 ranks) and soak tests, 0 reports
#                (tools/test-sanitizers.sh asan)
#   tsan         TSan: the concurrency tests (async, split, transports, shm, tcp, fake verbs, soak), 0 reports
#                (tools/test-sanitizers.sh tsan)
#   fuzz         every fuzz target 5 s under libFuzzer + ASan + UBSan (tools/fuzz.sh 5; the corpus replays run in
#                every build's ctest)
#   mlx          MLX (CPU, Python bindings) built with tbcoll's distributed backend into build/mlx, then the
#                backend's C++ test and MLX's own distributed tests at 2 and 3 ranks under tbcoll-run, and a rank
#                killed or stopped mid all_sum (integrations/mlx/test.sh build all; 5-7 min from a cold ccache on 2
#                busy cores, under 1 min from a warm one)
#
#   tools/run-tests.sh [STAGE...]   (default: all of them; `ctest -L fast` in build/ is the quick local run)
# Exits non-zero if any stage failed; all stages run either way.
# Every stage's output goes to build/ci-logs/STAGE.log (the run prints the folder; kept after the run), and a
# failed ctest stage ends with the failing tests' names and the end of their output (tools/test-report.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache hashes paths under the checkout relative to it: the stages' builds share the objects of files they
# compile alike (the posix build all but src/platform, the pip install of tests/python all of the library).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
# The whole gate: rdma_qemu (real rdma-core in QEMU) fails where it cannot run instead of being skipped
# (tools/test-rdma-qemu.sh skips outside CI); tools/setup.sh installs what it needs.
export CI=${CI:-true}
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(suite portability posix clang arm64 asan tsan fuzz mlx)
failed=()
summary=()
start=$SECONDS
logs=$PWD/build/ci-logs
mkdir -p "$logs"
echo "run-tests: every stage's log goes to $logs/"
set +e
{ tools/setup.sh && tools/build.sh; } 2>&1 | tee "$logs/setup-build.log"
status=${PIPESTATUS[0]}
set -e
[ "$status" -eq 0 ] || { echo "run-tests: FAIL (setup or build; see $logs/setup-build.log)"; exit 1; }
summary+=("$(printf '%-12s %s  %4d s' "setup+build" done $((SECONDS - start)))")
# The build directory of the stages that run ctest, for the report of their failed tests.
build_of() {
  case "$1" in
    suite) echo build ;;
    posix) echo build-posix ;;
    clang) echo build-clang ;;
    asan | tsan) echo "build-$1" ;;
  esac
}
run_stage() {
  local name=$1
  shift
  local start=$SECONDS result=PASS status=0 log="$logs/$name.log"
  echo "==== $name (log: $log)"
  set +e
  "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  set -e
  if [ "$status" -ne 0 ]; then
    result=FAIL
    failed+=("$name")
    local dir
    dir=$(build_of "$name")
    if [ -n "$dir" ]; then tools/test-report.sh "$dir" 2>&1 | tee -a "$log"; fi
  fi
  summary+=("$(printf '%-12s %s  %4d s' "$name" "$result" $((SECONDS - start)))")
  echo "==== $name: $result ($((SECONDS - start)) s)"
}
for stage in "${stages[@]}"; do
  case "$stage" in
    suite) run_stage suite bash -c 'cd build && ctest --output-on-failure -j 2 --timeout 600' ;;
    portability) run_stage portability tools/check-portability.sh build ;;
    posix) run_stage posix tools/test-posix.sh -LE 'docs|install|rdma|abi|style' ;;
    clang) run_stage clang tools/test-clang-libcxx.sh -L fast -LE docs ;;
    arm64) run_stage arm64 tools/test-arm64.sh ;;
    asan) run_stage asan tools/test-sanitizers.sh asan ;;
    tsan) run_stage tsan tools/test-sanitizers.sh tsan ;;
    fuzz) run_stage fuzz tools/fuzz.sh 5 ;;
    mlx) run_stage mlx integrations/mlx/test.sh build all ;;
    *) echo "run-tests: unknown stage $stage (suite portability posix clang arm64 asan tsan fuzz mlx)"; exit 2 ;;
  esac
done
echo "==== summary (logs in $logs/)"
printf '%s\n' "${summary[@]}" | tee "$logs/summary.log"
if [ ${#failed[@]} -gt 0 ]; then
  echo "run-tests: FAIL (${failed[*]})"
  exit 1
fi
echo "run-tests: PASS"
