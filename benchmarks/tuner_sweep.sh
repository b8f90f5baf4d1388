#!/usr/bin/env bash
# Tuner sweep (a benchmark, not a test): for each world size and emulated link, every forced algorithm of a
# collective and the tuner's automatic choice over tcp, and per size the automatic choice's time relative to the
# best forced algorithm. The target (issue 15): auto never more than 15% slower than the best forced one.
#
#   benchmarks/tuner_sweep.sh [options]
#     --ranks "2 3 4 8"            world sizes (ranks as processes through tbcoll-run, all on this machine)
#     --links "none tb5-rdma tb5-tcp"  TBCOLL_LINK_EMULATION values; none: no emulation
#     --algos "direct ring"        forced algorithms (default: every point-to-point one tbcoll-info lists)
#     -c all_reduce                the collective
#     -b 8 -e 64M -f 4             sizes, as tbcoll-perf takes them
#     -n 10 -w 2                   timed and warm-up iterations per size (tbcoll-perf's -n, -w)
#     --rounds 1                   runs of every case; the table takes each algorithm's median over rounds,
#                                  and the rounds interleave the algorithms (the machine's noise moves slowly)
#     --out DIR                    keep the CSVs there (default: a temporary directory)
#     --table-only                 no runs: the tables of the CSVs a former run left in --out DIR
# Times are tbcoll-perf's (median over iterations of the slowest rank, out of place). Each row names the
# algorithm auto chose; auto / best = the automatic run's time over the best forced one's ("!" above 1.15);
# choice / best = the forced run of the algorithm auto chose over the best forced one: the cost of the choice
# alone, without the noise between the automatic run and the forced runs (which on an oversubscribed machine
# can exceed the differences between algorithms).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
ranks="2 3 4 8"
links="none tb5-rdma tb5-tcp"
algos=""
collective=all_reduce
min=8 max=64M factor=4 iterations=10 warmup=2 rounds=1 out="" table_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --links) links=$2; shift 2 ;;
    --algos) algos=$2; shift 2 ;;
    -c) collective=$2; shift 2 ;;
    -b) min=$2; shift 2 ;;
    -e) max=$2; shift 2 ;;
    -f) factor=$2; shift 2 ;;
    -n) iterations=$2; shift 2 ;;
    -w) warmup=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --table-only) table_only=1; shift ;;
    -h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "tuner_sweep.sh: unknown option '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
for tool in tbcoll-run tbcoll-info benchmarks/tbcoll-perf; do
  [ -x "$build/$tool" ] || { echo "tuner_sweep.sh: $build/$tool missing: build first (tools/build.sh)" >&2; exit 1; }
done
if [ -z "$algos" ]; then  # the collective's rows in tbcoll-info, fast paths (named "x (device)") left out
  algos=$("$build/tbcoll-info" | awk -v c="$collective" '
    /^algorithms/ { on = 1; next } /^$/ { on = 0 }
    on && $0 ~ "^  [a-z_]+$" { mine = ($1 == c); next }
    on && mine && $0 ~ "^    " && $2 !~ /^\(/ { printf "%s ", $1 }')
fi
[ -n "$algos" ] || { echo "tuner_sweep.sh: no algorithms found for '$collective'" >&2; exit 1; }
if [ "$table_only" = 1 ] && [ -z "$out" ]; then
  echo "tuner_sweep.sh: --table-only needs --out DIR" >&2
  exit 2
fi
if [ -z "$out" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
echo "# tuner sweep: $collective over tcp, ranks: $ranks; links: $links; algorithms: $algos+ auto;" \
     "sizes $min..$max x$factor; -n $iterations -w $warmup; $rounds round(s); $(nproc) CPUs; $(date -u +%FT%TZ)"
[ "$table_only" = 1 ] || for link in $links; do
  for n in $ranks; do
    for round in $(seq "$rounds"); do
      for algo in $algos auto; do
        emulation=$link
        [ "$link" = none ] && emulation=""
        forced=()
        [ "$algo" = auto ] || forced=(--algo "$collective:$algo")
        csv="$out/$link.$n.$algo.$round.csv"
        if ! TBCOLL_LINK_EMULATION=$emulation "$build/tbcoll-run" -n "$n" --timeout 1800 -- \
             "$build/benchmarks/tbcoll-perf" --transport tcp -c "$collective" "${forced[@]}" -b "$min" -e "$max" \
             -f "$factor" -n "$iterations" -w "$warmup" --csv "$csv" > "$out/$link.$n.$algo.$round.log" 2>&1; then
          echo "tuner_sweep.sh: $algo at $n ranks, link $link failed:" >&2
          tail -5 "$out/$link.$n.$algo.$round.log" >&2
          exit 1
        fi
      done
    done
  done
done
python3 - "$out" "$links" "$ranks" "$algos" "$rounds" <<'PY'
import csv, statistics, sys
out, links, ranks, algos, rounds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split(), int(sys.argv[5])
worst_overall = worst_choice_overall = 0
agree = total = 0
for link in links:
    for n in ranks:
        times, chosen, emulation = {}, {}, ""
        for algo in algos + ["auto"]:
            for r in range(1, rounds + 1):
                for row in csv.DictReader(open(f"{out}/{link}.{n}.{algo}.{r}.csv")):
                    if row["inplace"] != "0":
                        continue
                    size = int(row["size"])
                    times.setdefault(algo, {}).setdefault(size, []).append(float(row["median_us"]))
                    if algo == "auto":
                        chosen.setdefault(size, set()).add(row["algo"])
                    emulation = row.get("emulation", "")
        print(f"\n## {n} ranks, link {link} ({emulation or 'off'}); time in us (median of {rounds} round(s))")
        print("| size | " + " | ".join(algos) + " | auto (choice) | best forced | auto / best | choice / best |")
        print("|---" * (len(algos) + 5) + "|")
        worst = worst_choice = 0
        for size in sorted(times["auto"]):
            forced = {a: statistics.median(times[a][size]) for a in algos if size in times.get(a, {})}
            auto = statistics.median(times["auto"][size])
            best = min(forced, key=forced.get)
            ratio = auto / forced[best]
            worst = max(worst, ratio)
            cells = " | ".join(f"{forced[a]:.1f}" if a in forced else "-" for a in algos)
            mark = " !" if ratio > 1.15 else ""
            picks = sorted(chosen[size])
            choice = max(forced[p] for p in picks if p in forced) / forced[best] if any(p in forced for p in picks) else float("nan")
            worst_choice = max(worst_choice, choice)
            total += 1
            agree += best in picks
            choice_mark = " !" if choice > 1.15 else ""
            print(f"| {size} | {cells} | {auto:.1f} ({'/'.join(picks)}) | {best} | {ratio:.2f}{mark} | {choice:.2f}{choice_mark} |")
        print(f"worst auto / best forced: {worst:.2f}; worst choice / best forced: {worst_choice:.2f}")
        worst_overall = max(worst_overall, worst)
        worst_choice_overall = max(worst_choice_overall, worst_choice)
print(f"\n# worst auto / best forced over every case: {worst_overall:.2f} (target <= 1.15); worst choice / best "
      f"forced: {worst_choice_overall:.2f}; auto chose the best forced algorithm at {agree} of {total} sizes")
PY
