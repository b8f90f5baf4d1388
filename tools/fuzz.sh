#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/, libFuzzer with clang, -fsanitize=fuzzer,address,undefined; the library with
# fuzzer-no-link instrumentation; a unity build, as tools/test-sanitizers.sh explains) in ./build-fuzz and runs
# each one SECONDS seconds, printing its executions.
# Fails when a target finds a crash, a sanitizer report, a leak, an uncaught exception or a broken invariant; the
# input that did it is saved in build-fuzz/findings/<target>/ (fix the bug, then add the input to
# fuzz/corpus/<target>/ as regress-<name>: ctest replays it in every build).
#
#   tools/fuzz.sh SECONDS [TARGET...]   (default: every target; SECONDS defaults to 30)
#   tools/fuzz.sh --seeds               regenerates the seeds in fuzz/corpus (tbcoll_fuzz_corpus)
#
# Inputs that reach new code are kept in build-fuzz/corpus/<target>/ between runs (fuzz/corpus stays small).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--seeds" ]; then
  cmake --build build -j2 --target tbcoll_fuzz_corpus >/dev/null
  build/fuzz/tbcoll_fuzz_corpus fuzz/corpus
  echo "fuzz: seeds written to fuzz/corpus"
  exit 0
fi
seconds=${1:-30}
shift || true
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" -DTBCOLL_FUZZ=ON -DBUILD_SHARED_LIBS=OFF \
  -DTBCOLL_BUILD_TESTS=OFF -DTBCOLL_BUILD_BENCHMARKS=OFF -DTBCOLL_BUILD_EXAMPLES=OFF -DCMAKE_UNITY_BUILD=ON "${launcher[@]}" >/dev/null
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  available=$(cmake --build build-fuzz --target help)  # ibverbs_handshake only where the transport is built
  for dir in fuzz/corpus/*/; do
    target=$(basename "$dir")
    if grep -qx "\.\.\. fuzz_${target}" <<< "$available"; then targets+=("$target"); fi
  done
fi
cmake --build build-fuzz -j2 --target "${targets[@]/#/fuzz_}" >/dev/null
export TBCOLL_DEBUG=NONE  # the store server logs every client it rejects: thousands a second here
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
failed=()
for target in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$target" "build-fuzz/findings/$target"
  log="build-fuzz/fuzz-$target.log"
  status=0
  "build-fuzz/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=3072 -max_len=8192 \
    -print_final_stats=1 -artifact_prefix="build-fuzz/findings/$target/" \
    "build-fuzz/corpus/$target" "fuzz/corpus/$target" > "$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1 || true)
  elapsed=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | tail -1 | awk '{print $5}' || true)
  elapsed=${elapsed:-$seconds}
  rate=$(( ${runs:-0} / (elapsed > 0 ? elapsed : 1) ))
  if [ $status -eq 0 ]; then
    printf 'fuzz %-18s %10s executions in %s s (%s/s), corpus %s inputs\n' "$target" "${runs:-?}" \
      "$elapsed" "$rate" "$(ls "build-fuzz/corpus/$target" | wc -l)"
  else
    failed+=("$target")
    printf 'fuzz %-18s FAILED after %s executions (exit %d); input in build-fuzz/findings/%s/, log %s:\n' \
      "$target" "${runs:-?}" "$status" "$target" "$log"
    grep -E 'ERROR|invariant|SUMMARY|uncaught|Test unit written' "$log" | head -8 | sed 's/^/    /'
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAIL (${failed[*]})"
  exit 1
fi
echo "fuzz: PASS (${#targets[@]} targets, $seconds s each)"
