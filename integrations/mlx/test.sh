#!/usr/bin/env bash
# MLX on tbcoll, tested as MLX's users run it: MLX built with the backend (build.sh into BUILD_DIR/mlx), ranks
# started by tbcoll-run.
#
#   integrations/mlx/test.sh BUILD_DIR cpp      the backend's C++ test (backend/tbcoll_mlx_test.cpp) at 2 and 3
#                                               ranks, and outside a job (strict init names tbcoll-run)
#   integrations/mlx/test.sh BUILD_DIR python   MLX's common distributed test case on tbcoll
#                                               (tests/tbcoll_test_distributed.py) at 2 and 3 ranks, the third
#                                               run over tcp
#   integrations/mlx/test.sh BUILD_DIR faults   a rank killed mid all_sum (tests/dead_peer.py): every survivor
#                                               fails within TBCOLL_TIMEOUT naming it, on shm and on tcp; and a
#                                               rank stopped (SIGSTOP) on tcp: the survivors' deadline names it
#   integrations/mlx/test.sh BUILD_DIR all      the three
#
# BUILD_DIR is tbcoll's build tree (tbcoll-run, libtbcoll.so). Exit 77 (skipped, with the reason) without MLX's
# sources (MLX_SRC or ../shared/vendor/mlx) or a Python with numpy. MLX_PYTHON: the interpreter (default
# /usr/bin/python3, Debian's, which has numpy).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
project=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: test.sh BUILD_DIR cpp|python|faults|all}" && pwd)
part=${2:?usage: test.sh BUILD_DIR cpp|python|faults|all}
python=${MLX_PYTHON:-/usr/bin/python3}
shared=${TBCOLL_SHARED_DIR:-$project/../shared}

skip() { echo "mlx test: SKIP: $*"; exit 77; }
fail() { echo "mlx test: FAIL: $*" >&2; exit 1; }
[ -n "${MLX_SRC:-}" ] || [ -d "$shared/vendor/mlx/mlx" ] || skip "no MLX sources (MLX_SRC or ../shared/vendor/mlx)"
"$python" -c "import numpy" 2> /dev/null || skip "$python has no numpy (python3-numpy)"
run=$build/tbcoll-run
[ -x "$run" ] || fail "no tbcoll-run in $build"

work=$(mktemp -d "${TMPDIR:-/tmp}/tbcoll-mlx.XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2> /dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

[ -z "${MLX_SRC:-}" ] && [ -d "$shared/vendor/mlx" ] && export MLX_SRC=$shared/vendor/mlx
[ -z "${NANOBIND_SRC:-}" ] && [ -d "$shared/vendor/nanobind" ] && export NANOBIND_SRC=$shared/vendor/nanobind
TBCOLL_BUILD=$build MLX_PYTHON=$python "$here/build.sh" "$build/mlx" || fail "building MLX with the tbcoll backend"
unset TBCOLL_TRANSPORT TBCOLL_TIMEOUT TBCOLL_RANK TBCOLL_WORLD_SIZE TBCOLL_ROOT MLX_HOSTFILE MLX_RANK
export PYTHONPATH=$build/mlx/python:$build/mlx/python/tests:$here/tests
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the source tree
passed=0

# ranks N [ENV=VALUE...] -- COMMAND...: COMMAND on N ranks under tbcoll-run (4 minutes at most).
ranks() {
  local n=$1
  shift
  local env=()
  while [ "$1" != "--" ]; do
    env+=(-x "$1")
    shift
  done
  shift
  "$run" -n "$n" --timeout 240 --tag-output "${env[@]}" -- "$@"
}

test_cpp() {
  local test=$build/mlx/bin/tbcoll_mlx_test
  "$test" --no-job || fail "tbcoll_mlx_test outside a job"
  for n in 2 3; do
    ranks "$n" -- "$test" > "$work/cpp$n.log" 2>&1 || { cat "$work/cpp$n.log"; fail "tbcoll_mlx_test at $n ranks"; }
    grep "checks" "$work/cpp$n.log"
    [ "$(grep -c ', 0 failed' "$work/cpp$n.log")" -eq "$n" ] || fail "tbcoll_mlx_test at $n ranks: not every rank passed"
    passed=$((passed + 1))
  done
}

# MLX's unittest prints "Ran N tests" and "OK" (or "OK (skipped=K)") per rank; every rank must say so.
test_python() {
  # Each run: the ranks and one setting (TBCOLL_TIMEOUT=60 is the default, said for the log).
  local runs=("2 TBCOLL_TIMEOUT=60" "3 TBCOLL_TIMEOUT=60" "2 TBCOLL_TRANSPORT=tcp")
  for spec in "${runs[@]}"; do
    set -- $spec
    local n=$1 log=$work/python-${spec// /-}.log
    ranks "$n" "$2" -- "$python" "$here/tests/tbcoll_test_distributed.py" -v > "$log" 2>&1 ||
      { cat "$log"; fail "MLX's distributed tests at $n ranks ($2)"; }
    grep -E "^\[0\] (Ran|OK)" "$log"
    [ "$(grep -cE '^\[[0-9]+\] OK' "$log")" -eq "$n" ] || { cat "$log"; fail "not every rank said OK ($spec)"; }
    # Ring skips none of the common case; at 3 ranks MLX's two fixed-shape sharding tests cannot run (on ring
    # neither) and say so. Any other skip fails.
    local skips expected=0
    skips=$(grep -E '^\[0\] .* skipped ' "$log" || true)
    [ "$n" -eq 3 ] && expected=2
    [ "$(grep -c 'do not divide it' <<< "$skips")" -eq "$expected" ] && [ "$(grep -c . <<< "$skips")" -eq "$expected" ] ||
      fail "unexpected skips at $n ranks ($spec): $skips"
    passed=$((passed + 1))
  done
}

# A rank killed (its connections close) on shm and tcp, and one stopped (silent: only the deadline finds it).
test_faults() {
  for spec in "shm KILL" "tcp KILL" "tcp STOP"; do
    set -- $spec
    local log=$work/faults-$1-$2.log
    TBCOLL_TRANSPORT=$1 "$python" "$here/tests/dead_peer.py" --backend tbcoll --ranks 3 --timeout 5 --signal "$2" \
      > "$log" 2>&1 || { cat "$log"; fail "dead peer ($spec)"; }
    cat "$log"
    passed=$((passed + 1))
  done
}

case "$part" in
  cpp) test_cpp ;;
  python) test_python ;;
  faults) test_faults ;;
  all) test_cpp && test_python && test_faults ;;
  *) fail "unknown part $part (cpp, python, faults or all)" ;;
esac
echo "mlx test: PASS ($part: $passed runs)"
