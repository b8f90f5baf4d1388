"""Checks the Chrome traces tbcoll wrote for one job (TBCOLL_TRACE=DIR): every file is JSON; each communicator of the
job (its files are tbcoll-<communicator>-rank<R>.trace.json: a split has its own) has one per rank, each rank its own
track (pid), one complete event ("ph": "X") per call, and every rank's calls the same collectives in the same order
(their numbers, names and counts).

    python3 check_trace.py DIR RANKS      prints one line per communicator, or fails naming what is wrong
"""
import glob
import json
import os
import sys


def fail(message):
    print(f"check_trace: {message}", file=sys.stderr)
    sys.exit(1)


def read_track(path):
    """(pid, [(seq, name, count) of its collectives]) of one rank's file."""
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as error:
        fail(f"{path}: not a Chrome trace: {error}")
    names = [e for e in events if e.get("ph") == "M" and e.get("name") == "process_name"]
    if len(names) != 1:
        fail(f"{path}: {len(names)} process names, not one")
    pid = names[0]["pid"]
    complete = [e for e in events if e.get("ph") == "X"]
    if not complete or any(e["pid"] != pid or e["dur"] < 0 for e in complete):
        fail(f"{path}: no calls, or calls off its track")
    return pid, [(e["args"]["seq"], e["name"], e["args"]["count"]) for e in complete
                 if e["name"] not in ("send", "recv", "group_end")]


def main():
    if len(sys.argv) != 3:
        fail("usage: check_trace.py DIR RANKS")
    directory, ranks = sys.argv[1], int(sys.argv[2])
    groups = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.trace.json"))):
        communicator = os.path.basename(path).split("-rank")[0]
        groups.setdefault(communicator, []).append(path)
    if not groups:
        fail(f"no trace files in {directory}")
    for communicator, paths in sorted(groups.items()):
        if len(paths) != ranks:
            fail(f"{communicator}: {len(paths)} trace files, not {ranks}")
        calls = {}
        for path in paths:
            pid, mine = read_track(path)
            if pid in calls:
                fail(f"{path}: track {pid} is another file's too")
            calls[pid] = mine
        if sorted(calls) != list(range(ranks)):
            fail(f"{communicator}: tracks {sorted(calls)}, not ranks 0..{ranks - 1}")
        for pid, mine in calls.items():
            if mine != calls[0]:
                fail(f"{communicator}: rank {pid}'s collectives differ from rank 0's ({len(mine)} vs {len(calls[0])})")
        print(f"trace {communicator}: {ranks} ranks, {len(calls[0])} collectives each")


if __name__ == "__main__":
    main()
