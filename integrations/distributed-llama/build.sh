#!/usr/bin/env bash
# Builds distributed-llama with tbcoll's synchronizer: a copy of dllama's sources with dllama.patch applied and
# tbcoll-sync.cpp linked in, into OUT_DIR/dllama (one binary: `--sync socket`, the default, is dllama's own TCP
# sync, untouched; `--sync tbcoll` on the root moves the sync onto tbcoll).
#
#   integrations/distributed-llama/build.sh OUT_DIR
#
# dllama's sources: $DLLAMA_SRC, else ../shared/vendor/distributed-llama beside the project, else the script
# says where to clone them. tbcoll: the build tree $TBCOLL_BUILD (default ./build, with libtbcoll.so) and the
# headers of this checkout, or an installed prefix $TBCOLL_PREFIX (include/ and lib/). Uses only what
# tools/setup.sh installs (g++, make).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
project=$(cd "$here/../.." && pwd)
out=${1:?usage: build.sh OUT_DIR}
upstream="github.com/b4rtaz/distributed-llama at commit 8d624a7b1f9acc0855d71a32519b22fe51e0bd86"

src=${DLLAMA_SRC:-}
if [ -z "$src" ]; then
  src=$project/../shared/vendor/distributed-llama
  [ -d "$src/src" ] || { echo "build.sh: no dllama sources: set DLLAMA_SRC to a clone of $upstream" >&2; exit 2; }
fi
[ -f "$src/src/app.cpp" ] || { echo "build.sh: $src is not a dllama source tree (no src/app.cpp)" >&2; exit 2; }

. "$project/integrations/tbcoll_paths.sh"  # include, lib

mkdir -p "$out"
out=$(cd "$out" && pwd)
tree=$out/dllama-src
# A fresh copy whenever the sources or the patch changed (dllama's Makefile writes its objects beside them).
stamp=$( (cd "$src" && find src Makefile -type f -exec cksum {} +; cksum < "$here/dllama.patch") | cksum)
if [ ! -f "$tree/.tbcoll-stamp" ] || [ "$(cat "$tree/.tbcoll-stamp")" != "$stamp" ]; then
  rm -rf "$tree"
  mkdir -p "$tree"
  cp -r "$src/src" "$src/Makefile" "$tree/"
  [ -f "$src/LICENSE" ] && cp "$src/LICENSE" "$tree/"
  (cd "$tree" && patch -p1 --quiet < "$here/dllama.patch") ||
    { echo "build.sh: dllama.patch does not apply to $src (made for $upstream)" >&2; exit 2; }
  echo "$stamp" > "$tree/.tbcoll-stamp"
fi
cp "$here/tbcoll-sync.hpp" "$tree/src/"
cd "$tree"
# dllama's own flags (its Makefile: C++11, -O3 -march=native); the synchronizer needs C++17 for tbcoll's API.
if [ ! tbcoll-sync.o -nt "$here/tbcoll-sync.cpp" ] || [ ! tbcoll-sync.o -nt "$include/tbcoll/tbcoll.hpp" ]; then
  g++ -std=c++17 -O3 -march=native -Wall -Werror -I src -I "$include" -c "$here/tbcoll-sync.cpp" -o tbcoll-sync.o
fi
make --no-print-directory -j "$(nproc)" dllama DEPS=tbcoll-sync.o \
  LIBS="-lpthread -L$lib -ltbcoll -Wl,-rpath,$lib" > make.log 2>&1 || { tail -30 make.log; exit 1; }
cp dllama "$out/dllama.new" && mv -f "$out/dllama.new" "$out/dllama"  # a running copy keeps its file
echo "build.sh: $out/dllama (dllama from $src, tbcoll from $lib)"
