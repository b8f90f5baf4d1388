#!/usr/bin/env bash
# The README's test command, what CI runs (.ci/run): sets up, builds and runs the whole test suite, then the checks
# that keep tbcoll building and running where no CI machine is (macOS, arm64), each a stage that prints PASS or FAIL
# and its time:
#
#   suite        the whole ctest suite of ./build (Linux platform layer, GCC, libstdc++)
#   portability  no Linux-only call outside src/platform (tools/check-portability.sh)
#   posix        the generic POSIX platform layer, the fast tests (tools/test-posix.sh -L fast)
#   clang        clang + libc++, warnings as errors, the fast tests (tools/test-clang-libcxx.sh -L fast)
#   arm64        cross-compiled, reduce kernels and shm tests under qemu-aarch64 (tools/test-arm64.sh)
#   asan         ASan + UBSan: unit, collective (security included), fuzz corpus and soak tests, 0 reports
#                (tools/test-sanitizers.sh asan)
#   tsan         TSan: the concurrency tests (async, split, transports, shm, tcp, fake verbs, soak), 0 reports
#                (tools/test-sanitizers.sh tsan)
#   fuzz         every fuzz target 30 s under libFuzzer + ASan + UBSan (tools/fuzz.sh 30)
#
#   tools/run-tests.sh [STAGE...]   (default: all of them; `ctest -L fast` in build/ is the quick local run)
# Exits non-zero if any stage failed; all stages run either way.
set -euo pipefail
cd "$(dirname "$0")/.."
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(suite portability posix clang arm64 asan tsan fuzz)
failed=()
summary=()
start=$SECONDS
tools/setup.sh
tools/build.sh
summary+=("$(printf '%-12s %s  %4d s' "setup+build" done $((SECONDS - start)))")
run_stage() {
  local name=$1
  shift
  local start=$SECONDS result=PASS
  echo "==== $name"
  "$@" || { result=FAIL; failed+=("$name"); }
  summary+=("$(printf '%-12s %s  %4d s' "$name" "$result" $((SECONDS - start)))")
  echo "==== $name: $result ($((SECONDS - start)) s)"
}
for stage in "${stages[@]}"; do
  case "$stage" in
    suite) run_stage suite bash -c 'cd build && ctest --output-on-failure -j 2 --timeout 600' ;;
    portability) run_stage portability tools/check-portability.sh build ;;
    posix) run_stage posix tools/test-posix.sh -L fast ;;
    clang) run_stage clang tools/test-clang-libcxx.sh -L fast ;;
    arm64) run_stage arm64 tools/test-arm64.sh ;;
    asan) run_stage asan tools/test-sanitizers.sh asan ;;
    tsan) run_stage tsan tools/test-sanitizers.sh tsan ;;
    fuzz) run_stage fuzz tools/fuzz.sh 30 ;;
    *) echo "run-tests: unknown stage $stage (suite portability posix clang arm64 asan tsan fuzz)"; exit 2 ;;
  esac
done
echo "==== summary"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "run-tests: FAIL (${failed[*]})"
  exit 1
fi
echo "run-tests: PASS"
