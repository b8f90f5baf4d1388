#!/usr/bin/env bash
# The test suite under the sanitizers (GCC, ccache), each build in its own directory:
#
#   asan   ASan + UBSan (-fno-sanitize-recover: any undefined behaviour fails), in build-asan: the unit and
#          collective tests (with the security tests; the sweeps up to 4 ranks) and the short soak (the fuzz
#          corpora run under ASan + UBSan
#          in the fuzz stage, tools/fuzz.sh, and are replayed in every other build's ctest)
#   tsan   TSan, in build-tsan: the concurrency tests: async, split, measured tuning, every transport's
#          conformance suite (loopback, shm, tcp, the fake verbs provider), the sweeps of 2 to 4 ranks on shm,
#          2 and 3 on tcp and the fake verbs, 3 on loopback (one rank has no peer to race with),
#          the fake verbs fabric and its fault matrix, the store and peer exchange, the short soak, and the link
#          emulation's close and overlap tests
#
# Both are unity builds (CMAKE_UNITY_BUILD: a target's sources compiled in batches, each header parsed once a
# batch, about half the compile time); the main and posix builds compile file by file, so a missing include still
# fails there.
#
#   tools/test-sanitizers.sh asan|tsan [ctest arguments...]   (after tools/setup.sh); PASS or FAIL, non-zero on
#   failure. Every process writes its reports to <build>/sanitizer-reports/ (children that tbcoll-run starts too):
#   the stage passes only with every test passing and that directory empty, and prints how many reports it found.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-}
shift || true
case "$kind" in
  asan)
    flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g1"
    targets=(tbcoll_unit_tests tbcoll_collective_tests tbcoll_plugin_tests tbcoll_soak tbcoll_test_prog tbcoll-run
             tbcoll-info)
    tests='^(soak_short|TransportsAndSizes/(Sweep|AlgorithmSweep)[.][A-Za-z]*/[a-z]*_[1-4]|ExchangeSizes/|'
    tests+='ExchangeErrors[.]RanksThatOnlyWait|Modes/IbverbsFaultMatrix[.])'
    labels='unit|collectives'
    skip=''
    ;;
  tsan)
    flags="-fsanitize=thread -fno-omit-frame-pointer -g1"
    targets=(tbcoll_collective_tests tbcoll_plugin_tests tbcoll_soak tbcoll_test_prog tbcoll-run tbcoll-info)
    tests='^(Transports/|Plugin/|Async|Split|NcclApi|GroupCApi|MeasuredTuningRuns|FakeVerbs|IbverbsFake|Modes/IbverbsFaultMatrix|PeerExchange|Security|'
    tests+='Ibverbs(Mesh|Lanes|Rails|SideChannel|ZeroCopyUse)[.]|Devices/IbverbsZeroCopy[.]|RdmaCheck[.]TwoRanks|'
    tests+='Collectives[.]Shm|soak_short|'
    tests+='TransportsAndSizes/Sweep[.][A-Za-z]*/(shm_[2-4]|(tcp|fakeverbs)_[23]|loopback_3)( |$)|'
    tests+='LinkEmulation[.]MessagesSentBeforeTheSenderLeaves|Collectives[.]EmulatedLinkDelaysOf)'
    labels=''
    # Its counts of 1 MiB under measured tuning check results (the unsanitized and ASan runs have it); the
    # trials' threads and agreement are the other MeasuredTuningRuns tests'.
    skip='^MeasuredTuningRuns[.]EveryCallRightAndEveryRankDecidesAlike$'
    ;;
  *)
    echo "usage: tools/test-sanitizers.sh asan|tsan [ctest arguments...]"
    exit 2
    ;;
esac
build=build-$kind
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fail() {
  echo "$kind: FAIL ($1)"
  exit 1
}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" -DTBCOLL_BUILD_BENCHMARKS=OFF \
  -DTBCOLL_BUILD_EXAMPLES=OFF -DCMAKE_UNITY_BUILD=ON "${launcher[@]}" > "$build.configure.log" 2>&1 || {
  cat "$build.configure.log"
  fail "configure"
}
available=$(cmake --build "$build" --target help)
built=()
for target in "${targets[@]}"; do
  if grep -qx "\.\.\. $target" <<< "$available"; then built+=("$target"); fi
done
cmake --build "$build" -j 2 --target "${built[@]}" > "$build.build.log" 2>&1 || {
  grep -E 'error' "$build.build.log" | head -40
  fail "build; see $build.build.log"
}
reports=$PWD/$build/sanitizer-reports
rm -rf "$reports"
mkdir -p "$reports"
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:log_path=$reports/asan:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan:${UBSAN_OPTIONS:-}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$reports/tsan:${TSAN_OPTIONS:-}"
select=(-R "$tests")
[ -n "$skip" ] && select+=(-E "$skip")
# The fast tests of the labels (the fuzz corpora: the fuzz stage), then the named slow ones: the sweeps of 5 to 8
# ranks run the code of the smaller ones again (the unsanitized suite runs them), the rest all.
[ -n "$labels" ] && select=(-L "$labels" -LE 'fuzz|slow')
status=0
(cd "$build" && ctest -j 2 --timeout 900 --output-on-failure "${select[@]}" "$@" > ctest.log 2>&1) || status=$?
if [ -n "$labels" ]; then  # the label run, then the named extras
  (cd "$build" && ctest -j 2 --timeout 900 --output-on-failure -R "$tests" "$@" >> ctest.log 2>&1) || status=$?
fi
count=$(find "$reports" -type f | wc -l)
if [ "$count" -gt 0 ]; then
  echo "$kind: $count sanitizer report(s):"
  for report in $(find "$reports" -type f | head -5); do
    echo "---- $report"
    grep -E 'ERROR|WARNING|SUMMARY|runtime error|#[0-4] ' "$report" | head -12
  done
fi
if [ $status -ne 0 ]; then
  grep -E '\*\*\*(Failed|Timeout|Exception)|Not Run' "$build/ctest.log" | head -20
  # Each failed test's own output (--output-on-failure put it in ctest.log): the gtest failure lines first.
  grep -A8 -E ': Failure$' "$build/ctest.log" | head -80
fi
[ $status -eq 0 ] && [ "$count" -eq 0 ] || fail "$count reports, tests $( [ $status -eq 0 ] && echo passed || echo failed ); see $build/ctest.log"
echo "$kind: PASS ($(grep -E 'tests passed' "$build/ctest.log" | tr '\n' ' '), 0 sanitizer reports)"
