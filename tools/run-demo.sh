#!/usr/bin/env bash
# Sets up, builds and runs the main job on this machine: the 2-rank all-reduce benchmark over TCP,
# next to the raw TCP ping-pong floor measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh
build/tbcoll-run -n 2 -- build/benchmarks/tbcoll-perf --transport tcp -b 8 -e 64M -f 2 --pingpong "$@"
