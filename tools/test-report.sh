#!/usr/bin/env bash
# After a failed ctest run: the names of the tests that failed and the end of each one's output, from ctest's own
# records in BUILD_DIR/Testing/Temporary (LastTestsFailed.log, LastTest.log), so a CI log shows what broke without
# a rerun.
#
#   tools/test-report.sh BUILD_DIR [LINES]    (LINES of output per failed test, default 60)
set -uo pipefail
build=${1:?usage: tools/test-report.sh BUILD_DIR [LINES]}
lines=${2:-60}
failed=$build/Testing/Temporary/LastTestsFailed.log
outputs=$build/Testing/Temporary/LastTest.log
if [ ! -s "$failed" ]; then
  echo "test-report: no failed test recorded in $failed"
  exit 0
fi
echo "test-report: $(wc -l < "$failed") failed test(s) in $build:"
sed 's/^[0-9]*:/  /' "$failed"
[ -f "$outputs" ] || exit 0
python3 - "$failed" "$outputs" "$lines" <<'PYTHON'
import re, sys
failed_path, outputs_path, keep = sys.argv[1], sys.argv[2], int(sys.argv[3])
names = [line.split(":", 1)[1].strip() for line in open(failed_path) if ":" in line]
text = open(outputs_path, errors="replace").read()
for name in names:
    # LastTest.log: "N/M Test: NAME" ... "Output:" then a dashed line, the output, "<end of output>".
    match = re.search(r"^\d+/\d+ Test: " + re.escape(name) + r"\n.*?^Output:\n-+\n(.*?)^<end of output>", text,
                      flags=re.S | re.M)
    print(f"---- {name}: the last {keep} lines of its output")
    body = match.group(1).rstrip("\n").split("\n") if match else ["(no output recorded)"]
    print("\n".join(body[-keep:]))
PYTHON
