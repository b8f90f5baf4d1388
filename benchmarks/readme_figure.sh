#!/usr/bin/env bash
# The README's all-reduce picture, measured in one run on this machine: tbcoll over shared memory and tcp, OpenMPI
# (vader and tcp BTLs), gloo through torch.distributed, and the hand-written shared-memory limit at 8 B; 2 ranks,
# f32 sum, in rounds where every one of them runs once (so all share the machine's state), each figure the median
# over rounds of a round's median call time of the slower rank (the statistic every one of these tools prints).
# Writes OUT/all_reduce_2ranks.csv (label, size, time_us, busbw_gbs) and draws it with benchmarks/plot.py, the
# machine, the date and this command in the caption. Run it on a quiet machine (a few minutes).
#   benchmarks/readme_figure.sh [--rounds N] [--max BYTES] [--out DIR]   (defaults: 3, 16777216, docs/img)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3 max=16777216 out=docs/img data=docs/data
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --max) max=$2; shift 2 ;;
    --out) out=$2; data=$2; shift 2 ;;
    -h | --help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "readme_figure.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
build=build
for tool in tbcoll-run benchmarks/tbcoll-perf benchmarks/mpi_allreduce_bench; do
  [ -x "$build/$tool" ] || { echo "readme_figure.sh: $build/$tool missing (tools/build.sh with OpenMPI)" >&2; exit 1; }
done
command -v mpirun > /dev/null || { echo "readme_figure.sh: mpirun missing (tools/setup.sh)" >&2; exit 1; }
python=/usr/bin/python3  # Debian's, with torch and numpy
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpi=(mpirun --allow-run-as-root -np 2 --bind-to core)
for round in $(seq "$rounds"); do
  for transport in shm tcp; do
    echo "readme_figure.sh: round $round of $rounds: tbcoll $transport" >&2
    "$build/tbcoll-run" -n 2 -- "$build/benchmarks/tbcoll-perf" --transport "$transport" -b 8 -e "$max" -f 4 \
      --csv "$work/tbcoll-$transport.$round.csv" > /dev/null
  done
  echo "readme_figure.sh: round $round of $rounds: the hand-written shared-memory limit" >&2
  "$build/tbcoll-run" -n 2 -- "$build/benchmarks/tbcoll-perf" --transport shm --pingpong --no-tcp-floor -b 8 -e 8 \
    -n 100 | sed -nE 's/.*hand-written 2-rank 8 B all-reduce.*: ([0-9.]+) us.*/\1/p' > "$work/limit.$round.txt"
  for btl in vader tcp; do
    echo "readme_figure.sh: round $round of $rounds: OpenMPI $btl" >&2
    "${mpi[@]}" --mca pml ob1 --mca btl "self,$btl" "$build/benchmarks/mpi_allreduce_bench" 8 "$max" 200 \
      > "$work/ompi-$btl.$round.txt"
  done
  echo "readme_figure.sh: round $round of $rounds: gloo (torch.distributed)" >&2
  "$build/tbcoll-run" -n 2 -x PYTHONPATH="$build/python" -- "$python" benchmarks/torch_allreduce.py --min 8 \
    --max "$max" --rounds 1 --csv "$work/torch.$round.csv" > /dev/null
done
mkdir -p "$data" "$out"
machine="$(lscpu | sed -nE 's/^Model name: *//p' | head -1), $(nproc) CPUs"
"$python" - "$work" "$rounds" "$data/all_reduce_2ranks.csv" <<'PY'
import csv, statistics, sys
work, rounds, target = sys.argv[1], int(sys.argv[2]), sys.argv[3]
series = {}  # label -> size -> [time_us per round]
def add(label, size, us):
    series.setdefault(label, {}).setdefault(size, []).append(us)
for r in range(1, rounds + 1):
    for transport in ("shm", "tcp"):
        for row in csv.DictReader(open(f"{work}/tbcoll-{transport}.{r}.csv")):
            if row["inplace"] == "0":
                add(f"tbcoll {transport}", int(row["size"]), float(row["median_us"]))
    for btl in ("vader", "tcp"):
        for line in open(f"{work}/ompi-{btl}.{r}.txt"):
            f = line.split()
            if len(f) == 4 and f[0].isdigit():
                add(f"OpenMPI {btl}", int(f[0]), float(f[1]))
    for row in csv.DictReader(open(f"{work}/torch.{r}.csv")):
        add("gloo (torch)", int(row["bytes"]), float(row["gloo median s"]) * 1e6)
    limit = open(f"{work}/limit.{r}.txt").read().split()
    if limit:
        add("hand-written shm limit", 8, float(limit[0]))
with open(target, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["label", "size", "time_us", "busbw_gbs"])
    for label, sizes in series.items():
        for size in sorted(sizes):
            us = statistics.median(sizes[size])
            w.writerow([label, size, f"{us:.3f}", f"{size / us / 1e3:.4f}"])  # busbw at 2 ranks = algbw
PY
title="all_reduce f32, 2 ranks, one machine ($machine), $(date -u +%F): median over $rounds interleaved rounds of each \
round's median call; benchmarks/readme_figure.sh --rounds $rounds --max $max"
"$python" benchmarks/plot.py figure "$data/all_reduce_2ranks.csv" --title "$title" --out "$out" \
  --prefix all-reduce-2ranks
echo "readme_figure.sh: wrote $data/all_reduce_2ranks.csv and $out/all-reduce-2ranks-figure.png" >&2
