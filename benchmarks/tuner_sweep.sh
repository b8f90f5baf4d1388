#!/usr/bin/env bash
# Tuner sweep (a benchmark, not a test): for each world size and emulated link, every forced algorithm of a
# collective, a twin of each (the same algorithm on a communicator of its own: the noise control) and the tuner's
# automatic choices over tcp (auto: the cost model's; measured: TBCOLL_TUNER=measure), and per size each automatic
# choice's time relative to the best forced algorithm. The target: auto within 15 % of the best forced algorithm,
# judged on the cells (one world size, link and size) whose twins agree within 5 %; the others are unmeasurable.
#
#   benchmarks/tuner_sweep.sh [options]
#     --ranks "2 3 4 8"             world sizes (ranks as processes through tbcoll-run, all on this machine)
#     --links "tb5-rdma tb5-tcp 10gbe"  TBCOLL_LINK_EMULATION values (presets or latency_us=N,gbps=N); none: off
#     --dilate 100                  time dilation of every emulated link (latency x K, bandwidth / K; 1: none)
#     --algos "direct ring"         forced algorithms (default: every point-to-point one of the collective)
#     --no-twins, --no-measured     leave the twins, or the measured tuner, out
#     -c all_reduce                 the collective
#     -b 16 -e 4M -f 4              sizes, as tbcoll-perf takes them
#     -n 20 --rounds 6 --budget 1   per size and algorithm: up to 6 rounds of up to 20 timed calls, cut to about
#                                   1 s of timed calls (at least 2 rounds of 1; tbcoll-perf --compare)
#     --agree 0.05 --target 1.15    twins agree within 5 %; auto passes at 1.15 x the best or less
#     --out DIR                     keep the CSVs, logs and cells.csv there (default: a temporary directory)
#     --resume                      keep the runs whose CSV --out DIR already holds (a sweep cut short goes on)
#     --table-only                  no runs: the tables of the CSVs a former run left in --out DIR
# One tbcoll-perf --compare run per world size and link: the algorithms, twins and tuners take turns in the same
# processes, round after round. Ratios are paired by round (the median over rounds of x's batch over the best's
# batch of the same round). A cell is measurable when the twins of the best forced algorithm and of the algorithm
# auto chose each agree within --agree (a twin's paired ratio to its original, either way); there auto / best
# decides pass or FAIL. Each run's load (uptime) before and after is printed with its table. cells.csv in --out
# holds one row per cell, for benchmarks/plot.py.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
ranks="2 3 4 8"
links="tb5-rdma tb5-tcp 10gbe"
dilate=100 algos="" twins=1 measured=1 collective=all_reduce
min=16 max=4M factor=4 iterations=20 rounds=6 budget=1 agree=0.05 target=1.15 out="" resume=0 table_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --links) links=$2; shift 2 ;;
    --dilate) dilate=$2; shift 2 ;;
    --algos) algos=$2; shift 2 ;;
    --no-twins) twins=0; shift ;;
    --no-measured) measured=0; shift ;;
    -c) collective=$2; shift 2 ;;
    -b) min=$2; shift 2 ;;
    -e) max=$2; shift 2 ;;
    -f) factor=$2; shift 2 ;;
    -n) iterations=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --agree) agree=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --resume) resume=1; shift ;;
    --table-only) table_only=1; shift ;;
    -h | --help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
# Per link: the emulation asked for, and the file name of its runs.
emulation_of() { if [ "$1" = none ]; then echo ""; elif [ "$dilate" = 1 ]; then echo "$1"; else echo "$1,dilate=$dilate"; fi; }
file_of() { echo "$(emulation_of "$1" | tr ',=' '_-' | sed 's/^$/none/').$2"; }
list=""
for a in $algos; do list+="$a,"; [ "$twins" = 1 ] && list+="$a@2,"; done
list+="auto"
[ "$measured" = 1 ] && list+=",measured"
echo "# tuner sweep: $collective over tcp, ranks: $ranks; links: $links; dilation: $dilate; algorithms: $list;" \
     "sizes $min..$max x$factor; -n $iterations --rounds $rounds --budget $budget; $(nproc) CPUs; $(date -u +%FT%TZ)"
sweep_started=$(date +%s)
[ "$table_only" = 1 ] || for link in $links; do
  for n in $ranks; do
    name=$(file_of "$link" "$n")
    if [ "$resume" = 1 ] && [ -s "$out/$name.csv" ] && [ -s "$out/$name.load" ]; then
      echo "# $n ranks, link $link: kept from a former run" >&2
      continue
    fi
    rm -f "$out/$name.csv"
    echo "# $n ranks, link $link: running (its log: $out/$name.log) ..." >&2
    started=$(date +%s)
    load_before=$(uptime | sed 's/.*load average: //')
    if ! TBCOLL_LINK_EMULATION=$(emulation_of "$link") "$build/tbcoll-run" -n "$n" --timeout 7200 -- \
         "$build/benchmarks/tbcoll-perf" --transport tcp -c "$collective" --compare "$list" -b "$min" -e "$max" \
         -f "$factor" -n "$iterations" --rounds "$rounds" --budget "$budget" --csv "$out/$name.csv" \
         > "$out/$name.log" 2>&1; then
      echo "tuner_sweep.sh: $n ranks, link $link failed:" >&2
      tail -5 "$out/$name.log" >&2
      exit 1
    fi
    seconds=$(( $(date +%s) - started ))
    echo "$seconds s; load average $load_before before, $(uptime | sed 's/.*load average: //') after" \
      > "$out/$name.load"
    echo "# $n ranks, link $link: $(cat "$out/$name.load")" >&2
  done
done
[ "$table_only" = 1 ] || echo "# the runs took $(( $(date +%s) - sweep_started )) s"
runs=""
for link in $links; do for n in $ranks; do runs+="$link:$n:$(file_of "$link" "$n") "; done; done
python3 - "$out" "$agree" "$target" $runs <<'PY'
import csv, math, sys

out, agree, target, runs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
tuned = ("auto", "measured")
fmt = lambda r: "-" if math.isnan(r) else f"{r:.2f}"
cells_out = open(f"{out}/cells.csv", "w", newline="")
cells = csv.writer(cells_out)
cells.writerow(["link", "emulation", "ranks", "size", "best", "best_us", "twin_best", "twin_choice", "measurable"] +
               [f"{t}{c}" for t in tuned for c in ("_choice", "_us", "_vs_best", "_verdict")])
summary = []
for run in runs:
    link, n, name = run.split(":")
    rows = list(csv.DictReader(open(f"{out}/{name}.csv")))
    try:
        load = open(f"{out}/{name}.load").read().strip()
    except OSError:
        load = "load not recorded"
    names = list(dict.fromkeys(r["algo"] for r in rows))
    forced = [a for a in names if a not in tuned and "@" not in a]
    present = [t for t in tuned if t in names]
    by_size = {}
    for r in rows:
        by_size.setdefault(int(r["size"]), {})[r["algo"]] = r
        if int(r["wrong"]) != 0:
            print(f"WRONG results: {link} {n} ranks {r['size']} B {r['algo']}")
    emulation = rows[0]["emulation"] if rows else ""
    print(f"\n## {n} ranks, link {link} ({emulation or 'off'}); time in us; {load}")
    print("| size | " + " | ".join(forced) + " | best | twins: best, choice | measurable | " +
          " | ".join(f"{t} (choice) | {t} / best | verdict" for t in present) + " |")
    print("|---" * (len(forced) + 4 + 3 * len(present)) + "|")
    counts = {"cells": 0, "measurable": 0, **{t: 0 for t in present}}
    for size in sorted(by_size):
        at = by_size[size]
        times = {a: float(r["median_us"]) for a, r in at.items()}
        best = min((a for a in forced if a in times), key=times.get)

        def paired(algo):  # paired by round against the best (ratio of medians for CSVs without it)
            if algo not in at:
                return math.nan
            ratio = float(at[algo].get("paired_vs_best") or "nan")
            return times[algo] / times[best] if math.isnan(ratio) or ratio < 0 else ratio

        def twin(algo):  # the twin's paired ratio to algo, as a distance from 1 either way; nan: no twin
            r = at.get(algo + "@2")
            ratio = float(r.get("paired_vs_twin") or "nan") if r else math.nan
            return math.nan if math.isnan(ratio) or ratio <= 0 else max(ratio, 1 / ratio)

        choice = at[present[0]]["auto_choice"] if present else best
        twin_best, twin_choice = twin(best), twin(choice)
        measurable = all(not math.isnan(x) and x <= 1 + agree for x in (twin_best, twin_choice))
        counts["cells"] += 1
        counts["measurable"] += measurable
        line = [f"{times[a]:.1f}" if a in times else "-" for a in forced] + [best]
        line += [f"{fmt(twin_best)}, {fmt(twin_choice)}", "yes" if measurable else "no"]
        record = [link, emulation, n, size, best, times[best], twin_best, twin_choice, int(measurable)]
        for t in present:
            pick = at[t]["auto_choice" if t == "auto" else "measured_choice"]
            ratio = paired(t)
            verdict = "unmeasurable" if not measurable else ("pass" if ratio <= target else "FAIL")
            counts[t] += verdict == "pass"
            line += [f"{times[t]:.1f} ({pick})", fmt(ratio), verdict]
            record += [pick, times[t], ratio, verdict]
        print(f"| {size} | " + " | ".join(line) + " |")
        cells.writerow(record + [""] * (9 + 4 * len(tuned) - len(record)))
    summary.append((n, link, counts, load))
cells_out.close()
present = [t for t in tuned if any(t in c for _, _, c, _ in summary)]
print("\n## Summary: cells whose twins agree within {:.0f} %, and of those where each tuner is within {:.2f} x the "
      "best forced algorithm".format(agree * 100, target))
print("| ranks | link | cells | measurable | " + " | ".join(f"{t} pass" for t in present) + " | load |")
print("|---" * (5 + len(present)) + "|")
total = {"cells": 0, "measurable": 0, **{t: 0 for t in present}}
for n, link, counts, load in summary:
    for key in total:
        total[key] += counts.get(key, 0)
    print(f"| {n} | {link} | {counts['cells']} | {counts['measurable']} | " +
          " | ".join(f"{counts.get(t, 0)} of {counts['measurable']}" for t in present) + f" | {load} |")
share = total["measurable"] / total["cells"] if total["cells"] else 0
print(f"\n# measurable: {total['measurable']} of {total['cells']} cells ({share * 100:.0f} %; target at least 80 %)")
for t in present:
    print(f"# {t}: within {target:.2f} x the best forced algorithm at {total[t]} of {total['measurable']} measurable "
          f"cells{' (every one)' if total[t] == total['measurable'] else ''}")
PY
