#!/bin/sh
# expect.sh [--want REGEX]... [--note REGEX]... -- COMMAND...
# Runs COMMAND (in the QEMU guest, under busybox sh), shows its output, and exits 0 when COMMAND exited 0 and its
# output has a line matching every --want (grep -E); the lines matching a --note become the check's note (the
# `note: ` line test-rdma-qemu.sh puts on the PASS line).
wants=""; notes=""
while [ $# -gt 0 ]; do
  case "$1" in
    --want) wants="$wants
$2"; shift 2 ;;
    --note) notes="$notes
$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "expect.sh: unknown option $1"; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "expect.sh: no command"; exit 2; }
out=/tmp/expect.$$
"$@" > $out 2>&1; status=$?
cat $out
ok=0
[ $status = 0 ] || { echo "expect.sh: exit status $status"; ok=1; }
echo "$wants" | while IFS= read -r want; do
  [ -n "$want" ] || continue
  grep -Eq -- "$want" $out || echo "expect.sh: no line matches '$want'"
done > $out.missing
if [ -s $out.missing ]; then cat $out.missing; ok=1; fi
note=$(echo "$notes" | while IFS= read -r pattern; do
  [ -n "$pattern" ] || continue
  grep -E -- "$pattern" $out | sed 's/^[#[:space:]]*//'
done | awk 'NR > 1 { printf " | " } { printf "%s", $0 }')
[ -z "$note" ] || echo "note: $note"
rm -f $out $out.missing
exit $ok
