#!/usr/bin/env bash
# Side-by-side, interleaved comparison of tbcoll and OpenMPI on this machine, 2 ranks, f32 sum all-reduce
# (or all-gather). Medians of ROUNDS rounds; each round runs tbcoll then each OpenMPI flavour at every size.
#   benchmarks/compare.sh [tcp|shm] [all_reduce|all_gather] [ROUNDS] [MAX_BYTES] [ITERATIONS]
# tcp: tbcoll over TCP vs OpenMPI ob1 + tcp BTL (loopback).
# shm: tbcoll shm vs OpenMPI ob1 + vader BTL (shm + CMA) and vs OpenMPI's UCX PML (shared memory).
# Every process is pinned to its own core (tbcoll-run and mpirun --bind-to core); time = median over
# ITERATIONS of the slowest rank, as in tbcoll-perf. shm all_reduce also measures the cross-core streaming ceiling
# each round (column max: the highest bw ratio any 2-rank all-reduce could reach against that flavour).
set -euo pipefail
cd "$(dirname "$0")/.."
transport=${1:-tcp}
collective=${2:-all_reduce}
rounds=${3:-3}
max_bytes=${4:-67108864}
iterations=${5:-100}
build=${BUILD_DIR:-build}
case "$transport" in tcp | shm) ;; *) echo "compare.sh: transport must be tcp or shm, not '$transport'" >&2; exit 2 ;; esac
case "$collective" in all_reduce | all_gather) ;; *)
  echo "compare.sh: collective must be all_reduce or all_gather (what the OpenMPI side runs), not '$collective'" >&2
  exit 2 ;;
esac
[ -x "$build/benchmarks/mpi_allreduce_bench" ] || { echo "build first (tools/build.sh) with OpenMPI installed"; exit 1; }
gather=""
[ "$collective" = all_gather ] && gather=gather
# name:mpirun-arguments of each OpenMPI flavour compared against
declare -a peers
if [ "$transport" = shm ]; then
  peers=("vader:--mca pml ob1 --mca btl self,vader"
         "ucx:--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any")
else
  peers=("tcp:--mca pml ob1 --mca btl self,tcp")
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for round in $(seq "$rounds"); do
  echo "compare.sh: round $round of $rounds: tbcoll ($transport, $collective, 8 B to $max_bytes B)" >&2
  "$build/tbcoll-run" -n 2 -- "$build/benchmarks/tbcoll-perf" --transport "$transport" -c "$collective" \
    -b 8 -e "$max_bytes" -f 2 -n "$iterations" --csv "$out/tbcoll.$round.csv" > /dev/null
  if [ "$transport" = shm ] && [ "$collective" = all_reduce ]; then  # the cross-core streaming ceiling
    "$build/tbcoll-run" -n 2 -- "$build/benchmarks/tbcoll-perf" --transport shm --pingpong -b 8 -e 8 -n 10 |
      sed -nE 's/.*raw shared-memory streaming.*: ([0-9.]+) GB\/s per direction.*/\1/p' > "$out/ceiling.$round.txt"
  fi
  for peer in "${peers[@]}"; do
    name=${peer%%:*}
    echo "compare.sh: round $round of $rounds: OpenMPI $name" >&2
    # shellcheck disable=SC2086  # the flavour's arguments are split on purpose
    mpirun --allow-run-as-root -np 2 --bind-to core ${peer#*:} \
      "$build/benchmarks/mpi_allreduce_bench" 8 "$max_bytes" "$iterations" $gather > "$out/$name.$round.txt" \
      2> "$out/$name.$round.err" ||
      { echo "OpenMPI $name failed:"; cat "$out/$name.$round.txt" "$out/$name.$round.err"; exit 1; }
  done
done
names=""
for peer in "${peers[@]}"; do names="$names ${peer%%:*}"; done
python3 - "$out" "$rounds" "$transport" "$collective" $names <<'PY'
import csv, statistics, sys
out, rounds, transport, collective, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
ours, theirs = {}, {name: {} for name in names}
for r in range(1, rounds + 1):
    for row in csv.DictReader(open(f"{out}/tbcoll.{r}.csv")):
        if row["inplace"] == "0":
            ours.setdefault(int(row["size"]), []).append((float(row["median_us"]), float(row["busbw"]), int(row["wrong"])))
    for name in names:
        for line in open(f"{out}/{name}.{r}.txt"):
            fields = line.split()
            if len(fields) != 4 or not fields[0].isdigit():
                continue  # anything OpenMPI printed besides the rows
            size, us, bw, wrong = fields
            theirs[name].setdefault(int(size), []).append((float(us), float(bw), int(wrong)))
med = lambda rows, i: statistics.median(x[i] for x in rows)
ceilings = []
for r in range(1, rounds + 1):
    try:
        ceilings += [float(x) for x in open(f"{out}/ceiling.{r}.txt").read().split()]
    except FileNotFoundError:
        pass
if ceilings:
    # A 2-rank all-reduce moves its whole size each way between the cores: its busbw cannot pass this.
    ceiling = statistics.median(ceilings)
    print(f"# cross-core streaming ceiling (tbcoll-perf --pingpong, both ways at once), median of {len(ceilings)}: "
          f"{ceiling:.2f} GB/s per direction = the highest busbw any 2-rank all-reduce can reach here; "
          f"'max' = that ceiling / OpenMPI's busbw, the highest bw ratio possible")
print(f"# {collective}, 2 ranks, f32 sum, out of place, tbcoll {transport} vs OpenMPI {', '.join(names)}; "
      f"medians of {rounds} interleaved rounds")
print("# time ratio = tbcoll time / OpenMPI time (lower is better); bw ratio = OpenMPI time / tbcoll time, i.e. "
      "tbcoll busbw / OpenMPI busbw at this size (from the median times, not the rounded busbw columns)")
head = f"# {'size':>10} {'tbcoll us':>10} {'busbw':>7}"
for name in names:
    head += f" | {name + ' us':>10} {'busbw':>7} {'t ratio':>7} {'bw ratio':>8}" + (f" {'max':>6}" if ceilings else "")
print(head + f" {'#wrong':>6}")
for size in sorted(set(ours).intersection(*(theirs[n] for n in names))):
    t, w = med(ours[size], 0), med(ours[size], 1)
    wrong = sum(x[2] for x in ours[size])
    line = f"  {size:>10} {t:>10.2f} {w:>7.3f}"
    for name in names:
        rows = theirs[name][size]
        t2, w2 = med(rows, 0), med(rows, 1)
        wrong += sum(x[2] for x in rows)
        line += f" | {t2:>10.2f} {w2:>7.3f} {t / t2:>7.2f} {t2 / t:>8.2f}"
        if ceilings:
            line += f" {ceiling / (size / t2 / 1e3):>6.2f}"  # OpenMPI's busbw from its median time (2 ranks)
    print(line + f" {wrong:>6}")
PY
