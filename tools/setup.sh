#!/usr/bin/env bash
# Installs what tbcoll needs to build, test and benchmark on Debian 12 (idempotent; quiet when all is there).
set -euo pipefail
# libibverbs-dev: the verbs headers the ibverbs transport and the tests' fake provider build against (never linked).
# python3: benchmarks/compare.sh's table and tools/check-portability.sh; curl + ca-certificates: tools/get-model.sh
# on machines without ../shared. clang, libc++: the clang + libc++ build (tools/test-clang-libcxx.sh); libclang-rt-14-dev:
# libFuzzer and the sanitizer runtimes for clang (tools/fuzz.sh);
# g++-aarch64-linux-gnu, qemu-user and the arm64 GoogleTest and fmt: tools/test-arm64.sh; ccache: the extra builds
# share object files where they can; pkg-config: the installed tbcoll.pc is tested (tests/install).
# libssl3: OpenSSL's libcrypto, dlopen'ed for the job secret's HMAC-SHA256 (TBCOLL_SECRET; the build needs no headers).
packages+=(libssl3)
packages+=(build-essential cmake libboost-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev libibverbs-dev
          openmpi-bin libopenmpi-dev python3 curl ca-certificates ccache pkg-config
          clang libc++-dev libc++abi-dev libclang-rt-14-dev googletest
          g++-aarch64-linux-gnu qemu-user libgtest-dev:arm64 libfmt-dev:arm64)
# The RDMA test layer (tools/test-rdma-qemu.sh): qemu-system-x86 boots Debian's kernel with Soft-RoCE (rdma_rxe),
# busybox-static is the guest's userland, rdma-core + ibverbs-providers + ibverbs-utils give the guest libibverbs,
# the rxe provider and the pingpong programs, libibverbs-dev the verbs headers, kmod depmod, iproute2 the rdma tool,
# xz-utils unpacks the kernel for a PVH boot.
packages+=(qemu-system-x86 busybox-static rdma-core ibverbs-utils ibverbs-providers libibverbs-dev kmod iproute2
           xz-utils)
# The Python module and its tests (tests/python): the headers and pybind11 to build it, numpy and pytest to test it,
# torch for the torch.distributed backend (python3-torch, 1.13), libtorch-dev its C++ headers and libraries for the
# C++ process group (python/torch_pg).
packages+=(python3-dev pybind11-dev python3-numpy python3-pytest python3-torch libtorch-dev)
# integrations/distributed-llama: patch applies its change to dllama's sources (make and g++ are build-essential's,
# numpy is above); stdbuf (coreutils) and ss (iproute2) serve its test.
packages+=(patch)
# integrations/mlx (the mlx stage of tools/run-tests.sh): what MLX's CPU build would download, from Debian instead:
# OpenBLAS and LAPACKE (its CPU kernels), nlohmann's json, and robin-map for nanobind (the Python bindings; fmt,
# python3-dev and numpy are above).
packages+=(libopenblas-dev liblapacke-dev nlohmann-json3-dev robin-map-dev)
# benchmarks/plot.py (the benchmark pictures of docs/, and their test): Debian's matplotlib.
packages+=(python3-matplotlib)
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  # The arm64 libraries come from Debian's multiarch archive (the same mirror, arm64 package lists).
  dpkg --print-foreign-architectures | grep -qx arm64 || $sudo_cmd dpkg --add-architecture arm64
  $sudo_cmd apt-get update -qq
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
