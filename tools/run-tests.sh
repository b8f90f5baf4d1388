#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (the README's test command; .ci/run calls it).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh
cd build
ctest --output-on-failure -j 2 --timeout 600
