#!/usr/bin/env bash
# Small all_reduce on a slow link, every all_reduce algorithm in one run (the schedules' latency at high link latency): N ranks
# over tcp with TBCOLL_LINK_DELAY_US of emulated latency, one size, each algorithm forced in turn; prints the
# median time per algorithm and its speed-up over the ring. Defaults: 8 ranks, 2 ms, 1 KiB.
#
#   benchmarks/allreduce_latency.sh [--build DIR] [-n RANKS] [--delay-us US] [--size SIZE] [--iters N]
#
# The ring pays 2(n-1) link latencies, the double binary tree 2 ceil(log2 n), recursive doubling log2 n (+2 when n
# is not a power of two), halving-doubling twice that, mesh and direct one.
set -euo pipefail
build="$(cd "$(dirname "$0")/.." && pwd)/build"
ranks=8 delay_us=2000 size=1K iters=20
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    -n) ranks="$2"; shift 2 ;;
    --delay-us) delay_us="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "allreduce_latency.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
run="$build/tbcoll-run" perf="$build/benchmarks/tbcoll-perf"
for tool in "$run" "$perf"; do
  [[ -x "$tool" ]] || { echo "allreduce_latency.sh: $tool not built (cmake --build $build)" >&2; exit 2; }
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

algos=(ring direct tree recursive_doubling halving_doubling mesh)
echo "# all_reduce of $size f32, $ranks ranks over tcp, emulated link latency ${delay_us} us (TBCOLL_LINK_DELAY_US)," \
     "median of $iters iterations, out of place"
for algo in "${algos[@]}"; do
  TBCOLL_TRANSPORT=tcp TBCOLL_LINK_DELAY_US="$delay_us" \
    "$run" -n "$ranks" -- "$perf" -b "$size" -e "$size" -n "$iters" --algo "allreduce:$algo" \
    --csv "$work/$algo.csv" > "$work/$algo.out" 2>&1 || { cat "$work/$algo.out" >&2; exit 1; }
done
# CSV columns: collective,ranks,transport,algo,size,count,type,redop,inplace,median_us,... (rank 0 writes it)
ring_us="$(awk -F, 'NR > 1 && $9 == 0 { print $10; exit }' "$work/ring.csv")"
printf '%-20s %12s %10s %8s\n' algorithm "median (us)" "vs ring" "#wrong"
for algo in "${algos[@]}"; do
  awk -F, -v algo="$algo" -v ring="$ring_us" 'NR > 1 && $9 == 0 {
    printf "%-20s %12.0f %9.2fx %8s\n", algo, $10, ring / $10, $14; exit }' "$work/$algo.csv"
done
