#!/usr/bin/env bash
# Configures and builds tbcoll (Release) into ./build. `--target NAME` (repeatable) builds only those targets and
# what they need (tools/run-demo.sh builds the demo alone); other arguments go to cmake. With ccache installed the
# compilations go through it (the extra builds of tools/run-tests.sh reuse the objects they share with this one);
# compile_commands.json is written for tools/check-portability.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=()
configure=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--target" ] && [ $# -ge 2 ]; then
    targets+=(--target "$2")
    shift 2
  else
    configure+=("$1")
    shift
  fi
done
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
# Paths under the checkout are hashed relative to it, so the other builds of the same files (build-posix,
# build-pip beside build/) hit this one's objects (tools/run-tests.sh exports the same for its stages).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "${launcher[@]}" "${configure[@]}" >/dev/null
cmake --build build -j "$(nproc)" "${targets[@]}"
