#!/usr/bin/env bash
# Side-by-side, interleaved comparison of tbcoll and OpenMPI on this machine, 2 ranks, f32 sum all-reduce
# (or all-gather). Medians of ROUNDS rounds; each round runs tbcoll then OpenMPI at every size.
#   benchmarks/compare.sh [tcp|shm] [all_reduce|all_gather] [ROUNDS] [MAX_BYTES]
# tcp: tbcoll over TCP vs OpenMPI ob1 + tcp BTL (loopback). shm: tbcoll shm vs OpenMPI vader (shm + CMA).
set -euo pipefail
cd "$(dirname "$0")/.."
transport=${1:-tcp}
collective=${2:-all_reduce}
rounds=${3:-3}
max_bytes=${4:-67108864}
build=${BUILD_DIR:-build}
[ -x "$build/benchmarks/mpi_allreduce_bench" ] || { echo "build first (tools/build.sh) with OpenMPI installed"; exit 1; }
btl="self,tcp"
[ "$transport" = shm ] && btl="self,vader"
gather=""
[ "$collective" = all_gather ] && gather=gather
out=$(mktemp -d)
for round in $(seq "$rounds"); do
  "$build/tbcoll-run" -n 2 -- "$build/benchmarks/tbcoll-perf" --transport "$transport" -c "$collective" \
    -b 8 -e "$max_bytes" -f 2 -n 20 --csv "$out/tbcoll.$round.csv" > /dev/null
  mpirun --allow-run-as-root -np 2 --bind-to none --mca pml ob1 --mca btl "$btl" \
    "$build/benchmarks/mpi_allreduce_bench" 8 "$max_bytes" 20 $gather > "$out/ompi.$round.txt"
done
python3 - "$out" "$rounds" "$transport" "$collective" <<'PY'
import csv, statistics, sys
out, rounds, transport, collective = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ours, theirs = {}, {}
for r in range(1, rounds + 1):
    for row in csv.DictReader(open(f"{out}/tbcoll.{r}.csv")):
        if row["inplace"] == "0":
            ours.setdefault(int(row["size"]), []).append((float(row["median_us"]), float(row["busbw"]), int(row["wrong"])))
    for line in open(f"{out}/ompi.{r}.txt"):
        size, us, bw, wrong = line.split()
        theirs.setdefault(int(size), []).append((float(us), float(bw), int(wrong)))
peer = "OpenMPI vader" if transport == "shm" else "OpenMPI tcp"
print(f"# {collective}, 2 ranks, f32 sum, tbcoll {transport} vs {peer}; medians of {rounds} interleaved rounds")
print(f"# {'size':>10} {'tbcoll us':>10} {'ompi us':>10} {'time ratio':>10} {'tbcoll busbw':>12} {'ompi busbw':>11} {'bw ratio':>8} {'#wrong':>6}")
for size in sorted(set(ours) & set(theirs)):
    a, b = ours[size], theirs[size]
    t1, t2 = statistics.median(x[0] for x in a), statistics.median(x[0] for x in b)
    w1, w2 = statistics.median(x[1] for x in a), statistics.median(x[1] for x in b)
    wrong = sum(x[2] for x in a) + sum(x[2] for x in b)
    print(f"  {size:>10} {t1:>10.2f} {t2:>10.2f} {t1 / t2:>10.2f} {w1:>12.3f} {w2:>11.3f} {w1 / w2:>8.2f} {wrong:>6}")
PY
rm -rf "$out"
