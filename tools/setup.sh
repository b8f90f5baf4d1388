#!/usr/bin/env bash
# Installs what tbcoll needs to build, test and benchmark on Debian 12 (idempotent; quiet when all is there).
set -euo pipefail
packages=(build-essential cmake pkg-config libboost-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
          openmpi-bin libopenmpi-dev iproute2 procps)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
