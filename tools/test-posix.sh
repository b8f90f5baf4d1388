#!/usr/bin/env bash
# The generic POSIX platform layer on Linux (cmake -DTBCOLL_PLATFORM=posix, in build-posix): what macOS and other
# systems run instead of futexes, pidfds, cross-memory attach, CPU affinity, PR_SET_PDEATHSIG and /dev/shm listings
# (bounded sleeps, kill(), copies through the segment, a guard process, the segment registry, names of at most 31
# characters), then the whole test suite.
#
#   tools/test-posix.sh [ctest arguments...]   (after tools/setup.sh); prints PASS or FAIL, non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-posix
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)

fail() {
  echo "posix: FAIL ($1)"
  exit 1
}

# The same flags as tools/build.sh's build, so ccache serves every file but src/platform from it (-Werror would
# change them); warnings fail the stage all the same (ccache replays them).
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTBCOLL_PLATFORM=posix -DCMAKE_COMPILE_WARNING_AS_ERROR=OFF -DTBCOLL_WITH_PYTHON=OFF \
  "${launcher[@]}" > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; fail "configure"; }
grep -q 'tbcoll platform layer: posix' "$build.configure.log" || fail "the posix flavour was not chosen"
if ! cmake --build "$build" -j 2 > "$build.build.log" 2>&1 || grep -q 'warning:' "$build.build.log"; then
  grep -E 'error|warning' "$build.build.log" | head -40
  fail "build; see $build.build.log"
fi
(cd "$build" && ctest -j 2 --timeout 600 "$@" > ctest.log 2>&1) || {
  grep -E '\*\*\*(Failed|Timeout|Exception)|Not Run' "$build/ctest.log" | head -20
  fail "tests; see $build/ctest.log"
}
echo "posix: PASS ($(grep -E 'tests passed' "$build/ctest.log"))"
