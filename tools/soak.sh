#!/usr/bin/env bash
# The soak for longer than the test command's short run (ctest soak_short, ~24 s): tbcoll_soak (tests/soak/soak.cc)
# on shm, tcp and loopback in turn, MINUTES in all split evenly, 3 ranks x 2 communicators, every result checked.
# Prints the seed (rerun one with SOAK_SEED=<seed>), the collectives per transport and how many were wrong;
# non-zero exit if any was wrong or a call failed.
#
#   tools/soak.sh MINUTES [TRANSPORTS]   (TRANSPORTS default shm,tcp,loopback; builds build/tests/tbcoll_soak)
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:?usage: tools/soak.sh MINUTES [shm,tcp,loopback]}
transports=${2:-shm,tcp,loopback}
count=$(tr ',' '\n' <<< "$transports" | wc -l)
seconds=$(awk -v m="$minutes" -v n="$count" 'BEGIN { printf "%d", m * 60 / n }')
[ -d build ] || tools/build.sh
cmake --build build -j2 --target tbcoll_soak > /dev/null
seed=()
[ -n "${SOAK_SEED:-}" ] && seed=(--seed "$SOAK_SEED")
exec build/tests/tbcoll_soak --transport "$transports" --seconds "$seconds" --ops 0 "${seed[@]}"
