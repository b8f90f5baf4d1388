#!/usr/bin/env bash
# The compiler and C++ library macOS has: clang with libc++, warnings as errors (-Wall -Wextra), in build-clang,
# then the whole test suite. Debian's libfmt and GoogleTest are built for libstdc++: fmt is used header-only and
# GoogleTest is built from /usr/src/googletest with -stdlib=libc++ (once, into build-clang-gtest); Google Benchmark
# is left out (the micro-benchmark alone needs it).
# A unity build (batches of sources as one translation unit, as tools/test-sanitizers.sh explains).
#
#   tools/test-clang-libcxx.sh [ctest arguments...]   (after tools/setup.sh); prints PASS or FAIL, non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=build-clang
gtest=$root/build-clang-gtest
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
libcxx=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS=-stdlib=libc++)

fail() {
  echo "clang+libc++: FAIL ($1)"
  exit 1
}

if [ ! -f "$gtest/prefix/lib/cmake/GTest/GTestConfig.cmake" ]; then
  cmake -S /usr/src/googletest -B "$gtest/build" -DCMAKE_BUILD_TYPE=Release "${libcxx[@]}" "${launcher[@]}" \
    -DCMAKE_INSTALL_PREFIX="$gtest/prefix" > "$gtest.log" 2>&1 &&
    cmake --build "$gtest/build" -j 2 >> "$gtest.log" 2>&1 &&
    cmake --install "$gtest/build" >> "$gtest.log" 2>&1 || { tail -20 "$gtest.log"; fail "GoogleTest with libc++"; }
fi

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "${libcxx[@]}" "${launcher[@]}" -DCMAKE_PREFIX_PATH="$gtest/prefix" \
  -DTBCOLL_FMT_HEADER_ONLY=ON -DTBCOLL_WITH_PYTHON=OFF -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON -DCMAKE_COMPILE_WARNING_AS_ERROR=ON -DCMAKE_UNITY_BUILD=ON \
  > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; fail "configure"; }
if ! cmake --build "$build" -j 2 > "$build.build.log" 2>&1; then
  grep -E 'error|warning' "$build.build.log" | head -40
  fail "build; see $build.build.log"
fi
# Every object must use libc++: a stray libstdc++ symbol would mean a library built for the other one slipped in.
if nm -D --undefined-only "$build/libtbcoll.so" | grep -q 'GLIBCXX'; then fail "libtbcoll links libstdc++"; fi
(cd "$build" && ctest -j 2 --timeout 600 "$@" > ctest.log 2>&1) || {
  grep -E '\*\*\*(Failed|Timeout|Exception)|Not Run' "$build/ctest.log" | head -20
  fail "tests; see $build/ctest.log"
}
echo "clang+libc++: PASS ($(grep -E 'tests passed' "$build/ctest.log"))"
