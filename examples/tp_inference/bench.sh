#!/usr/bin/env bash
# Prefill and decode speed of tp_inference at TP=1, TP=2 (tcp and shm) and PP=2, as one markdown table.
#
#   examples/tp_inference/bench.sh BUILD_DIR [MODEL_DIR]
#
# Builds nothing: BUILD_DIR must hold tbcoll-run and examples/tp_inference/{tp_inference,tp_make_synthetic}. The
# synthetic models (random weights, see make_synthetic.cc) are written to MODEL_DIR (default
# ${TMPDIR:-/tmp}/tp_inference_bench) when missing. stories260K.gguf is taken from $TP_BENCH_STORIES or
# ../shared/models next to the repository (tools/get-model.sh downloads it).
#
# Every cell is the median of $TP_BENCH_RUNS (default 3) runs of a fixed ~100-token prompt (the "prompt" column
# gives its length in each model's tokens) followed by $TP_BENCH_TOKENS (default 128) generated tokens with
# --ignore-eos, greedy; the runs of a row's configurations are interleaved, so a noisy spell hits them all alike.
# Prefill tok/s = prompt tokens / time to the first generated token; decode tok/s covers the remaining tokens.
# "comm" is the TP=2 shm rank 0's time inside collectives per decode token (waiting for the
# other rank included) and its share of decode time. Never run more ranks than cores when measuring.
#
# Then one rank against a plain C reference (reference/reference.c, -Ofast -march=native) on stories260K.
# A second table runs TP=2 and PP=2 over emulated links (TBCOLL_LINK_DELAY_US on tcp): $TP_BENCH_SLOW_US
# (default 300) and $TP_BENCH_FAST_US (default 8) microseconds of extra one-way latency. TP_BENCH_LINKS=0 skips it.
set -euo pipefail

if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
build="$(cd "$1" && pwd)"
script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
model_dir="${2:-${TMPDIR:-/tmp}/tp_inference_bench}"
runs="${TP_BENCH_RUNS:-3}"
tokens="${TP_BENCH_TOKENS:-128}"
stories="${TP_BENCH_STORIES:-$script_dir/../../../shared/models/stories260K.gguf}"

engine="$build/examples/tp_inference/tp_inference"
maker="$build/examples/tp_inference/tp_make_synthetic"
launcher="$build/tbcoll-run"
for f in "$engine" "$maker" "$launcher"; do
  [[ -x "$f" ]] || { echo "bench.sh: $f not found: build tp_inference, tp_make_synthetic and tbcoll-run first" >&2; exit 1; }
done
[[ -r "$stories" ]] || { echo "bench.sh: $stories not found (run tools/get-model.sh or set TP_BENCH_STORIES)" >&2; exit 1; }

mkdir -p "$model_dir"
for shape in cache 110m; do
  if [[ ! -s "$model_dir/synthetic-$shape.gguf" ]]; then
    "$maker" --shape "$shape" --out "$model_dir/synthetic-$shape.gguf" >&2
  fi
done

prompt="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her \
friends. One day, she saw a big red ball under a tree. She ran to get it, but a small dog took the ball and ran away."

# One run of a configuration; prints "prompt_tokens prefill decode comm_us comm_pct" ("0 - - - -" if it failed).
run_once() {
  local model="$1" ranks="$2" mode="$3" transport="$4" delay="${5:-0}" line
  local -a cmd=("$engine" --model "$model" --prompt "$prompt" --tokens "$tokens" --ignore-eos --mode "$mode")
  if [[ "$ranks" -gt 1 ]]; then
    cmd=("$launcher" -n "$ranks" --timeout 600 -x "TBCOLL_TRANSPORT=$transport" -x "TBCOLL_LINK_DELAY_US=$delay" \
         -- "${cmd[@]}")
  fi
  line="$("${cmd[@]}" 2>&1 >/dev/null | grep 'tp_inference: model=' | tail -1)" || true
  if [[ -z "$line" ]]; then
    echo "bench.sh: run failed: ${cmd[*]}" >&2
    echo "0 - - - -"
    return
  fi
  echo "$(sed -E 's/.*prefill ([0-9]+) tok.*/\1/' <<<"$line")" \
       "$(sed -E 's/.*prefill [0-9]+ tok ([0-9.]+) tok\/s.*/\1/' <<<"$line")" \
       "$(sed -E 's/.*decode [0-9]+ tok ([0-9.]+) tok\/s.*/\1/' <<<"$line")" \
       "$(sed -E 's/.*of decode \(([0-9.]+) us\/tok\).*/\1/' <<<"$line")" \
       "$(sed -E 's/.*, ([0-9.]+)% of decode.*/\1/' <<<"$line")"
}

# Runs every configuration given ("ranks mode transport delay" each, for model $1) $runs times, interleaved
# (round 1 of every configuration, then round 2, ...), so a noisy spell of the machine hits all of them alike;
# prints one line per configuration, in order: "prompt_tokens prefill_median decode_median comm_us comm_pct".
measure() {
  local model="$1" round i
  shift
  local results
  results="$(mktemp -d)"
  for ((round = 0; round < runs; ++round)); do
    for ((i = 1; i <= $#; ++i)); do
      # shellcheck disable=SC2086  # the configuration is deliberately split into its words
      run_once "$model" ${!i} >>"$results/$i"
    done
  done
  for ((i = 1; i <= $#; ++i)); do
    awk '$1 == 0 { failed = 1 }
         { n++; prompt = $1; for (c = 2; c <= 5; ++c) v[c, n] = $c }
         END {
           if (failed) { print "0 - - - -"; exit }
           line = prompt
           for (c = 2; c <= 5; ++c) {
             for (a = 1; a <= n; ++a) col[a] = v[c, a]
             for (a = 2; a <= n; ++a) { x = col[a]; b = a - 1; while (b >= 1 && col[b] + 0 > x + 0) { col[b + 1] = col[b]; --b } col[b + 1] = x }
             m = n % 2 ? col[(n + 1) / 2] : (col[n / 2] + col[n / 2 + 1]) / 2  # even n: mean of the middle two
             line = line " " m
           }
           print line
         }' "$results/$i"
  done
  rm -rf "$results"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a != "-") printf "%.2fx", a / b; else printf "-" }'; }

models=("stories260K|$stories" "synthetic cache-resident (dim 256, 4 layers, 13 MB F32)|$model_dir/synthetic-cache.gguf"
        "synthetic 110M (dim 768, 12 layers, 440 MB F32)|$model_dir/synthetic-110m.gguf")
echo "| model | prompt tok | TP=1 prefill / decode | TP=2 tcp prefill / decode | TP=2 shm prefill / decode | PP=2 prefill / decode | TP=2 shm comm per decode token | TP=2 shm vs TP=1 prefill / decode |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for entry in "${models[@]}"; do
  name="${entry%%|*}"
  model="${entry#*|}"
  {
    read -r n1 p1 d1 _ _
    read -r _ pt dt _ _
    read -r _ ps ds cus cpct
    read -r _ pp dp _ _
  } < <(measure "$model" "1 tensor shm" "2 tensor tcp" "2 tensor shm" "2 pipeline shm")
  echo "| $name | $n1 | $p1 / $d1 | $pt / $dt | $ps / $ds | $pp / $dp | $cus us ($cpct%) | $(ratio "$ps" "$p1") / $(ratio "$ds" "$d1") |"
done
echo
echo "tok/s, median of $runs runs; $tokens generated tokens; $(nproc) cores; synthetic models have random weights."

# Single rank against the plain C reference (reference/reference.c, -Ofast -march=native), same workload: greedy
# from BOS, 256 tokens, tokens/s over all steps after the first; alternating runs, medians.
exporter="$build/examples/tp_inference/tp_export_llama2c"
reference="$build/examples/tp_inference/tp_reference"
if [[ -x "$exporter" && -x "$reference" ]]; then
  "$exporter" "$stories" "$model_dir/stories260K.llama2c.bin"
  ours=() theirs=()
  for ((i = 0; i < runs; ++i)); do
    theirs+=("$("$reference" "$model_dir/stories260K.llama2c.bin" 256 2>&1 >/dev/null | sed -E 's/.* ([0-9.]+) tok\/s/\1/')")
    ours+=("$("$engine" --model "$stories" --tokens 256 2>&1 >/dev/null | sed -nE 's/.*decode [0-9]+ tok ([0-9.]+) tok\/s.*/\1/p')")
  done
  median() {
    printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
  }
  echo
  echo "stories260K, one rank, greedy from BOS, 256 tokens: tp_inference $(median "${ours[@]}") tok/s, plain C reference" \
       "(-Ofast -march=native) $(median "${theirs[@]}") tok/s: $(ratio "$(median "${ours[@]}")" "$(median "${theirs[@]}")")"
fi
[[ "${TP_BENCH_LINKS:-1}" == 0 ]] && exit 0
echo
echo "Emulated links (tcp plus TBCOLL_LINK_DELAY_US extra one-way latency on every message): ~${TP_BENCH_SLOW_US:-300} us as"
echo "all-reduces reportedly take over Thunderbolt TCP, ~${TP_BENCH_FAST_US:-8} us as over Thunderbolt RDMA."
echo
echo "| model | TP=2 prefill / decode, +${TP_BENCH_SLOW_US:-300} us | PP=2 prefill / decode, +${TP_BENCH_SLOW_US:-300} us | TP=2 prefill / decode, +${TP_BENCH_FAST_US:-8} us | PP=2 prefill / decode, +${TP_BENCH_FAST_US:-8} us | TP=2 decode, fast vs slow link |"
echo "|---|---:|---:|---:|---:|---:|"
for entry in "${models[@]}"; do
  name="${entry%%|*}"
  model="${entry#*|}"
  {
    read -r _ pts dts _ _
    read -r _ pps dps _ _
    read -r _ ptf dtf _ _
    read -r _ ppf dpf _ _
  } < <(measure "$model" "2 tensor tcp ${TP_BENCH_SLOW_US:-300}" "2 pipeline tcp ${TP_BENCH_SLOW_US:-300}" \
                 "2 tensor tcp ${TP_BENCH_FAST_US:-8}" "2 pipeline tcp ${TP_BENCH_FAST_US:-8}")
  echo "| $name | $pts / $dts | $pps / $dps | $ptf / $dtf | $ppf / $dpf | $(ratio "$dtf" "$dts") |"
done
