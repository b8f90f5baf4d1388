#!/usr/bin/env bash
# distributed-llama on tbcoll, tested as its users run it: worker processes started first, the root connecting
# to them, greedy text compared byte for byte.
#
#   integrations/distributed-llama/test.sh BUILD_DIR text     stories260K from BOS, 256 tokens at temperature 0,
#                                                             equal to the model's published reference text at 1,
#                                                             2 and 4 nodes over dllama's own sockets and over
#                                                             tbcoll (shm; tcp; at 4 nodes both slice modes); a
#                                                             prompt (prefill batches) and a q40 model with Q80
#                                                             syncs equal to dllama's own sync
#   integrations/distributed-llama/test.sh BUILD_DIR faults   a worker killed mid-generation, one stopped, and
#                                                             the root killed: every other node reports it within
#                                                             TBCOLL_TIMEOUT, naming it; nothing hangs
#   integrations/distributed-llama/test.sh BUILD_DIR netns    two network namespaces joined by veth as two hosts:
#                                                             2 nodes (tcp) and 2 x 2 nodes (shm inside a host,
#                                                             tcp across), text equal to the reference
#
# Exit 77 (skipped, with the reason) without dllama's sources (DLLAMA_SRC or ../shared/vendor), the model, or
# (netns) root and namespaces. PYTHON: an interpreter with numpy (default /usr/bin/python3, Debian's).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
project=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: test.sh BUILD_DIR text|faults|netns}" && pwd)
part=${2:?usage: test.sh BUILD_DIR text|faults|netns}
python=${PYTHON:-/usr/bin/python3}
model=${TBCOLL_SHARED_DIR:-$project/../shared}/models
reference=$model/stories260K.greedy.txt

skip() { echo "dllama test: SKIP: $*"; exit 77; }
fail() { echo "dllama test: FAIL: $*" >&2; exit 1; }
[ -n "${DLLAMA_SRC:-}" ] || [ -d "$project/../shared/vendor/distributed-llama/src" ] ||
  skip "no dllama sources (DLLAMA_SRC or ../shared/vendor/distributed-llama)"
[ -f "$model/stories260K.gguf" ] || skip "no model at $model/stories260K.gguf (tools/get-model.sh)"
"$python" -c "import numpy" 2> /dev/null || skip "$python has no numpy (python3-numpy)"

work=$(mktemp -d "${TMPDIR:-/tmp}/tbcoll-dllama.XXXXXX")
pids=()
namespaces=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2> /dev/null; done
  for ns in "${namespaces[@]}"; do
    for pid in $(ip netns pids "$ns" 2> /dev/null); do kill -9 "$pid" 2> /dev/null; done
    ip netns del "$ns" 2> /dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

TBCOLL_BUILD=$build "$here/build.sh" "$build/dllama" > "$work/build.log" 2>&1 || { cat "$work/build.log"; fail "building dllama"; }
dllama=$build/dllama/dllama
"$python" "$here/convert_gguf.py" "$model/stories260K.gguf" "$work/s260k" > /dev/null || fail "converting stories260K"
unset TBCOLL_TRANSPORT TBCOLL_TIMEOUT TBCOLL_HOST_ID DLLAMA_TBCOLL_SLICES TBCOLL_RANK TBCOLL_WORLD_SIZE TBCOLL_ROOT

port=$((20000 + $$ % 10000))  # below Linux's ephemeral ports (32768 up), which other programs' sockets take
host_ids=""
# in_ns NS COMMAND...: COMMAND in namespace NS ("" for this one).
in_ns() {
  local ns=$1
  shift
  if [ -n "$ns" ]; then ip netns exec "$ns" "$@"; else "$@"; fi
}
# start_worker NS LOG [ENV...]: a worker on the next port, in namespace NS; sets $worker_port, appends its pid.
start_worker() {
  local ns=$1 log=$2
  shift 2
  local attempt
  for attempt in 1 2 3 4 5; do  # a port another program holds: the next one
    port=$((port + 1))
    # (not through a function: $! must be the worker itself, ip netns exec and env exec what they run)
    if [ -n "$ns" ]; then
      ip netns exec "$ns" env "$@" "$dllama" worker --port "$port" --nthreads 1 > "$log" 2>&1 &
    else
      env "$@" "$dllama" worker --port "$port" --nthreads 1 > "$log" 2>&1 &
    fi
    local pid=$!
    worker_port=$port
    # dllama does not retry a refused connection: wait for the listening socket (a probe would be taken for the
    # root, so look at the socket table).
    for _ in $(seq 200); do
      if in_ns "$ns" ss -ltn | grep -q ":$port "; then
        pids+=("$pid")
        return 0
      fi
      kill -0 "$pid" 2> /dev/null || break
      sleep 0.05
    done
    wait "$pid" 2> /dev/null
    grep -q "Cannot bind port" "$log" || break
  done
  fail "worker on port $port did not listen: $(cat "$log")"
}
stop_workers() {
  # A run that traces (TBCOLL_TRACE): the workers write theirs as the root leaves them; give them a few seconds.
  if [ -n "${await_traces:-}" ]; then
    for ((i = 0; i < 50; i++)); do
      [ "$(ls "$await_traces"/*.trace.json 2> /dev/null | wc -l)" -ge "$await_count" ] && break
      sleep 0.1
    done
  fi
  for pid in "${pids[@]}"; do kill -9 "$pid" 2> /dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2> /dev/null; done
  pids=()
}
# generate NAME NODES SYNC MODEL [--prompt P] [ENV...]: the root in this namespace, NODES-1 local workers, text
# into $work/NAME.txt. ENV (NAME=VALUE words) goes to every node.
generate() {
  local name=$1 nodes=$2 sync=$3 prefix=$4
  shift 4
  local prompt="" float=f32 steps=256 addresses=() envs=() place=""
  while [ $# -gt 0 ]; do
    case $1 in
      --prompt) prompt=$2; shift 2 ;;
      --place) place=$2; shift 2 ;;  # a letter per node: A or B, the namespace it runs in (netns)
      --q80) float=q80; shift ;;
      --steps) steps=$2; shift 2 ;;
      *) envs+=("$1"); shift ;;
    esac
  done
  for ((i = 1; i < nodes; i++)); do
    if [ -n "$place" ]; then
      start_worker "$(ns_of "${place:$i:1}")" "$work/$name.worker$i.log" "${envs[@]}" \
        ${host_ids:+TBCOLL_HOST_ID=${place:$i:1}}
      addresses+=("$(address_of "${place:$i:1}"):$worker_port")
    else
      start_worker "" "$work/$name.worker$i.log" "${envs[@]}"
      addresses+=("127.0.0.1:$worker_port")
    fi
  done
  local args=(--model "$prefix.m" --tokenizer "$prefix.t" --buffer-float-type "$float" --prompt "$prompt"
              --steps "$steps" --temperature 0 --nthreads 1 --net-turbo 0)
  [ ${#addresses[@]} -gt 0 ] && args+=(--workers "${addresses[@]}" --sync "$sync")
  local in_root=()
  [ -n "$place" ] && in_root=(ip netns exec "$(ns_of "${place:0:1}")")
  timeout 120 "${in_root[@]}" env "${envs[@]}" ${host_ids:+${place:+TBCOLL_HOST_ID=${place:0:1}}} "$dllama" inference "${args[@]}" > "$work/$name.out" 2> "$work/$name.err" ||
    fail "$name: dllama exited $?: $(tail -5 "$work/$name.out" "$work/$name.err"; tail -3 "$work/$name.worker"*.log 2> /dev/null)"
  stop_workers
  python3 "$here/extract_text.py" < "$work/$name.out" > "$work/$name.txt" || fail "$name: no text"
  echo "dllama test: $name: $(grep -a -A2 '^Prediction' "$work/$name.out" | tail -1 | tr -s ' ')"
}
same() {  # same NAME FILE
  cmp -s "$work/$1.txt" "$2" || { diff "$2" "$work/$1.txt" | head -5; fail "$1: text differs from $2"; }
}

case "$part" in
text)
  generate one 1 socket "$work/s260k"
  same one "$reference"
  for nodes in 2 4; do
    generate "socket$nodes" "$nodes" socket "$work/s260k"
    same "socket$nodes" "$reference"
    generate "tbcoll$nodes" "$nodes" tbcoll "$work/s260k"
    same "tbcoll$nodes" "$reference"
    generate "tbcoll${nodes}tcp" "$nodes" tbcoll "$work/s260k" TBCOLL_TRANSPORT=tcp
    same "tbcoll${nodes}tcp" "$reference"
  done
  generate tbcoll4gather 4 tbcoll "$work/s260k" DLLAMA_TBCOLL_SLICES=gather
  same tbcoll4gather "$reference"
  generate tbcoll2reduce 2 tbcoll "$work/s260k" DLLAMA_TBCOLL_SLICES=reduce
  same tbcoll2reduce "$reference"
  # Traced (TBCOLL_TRACE): each node's calls as Chrome trace JSON, one track per rank, the same collectives.
  await_traces=$work/trace await_count=4  # two communicators (data and control) of two ranks
  generate tbcoll2trace 2 tbcoll "$work/s260k" TBCOLL_TRACE="$work/trace"
  same tbcoll2trace "$reference"
  "$python" "$here/check_trace.py" "$work/trace" 2 || fail "tbcoll2trace: the traces"
  await_traces=""
  # A prompt: the prefill runs batches of rows (one call per sync for the whole batch).
  for nodes in 2 4; do
    generate "prompt_socket$nodes" "$nodes" socket "$work/s260k" --prompt "Once upon a time there was a dog" --steps 96
    generate "prompt_tbcoll$nodes" "$nodes" tbcoll "$work/s260k" --prompt "Once upon a time there was a dog" --steps 96
    same "prompt_tbcoll$nodes" "$work/prompt_socket$nodes.txt"
  done
  # q40 weights, Q80 syncs (quantised bytes gathered as they are).
  "$python" "$here/make_synthetic.py" "$work/syn" --dim 256 --layers 2 --heads 8 --kv-heads 4 --weights q40 \
    --seq-len 256 > /dev/null || fail "synthetic q40 model"
  generate q40_socket 2 socket "$work/syn" --q80 --steps 64
  generate q40_tbcoll 2 tbcoll "$work/syn" --q80 --steps 64
  same q40_tbcoll "$work/q40_socket.txt"
  ;;
faults)
  # 4 nodes, a model that generates for seconds; stdout line-buffered so a worker's report is in its log while it
  # goes on (dllama's workers return to listening after an error).
  "$python" "$here/make_synthetic.py" "$work/fault" --dim 1024 --layers 4 --heads 16 --kv-heads 4 --weights q40 \
    --seq-len 4096 > /dev/null || fail "synthetic model"
  timeout_s=3
  slack=2  # the report is printed, then read by this script polling every 20 ms; loaded CI machines lag
  since() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
  # fault_case NAME VICTIM SIGNAL [ENV...]: VICTIM is a node (0 the root); the others must each print a report
  # naming it, within TBCOLL_TIMEOUT (+slack) of the signal.
  fault_case() {
    local name=$1 victim=$2 signal=$3
    shift 3
    local envs=(TBCOLL_TIMEOUT=$timeout_s "$@") addresses=() node_pids=() logs=()
    for i in 1 2 3; do
      start_worker "" "$work/$name.$i.log" "${envs[@]}" stdbuf -oL
      addresses+=("127.0.0.1:$worker_port")
    done
    # start_worker ran `env ENV... stdbuf -oL dllama worker`: stdbuf execs dllama in the same process.
    node_pids=(0 "${pids[@]}")
    env "${envs[@]}" stdbuf -oL "$dllama" inference --model "$work/fault.m" --tokenizer "$work/fault.t" \
      --buffer-float-type q80 --prompt "" --steps 4000 --temperature 0 --nthreads 1 --net-turbo 0 \
      --workers "${addresses[@]}" --sync tbcoll > "$work/$name.0.log" 2>&1 &
    local root=$!
    node_pids[0]=$root
    for i in 0 1 2 3; do logs+=("$work/$name.$i.log"); done
    for _ in $(seq 1500); do  # up to 30 s: 4 nodes of a q40 model on a loaded 2-CPU machine start slowly
      [ "$(grep -ac 'Pred' "${logs[0]}")" -ge 100 ] && break
      sleep 0.02
    done
    [ "$(grep -ac 'Pred' "${logs[0]}")" -ge 100 ] || fail "$name: no generation: $(tail -3 "${logs[@]}")"
    local injected=$EPOCHREALTIME
    kill "-$signal" "${node_pids[$victim]}"
    # Every other node's first report: the root's execution error (it then exits), a worker's.
    local reported=() left=3 named=0 give_up=$((SECONDS + timeout_s + 15)) node line
    while [ $left -gt 0 ] && [ $SECONDS -lt $give_up ]; do
      for node in 0 1 2 3; do
        [ "$node" = "$victim" ] || [ -n "${reported[$node]:-}" ] && continue
        line=$(grep -a -m1 'Execution error\|Network error\|Critical error' "${logs[$node]}") || continue
        reported[$node]=$(since "$injected" "$EPOCHREALTIME")
        left=$((left - 1))
        echo "dllama test: $name: node $node after ${reported[$node]} s: $line"
        # tbcoll names the node that failed (a rank is a node); a node told by another that it gave up quotes
        # that node's reason, which names the victim too. The root serves the job's store, so with the root
        # gone nobody can tell the others why it gave up: a worker that waited for another worker, which gave
        # up on the root and closed its end, names that worker; at least one names the root (checked below).
        if grep -a 'Execution error\|Network error\|Critical error' "${logs[$node]}" | grep -q "peer $victim\b"; then
          named=$((named + 1))
        elif [ "$victim" != 0 ]; then
          fail "$name: node $node does not name node $victim: $(grep -a 'error' "${logs[$node]}")"
        fi
        awk -v t="${reported[$node]}" -v a="$timeout_s" -v b="$slack" 'BEGIN { exit !(t < a + b) }' ||
          fail "$name: node $node reported after ${reported[$node]} s (TBCOLL_TIMEOUT=$timeout_s)"
      done
      sleep 0.02
    done
    [ $left = 0 ] || fail "$name: $left node(s) never reported: $(tail -n 3 "${logs[@]}")"
    [ $named -gt 0 ] || fail "$name: no node names node $victim"
    # The root exits with an error; the workers still run, listening for the next root (dllama's way).
    kill -CONT "${node_pids[$victim]}" 2> /dev/null
    local status=0
    if [ "$victim" != 0 ]; then
      for _ in $(seq 250); do kill -0 "$root" 2> /dev/null || break; sleep 0.02; done
      kill -0 "$root" 2> /dev/null && fail "$name: the root is still running after reporting"
      wait "$root"
      status=$?
      [ "$status" != 0 ] || fail "$name: the root exited 0"
    fi
    for node in 1 2 3; do
      [ "$node" = "$victim" ] || kill -0 "${node_pids[$node]}" 2> /dev/null ||
        fail "$name: worker $node is gone (it should listen for the next root)"
    done
    kill -9 "$root" 2> /dev/null
    wait "$root" 2> /dev/null
    stop_workers
  }
  fault_case "worker killed (shm)" 2 KILL
  fault_case "worker killed (tcp)" 2 KILL TBCOLL_TRANSPORT=tcp
  fault_case "worker stopped (shm)" 3 STOP
  fault_case "root killed (shm)" 0 KILL
  fault_case "root stopped (tcp)" 0 STOP TBCOLL_TRANSPORT=tcp
  ;;
netns)
  # Two hosts: network namespaces joined by a veth pair, A at 10.232.0.1 and B at 10.232.0.2. The root's unique id
  # names the interface that is not loopback (the veth), as it would name bridge0 between two Macs.
  [ "$(id -u)" = 0 ] || skip "not root: network namespaces need CAP_SYS_ADMIN"
  command -v ip > /dev/null || skip "no ip command (iproute2)"
  tag="$$$(date +%N | cut -c1-3)"
  ns_a="tdlA$tag" ns_b="tdlB$tag"
  ip netns add "$ns_a" 2> "$work/ip.err" || skip "cannot create a network namespace: $(cat "$work/ip.err")"
  namespaces+=("$ns_a")
  ip netns add "$ns_b" || fail "second namespace"
  namespaces+=("$ns_b")
  ip link add "va$tag" type veth peer name "vb$tag" 2> "$work/ip.err" || skip "no veth pair: $(cat "$work/ip.err")"
  ip link set "va$tag" netns "$ns_a" && ip link set "vb$tag" netns "$ns_b" || fail "moving the veth ends"
  ip -n "$ns_a" addr add 10.232.0.1/24 dev "va$tag" && ip -n "$ns_b" addr add 10.232.0.2/24 dev "vb$tag" ||
    fail "addresses"
  for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
  ip -n "$ns_a" link set "va$tag" up && ip -n "$ns_b" link set "vb$tag" up || fail "links up"
  ns_of() { if [ "$1" = A ]; then echo "$ns_a"; else echo "$ns_b"; fi; }
  address_of() { if [ "$1" = A ]; then echo 10.232.0.1; else echo 10.232.0.2; fi; }
  # Where the platform layer cannot tell namespaces apart (the posix flavour), each gets its own host id.
  "$build/tbcoll-info" | grep -q "platform layer linux" || host_ids=1
  generate netns_socket2 2 socket "$work/s260k" --place AB
  same netns_socket2 "$reference"
  generate netns_tbcoll2 2 tbcoll "$work/s260k" --place AB TBCOLL_DEBUG=INFO
  same netns_tbcoll2 "$reference"
  grep -aq "rank 0/2: connected (all peers via self,tcp)" "$work/netns_tbcoll2.err" ||
    fail "2 hosts: the root is not on tcp: $(grep -a connected "$work/netns_tbcoll2.err")"
  generate netns_tbcoll4 4 tbcoll "$work/s260k" --place AABB TBCOLL_DEBUG=INFO
  same netns_tbcoll4 "$reference"
  grep -aq "rank 0/4: connected (peers via self,shm,tcp,tcp)" \
    "$work/netns_tbcoll4.err" || fail "2 x 2: the root not on shm and tcp: $(grep -a connected "$work/netns_tbcoll4.err")"
  ;;
*)
  fail "unknown part $part (text, faults or netns)"
  ;;
esac
echo "dllama test: PASS ($part)"
