#!/usr/bin/env bash
# Installs the build into a scratch prefix, moves the prefix elsewhere (nothing may point back into it or into the
# build tree) and runs the installed tools and the demo from there with no LD_LIBRARY_PATH: tbcoll-info,
# tbcoll-run with 2 ranks of tbcoll-perf, and tp_inference at 1 and 2 ranks (same text), as a remote host of a
# multi-host job runs them.
#   tests/install/run_installed.sh BUILD_DIR WORK_DIR [MODEL]
set -euo pipefail
build=$1 work=$2 model=${3:-}
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/staged" > /dev/null
mv "$work/staged" "$work/moved"
bin=$work/moved/bin
unset LD_LIBRARY_PATH DYLD_LIBRARY_PATH
fail() { echo "run_installed: FAIL: $*" >&2; exit 1; }
for tool in tbcoll-run tbcoll-info tbcoll-doctor tbcoll-perf tp_inference tp_make_synthetic allreduce_example; do
  [ -x "$bin/$tool" ] || fail "$tool is not installed in $bin"
done
"$bin/tbcoll-info" > "$work/info.txt" 2>&1 || { cat "$work/info.txt" >&2; fail "installed tbcoll-info does not run"; }
grep -q TBCOLL_SOCKET_IFNAME "$work/info.txt" || fail "tbcoll-info lists no TBCOLL_SOCKET_IFNAME"
"$bin/tbcoll-doctor" --version | grep -q '^tbcoll-doctor ' || fail "installed tbcoll-doctor does not run"
"$bin/tbcoll-run" -n 2 --timeout 120 -- "$bin/tbcoll-perf" -b 8 -e 4096 -n 5 -w 1 > "$work/perf.txt" 2>&1 ||
  { cat "$work/perf.txt" >&2; fail "installed tbcoll-run + tbcoll-perf"; }
if [ -n "$model" ] && [ -f "$model" ]; then
  "$bin/tp_inference" --model "$model" --tokens 30 --prompt "Once upon a time" > "$work/one.txt" 2> "$work/one.err" ||
    { cat "$work/one.err" >&2; fail "installed tp_inference"; }
  "$bin/tbcoll-run" -n 2 --timeout 120 -- "$bin/tp_inference" --model "$model" --tokens 30 \
    --prompt "Once upon a time" > "$work/two.txt" 2> "$work/two.err" || { cat "$work/two.err" >&2; fail "2 ranks"; }
  cmp -s "$work/one.txt" "$work/two.txt" || fail "2 ranks wrote other text than 1 rank"
else
  echo "run_installed: no model at '$model': the demo was not run (the tools were)"
fi
# pkg-config from the moved prefix: a C program ported from NCCL (NCCL's type names) builds and runs with its flags.
pc_dir=$(dirname "$(find "$work/moved" -name tbcoll.pc | head -1)")
[ -f "$pc_dir/tbcoll.pc" ] || fail "no tbcoll.pc installed"
flags=$(PKG_CONFIG_PATH=$pc_dir pkg-config --cflags --libs tbcoll) || fail "pkg-config --cflags --libs tbcoll"
[ "$(PKG_CONFIG_PATH=$pc_dir pkg-config --modversion tbcoll)" = "$("$bin/tbcoll-info" --version | cut -d' ' -f2)" ] ||
  fail "tbcoll.pc's version differs from tbcoll-info --version"
cat > "$work/port.c" <<'PROGRAM'
#include <stdio.h>
#include <tbcoll/tbcoll.h>
int main(void) {
  tbcollComm_t comm;
  float x[4] = {1, 2, 3, 4};
  if (tbcollCommInitFromEnv(&comm) != tbcollSuccess) return 1;
  if (tbcollAllReduce(x, x, 4, tbcollFloat, tbcollSum, comm) != tbcollSuccess) return 2;
  if (tbcollCommFinalize(comm) != tbcollSuccess || tbcollCommDestroy(comm) != tbcollSuccess) return 3;
  printf("sum %g\n", x[3]);
  return 0;
}
PROGRAM
# shellcheck disable=SC2086  # the flags are words
cc -std=c99 -Wall -Werror "$work/port.c" -o "$work/port" $flags ||
  fail "a C program does not build with pkg-config's flags"
"$bin/tbcoll-run" -n 2 --timeout 60 -- "$work/port" > "$work/port.txt" 2>&1 || { cat "$work/port.txt" >&2; fail "port"; }
[ "$(grep -c 'sum 8' "$work/port.txt")" -eq 2 ] || { cat "$work/port.txt" >&2; fail "the port's all-reduce"; }
# A program written for NCCL, built with `pkg-config --cflags --libs tbcoll-nccl` in place of NCCL's flags, runs
# without LD_LIBRARY_PATH (the flags carry the rpath).
nccl_flags=$(PKG_CONFIG_PATH=$pc_dir pkg-config --cflags --libs tbcoll-nccl) || fail "pkg-config tbcoll-nccl"
# shellcheck disable=SC2086  # the flags are words
cc -std=c99 -Wall -Werror "$(dirname "$0")/../nccl/single_process.c" -o "$work/nccl_single" $nccl_flags ||
  fail "a program written for NCCL does not build with pkg-config tbcoll-nccl's flags"
"$work/nccl_single" > "$work/nccl.txt" 2>&1 || { cat "$work/nccl.txt" >&2; fail "the NCCL program"; }
grep -q '^Success: 0 wrong' "$work/nccl.txt" || { cat "$work/nccl.txt" >&2; fail "the NCCL program's results"; }
"$bin/tbcoll-run" -n 2 --timeout 60 -- "$bin/allreduce_example" > "$work/example.txt" 2>&1 ||
  { cat "$work/example.txt" >&2; fail "the installed allreduce_example"; }
echo "run_installed: PASS (installed tools run from a moved prefix without LD_LIBRARY_PATH; pkg-config builds a C program)"
