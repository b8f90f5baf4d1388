#!/usr/bin/env bash
# Runs a command for ctest and checks both its exit status and its output, which a PASS_REGULAR_EXPRESSION alone
# cannot (ctest then ignores the status: a benchmark that crashed after printing its table would pass).
#
#   expect_run.sh STATUS PATTERN [--not PATTERN] -- COMMAND...
#
# STATUS: 0, or "fail" for any non-zero status. PATTERN: an extended regular expression the whole output (stdout and
# stderr) must match, newlines included; --not: one it must not match. Prints the output, then what was wrong.
set -uo pipefail
expected=$1
pattern=$2
shift 2
refused=""
if [ "${1:-}" = "--not" ]; then
  refused=$2
  shift 2
fi
[ "${1:-}" = "--" ] && shift
output=$("$@" 2>&1)
status=$?
printf '%s\n' "$output"
verdict=0
if [ "$expected" = "fail" ]; then
  [ "$status" -ne 0 ] || { echo "expect_run: exit status 0, expected a failure"; verdict=1; }
elif [ "$status" -ne "$expected" ]; then
  echo "expect_run: exit status $status, expected $expected"
  verdict=1
fi
[[ $output =~ $pattern ]] || { echo "expect_run: the output does not match: $pattern"; verdict=1; }
if [ -n "$refused" ] && [[ $output =~ $refused ]]; then
  echo "expect_run: the output matches what it must not: $refused"
  verdict=1
fi
exit $verdict
