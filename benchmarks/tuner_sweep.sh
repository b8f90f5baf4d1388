#!/usr/bin/env bash
# Tuner sweep (a benchmark, not a test): for each world size and emulated link, every forced algorithm of a
# collective and the tuner's automatic choices over tcp (auto: the cost model's; measured: TBCOLL_TUNER=measure,
# the model's shortlist timed by the first calls), and per size each automatic choice's time relative to the best
# forced algorithm. The target (issue 15): auto never more than 15% slower than the best forced one.
#
#   benchmarks/tuner_sweep.sh [options]
#     --ranks "2 3 4 8"            world sizes (ranks as processes through tbcoll-run, all on this machine)
#     --links "none tb5-rdma tb5-tcp"  TBCOLL_LINK_EMULATION values; none: no emulation
#     --algos "direct ring"        forced algorithms (default: every point-to-point one of the collective)
#     -c all_reduce                the collective
#     -b 8 -e 64M -f 4             sizes, as tbcoll-perf takes them
#     -n 20 --rounds 5 --budget 2  per size and algorithm: up to 5 rounds of up to 20 timed calls, cut to about
#                                  2 s of timed calls (tbcoll-perf --compare)
#     --out DIR                    keep the CSVs and logs there (default: a temporary directory)
#     --table-only                 no runs: the tables of the CSVs a former run left in --out DIR
# One tbcoll-perf --compare run per world size and link: the algorithms and auto take turns in the same
# processes, round after round, so the machine's noise falls on all of them alike (separate runs per algorithm
# differed by up to 5x on this 2-CPU machine, more than the algorithms differ). Each table row names the
# algorithm auto chose; auto / best = auto's time over the best forced one's ("!" above 1.15), paired by round
# (the median over rounds of auto's batch over the best's batch of the same round: the machine's phases, which
# last seconds, mostly fall on both); choice / best = the forced run of the algorithm auto chose over the best,
# paired alike: the cost of the choice alone, without the noise between two communicators running the same
# algorithm; measured / best and its choice / best alike. The time cells are each algorithm's median over rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
ranks="2 3 4 8"
links="none tb5-rdma tb5-tcp"
algos=""
collective=all_reduce
min=8 max=64M factor=4 iterations=20 rounds=5 budget=2 out="" table_only=0
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
    --rounds) rounds=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --table-only) table_only=1; shift ;;
    -h | --help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
echo "# tuner sweep: $collective over tcp, ranks: $ranks; links: $links; algorithms: $algos+ auto, measured;" \
     "sizes $min..$max x$factor; -n $iterations --rounds $rounds --budget $budget; $(nproc) CPUs; $(date -u +%FT%TZ)"
list=$(echo $algos auto measured | tr ' ' ',')
[ "$table_only" = 1 ] || for link in $links; do
  for n in $ranks; do
    emulation=$link
    [ "$link" = none ] && emulation=""
    started=$(date +%s)
    if ! TBCOLL_LINK_EMULATION=$emulation "$build/tbcoll-run" -n "$n" --timeout 3600 -- \
         "$build/benchmarks/tbcoll-perf" --transport tcp -c "$collective" --compare "$list" -b "$min" -e "$max" \
         -f "$factor" -n "$iterations" --rounds "$rounds" --budget "$budget" --csv "$out/$link.$n.csv" \
         > "$out/$link.$n.log" 2>&1; then
      echo "tuner_sweep.sh: $n ranks, link $link failed:" >&2
      tail -5 "$out/$link.$n.log" >&2
      exit 1
    fi
    echo "# $n ranks, link $link: $(( $(date +%s) - started )) s" >&2
  done
done
python3 - "$out" "$links" "$ranks" <<'PY'
import csv, math, sys
out, links, ranks = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
tuned = ("auto", "measured")
worst = {t: 0.0 for t in tuned}
worst_choice = {t: 0.0 for t in tuned}
over = {t: 0 for t in tuned}
over_choice = {t: 0 for t in tuned}
agree = {t: 0 for t in tuned}
total = 0
for link in links:
    for n in ranks:
        rows = list(csv.DictReader(open(f"{out}/{link}.{n}.csv")))
        algos = [a for a in dict.fromkeys(r["algo"] for r in rows) if a not in tuned]
        times, chosen, paired = {}, {}, {}
        for r in rows:
            size = int(r["size"])
            times.setdefault(size, {})[r["algo"]] = float(r["median_us"])
            # Paired by round against the best forced algorithm (tbcoll-perf --compare); CSVs from before it: the
            # ratio of the medians.
            paired.setdefault(size, {})[r["algo"]] = float(r.get("paired_vs_best") or "nan")
            chosen[size] = {"auto": r["auto_choice"], "measured": r.get("measured_choice", "")}
            if int(r["wrong"]) != 0:
                print(f"WRONG results: {link} {n} ranks {size} B {r['algo']}")
        emulation = rows[0]["emulation"] if rows else ""
        present = [t for t in tuned if any(t in v for v in times.values())]
        print(f"\n## {n} ranks, link {link} ({emulation or 'off'}); time in us")
        print("| size | " + " | ".join(algos) + " | best forced | " +
              " | ".join(f"{t} (choice) | {t} / best | choice / best" for t in present) + " |")
        print("|---" * (len(algos) + 2 + 3 * len(present)) + "|")
        for size in sorted(times):
            forced = {a: t for a, t in times[size].items() if a not in tuned}
            best = min(forced, key=forced.get)
            total += 1
            cells = [f"{forced[a]:.1f}" if a in forced else "-" for a in algos] + [best]
            def against_best(algo):
                if algo not in times[size]:
                    return float("nan")
                ratio = paired[size][algo]
                return times[size][algo] / forced[best] if math.isnan(ratio) else ratio
            for t in present:
                pick = chosen[size][t]
                ratio, choice = against_best(t), against_best(pick)
                worst[t], worst_choice[t] = max(worst[t], ratio), max(worst_choice[t], choice)
                over[t] += ratio > 1.15
                over_choice[t] += choice > 1.15
                agree[t] += best == pick
                cells += [f"{times[size][t]:.1f} ({pick})", f"{ratio:.2f}{' !' if ratio > 1.15 else ''}",
                          f"{choice:.2f}{' !' if choice > 1.15 else ''}"]
            print(f"| {size} | " + " | ".join(cells) + " |")
print()
for t in tuned:
    if worst[t] == 0:
        continue
    print(f"# {t}: worst {t} / best forced over every case: {worst[t]:.2f} (target <= 1.15), above 1.15 at "
          f"{over[t]} of {total} sizes; worst choice / best forced: {worst_choice[t]:.2f}, above 1.15 at "
          f"{over_choice[t]}; chose the best forced algorithm at {agree[t]} of {total} sizes")
PY
