#!/usr/bin/env bash
# The 2-node tensor-parallel demo: stories260K split over two machines, one rank each, started from either one
# (or a third) through ssh. Both machines need the same install prefix and the model at the same path (README,
# "Two machines"):
#
#   tools/run-2node-demo.sh HOST1 HOST2 [tp_inference options...]   rank 0 on HOST1, rank 1 on HOST2
#   tools/run-2node-demo.sh --single [tp_inference options...]      the same generation on this machine alone
#   tools/run-2node-demo.sh --print HOST1 HOST2 [...]               print the command instead (the README's)
#
#   TBCOLL_PREFIX         install prefix on every machine (default ~/tbcoll)
#   TBCOLL_DEMO_MODEL     the model on every machine (default $TBCOLL_PREFIX/models/stories260K.gguf)
#   TBCOLL_DEMO_LAUNCHER  agent command (default "ssh -o BatchMode=yes"; the tests use "ip netns exec")
#   TBCOLL_SOCKET_IFNAME  the interface between the machines (bridge0 for Thunderbolt); every TBCOLL_* variable
#                         set here reaches the ranks
#
# Rank 0 prints the text; its last line on stderr is the statistics line (tokens/s, time in communication).
# tests/multihost/netns_test.sh runs this very script between two network namespaces.
set -euo pipefail
print=0
if [ "${1:-}" = --print ]; then
  print=1
  shift
fi
if [ $# -lt 1 ] || { [ "$1" != --single ] && [ $# -lt 2 ]; }; then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
prefix=${TBCOLL_PREFIX:-$HOME/tbcoll}
model=${TBCOLL_DEMO_MODEL:-$prefix/models/stories260K.gguf}
launcher=${TBCOLL_DEMO_LAUNCHER:-ssh -o BatchMode=yes}
generate=("$prefix/bin/tp_inference" --model "$model" --prompt "Once upon a time" --tokens 200)
if [ "$1" = --single ]; then
  shift
  exec "${generate[@]}" "$@"
fi
hosts="$1:1,$2:1"
shift 2
command=("$prefix/bin/tbcoll-run" --hosts "$hosts" --launcher "$launcher" --connect-timeout 20 -- "${generate[@]}" "$@")
if [ $print = 1 ]; then  # as the README writes it: ~ for this home, words with spaces in double quotes
  for word in "${command[@]}"; do
    word=${word/#$HOME\//\~/}
    case $word in *" "*) printf '"%s" ' "$word" ;; *) printf '%s ' "$word" ;; esac
  done | sed 's/ $//'
  echo
  exit 0
fi
exec "${command[@]}"
