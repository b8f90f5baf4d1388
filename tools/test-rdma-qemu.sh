#!/usr/bin/env bash
# The real-rdma-core test layer (ARCHITECTURE.md, layer 5): boots Debian's linux-image-amd64 kernel (it ships Soft-RoCE,
# rdma_rxe) in qemu-system-x86_64 under TCG (no KVM) with a busybox initramfs, loads the modules, creates two rxe
# devices (rxe0 and rxe1 on dummy netdevs of subnets of their own; every rank on both, one rail unless a check asks
# for two) and runs a list of checks inside that ONE boot, each with a
# timeout. Prints one line per check on stdout,
#     RDMA-QEMU <mode> <name> PASS|FAIL|SKIP (detail)
# and exits non-zero on any failure, a check that left no result (guest crash or timeout) or a set-up error.
# The checks are data: tools/rdma-qemu/checks.txt (its header says the format), plus --checks FILE / --check LINE.
#
# usage: tools/test-rdma-qemu.sh [options] [BUILD_DIR]      (BUILD_DIR defaults to build/ in the repository)
#   --checks FILE       add the checks in FILE (repeatable)
#   --check 'MODE NAME [timeout=S] COMMAND...'   add one check (repeatable)
#   --no-default-checks leave tools/rdma-qemu/checks.txt out
#   --only REGEX        keep the checks whose "MODE NAME" matches REGEX (extended regex)
#   --list              print the checks and exit
#   --timeout S         a check's timeout when its line has no timeout= (default 300)
#   --env NAME=VALUE    set in every check's environment (repeatable), e.g. TBCOLL_DEBUG=INFO
#   --work DIR          work directory (initramfs, console.log, logs/<mode>-<name>.log); default a fresh temporary
#                       one, removed after a run that passed
#   --keep              keep the work directory
#   -v, --verbose       print every check's output on stderr, not only a failing one's tail
#   --kernel VERSION    kernel ABI, e.g. 6.1.0-57-amd64 (default: what linux-image-amd64 depends on; env KVER)
#   --no-pvh            boot the compressed bzImage instead of the uncompressed ELF through PVH (PVH saves ~5 s
#                       of decompression under emulation)
# Environment: TBCOLL_RDMA_QEMU_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/tbcoll-rdma-qemu) holds the unpacked
# kernel and the modules it needs, per kernel version, so re-runs download nothing. CI=true turns "this host cannot
# run QEMU" into a failure; elsewhere it exits 77 (ctest reports the test as skipped).
# Host packages (tools/setup.sh installs them): qemu-system-x86 busybox-static rdma-core ibverbs-utils
# ibverbs-providers libibverbs-dev kmod iproute2; apt-get download fetches the kernel package.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
T0=$(date +%s.%N)

die() { echo "test-rdma-qemu: $*" >&2; exit 2; }
cannot_run() {  # the host lacks what the layer needs: a failure in CI, a skip (77) elsewhere
  echo "test-rdma-qemu: cannot run here: $*" >&2
  if [ "${CI:-}" = true ]; then exit 2; fi
  echo "test-rdma-qemu: skipped (tools/setup.sh installs what it needs)" >&2
  exit 77
}
usage() { sed -n '/^# usage:/,/^# Host packages/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

# ---- options ---------------------------------------------------------------------------------------------------
BUILD=""
manifests=("$REPO/tools/rdma-qemu/checks.txt")
extra_lines=()
only=""
list_only=0
default_timeout=300
check_env=()
work=""
keep=0
verbose=0
pvh=1
kver=${KVER:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --checks) [ $# -ge 2 ] || die "--checks needs a file"; manifests+=("$2"); shift 2 ;;
    --check) [ $# -ge 2 ] || die "--check needs a line"; extra_lines+=("$2"); shift 2 ;;
    --no-default-checks) manifests=("${manifests[@]:1}"); shift ;;
    --only) [ $# -ge 2 ] || die "--only needs a regex"; only=$2; shift 2 ;;
    --list) list_only=1; shift ;;
    --timeout) [[ ${2:-} =~ ^[0-9]+$ ]] || die "--timeout needs whole seconds"; default_timeout=$2; shift 2 ;;
    --env) [[ ${2:-} =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env needs NAME=VALUE"; check_env+=("$2"); shift 2 ;;
    --work) [ $# -ge 2 ] || die "--work needs a directory"; work=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -v|--verbose) verbose=1; shift ;;
    --kernel) [ $# -ge 2 ] || die "--kernel needs a version"; kver=$2; shift 2 ;;
    --no-pvh) pvh=0; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (--help lists them)" ;;
    *) [ -z "$BUILD" ] || die "one build directory only"; BUILD=$1; shift ;;
  esac
done
BUILD=${BUILD:-$REPO/build}

# ---- the checks --------------------------------------------------------------------------------------------------
c_mode=(); c_name=(); c_timeout=(); c_cmd=()
add_check() {  # $1 = a manifest line, $2 = where it came from
  local line=$1 where=$2 mode name rest timeout=$default_timeout
  read -r mode name rest <<<"$line"
  [[ $mode =~ ^[A-Za-z0-9_.-]+$ && $name =~ ^[A-Za-z0-9_.-]+$ && -n $rest ]] ||
    die "$where: expected 'MODE NAME [timeout=S] COMMAND...', got: $line"
  if [[ $rest =~ ^timeout=([0-9]+)[[:space:]]+(.*)$ ]]; then timeout=${BASH_REMATCH[1]}; rest=${BASH_REMATCH[2]}; fi
  if [ -n "$only" ] && ! [[ "$mode $name" =~ $only ]]; then return; fi
  local k
  for k in "${!c_mode[@]}"; do
    if [ "${c_mode[$k]} ${c_name[$k]}" = "$mode $name" ]; then die "$where: check '$mode $name' is there twice"; fi
  done
  c_mode+=("$mode"); c_name+=("$name"); c_timeout+=("$timeout"); c_cmd+=("$rest")
}
for manifest in "${manifests[@]}"; do
  [ -f "$manifest" ] || die "no such checks file: $manifest"
  n=0
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    line=${line%$'\r'}
    [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
    add_check "$line" "$manifest:$n"
  done <"$manifest"
done
for line in "${extra_lines[@]}"; do add_check "$line" "--check"; done
[ ${#c_mode[@]} -gt 0 ] || die "no checks to run${only:+ (none matches --only '$only')}"
if [ $list_only = 1 ]; then
  for k in "${!c_mode[@]}"; do
    printf '%-6s %-16s %4ss  %s\n' "${c_mode[$k]}" "${c_name[$k]}" "${c_timeout[$k]}" "${c_cmd[$k]}"
  done
  exit 0
fi
needs_ib() { [ "$1" = uc ] || [ "$1" = rc ] || [ "$1" = auto ]; }   # the ibverbs modes (TBCOLL_IB_MODE)

# ---- the host ------------------------------------------------------------------------------------------------------
[ "$(uname -s)" = Linux ] && [ "$(uname -m)" = x86_64 ] || cannot_run "needs a Linux x86_64 host"
PATH=$PATH:/usr/sbin:/sbin
for tool in qemu-system-x86_64 apt-get apt-cache dpkg-deb depmod ldd flock rdma ibv_devinfo; do
  command -v "$tool" >/dev/null || cannot_run "no $tool (tools/setup.sh installs it)"
done
BUSYBOX=/bin/busybox
[ -x $BUSYBOX ] && ! ldd $BUSYBOX >/dev/null 2>&1 || cannot_run "no static $BUSYBOX (package busybox-static)"
RXE_PROVIDER=$(ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so 2>/dev/null | head -1)
[ -n "$RXE_PROVIDER" ] && [ -f /etc/libibverbs.d/rxe.driver ] ||
  cannot_run "no rxe provider (package ibverbs-providers)"
[ -d "$BUILD" ] || die "no build directory $BUILD"
BUILD=$(cd "$BUILD" && pwd)
[ -x "$BUILD/tbcoll-run" ] && [ -x "$BUILD/tbcoll-info" ] || die "$BUILD has no tbcoll-run/tbcoll-info: build first"

HAVE_IB=0
if "$BUILD/tbcoll-info" 2>/dev/null | grep -qE '^  ibverbs( |$)'; then HAVE_IB=1; fi

CACHE=${TBCOLL_RDMA_QEMU_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/tbcoll-rdma-qemu}
mkdir -p "$CACHE"
# One run at a time on this machine (QEMU takes both cores; the cache is filled once).
exec 9>"$CACHE/lock"
if ! flock -n 9; then
  echo "test-rdma-qemu: waiting for another run to finish (lock $CACHE/lock)" >&2
  flock -w 3600 9 || die "another run held $CACHE/lock for an hour"
fi

if [ -n "$work" ]; then
  mkdir -p "$work"; work=$(cd "$work" && pwd)
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/tbcoll-rdma-qemu.XXXXXX")
fi
rm -rf "$work/root" "$work/logs" "$work/console.log" "$work/console.fifo" "$work/initrd.cpio"
mkdir -p "$work/logs"

# ---- the kernel: Debian's linux-image-amd64, unpacked once per version into the cache -----------------------------
# Module names to load; their dependencies come from modules.dep. crc32_generic is no dependency of rdma_rxe but
# rxe cannot add a device without it (it asks the crypto API for "crc32").
WANTED_MODULES="crc32_generic rdma_rxe dummy"
index_kernel() {  # the ABI linux-image-amd64 depends on now, e.g. 6.1.0-57-amd64 (old ones leave the index)
  apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/.*Depends: linux-image-\([0-9][^ ]*-amd64\)$/\1/p' | head -1
}
cached_kernel() {  # the newest kernel unpacked in the cache
  local d
  for d in "$CACHE"/*-amd64; do if [ -f "$d/complete" ]; then basename "$d"; fi; done | sort -V | tail -1
}
kver_forced=${kver:+1}
[ -n "$kver" ] || kver=$(index_kernel)
if [ -z "$kver" ]; then  # no package index
  kver=$(cached_kernel)
  [ -n "$kver" ] || cannot_run "apt-cache knows no linux-image-amd64 and the cache is empty (run apt-get update)"
  echo "test-rdma-qemu: no package index; using the cached kernel $kver" >&2
fi
if [ ! -f "$CACHE/$kver/complete" ]; then
  tmp=$(mktemp -d "$CACHE/unpack.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  download() { echo "test-rdma-qemu: fetching linux-image-$1" >&2
               (cd "$tmp" && apt-get download -q "linux-image-$1" >/dev/null 2>"$tmp/apt.err"); }
  if ! download "$kver"; then
    # The index may be old (the ABI changes with security updates): refresh it once when we can, and ask again.
    if [ "$(id -u)" = 0 ] && apt-get update -qq >/dev/null 2>&1 && [ -z "$kver_forced" ]; then
      kver=$(index_kernel)
    fi
    if [ -n "$kver" ] && { [ -f "$CACHE/$kver/complete" ] || download "$kver"; }; then
      :
    elif [ -z "$kver_forced" ] && [ -n "$(cached_kernel)" ]; then
      echo "test-rdma-qemu: apt-get download failed ($(tr '\n' ' ' <"$tmp/apt.err")); using the cached kernel" >&2
      kver=$(cached_kernel)
    else
      die "apt-get download linux-image-$kver failed: $(cat "$tmp/apt.err")"
    fi
  fi
fi
K=$CACHE/$kver
if [ ! -f "$K/complete" ]; then
  echo "test-rdma-qemu: unpacking linux-image-$kver into $K" >&2
  dpkg-deb -x "$tmp"/linux-image-"$kver"_*.deb "$tmp/pkg"
  depmod -b "$tmp/pkg" "$kver"   # the package has no modules.dep: it is made at install time
  M=$tmp/pkg/lib/modules/$kver
  new=$tmp/k; mkdir -p "$new/mod"
  cp "$tmp/pkg/boot/vmlinuz-$kver" "$new/vmlinuz"
  # Load order: every module after its dependencies (modules.dep lists a module's full closure).
  order=()
  resolve() {
    local m=$1 line dep
    case " ${order[*]-} " in *" $m "*) return ;; esac
    line=$(grep -E "(^|/)$m\.ko(\.xz|\.zst|\.gz)?:" "$M/modules.dep" || true)
    if [ -z "$line" ]; then
      grep -qE "(^|/)$m\.ko$" "$M/modules.builtin" && return   # built in: nothing to load
      die "module $m is not in $kver's modules.dep"
    fi
    for dep in ${line#*:}; do
      dep=$(basename "$dep"); dep=${dep%%.ko*}
      resolve "${dep//-/_}"
    done
    local file=$M/${line%%:*}
    case "$file" in
      *.ko) cp "$file" "$new/mod/$m.ko" ;;
      *.ko.xz) xz -dc "$file" >"$new/mod/$m.ko" ;;
      *.ko.zst) zstd -qdc "$file" >"$new/mod/$m.ko" ;;
      *.ko.gz) gzip -dc "$file" >"$new/mod/$m.ko" ;;
    esac
    order+=("$m")
  }
  for m in $WANTED_MODULES; do resolve "$m"; done
  printf '%s\n' "${order[@]}" >"$new/mod/order"
  rm -rf "$K"; mv "$new" "$K"; touch "$K/complete"
  rm -rf "$tmp"; trap - EXIT
  if [ -z "$kver_forced" ]; then   # superseded kernels go
    for old in "$CACHE"/*-amd64; do [ "$old" = "$K" ] || rm -rf "$old"; done
  fi
fi
[ -z "${tmp:-}" ] || { rm -rf "$tmp"; trap - EXIT; }
# PVH boots the uncompressed ELF: cut the XZ stream out of the bzImage once, here, instead of in every boot.
if [ $pvh = 1 ] && [ ! -f "$K/vmlinux" ] && [ ! -f "$K/no-vmlinux" ]; then
  off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$K/vmlinuz" | head -1 | cut -d: -f1 || true)
  if [ -n "$off" ]; then   # xz complains about the data after the stream: the ELF check below decides
    tail -c +$((off + 1)) "$K/vmlinuz" | xz -dc >"$K/vmlinux.tmp" 2>/dev/null || true
  fi
  if [ "$(head -c 4 "$K/vmlinux.tmp" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; then
    mv "$K/vmlinux.tmp" "$K/vmlinux"
  else
    rm -f "$K/vmlinux.tmp"; touch "$K/no-vmlinux"
    echo "test-rdma-qemu: could not unpack an ELF vmlinux from the bzImage; booting the bzImage" >&2
  fi
fi
KIMG=$K/vmlinuz; boot_kind=bzImage
if [ $pvh = 1 ] && [ -f "$K/vmlinux" ] && [ ! -f "$K/no-vmlinux" ]; then KIMG=$K/vmlinux; boot_kind=PVH; fi

# ---- the initramfs ------------------------------------------------------------------------------------------------
R=$work/root
mkdir -p "$R"/{bin,dev,proc,sys,tmp,root,etc/libibverbs.d,tb/bin,tb/lib,tb/mod,tb/checks,tb/w/repo}
cp $BUSYBOX "$R/bin/busybox"
cp "$K"/mod/*.ko "$K/mod/order" "$R/tb/mod/"
cp /etc/libibverbs.d/rxe.driver "$R/etc/libibverbs.d/"
printf '127.0.0.1 localhost rdma-qemu\n' >"$R/etc/hosts"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
cp -a "$BUILD"/libtbcoll.so* "$R/tb/lib/" 2>/dev/null || true

copied=" "
copy_elf() {  # $1 = program or library, $2 = its place in the guest; then every ldd dependency
  local src=$1 dest=$2 lib
  case "$copied" in *" $dest "*) return ;; esac
  copied+="$dest "
  mkdir -p "$(dirname "$R$dest")"
  cp -L "$src" "$R$dest"
  ldd "$src" >/dev/null 2>&1 || return 0   # static, or not ELF
  for lib in $(ldd "$src" | grep -o '/[^ ]*'); do
    case "$lib" in
      "$BUILD"/*) [ -e "$R/tb/lib/$(basename "$lib")" ] || cp -L "$lib" "$R/tb/lib/" ;;
      *) [ -e "$R$lib" ] || cp --parents -L "$lib" "$R" ;;
    esac
  done
}
# Always there: rdma-core's library (also what the transport dlopens), the rxe provider, the rdma tool, the launcher.
for f in "$(command -v ibv_devinfo)" "$(command -v rdma)" "$RXE_PROVIDER" /usr/lib/x86_64-linux-gnu/libibverbs.so.1 \
         /usr/lib/x86_64-linux-gnu/libibverbs.so; do
  [ ! -e "$f" ] || copy_elf "$f" "$f"
done
copy_elf "$BUILD/tbcoll-run" /tb/bin/tbcoll-run
copy_elf "$BUILD/tbcoll-info" /tb/bin/tbcoll-info

# The build tree's programs by name (CMake's own files left out).
declare -A built
while IFS= read -r f; do
  b=$(basename "$f")
  [ -n "${built[$b]:-}" ] || built[$b]=$f
done < <(find "$BUILD" -type f -perm -u+x ! -path '*/CMakeFiles/*' ! -name '*.so*' ! -name '*.sh' ! -name '*.cmake' |
         awk '{ print length($0) " " $0 }' | sort -n | cut -d' ' -f2-)
declare -A applet
for a in $($BUSYBOX --list); do applet[$a]=1; done
helpers=" pingpong same-as-one-rank "

for k in "${!c_mode[@]}"; do
  # Every word of the command that names something: a build program, a host program, a file under the repository.
  read -ra words <<<"${c_cmd[$k]}"   # split on blanks, no globbing
  for word in "${words[@]}"; do
    word=${word//[\"\']/}
    [[ $word =~ ^--?[A-Za-z0-9_-]+=(.+)$ ]] && word=${BASH_REMATCH[1]}
    [[ $word =~ ^[A-Za-z_][A-Za-z0-9_]*=(.+)$ ]] && word=${BASH_REMATCH[1]}
    [ -n "$word" ] || continue
    if [[ $word == */* ]]; then
      if [[ $word == /* ]]; then
        if [ -f "$word" ]; then mkdir -p "$(dirname "$R$word")"; cp -L "$word" "$R$word"; fi
      elif [ -f "$REPO/$word" ]; then
        guest=$(realpath -m "/tb/w/repo/$word")
        mkdir -p "$(dirname "$R$guest")"; cp -L "$REPO/$word" "$R$guest"
      elif [[ $word == .* ]]; then
        echo "test-rdma-qemu: warning: ${c_mode[$k]} ${c_name[$k]} names $word, not found under $REPO" >&2
      fi
    elif [ -n "${built[$word]:-}" ]; then
      copy_elf "${built[$word]}" "/tb/bin/$word"
    elif [[ $helpers == *" $word "* || -n ${applet[$word]:-} ]]; then
      :
    elif [[ $word =~ ^[A-Za-z][A-Za-z0-9_.+-]*$ ]] && p=$(command -v "$word" 2>/dev/null) && [[ $p == /* ]]; then
      copy_elf "$p" "$p"
    fi
  done
  # The check's script: its environment, then the command as written.
  {
    echo "export CHECK_INDEX=$k CHECK_TIMEOUT=${c_timeout[$k]}"
    case "${c_mode[$k]}" in
      verbs) ;;
      uc|rc|auto) echo "export TBCOLL_TRANSPORT=ibverbs TBCOLL_IB_MODE=${c_mode[$k]}" ;;
      *) echo "export TBCOLL_TRANSPORT=${c_mode[$k]}" ;;
    esac
    for e in "${check_env[@]}"; do printf 'export %q\n' "$e"; done
    echo "cd /tb/w/repo"
    echo "${c_cmd[$k]}"
  } >"$R/tb/checks/$k.sh"
  echo "$k ${c_mode[$k]} ${c_timeout[$k]} $(needs_ib "${c_mode[$k]}" && echo ib || echo -)" >>"$R/tb/checks/list"
done
echo "HAVE_IB_HOST=$HAVE_IB" >"$R/tb/config"

# Helper: an rdma-core pingpong program as server and client, two processes on rxe0.
cat >"$R/tb/bin/pingpong" <<'EOF'
#!/bin/sh
# pingpong PROG ARGS: PROG as server and as client (to 10.9.0.1) on rxe0, on a port of this check's own.
prog=$1; shift
port=$((18515 + ${CHECK_INDEX:-0}))
$prog -d rxe0 -p $port "$@" > /tmp/pp.server 2>&1 & server=$!
i=0
while ! netstat -ltn | grep -q ":$port "; do
  sleep 0.1; i=$((i + 1))
  [ $i -lt 300 ] || { echo "pingpong: the server never listened on $port"; cat /tmp/pp.server; kill $server; exit 1; }
done
$prog -d rxe0 -p $port "$@" 10.9.0.1 > /tmp/pp.client 2>&1; client=$?
wait $server; server=$?
sed 's/^/[server] /' /tmp/pp.server; sed 's/^/[client] /' /tmp/pp.client
echo "pingpong: client exit $client, server exit $server"
# The emulated round trip for the result line (a smoke figure, not a speed): one iteration is one round trip.
sed -n 's|.* = \([0-9.]*\) usec/iter.*|note: round trip \1 us|p' /tmp/pp.client
[ $client = 0 ] && [ $server = 0 ] && grep -q 'usec/iter' /tmp/pp.client
EOF
# Helper: the same program at N ranks gives the same stdout as at one rank.
cat >"$R/tb/bin/same-as-one-rank" <<'EOF'
#!/bin/sh
# same-as-one-rank N PROG ARGS: PROG's stdout under tbcoll-run -n N equals its stdout as one plain process.
n=$1; shift
env -u TBCOLL_TRANSPORT -u TBCOLL_IB_MODE "$@" > /tmp/one.out 2> /tmp/one.err; one=$?
echo "1 rank: exit $one, $(wc -c < /tmp/one.out) bytes"; sed 's/^/[1 rank stderr] /' /tmp/one.err
tbcoll-run -n $n -- "$@" > /tmp/many.out 2> /tmp/many.err; many=$?
echo "$n ranks: exit $many, $(wc -c < /tmp/many.out) bytes"; sed "s/^/[$n ranks stderr] /" /tmp/many.err
[ $one = 0 ] && [ $many = 0 ] && [ -s /tmp/one.out ] || exit 1
if cmp -s /tmp/one.out /tmp/many.out; then echo "identical:"; sed 's/^/| /' /tmp/one.out; exit 0; fi
echo "outputs differ:"; diff /tmp/one.out /tmp/many.out; exit 1
EOF
chmod +x "$R/tb/bin/pingpong" "$R/tb/bin/same-as-one-rank"

cat >"$R/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/tb/bin:/bin:/usr/bin:/sbin:/usr/sbin LD_LIBRARY_PATH=/tb/lib HOME=/root TMPDIR=/tmp
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /dev/shm /dev/pts; mount -t tmpfs -o mode=1777 shm /dev/shm
say() { echo "@@RQ $*"; }
up() { cut -d' ' -f1 /proc/uptime; }
. /tb/config
say SETUP "kernel $(uname -r), up $(up) s"
for m in $(cat /tb/mod/order); do insmod /tb/mod/$m.ko || say SETUP "ERROR insmod $m failed"; done
hostname rdma-qemu
ip link set lo up        # tbcoll-run's rendezvous and the pingpong side channel
# Two devices, each on a subnet of its own as two Thunderbolt cables would be: rxe0 (every check's default) and
# rxe1, which the multi-rail checks add with TBCOLL_IB_RAILS=2.
for n in 0 1; do
  ip link add d$n type dummy && ip addr add 10.$((9 + n)).0.1/24 dev d$n && ip link set d$n up ||
    say SETUP "ERROR dummy netdev d$n"
  rdma link add rxe$n type rxe netdev d$n || say SETUP "ERROR rdma link add rxe$n failed"
  i=0
  until ibv_devinfo -d rxe$n 2>/dev/null | grep -q PORT_ACTIVE; do
    i=$((i + 1)); [ $i -lt 50 ] || { say SETUP "ERROR rxe$n's port is not active"; break; }; sleep 0.1
  done
  ibv_devinfo -d rxe$n -v 2>&1 | grep -E 'hca_id|transport|state|active_mtu|GID\[' | sed 's/^/@@RQ SETUP   /'
done
have_ib=$HAVE_IB_HOST
if [ "$have_ib" = 0 ] && tbcoll-info 2>/dev/null | grep -qE '^  ibverbs( |$)'; then have_ib=1; fi
echo 1 > /proc/sys/kernel/printk   # the console is for markers now; a failing check's log gets new dmesg lines
say SETUP "ready, up $(up) s, ibverbs transport: $([ $have_ib = 1 ] && echo yes || echo no)"
while read -r i mode t needs; do
  if [ "$needs" = ib ] && [ "$have_ib" = 0 ]; then say RESULT $i SKIP no ibverbs transport in this build; continue; fi
  seen=$(dmesg | wc -l); t0=$(up)
  setsid sh /tb/checks/$i.sh > /tmp/log.$i 2>&1 < /dev/null & pid=$!   # its own process group, for the timeout
  ( sleep $t; touch /tmp/timedout.$i; kill -TERM -$pid; sleep 5; kill -KILL -$pid ) > /dev/null 2>&1 & watchdog=$!
  wait $pid; rc=$?
  kill $watchdog 2>/dev/null; kill -KILL -$pid 2>/dev/null
  secs=$(awk "BEGIN { printf \"%.1f\", $(up) - $t0 }")
  note=$(sed -n 's/^note: //p' /tmp/log.$i | tail -n 1)   # a check's own figure, for its result line
  if [ -e /tmp/timedout.$i ]; then status="FAIL timed out after $t s"
  elif [ $rc = 0 ]; then status="PASS $secs s${note:+; $note}"
  else status="FAIL exit status $rc after $secs s"; fi
  [ $rc = 0 ] || dmesg | tail -n +$((seen + 1)) | sed 's/^/[dmesg] /' >> /tmp/log.$i
  sed "s/^/@@RQ LOG $i /" /tmp/log.$i
  say RESULT $i $status
done < /tb/checks/list
say DONE up $(up) s
poweroff -f
EOF
chmod +x "$R/init"
(cd "$R" && find . | $BUSYBOX cpio -o -H newc 2>/dev/null) >"$work/initrd.cpio"
T_BOOT=$(date +%s.%N)

# ---- boot, and read the console as it comes ------------------------------------------------------------------------
budget=240   # boot and set-up, plus every check's own timeout
for k in "${!c_mode[@]}"; do budget=$((budget + c_timeout[k] + 10)); done
result=(); detail=()
done_marker=0; setup_errors=0
print_result() {  # $1 = index
  local k=$1 line="RDMA-QEMU ${c_mode[$1]} ${c_name[$1]} ${result[$1]}"
  [ -z "${detail[$1]}" ] || line+=" (${detail[$1]})"
  echo "$line"
  local log=$work/logs/${c_mode[$k]}-${c_name[$k]}.log
  if [ "${result[$k]}" = FAIL ] || [ $verbose = 1 ]; then
    if [ -s "$log" ]; then
      echo "---- ${c_mode[$k]} ${c_name[$k]}: ${c_cmd[$k]}" >&2
      if [ $verbose = 1 ]; then cat "$log" >&2; else tail -n 40 "$log" >&2; fi
      echo "----" >&2
    fi
  fi
}
saw_guest=0
boot() {  # runs QEMU on $KIMG, reading the console as it comes: results are printed as they arrive
  rm -f "$work/console.fifo"; mkfifo "$work/console.fifo"
  timeout -k 10 "$budget" qemu-system-x86_64 -accel tcg,thread=multi -smp 2 -m 1536 -nographic -no-reboot -nic none \
    -kernel "$KIMG" -initrd "$work/initrd.cpio" -append "console=ttyS0 panic=-1 quiet" \
    </dev/null >"$work/console.fifo" 2>&1 &
  qemu_pid=$!
  trap 'kill $qemu_pid 2>/dev/null || true' EXIT   # timeout passes the signal on to QEMU
  exec 3>"$work/console.log"
  while IFS= read -r line; do
    line=${line%$'\r'}
    printf '%s\n' "$line" >&3
    [[ $line == *"@@RQ "* ]] || continue
    line=${line#*@@RQ }
    if [[ $line =~ ^LOG\ ([0-9]+)\ (.*)$ ]]; then
      k=${BASH_REMATCH[1]}
      printf '%s\n' "${BASH_REMATCH[2]}" >>"$work/logs/${c_mode[$k]}-${c_name[$k]}.log"
    elif [[ $line =~ ^RESULT\ ([0-9]+)\ ([A-Z]+)\ ?(.*)$ ]]; then
      k=${BASH_REMATCH[1]}; result[$k]=${BASH_REMATCH[2]}; detail[$k]=${BASH_REMATCH[3]}
      print_result "$k"
    elif [[ $line =~ ^SETUP\ (.*)$ ]]; then
      saw_guest=1
      if [[ $line == *ERROR* ]]; then setup_errors=$((setup_errors + 1)); fi
      if [ $verbose = 1 ] || [[ $line == *ERROR* ]]; then echo "test-rdma-qemu: guest: ${BASH_REMATCH[1]}" >&2; fi
    elif [[ $line == DONE* ]]; then
      done_marker=1
    fi
  done <"$work/console.fifo"
  exec 3>&-
  wait $qemu_pid || true
  trap - EXIT
}
boot
if [ $saw_guest = 0 ] && [ $boot_kind = PVH ]; then  # QEMU or the kernel refused the PVH entry: bzImage from now on
  echo "test-rdma-qemu: no sign of the guest booting through PVH; booting the bzImage (and from now on)" >&2
  mv "$work/console.log" "$work/console-pvh.log"; touch "$K/no-vmlinux"
  KIMG=$K/vmlinuz; boot_kind=bzImage
  boot
fi
T_END=$(date +%s.%N)

failed=0; passed=0; skipped=0
for k in "${!c_mode[@]}"; do
  if [ -z "${result[$k]:-}" ]; then
    result[$k]=FAIL
    detail[$k]="no result: the guest $([ $done_marker = 1 ] && echo skipped it || echo "crashed or timed out")"
    print_result "$k"
  fi
  case "${result[$k]}" in
    PASS) passed=$((passed + 1)) ;;
    SKIP) skipped=$((skipped + 1)) ;;
    *) failed=$((failed + 1)) ;;
  esac
done
if [ $done_marker = 0 ]; then
  echo "test-rdma-qemu: the guest did not finish; last console lines:" >&2
  tail -n 20 "$work/console.log" >&2
fi
awk -v k="$kver" -v b="$boot_kind" -v p=$passed -v f=$failed -v s=$skipped -v e=$setup_errors \
    -v t0="$T0" -v t1="$T_BOOT" -v t2="$T_END" 'BEGIN {
  printf "test-rdma-qemu: %d passed, %d failed, %d skipped, %d set-up errors; kernel %s (%s); prepare %.1f s, ",
         p, f, s, e, k, b, t1 - t0
  printf "QEMU %.1f s, total %.1f s\n", t2 - t1, t2 - t0 }' >&2
if [ $failed = 0 ] && [ $done_marker = 1 ] && [ $setup_errors = 0 ]; then
  [ $keep = 1 ] || [[ $work != "${TMPDIR:-/tmp}"/tbcoll-rdma-qemu.* ]] || rm -rf "$work"
  exit 0
fi
echo "test-rdma-qemu: FAILED; console and per-check logs in $work" >&2
exit 1
