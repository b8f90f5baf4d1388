#!/usr/bin/env bash
# The small-message latency of a 2-rank all_reduce against its limits, interleaved in one run: tbcoll over shm
# against the hand-written shared-memory limit (flag + copy + add, tbcoll-perf --pingpong) and OpenMPI's vader
# (shared memory), and tbcoll over tcp against twice the busy-poll one-way TCP floor --pingpong measures. Every
# round runs each once; the table gives each figure's median over the rounds and the ratios of the medians.
#
#   benchmarks/small_latency.sh [ROUNDS (3)] [ITERATIONS (10000)]      BUILD_DIR=build by default
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
rounds=${1:-3}
iterations=${2:-10000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpi=$build/benchmarks/mpi_allreduce_bench
for round in $(seq "$rounds"); do
  "$build/tbcoll-run" -n 2 -- "$build/benchmarks/tbcoll-perf" --transport shm -b 8 -e 512 -f 8 -n "$iterations" \
    -w 1000 --pingpong --no-tcp-floor > "$out/shm.$round.txt"
  if [ -x "$mpi" ] && command -v mpirun > /dev/null; then
    mpirun --allow-run-as-root -np 2 --bind-to core --mca pml ob1 --mca btl self,vader "$mpi" 8 512 "$iterations" \
      > "$out/vader.$round.txt" 2> /dev/null
  fi
  "$build/tbcoll-run" -n 2 -- "$build/benchmarks/tbcoll-perf" --transport tcp -b 8 -e 8 -n "$iterations" -w 1000 \
    --pingpong > "$out/tcp.$round.txt"
done
python3 - "$out" "$rounds" <<'PY'
import re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
def table_time(text, size):  # tbcoll-perf's out-of-place time at size
    m = re.search(r"^\s+%d\s+\d+\s+\S+\s+\S+\s+\S+\s+([0-9.]+)" % size, text, re.M)
    return float(m.group(1)) if m else None
shm, limit, vader, tcp, floor = {8: [], 64: [], 512: []}, [], {8: [], 64: [], 512: []}, [], []
for r in range(1, rounds + 1):
    text = open(f"{out}/shm.{r}.txt").read()
    for size in shm: shm[size].append(table_time(text, size))
    m = re.search(r"hand-written 2-rank 8 B all-reduce.*?: ([0-9.]+) us", text)
    limit.append(float(m.group(1)) if m else None)
    try:
        for line in open(f"{out}/vader.{r}.txt"):
            parts = line.split()
            if len(parts) >= 2 and parts[0].isdigit() and int(parts[0]) in vader: vader[int(parts[0])].append(float(parts[1]))
    except FileNotFoundError:
        pass
    text = open(f"{out}/tcp.{r}.txt").read()
    tcp.append(table_time(text, 8))
    m = re.search(r"one-way latency, median of \d+ round trips: 8 B ([0-9.]+) us", text)
    floor.append(float(m.group(1)) if m else None)
def show(name, value, against=None, against_name=""):
    ratio = f"  = {value / against:.2f}x {against_name}" if value and against else ""
    print(f"{name:52s} {value if value is not None else float('nan'):8.3f} us{ratio}")
print(f"# medians over {rounds} interleaved rounds")
show("hand-written shm limit, 8 B", med(limit))
for size in shm:
    show(f"tbcoll shm all_reduce, {size} B", med(shm[size]), med(limit) if size == 8 else None, "the hand-written limit")
for size in vader:
    show(f"OpenMPI vader all_reduce, {size} B", med(vader[size]))
    if med(vader[size]) and med(shm[size]): print(f"{'':52s} tbcoll / vader = {med(shm[size]) / med(vader[size]):.2f}")
show("busy-poll TCP one-way floor, 8 B", med(floor))
f2 = 2 * med(floor) if med(floor) else None
show("tbcoll tcp all_reduce, 8 B", med(tcp), f2, "twice the one-way floor")
PY
