#!/usr/bin/env bash
# Builds MLX (CPU only) with tbcoll's distributed backend: a copy of MLX's sources with mlx.patch applied and the
# backend (backend/) in mlx/distributed/tbcoll, into OUT_DIR, with the Python bindings:
#
#   integrations/mlx/build.sh OUT_DIR
#   PYTHONPATH=OUT_DIR/python /usr/bin/python3 -c 'import mlx.core as mx; print(mx.distributed.is_available("tbcoll"))'
#
# OUT_DIR/python is MLX's Python package (mlx.core built into it); OUT_DIR/bin/tbcoll_mlx_test the backend's C++
# test. Only what those need is built: no MLX C++ tests, examples, benchmarks, stubs, GGUF or safetensors.
#
# MLX's sources: $MLX_SRC, else ../shared/vendor/mlx beside the project, else the script names the upstream commit.
# nanobind (the bindings): $NANOBIND_SRC, else ../shared/vendor/nanobind. Offline: Debian's nlohmann-json3-dev,
# libopenblas-dev, liblapacke-dev, libfmt-dev and robin-map-dev stand in for MLX's FetchContent downloads
# (tools/setup.sh installs them). tbcoll: the build tree $TBCOLL_BUILD (default ./build, with libtbcoll.so) and
# the headers of this checkout, or an installed prefix $TBCOLL_PREFIX (include/ and lib/).
# Knobs: MLX_PYTHON (default /usr/bin/python3, which has numpy), MLX_BUILD_JOBS (default 2), MLX_OPT (the
# optimisation flags, default -O1: 4.8 minutes here against about 10 for -O3, under different loads of a shared
# 2-core machine, so roughly; the tests run in under a minute at -O1; benchmarks want -O3), ccache when installed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
project=$(cd "$here/../.." && pwd)
out=${1:?usage: build.sh OUT_DIR}
upstream="github.com/ml-explore/mlx at commit 846d176227a0ac13d2667e58d2bb68b322109ab0"
nanobind_upstream="github.com/wjakob/nanobind at tag v2.15.0 (0b60aa8879ad6eb6c274a01529aa63dd6cd929be)"

src=${MLX_SRC:-}
if [ -z "$src" ]; then
  src=$project/../shared/vendor/mlx
  [ -d "$src/mlx" ] || { echo "build.sh: no MLX sources: set MLX_SRC to a clone of $upstream" >&2; exit 2; }
fi
[ -f "$src/mlx/distributed/distributed.cpp" ] ||
  { echo "build.sh: $src is not an MLX source tree (no mlx/distributed/distributed.cpp)" >&2; exit 2; }
nanobind=${NANOBIND_SRC:-$project/../shared/vendor/nanobind}
[ -f "$nanobind/cmake/nanobind-config.cmake" ] ||
  { echo "build.sh: no nanobind in $nanobind: set NANOBIND_SRC to a clone of $nanobind_upstream" >&2; exit 2; }
[ -f /usr/include/nlohmann/json.hpp ] && [ -f /usr/include/tsl/robin_map.h ] ||
  { echo "build.sh: needs Debian's nlohmann-json3-dev and robin-map-dev (tools/setup.sh installs them)" >&2; exit 2; }

. "$project/integrations/tbcoll_paths.sh"  # include, lib
python=${MLX_PYTHON:-/usr/bin/python3}

mkdir -p "$out"
out=$(cd "$out" && pwd)
tree=$out/mlx-src
# A fresh copy whenever MLX's sources or the patch changed; the backend's files are refreshed every time (only
# those that differ, so that make rebuilds only what changed).
stamp=$( (cd "$src" && find CMakeLists.txt mlx.pc.in cmake mlx python -type f -exec cksum {} +; cksum < "$here/mlx.patch") |
  cksum)
if [ ! -f "$tree/.tbcoll-stamp" ] || [ "$(cat "$tree/.tbcoll-stamp")" != "$stamp" ]; then
  rm -rf "$tree" "$out/mlx-build"
  mkdir -p "$tree"
  cp -r "$src/CMakeLists.txt" "$src/mlx.pc.in" "$src/cmake" "$src/mlx" "$src/python" "$tree/"
  [ -f "$src/LICENSE" ] && cp "$src/LICENSE" "$tree/"
  (cd "$tree" && patch -p1 --quiet < "$here/mlx.patch") ||
    { echo "build.sh: mlx.patch does not apply to $src (made for $upstream)" >&2; exit 2; }
  echo "$stamp" > "$tree/.tbcoll-stamp"
fi
mkdir -p "$tree/mlx/distributed/tbcoll"
for file in "$here"/backend/*; do
  cmp -s "$file" "$tree/mlx/distributed/tbcoll/${file##*/}" || cp "$file" "$tree/mlx/distributed/tbcoll/"
done

# MLX fetches nlohmann/json for its single header: a folder whose single_include/nlohmann is Debian's.
deps=$out/deps
mkdir -p "$deps/json/single_include"
ln -sfn /usr/include/nlohmann "$deps/json/single_include/nlohmann"

# nanobind 2.15 needs robin-map 1.3 or later (its version macros and erase_fast); Debian 12 has 1.2.1. 1.3's
# erase_fast(it) is erase(it) without looking for the next element, so Debian's headers with erase_fast defined
# as erase and the version set to 1.3.0 behave alike (without that speed-up). A package config makes nanobind's
# find_dependency(tsl-robin-map) find the copy.
robin=$deps/robin-map
mkdir -p "$robin/include/tsl" "$robin/cmake"
for header in /usr/include/tsl/*.h; do
  cmp -s "$header" "$robin/include/tsl/${header##*/}.debian" && continue
  cp "$header" "$robin/include/tsl/${header##*/}.debian"
  cp "$header" "$robin/include/tsl/"
  sed -i -e 's|^\(  iterator erase(iterator pos) { return m_ht.erase(pos); }\)$|\1\n  void erase_fast(iterator pos) { m_ht.erase(pos); }|' \
    -e 's|^#define TSL_ROBIN_MAP_H$|&\n#define TSL_RH_VERSION_MAJOR 1\n#define TSL_RH_VERSION_MINOR 3\n#define TSL_RH_VERSION_PATCH 0|' \
    "$robin/include/tsl/${header##*/}"
done
grep -q erase_fast "$robin/include/tsl/robin_set.h" && grep -q TSL_RH_VERSION_MAJOR "$robin/include/tsl/robin_map.h" ||
  { echo "build.sh: could not adapt Debian's robin-map headers (robin-map-dev) for nanobind" >&2; exit 2; }
printf '%s\n' 'add_library(tsl::robin_map INTERFACE IMPORTED)' \
  "set_target_properties(tsl::robin_map PROPERTIES INTERFACE_INCLUDE_DIRECTORIES \"$robin/include\")" \
  > "$robin/cmake/tsl-robin-mapConfig.cmake"

build=$out/mlx-build
opt=${MLX_OPT:--O1}
# Configured every time (quick once configured): a changed tbcoll location or MLX_OPT takes effect.
cmake -S "$tree" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="$opt -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="$opt -DNDEBUG" \
  -DMLX_BUILD_METAL=OFF -DMLX_BUILD_TESTS=OFF -DMLX_BUILD_EXAMPLES=OFF -DMLX_BUILD_BENCHMARKS=OFF \
  -DMLX_BUILD_GGUF=OFF -DMLX_BUILD_SAFETENSORS=OFF -DUSE_SYSTEM_FMT=ON \
  -DMLX_BUILD_PYTHON_BINDINGS=ON -DMLX_BUILD_PYTHON_STUBS=OFF -DPython_EXECUTABLE="$python" \
  -DMLX_PYTHON_BINDINGS_OUTPUT_DIRECTORY="$tree/python/mlx" \
  -DFETCHCONTENT_FULLY_DISCONNECTED=ON -DFETCHCONTENT_SOURCE_DIR_JSON="$deps/json" \
  -DFETCHCONTENT_SOURCE_DIR_NANOBIND="$nanobind" -DNB_USE_SUBMODULE_DEPS=OFF -Dtsl-robin-map_DIR="$robin/cmake" \
  -DMLX_TBCOLL_INCLUDE_DIR="$include" -DMLX_TBCOLL_LIBRARY="$lib/libtbcoll.so" -DMLX_TBCOLL_TESTS=ON \
  > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build "$build" --target core tbcoll_mlx_test -j "${MLX_BUILD_JOBS:-2}" > "$out/build.log" 2>&1 ||
  { grep -B2 -A12 -m3 'error' "$out/build.log" || tail -40 "$out/build.log"; exit 1; }
mkdir -p "$out/bin"
cp "$build/mlx/distributed/tbcoll/tbcoll_mlx_test" "$out/bin/tbcoll_mlx_test.new"
mv -f "$out/bin/tbcoll_mlx_test.new" "$out/bin/tbcoll_mlx_test"  # a running copy keeps its file
ln -sfn "$tree/python" "$out/python"
echo "build.sh: $out/python (MLX from $src with the tbcoll backend, tbcoll from $lib)"
