#!/usr/bin/env bash
# Installs what tbcoll needs to build, test and benchmark on Debian 12 (idempotent; quiet when all is there).
set -euo pipefail
# libibverbs-dev: the verbs headers the ibverbs transport and the tests' fake provider build against (never linked).
# python3: benchmarks/compare.sh's table; curl + ca-certificates: tools/get-model.sh on machines without ../shared.
packages=(build-essential cmake libboost-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev libibverbs-dev
          openmpi-bin libopenmpi-dev python3 curl ca-certificates)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
