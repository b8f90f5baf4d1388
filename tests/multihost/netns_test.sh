#!/usr/bin/env bash
# Multi-host tbcoll-run between two network namespaces joined by a veth pair, each namespace a "host" with its own
# address (ranks in different network namespaces count as different hosts: tcp between them, shm inside one).
#
#   tests/multihost/netns_test.sh BUILD_DIR MODEL demo     the README's "Two machines" steps: install into a
#                                                           prefix, tools/run-2node-demo.sh nsA nsB with the agent
#                                                           swapped for `ip netns exec`; text equal to 1 rank's;
#                                                           then 2 x 2 ranks (shm inside a host, tcp across)
#   tests/multihost/netns_test.sh BUILD_DIR MODEL faults   an unreachable host, a host that never answers, a rank
#                                                           killed on the second host, SIGINT to the launcher: every
#                                                           rank on every host gone, no segment left, a clear message
#   tests/multihost/netns_test.sh BUILD_DIR MODEL halfopen a host vanishes mid-job (its veth end taken down, or its
#                                                           packets dropped with links up: no RST, no FIN): every rank
#                                                           on both hosts fails in the deadline naming the call and a
#                                                           peer on the other host; a link down for 0.5 s is survived
#                                                           (TCP retransmits)
#
# Exit 77 (skipped, with the reason) where namespaces cannot be made: not root, no `ip`, no netns support.
# Namespace and interface names are unique per run and removed on exit, whatever happens.
set -uo pipefail
build=$(cd "$1" && pwd)
model=$2
what=$3
source_dir=$(cd "$(dirname "$0")/../.." && pwd)

skip() { echo "netns_test: SKIP: $*"; exit 77; }
fail() { echo "netns_test: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || skip "not root: network namespaces need CAP_SYS_ADMIN"
command -v ip > /dev/null || skip "no ip command (iproute2)"

tag="$$$(date +%N | cut -c1-3)"
ns_a="tbcA$tag" ns_b="tbcB$tag"
veth_a="tva$tag" veth_b="tvb$tag"
work=$(mktemp -d "${TMPDIR:-/tmp}/tbcoll-netns.XXXXXX")
cleanup() {
  for ns in "$ns_a" "$ns_b"; do
    # Whatever still runs in a namespace is a failure already reported; it must not outlive the test.
    for pid in $(ip netns pids "$ns" 2> /dev/null); do kill -9 "$pid" 2> /dev/null; done
    ip netns del "$ns" 2> /dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
ip netns add "$ns_a" 2> "$work/ip.err" || skip "cannot create a network namespace: $(cat "$work/ip.err")"
ip netns add "$ns_b" || fail "second namespace"
ip link add "$veth_a" type veth peer name "$veth_b" 2> "$work/ip.err" || skip "no veth pair: $(cat "$work/ip.err")"
ip link set "$veth_a" netns "$ns_a" && ip link set "$veth_b" netns "$ns_b" || fail "moving the veth ends"
ip -n "$ns_a" addr add 10.231.0.1/24 dev "$veth_a" && ip -n "$ns_b" addr add 10.231.0.2/24 dev "$veth_b" ||
  fail "addresses"
ip -n "$ns_a" addr add 10.231.0.11/24 dev "$veth_a" || fail "a second address"  # for the hostfile's "ips"
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns_a" link set "$veth_a" up && ip -n "$ns_b" link set "$veth_b" up || fail "links up"

# The README's steps: an install prefix (the same path on both "machines") holding the tools and the model.
prefix=$work/prefix
if [ "$what" != halfopen ]; then  # (that part runs the build tree's test program)
  cmake --install "$build" --prefix "$prefix" > /dev/null || fail "cmake --install"
  mkdir -p "$prefix/models"
  [ -f "$model" ] && cp "$model" "$prefix/models/stories260K.gguf"
fi
# A command runs on a host as `$in_host HOST COMMAND...`. The Linux platform layer tells network namespaces apart
# by itself (platform::network_domain); the others cannot (POSIX has no namespaces, macOS none to tell), so there
# the ranks of both namespaces would share one host's memory and talk shm: each namespace then gets its own
# TBCOLL_HOST_ID, as two real machines have two kernel ids.
in_host="ip netns exec"
if ! "$build/tbcoll-info" | grep -q "platform layer linux"; then
  in_host=$work/in-host
  printf '#!/bin/sh\nhost=$1\nshift\nexec ip netns exec "$host" env TBCOLL_HOST_ID="$host" "$@"\n' > "$in_host"
  chmod +x "$in_host"
fi
export TBCOLL_PREFIX=$prefix
export TBCOLL_DEMO_LAUNCHER=$in_host
export TBCOLL_SOCKET_IFNAME=tva,tvb  # the veth ends: what bridge0 is between two Macs
unset TBCOLL_HOST_ID TBCOLL_ROOT TBCOLL_RANK TBCOLL_WORLD_SIZE
demo=$source_dir/tools/run-2node-demo.sh
run=$prefix/bin/tbcoll-run

# Processes still in either namespace (the agents' and ranks' pids), none expected once a job is over.
leftovers() { ip netns pids "$ns_a"; ip netns pids "$ns_b"; }
# Segments in /dev/shm whose owner is one of the pids given (names carry the owner's pid in hex).
segments_of() {
  for pid in "$@"; do ls /dev/shm 2> /dev/null | grep -E "^tb[0-9a-f]*-$(printf '%x' "$pid")-" || true; done
}

case "$what" in
demo)
  # The README shows what the script runs, and the script is what runs here: the two must not drift apart.
  readme_command=$(env -u TBCOLL_PREFIX -u TBCOLL_DEMO_LAUNCHER "$demo" --print mac1.local mac2.local)
  tr '\n' ' ' < "$source_dir/README.md" | tr -s ' ' | grep -qF "$readme_command" ||
    fail "README.md does not show the command tools/run-2node-demo.sh runs: $readme_command"
  grep -q '^ *TBCOLL_SOCKET_IFNAME=bridge0 tools/run-2node-demo.sh mac1.local mac2.local' "$source_dir/README.md" ||
    fail "README.md does not show tools/run-2node-demo.sh mac1.local mac2.local"
  # What a rank gets: -x variables, its place, and the rendezvous on the first host's veth address (not loopback).
  FOO_FROM_HERE=forwarded "$run" --hosts "$ns_a:2,$ns_b:1" --launcher "$in_host" -x GREETING=hello \
    -x FOO_FROM_HERE --tag-output -- sh -c \
    'echo "$GREETING $FOO_FROM_HERE rank=$TBCOLL_RANK/$TBCOLL_WORLD_SIZE local=$TBCOLL_LOCAL_RANK/$TBCOLL_LOCAL_SIZE root=${TBCOLL_ROOT%:*}"' \
    > "$work/env.txt" 2>&1 || { cat "$work/env.txt"; fail "environment job"; }
  sort "$work/env.txt" > "$work/env.sorted"
  printf '%s\n' "[0 $ns_a] hello forwarded rank=0/3 local=0/2 root=10.231.0.1" \
    "[1 $ns_a] hello forwarded rank=1/3 local=1/2 root=10.231.0.1" \
    "[2 $ns_b] hello forwarded rank=2/3 local=0/1 root=10.231.0.1" > "$work/env.expected"
  cmp -s "$work/env.sorted" "$work/env.expected" || { diff "$work/env.expected" "$work/env.sorted"; fail "environment"; }
  # mlx.launch's JSON hostfile: one slot per host, its "envs" forwarded, rank 0 serving on the first of its "ips"
  # (the veth's second address, which nothing else would choose).
  printf '{"backend": "ring", "envs": ["GREETING=hi"], "hosts": [{"ssh": "%s", "ips": ["10.231.0.11"]}, %s]}\n' \
    "$ns_a" "{\"ssh\": \"$ns_b\", \"ips\": [\"10.231.0.2\"]}" > "$work/hosts.json"
  env -u TBCOLL_SOCKET_IFNAME "$run" --hostfile "$work/hosts.json" --launcher "$in_host" --tag-output -- sh -c \
    'echo "$GREETING rank=$TBCOLL_RANK/$TBCOLL_WORLD_SIZE root=${TBCOLL_ROOT%:*}"' > "$work/json.txt" 2>&1 ||
    { cat "$work/json.txt"; fail "JSON hostfile job"; }
  printf '%s\n' "[0 $ns_a] hi rank=0/2 root=10.231.0.11" "[1 $ns_b] hi rank=1/2 root=10.231.0.11" > "$work/json.expected"
  sort "$work/json.txt" | cmp -s - "$work/json.expected" || { cat "$work/json.txt"; fail "JSON hostfile"; }
  [ -f "$model" ] || skip "no model at $model (tools/get-model.sh)"
  "$demo" --single > "$work/one.txt" 2> "$work/one.err" || { cat "$work/one.err"; fail "1 rank"; }
  [ "$(wc -c < "$work/one.txt")" -gt 200 ] || fail "1 rank wrote too little: $(cat "$work/one.txt")"
  start=$SECONDS
  "$demo" "$ns_a" "$ns_b" > "$work/two.txt" 2> "$work/two.err" || { cat "$work/two.err"; fail "2 hosts"; }
  cmp -s "$work/one.txt" "$work/two.txt" || { diff "$work/one.txt" "$work/two.txt"; fail "2 hosts: other text"; }
  grep "tp_inference: model=" "$work/two.err" | grep -q "ranks=2" || fail "no stats line: $(cat "$work/two.err")"
  echo "netns_test: 2 hosts x 1 rank (tcp), $((SECONDS - start)) s, text equal to 1 rank's:"
  grep "tp_inference: model=" "$work/two.err"

  # The same through `ssh` (the default agent command, the script unchanged): a stand-in that takes ssh's options,
  # then the host, then one line for the remote login shell, run in a session of its own behind a relay as sshd
  # does. It checks how tbcoll-run quotes the command for ssh and that it asks for batch mode and a time limit.
  mkdir -p "$work/bin"
  cat > "$work/bin/ssh" << 'SSH'
#!/bin/sh
echo "$@" >> "$(dirname "$0")/ssh.log"
while [ $# -gt 0 ]; do case $1 in -o) shift 2 ;; -*) shift ;; *) break ;; esac; done
host=$1
shift
# Our stdin reaches the command through a relay, and we exit when the command does, as ssh does.
fifo=$(mktemp -u)
mkfifo "$fifo"
exec 3<&0  # (an asynchronous command's own stdin is /dev/null)
cat <&3 > "$fifo" &
relay=$!
$IN_HOST "$host" setsid -w sh -c "$*" < "$fifo"
status=$?
kill $relay 2> /dev/null
rm -f "$fifo"
exit $status
SSH
  chmod +x "$work/bin/ssh"
  PATH=$work/bin:$PATH IN_HOST=$in_host TBCOLL_DEMO_LAUNCHER= "$demo" "$ns_a" "$ns_b" > "$work/ssh.txt" 2> "$work/ssh.err" ||
    { cat "$work/ssh.err"; fail "2 hosts through ssh"; }
  cmp -s "$work/one.txt" "$work/ssh.txt" || { diff "$work/one.txt" "$work/ssh.txt"; fail "through ssh: other text"; }
  grep -q -- "^-o BatchMode=yes -o ConnectTimeout=20 $ns_b sh -c 'exec " "$work/bin/ssh.log" ||
    fail "ssh was called as: $(cat "$work/bin/ssh.log")"
  echo "netns_test: 2 hosts through ssh (a stand-in): text equal to 1 rank's"

  "$run" --hosts "$ns_a:2,$ns_b:2" --launcher "$in_host" -x TBCOLL_DEBUG=INFO --tag-output --timeout 300 -- \
    "$prefix/bin/tp_inference" --model "$prefix/models/stories260K.gguf" --prompt "Once upon a time" \
    --tokens 200 > "$work/four.txt" 2> "$work/four.err" || { cat "$work/four.err"; fail "2 hosts x 2 ranks"; }
  sed -n "s/^\[0 $ns_a\] //p" "$work/four.txt" > "$work/four.rank0"
  cmp -s "$work/one.txt" "$work/four.rank0" || { diff "$work/one.txt" "$work/four.rank0"; fail "2 x 2: other text"; }
  grep -q "^\[0 $ns_a\] .*rank 0/4: connected (peers via .*shm.*tcp\|^\[0 $ns_a\] .*rank 0/4: connected (peers via .*tcp.*shm" \
    "$work/four.err" || fail "2 x 2: rank 0 not on shm and tcp: $(grep connected "$work/four.err")"
  grep -q "^\[3 $ns_b\] " "$work/four.err" || fail "2 x 2: output not tagged with rank and host"
  echo "netns_test: 2 hosts x 2 ranks (shm inside, tcp across): text equal to 1 rank's"
  grep "tp_inference: model=" "$work/four.err"
  [ -z "$(leftovers)" ] || fail "processes left in the namespaces: $(leftovers)"
  ;;
faults)
  prog=$build/tests/tbcoll_test_prog
  # An unreachable host: the agent command fails at once (no such namespace); reported by name.
  start=$SECONDS
  "$run" --hosts "$ns_a:1,nosuch$tag:1" --launcher "$in_host" -- "$prog" check > "$work/out" 2> "$work/err"
  code=$?
  [ $code -ne 0 ] || fail "unreachable host: exit 0"
  grep -q "cannot start rank 1 on host nosuch$tag" "$work/err" || fail "unreachable host: $(cat "$work/err")"
  [ -z "$(leftovers)" ] || fail "unreachable host: processes left: $(leftovers)"
  echo "netns_test: unreachable host reported in $((SECONDS - start)) s (exit $code): $(grep 'cannot start' "$work/err")"

  # A host that never answers (an agent command that hangs, like ssh to a silent address): the connect timeout.
  printf '#!/bin/sh\nexec sleep 300\n' > "$work/silent-agent"
  chmod +x "$work/silent-agent"
  start=$SECONDS
  "$run" --hosts "$ns_a:1,$ns_b:1" --launcher "$work/silent-agent" --connect-timeout 2 -- "$prog" check \
    > "$work/out" 2> "$work/err"
  code=$?
  took=$((SECONDS - start))
  [ $code -ne 0 ] || fail "silent host: exit 0"
  grep -q "host $ns_b (rank 1) did not answer within 2 s" "$work/err" || fail "silent host: $(cat "$work/err")"
  [ $took -le 15 ] || fail "silent host: took $took s"
  pgrep -f "$work/silent-agent" > /dev/null && fail "silent host: agent commands left running"
  echo "netns_test: silent host reported after $took s (exit $code)"

  # The launcher killed outright, with an agent command that behaves like ssh: the agent runs in a session of its
  # own behind a relay, so nothing but its stdin closing tells it (sshd sends no signal either). Its watchdog
  # must end the ranks.
  printf '#!/bin/sh\nhost=$1\nshift\ncat | %s "$host" setsid -w "$@"\n' "$in_host" > "$work/ssh-like-agent"
  chmod +x "$work/ssh-like-agent"
  "$run" --hosts "$ns_a:2,$ns_b:2" --launcher "$work/ssh-like-agent" --timeout 60 -- "$prog" check 100000000 \
    > "$work/out" 2> "$work/err" &
  launcher=$!
  for _ in $(seq 100); do
    [ "$(pgrep -c -f -- "$prog check 100000000")" -ge 8 ] && break  # 4 agents, 4 ranks
    sleep 0.1
  done
  sleep 0.5
  kill -9 $launcher
  wait $launcher 2> /dev/null
  start=$SECONDS
  for _ in $(seq 100); do
    [ -z "$(leftovers)" ] && break
    sleep 0.1
  done
  [ -z "$(leftovers)" ] || fail "launcher killed: processes left in the namespaces: $(leftovers)"
  echo "netns_test: launcher killed outright: agents ended their ranks on both hosts within $((SECONDS - start)) s"

  # A rank killed on the second host, and SIGINT to the launcher, each in a running 2 x 2 job (shm inside a host).
  for fault in kill-rank sigint; do
    # A background job of a script starts with SIGINT ignored (and tbcoll-run keeps ignored signals ignored).
    env --default-signal=INT "$run" --hosts "$ns_a:2,$ns_b:2" --launcher "$in_host" --timeout 60 -- \
      "$prog" check 100000000 > "$work/out" 2> "$work/err" &
    launcher=$!
    ranks=()
    for _ in $(seq 100); do  # until all four ranks run
      ranks=($(pgrep -f -- "$prog check 100000000" | while read -r pid; do
        [ "$(ps -o comm= -p "$pid")" = tbcoll_test_pro ] && echo "$pid"; done))
      [ ${#ranks[@]} -ge 4 ] && break
      sleep 0.1
    done
    [ ${#ranks[@]} -ge 4 ] || { kill -9 $launcher; fail "$fault: the ranks did not start: $(cat "$work/err")"; }
    sleep 0.5  # connected and all-reducing
    start=$SECONDS
    if [ $fault = kill-rank ]; then
      victim=$(for pid in $(ip netns pids "$ns_b"); do [ "$(ps -o comm= -p "$pid")" = tbcoll_test_pro ] && echo "$pid"; done | head -1)
      [ -n "$victim" ] || fail "kill-rank: no rank in $ns_b"
      kill -9 "$victim"
      # The first failure the launcher hears of sets the status: the killed rank's (137), or, when a peer on
      # the same host noticed first and its agent answered sooner, that peer's error exit (1).
      expected="137 1"
    else
      kill -INT $launcher
      expected=130
    fi
    wait $launcher
    code=$?
    took=$((SECONDS - start))
    [[ " $expected " == *" $code "* ]] || fail "$fault: exit $code, expected $expected: $(cat "$work/err")"
    if [ $fault = kill-rank ]; then
      grep -q "rank [23] on host $ns_b killed by signal 9" "$work/err" || fail "kill-rank: no message: $(cat "$work/err")"
    else
      grep -q "caught signal 2" "$work/err" || fail "sigint: no message: $(cat "$work/err")"
    fi
    [ -z "$(leftovers)" ] || fail "$fault: processes left in the namespaces: $(leftovers)"
    left=$(segments_of "${ranks[@]}")
    [ -z "$left" ] || fail "$fault: segments left in /dev/shm: $left"
    echo "netns_test: $fault: job ended on both hosts in $took s (exit $code), no process or segment left:" \
      "$(grep -m1 'killed by signal\|caught signal' "$work/err")"
  done
  ;;
halfopen)
  # The fault matrix's half-open connection (tests/multiproc/fault_test.cc has the other faults): 3 ranks of
  # test_prog "steady" (checked all-reduces), TBCOLL_TIMEOUT=2, started straight into the namespaces (a launcher
  # would end the others when one fails), shm inside a host and tcp between hosts. Mid-job one host's veth end goes
  # down, or its packets are dropped with every link up: packets vanish, nobody gets a reset or a FIN, and the
  # kernels would retransmit for many minutes. Each case
  # prints a "[ time to error ]" line as fault_test.cc does (fault -> the last rank's exit), for the README's table.
  prog=$build/tests/tbcoll_test_prog
  timeout_s=2
  slack=1.5  # as fault_test.cc allows
  since() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
  port=29600
  # blackhole HOST ACTION: HOST's packets to and from the other host dropped by policy rules (drop) with every link
  # up, or let through again (keep): what a host far away looks like when it vanishes (no carrier change anywhere).
  # The rules go before the local table, moved from preference 0 to 100 beforehand (prepare; restore moves it back),
  # so packets for this host drop too. The rules come in one batch: traffic stops in both directions at once.
  blackhole() {
    local ns=$ns_b others="10.231.0.1 10.231.0.11" verb=add address
    [ "$1" = A ] && ns=$ns_a others=10.231.0.2
    case $2 in
      prepare) ip -n "$ns" rule add pref 100 lookup local && ip -n "$ns" rule del pref 0 ;;
      restore) ip -n "$ns" rule add pref 0 lookup local && ip -n "$ns" rule del pref 100 ;;
      drop | keep)
        [ "$2" = keep ] && verb=del
        for address in $others; do
          printf 'rule %s pref 10 to %s blackhole\nrule %s pref 11 from %s blackhole\n' $verb "$address" $verb "$address"
        done | ip -n "$ns" -batch -
        ;;
    esac
  }
  # halfopen_case NAME LAYOUT VANISHING HOW DOWN_S: LAYOUT names each rank's host (AAB: ranks 0 and 1 on A, rank 2
  # on B; rank 0 hosts the store, on A); host VANISHING goes: its link down (HOW link) or its packets dropped (HOW
  # drop), for good (DOWN_S 0) or for DOWN_S seconds.
  halfopen_case() {
    local name=$1 layout=$2 vanishing=$3 how=$4 down_s=$5
    local ns_down=$ns_b veth_down=$veth_b rounds=100000 rank pids=() logs=() status=() ended=()
    [ "$vanishing" = A ] && ns_down=$ns_a veth_down=$veth_a
    vanish() {
      if [ "$how" = drop ]; then blackhole "$vanishing" "$1"; else ip -n "$ns_down" link set "$veth_down" "$1"; fi
    }
    [ "$down_s" = 0 ] || rounds=400  # ~2.5 s: the job goes on well after the link is back
    port=$((port + 1))
    for rank in 0 1 2; do
      local ns=$ns_b
      [ "${layout:$rank:1}" = A ] && ns=$ns_a
      logs+=("$work/halfopen.$port.$rank.log")
      # The direct exchange, as two real hosts would pick for 4 KiB (here the namespaces share 2 CPUs among 3
      # ranks, so the model picks recursive doubling, where rank 2 of ABB hears from rank 1 alone and can only
      # name it): every rank waits on the host that vanished.
      $in_host "$ns" env TBCOLL_RANK=$rank TBCOLL_WORLD_SIZE=3 TBCOLL_ROOT=10.231.0.1:$port \
        TBCOLL_TIMEOUT=$timeout_s TBCOLL_ALGO=allreduce:direct "$prog" steady $rounds > "${logs[$rank]}" 2>&1 &
      pids+=($!)  # ip netns exec and env exec the program: the rank's own pid
    done
    for _ in $(seq 200); do
      [ "$(cat "${logs[@]}" | grep -c '^ready$')" = 3 ] && break
      sleep 0.05
    done
    [ "$(cat "${logs[@]}" | grep -c '^ready$')" = 3 ] || fail "$name: the ranks did not start: $(cat "${logs[@]}")"
    sleep 0.3  # all-reducing
    if [ "$how" = drop ]; then blackhole "$vanishing" prepare || fail "$name: cannot move the local routing rule"; fi
    local injected=$EPOCHREALTIME
    if [ "$how" = drop ]; then vanish drop; else vanish down; fi || fail "$name: cannot make host $vanishing vanish"
    if [ "$down_s" != 0 ]; then
      sleep "$down_s"
      if [ "$how" = drop ]; then vanish keep; else vanish up; fi || fail "$name: cannot bring host $vanishing back"
    fi
    # Reap the ranks as they end (a zombie or gone from /proc: ended); one still running 20 s on has hung.
    local left=3 give_up=$((SECONDS + 20)) state
    while [ $left -gt 0 ] && [ $SECONDS -lt $give_up ]; do
      for rank in 0 1 2; do
        [ -z "${status[$rank]:-}" ] || continue
        state=$(sed 's/.*) //' "/proc/${pids[$rank]}/stat" 2> /dev/null | cut -c1)
        [ -z "$state" ] || [ "$state" = Z ] || continue
        ended[$rank]=$(since "$injected" "$EPOCHREALTIME")
        wait "${pids[$rank]}"
        status[$rank]=$?
        left=$((left - 1))
      done
      sleep 0.005
    done
    if [ "$down_s" = 0 ]; then  # back, for the next case
      if [ "$how" = drop ]; then vanish keep; else vanish up; fi || fail "$name: cannot bring host $vanishing back"
    fi
    if [ "$how" = drop ]; then blackhole "$vanishing" restore || fail "$name: cannot restore the local routing rule"; fi
    local hung=""
    for rank in 0 1 2; do
      [ -n "${status[$rank]:-}" ] || { hung+=" $rank"; kill -9 "${pids[$rank]}"; wait "${pids[$rank]}"; }
    done
    [ -z "$hung" ] || fail "$name: rank(s)$hung hung: $(tail -n 3 "${logs[@]}")"
    local worst=0 worst_a=0 worst_b=0 host log other
    for rank in 0 1 2; do
      host=${layout:$rank:1} log=$(cat "${logs[$rank]}")
      if [ "$down_s" != 0 ]; then
        [ "${status[$rank]}" = 0 ] && grep -q '^done (longest round [0-9]* ms)$' <<< "$log" ||
          fail "$name: rank $rank (exit ${status[$rank]}) did not succeed: $log"
      else
        # A typed error naming the call and the peer it waited for on the other host (the one this rank lost; or a
        # peer on its own host gave up first, waiting for one there).
        other=$(for peer in 0 1 2; do [ "${layout:$peer:1}" != "$host" ] && echo "$peer"; done | paste -sd'|')
        [ "${status[$rank]}" = 1 ] || fail "$name: rank $rank: exit ${status[$rank]}, expected 1: $log"
        grep -qE "^tbcoll error \(code [0-9]+\): rank $rank: all_reduce\(.* waiting for peer ($other)\b" <<< "$log" ||
          fail "$name: rank $rank: no typed error naming the all_reduce and peer $other: $log"
        awk -v t="${ended[$rank]}" -v a="$timeout_s" -v b="$slack" 'BEGIN { exit !(t < a + b) }' ||
          fail "$name: rank $rank ended ${ended[$rank]} s after the fault (TBCOLL_TIMEOUT=$timeout_s): $log"
      fi
      worst=$(awk -v a="$worst" -v b="${ended[$rank]}" 'BEGIN { print (b > a ? b : a) }')
      if [ "$host" = A ]; then
        worst_a=$(awk -v a="$worst_a" -v b="${ended[$rank]}" 'BEGIN { print (b > a ? b : a) }')
      else
        worst_b=$(awk -v a="$worst_b" -v b="${ended[$rank]}" 'BEGIN { print (b > a ? b : a) }')
      fi
    done
    [ -z "$(leftovers)" ] || fail "$name: processes left in the namespaces: $(leftovers)"
    local left_segments
    left_segments=$(segments_of "${pids[@]}")
    [ -z "$left_segments" ] || fail "$name: segments left in /dev/shm: $left_segments"
    if [ "$down_s" != 0 ]; then
      # The link was down mid-job (or the case proves nothing): an all-reduce waited across the outage.
      local stalled_ms
      stalled_ms=$(sed -n 's/^done (longest round \([0-9]*\) ms)$/\1/p' "${logs[@]}" | sort -n | tail -1)
      awk -v ms="$stalled_ms" -v s="$down_s" 'BEGIN { exit !(ms >= 800 * s) }' ||
        fail "$name: the longest all-reduce took $stalled_ms ms: the link going down for $down_s s held nothing up"
      printf '[ time to error ] %s | tcp | success | %.2f s (TBCOLL_TIMEOUT=%g; the longest all-reduce %d ms)\n' \
        "$name" "$worst" "$timeout_s" "$stalled_ms"
    else
      printf '[ time to error ] %s | tcp | typed error on every rank | %.2f s (TBCOLL_TIMEOUT=%g; host A %.2f s, host B %.2f s)\n' \
        "$name" "$worst" "$timeout_s" "$worst_a" "$worst_b"
      for rank in 0 1 2; do
        echo "netns_test:   rank $rank on host ${layout:$rank:1}, ${ended[$rank]} s: $(grep '^tbcoll error' "${logs[$rank]}")"
      done
    fi
  }
  halfopen_case "half-open: host B vanishes, link down (ranks 0, 1 on A; 2 on B)" AAB B link 0
  halfopen_case "half-open: host B vanishes, packets dropped, links up (ranks 0, 1 on A; 2 on B)" AAB B drop 0
  halfopen_case "half-open: the store's host A vanishes, link down (rank 0 on A; 1, 2 on B)" ABB A link 0
  halfopen_case "half-open: the store's host A vanishes, packets dropped, links up (rank 0 on A; 1, 2 on B)" ABB A drop 0
  halfopen_case "half-open: link down 0.5 s, then up" AAB B link 0.5
  ;;
*)
  fail "unknown part '$what' (demo, faults or halfopen)"
  ;;
esac
echo "netns_test: PASS ($what)"
