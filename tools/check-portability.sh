#!/usr/bin/env bash
# Keeps Linux-only calls in src/platform: compiles every other source file (library, tools, benchmarks, examples,
# tests) with tools/portability/linux_only.h force-included, which poisons the Linux-only names, and looks for
# Linux-only headers and paths in the non-test sources. Exempt: src/platform/ and transport files named for a
# platform (say transports/ibverbs/linux_verbs.cc or transports/x/device_darwin.cc).
#
#   tools/check-portability.sh [BUILD_DIR]   (default build; it needs compile_commands.json, which tools/build.sh
#                                             asks CMake for)
# Prints PASS or FAIL and exits non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${1:-build}
poison=$root/tools/portability/linux_only.h
commands=$build/compile_commands.json
if [ ! -f "$commands" ]; then
  echo "portability: FAIL: $commands missing (configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)"
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The check must be able to fail: a file using accept4 is refused.
printf '#include <sys/socket.h>\nint f(int fd) { return accept4(fd, nullptr, nullptr, SOCK_CLOEXEC); }\n' > "$work/canary.cc"
if c++ -std=c++17 -fsyntax-only -include "$poison" "$work/canary.cc" 2>/dev/null; then
  echo "portability: FAIL: the poison header lets accept4 through"
  exit 1
fi

# Every translation unit again, its object output swapped for -fsyntax-only and the poison header, two at a time
# (the machine is shared).
status=0
python3 "$root/tools/portability/poisoned_compile.py" "$commands" "$root" "$poison" || status=1

# Linux-only headers and paths in what users run (tests may read /proc where they skip without it).
if grep -rnE '#include <(linux/|sys/prctl\.h|sys/syscall\.h|sys/epoll\.h|sys/eventfd\.h|sys/sysinfo\.h)|"/proc/|"/dev/shm' \
     src transports tools benchmarks examples --include='*.cc' --include='*.h' --include='*.c' |
   grep -vE '^(src/platform/|tools/portability/)' | grep -vE '^transports/[^:]*(/|_)(linux|darwin)[_.]'; then
  echo "portability: Linux-only header or path above, outside src/platform"
  status=1
fi

if [ $status -eq 0 ]; then
  echo "portability: PASS"
else
  echo "portability: FAIL"
fi
exit $status
