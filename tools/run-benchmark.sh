#!/usr/bin/env bash
# Sets up, builds and runs the 2-rank all-reduce benchmark over TCP on this machine, next to the raw TCP floor
# measured between the same two processes. Extra arguments go to tbcoll-perf (e.g. --transport shm).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh
build/tbcoll-run -n 2 -- build/benchmarks/tbcoll-perf --transport tcp -b 8 -e 64M -f 2 --pingpong "$@"
