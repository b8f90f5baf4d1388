#!/usr/bin/env bash
# Downloads stories260K.gguf (Karpathy's TinyStories "tinyllamas" 260K Llama, MIT licence, converted to GGUF) from
# its public source and checks its SHA-256.
#
#   tools/get-model.sh [DIR]      (default DIR: ../shared/models next to the repository)
#
# Source: Hugging Face repository ggml-org/models-moved, folder tinyllamas. An existing file with the right hash is
# kept; a file with a wrong hash is reported and left alone (exit 1). Needs curl or wget and sha256sum (or shasum).
set -euo pipefail

readonly kUrl="https://huggingface.co/ggml-org/models-moved/resolve/main/tinyllamas/stories260K.gguf"
readonly kFile="stories260K.gguf"
readonly kSha256="270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d"

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${1:-$script_dir/../../shared/models}"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  elif command -v shasum >/dev/null 2>&1; then
    shasum -a 256 "$1" | cut -d' ' -f1
  else
    echo "get-model: need sha256sum or shasum to verify the download" >&2
    exit 1
  fi
}

# Exit 0 when $1 has the expected hash, 1 (with a message) otherwise.
verify() {
  local got
  got="$(sha256_of "$1")"
  if [[ "$got" == "$kSha256" ]]; then
    echo "get-model: $1: SHA-256 OK ($kSha256)"
    return 0
  fi
  echo "get-model: $1: SHA-256 MISMATCH" >&2
  echo "  expected $kSha256" >&2
  echo "  got      $got" >&2
  return 1
}

offline_help() {
  cat >&2 <<HELP
get-model: could not download $kUrl
  This machine may be offline or unable to reach huggingface.co. To install the model by hand:
    1. on a machine with internet access:  curl -L -o $kFile '$kUrl'
       (or open https://huggingface.co/ggml-org/models-moved/tree/main/tinyllamas in a browser)
    2. copy $kFile into $dir/
    3. run this script again: it finds the file, checks its SHA-256 and downloads nothing.
  Behind a proxy, set https_proxy=http://HOST:PORT first (curl and wget both honour it).
HELP
}

mkdir -p "$dir"
target="$dir/$kFile"
if [[ -e "$target" ]]; then
  verify "$target" || { echo "get-model: remove $target and run again to download a fresh copy" >&2; exit 1; }
  exit 0
fi

partial="$target.part.$$"
trap 'rm -f "$partial"' EXIT
echo "get-model: downloading $kUrl"
if command -v curl >/dev/null 2>&1; then
  curl -fL --retry 3 --connect-timeout 20 -o "$partial" "$kUrl" || { offline_help; exit 1; }
elif command -v wget >/dev/null 2>&1; then
  wget -q -T 20 -t 3 -O "$partial" "$kUrl" || { offline_help; exit 1; }
else
  echo "get-model: need curl or wget" >&2
  offline_help
  exit 1
fi
verify "$partial" || { echo "get-model: the download is corrupt or the file changed upstream; not installed" >&2; exit 1; }
mv "$partial" "$target"
echo "get-model: installed $target"
