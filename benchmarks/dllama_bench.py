#!/usr/bin/env python3
"""distributed-llama's own sync against tbcoll's, side by side, in interleaved rounds.

  benchmarks/dllama_bench.py [--build build] [--rounds 5] [--nodes 2,4] [--models tiny,syn-q40,syn-f32]
      [--syncs socket,socket-blocking,socket-root-blocking,tbcoll,tbcoll-tcp] [--placements host,netns]
      [--loads quiet,busy]
      [--csv FILE] [--work DIR] [--split]

Builds dllama with tbcoll's synchronizer (integrations/distributed-llama/build.sh) and runs `dllama inference`
(greedy, from BOS, --nthreads 1 per node) for every combination of:
  model      tiny: stories260K (latency-bound: 12 small syncs a token); syn-q40 / syn-f32: a synthetic Llama of
             dim 2048, 8 layers (make_synthetic.py; compute-bound), Q80 or f32 syncs
  nodes      the root and N-1 workers
  sync       socket: dllama's own TCP, busy-polling (its default, --net-turbo 1); socket-blocking: --net-turbo 0
             on every node; socket-root-blocking: on the root alone (the workers busy-poll: each node reads the flag
             for itself, and a worker's default is 1);
             tbcoll: --sync tbcoll, tbcoll's choice per pair (shm on one host); tbcoll-tcp: TBCOLL_TRANSPORT=tcp;
             either followed by /NAME=VALUE knobs (tbcoll/wait=block: TBCOLL_WAIT=block)
  placement  host: every node on this machine's network; netns: two network namespaces joined by veth as two
             hosts, the nodes split half and half (root only)
  load       quiet; busy: one process spinning on a CPU for the whole run, as anything else running would
Each round runs every combination once (the machine's drift hits them all alike); the table gives medians over
the rounds (min-max in brackets) of tokens/s, measured by the wall clock between the root's first and last token
lines, and of the time the root's thread spent in syncs per token (DLLAMA_SYNC_STATS), and each tbcoll row's
ratio to dllama's better own mode in the same model, nodes, placement and load. --csv writes every run.
--split: tbcoll's runs also write their calls' traces (TBCOLL_TRACE), and the root's sync time per token is split in
two: waiting (in a call before the last node entered it) and transfer (the rest of the call), per call from the
nodes' begin times (one clock: the nodes share this host's). Tracing reads a precise clock twice a call.
Needs Debian's python3-numpy for the models (PYTHON, default /usr/bin/python3), and root for netns.
"""
import argparse
import csv
import datetime
import glob
import json
import os
import platform
import re
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)
INTEGRATION = os.path.join(PROJECT, "integrations", "distributed-llama")
PRED = "\U0001F536 Pred".encode()
SYNC_STATS = re.compile(rb"dllama sync: (\d+) calls, (\d+) us in syncs")
MODELS = {
    "tiny": {"steps": 256, "float": "f32"},
    "syn-q40": {"steps": 48, "float": "q80", "weights": "q40"},
    "syn-f32": {"steps": 24, "float": "f32", "weights": "f32"},
}
OWN_MODES = ("socket", "socket-blocking", "socket-root-blocking")  # dllama's own sync, as its flags set it
NS_ADDRESSES = {"A": "10.233.0.1", "B": "10.233.0.2"}


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def prepare_models(args, names):
    paths = {}
    python = os.environ.get("PYTHON", "/usr/bin/python3")
    for name in names:
        prefix = os.path.join(args.work, name)
        paths[name] = prefix
        if os.path.exists(prefix + ".m"):
            continue
        if name == "tiny":
            gguf = os.path.join(PROJECT, "..", "shared", "models", "stories260K.gguf")
            run([python, os.path.join(INTEGRATION, "convert_gguf.py"), gguf, prefix], stdout=subprocess.DEVNULL)
        else:
            run([python, os.path.join(INTEGRATION, "make_synthetic.py"), prefix, "--weights", MODELS[name]["weights"],
                 "--seq-len", "512"], stdout=subprocess.DEVNULL)
    return paths


class Namespaces:
    """Two network namespaces joined by a veth pair (A 10.233.0.1, B 10.233.0.2), removed on close()."""

    def __init__(self):
        tag = str(os.getpid())
        self.names = {"A": f"dlbA{tag}", "B": f"dlbB{tag}"}
        a, b = self.names["A"], self.names["B"]
        for ns in (a, b):
            run(["ip", "netns", "add", ns])
        run(["ip", "link", "add", f"dva{tag}", "type", "veth", "peer", "name", f"dvb{tag}"])
        for side, ns in (("a", a), ("b", b)):
            dev = f"dv{side}{tag}"
            run(["ip", "link", "set", dev, "netns", ns])
            run(["ip", "-n", ns, "addr", "add", NS_ADDRESSES[side.upper()] + "/24", "dev", dev])
            run(["ip", "-n", ns, "link", "set", dev, "up"])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def close(self):
        for ns in self.names.values():
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port, ns):
    prefix = ["ip", "netns", "exec", ns] if ns else []
    out = subprocess.run(prefix + ["ss", "-ltn"], capture_output=True, text=True).stdout
    return f":{port} " in out


def trace_split(directory, steps):
    """(waiting, transfer) us per token of the root's collectives, from the ranks' traces in directory: a call's
    waiting is from the root's begin to the last rank's (at most its duration), its transfer the rest."""
    tracks = {}
    for path in glob.glob(os.path.join(directory, "*.trace.json")):
        with open(path) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e["name"] not in
                      ("send", "recv", "group_end")]
        if events:
            tracks[events[0]["pid"]] = {e["args"]["seq"]: (e["ts"], e["dur"]) for e in events}
    if 0 not in tracks or len(tracks) < 2:
        return float("nan"), float("nan")
    waiting = transfer = 0.0
    for seq, (begin, duration) in tracks[0].items():
        last = max((t[seq][0] for t in tracks.values() if seq in t), default=begin)
        wait = min(max(0.0, last - begin), duration)
        waiting += wait
        transfer += duration - wait
    return waiting / steps, transfer / steps


def one_run(args, dllama, model, prefix, nodes, sync, place, namespaces):
    """Runs one inference; returns (tokens/s, sync us per token, waiting us per token, transfer us per token); the
    last two NaN unless --split and tbcoll."""
    env = dict(os.environ, DLLAMA_SYNC_STATS="1")
    traces = None
    if args.split and sync.startswith("tbcoll") and nodes > 1:
        traces = tempfile.mkdtemp(prefix="dllama-trace-", dir=args.work)
        env["TBCOLL_TRACE"] = traces
    env.pop("TBCOLL_TRANSPORT", None)
    base, *knobs = sync.split("/")
    if base == "tbcoll-tcp":
        env["TBCOLL_TRANSPORT"] = "tcp"
    for knob in knobs:  # tbcoll/wait=block: TBCOLL_WAIT=block
        name, _, value = knob.partition("=")
        env["TBCOLL_" + name.upper()] = value
    layout = ("A" * (nodes // 2) + "B" * (nodes - nodes // 2)) if place == "netns" else ""
    ns_of = (lambda i: namespaces.names[layout[i]]) if layout else (lambda i: "")
    address_of = (lambda i: NS_ADDRESSES[layout[i]]) if layout else (lambda i: "127.0.0.1")
    workers, addresses = [], []
    try:
        for i in range(1, nodes):
            port = free_port()
            prefix_cmd = ["ip", "netns", "exec", ns_of(i)] if layout else []
            worker = [dllama, "worker", "--port", str(port), "--nthreads", "1"]
            if sync == "socket-blocking":
                worker += ["--net-turbo", "0"]
            workers.append(subprocess.Popen(prefix_cmd + worker, env=env, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL))
            deadline = time.monotonic() + 10
            while not listening(port, ns_of(i)):
                if time.monotonic() > deadline or workers[-1].poll() is not None:
                    raise RuntimeError(f"worker {i} did not listen on {port}")
                time.sleep(0.02)
            addresses.append(f"{address_of(i)}:{port}")
        spec = MODELS[model]
        cmd = [dllama, "inference", "--model", prefix + ".m", "--tokenizer", prefix + ".t",
               "--buffer-float-type", spec["float"], "--prompt", "", "--steps", str(spec["steps"]),
               "--temperature", "0", "--nthreads", "1"]
        if nodes > 1:
            cmd += ["--workers"] + addresses + ["--sync", "tbcoll" if sync.startswith("tbcoll") else "socket",
                                                "--net-turbo", "0" if sync in OWN_MODES[1:] else "1"]
        if layout:
            cmd = ["ip", "netns", "exec", ns_of(0)] + cmd
        tok_s, sync_us = time_root(cmd, env, spec["steps"])
        if traces is None:
            return tok_s, sync_us, float("nan"), float("nan")
        deadline = time.monotonic() + 5  # the workers write theirs as the root leaves them
        while len(glob.glob(os.path.join(traces, "*.trace.json"))) < 2 * nodes and time.monotonic() < deadline:
            time.sleep(0.05)
        return (tok_s, sync_us) + trace_split(traces, spec["steps"])
    finally:
        for w in workers:
            w.kill()
            w.wait()
        if traces:
            shutil.rmtree(traces, ignore_errors=True)


def time_root(cmd, env, steps):
    with tempfile.TemporaryFile() as err:
        root = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err)
        stamps, tail = [], b""
        while True:
            chunk = os.read(root.stdout.fileno(), 65536)
            if not chunk:
                break
            now = time.monotonic()
            text = tail + chunk
            stamps += [now] * text.count(PRED)
            tail = text[-len(PRED) + 1:]
        if root.wait(timeout=600) != 0:
            err.seek(0)
            raise RuntimeError(f"dllama exited {root.returncode}: {err.read()[-400:]!r}")
        err.seek(0)
        stats = SYNC_STATS.search(err.read())
    if len(stamps) < 3 or stamps[-1] <= stamps[0]:
        raise RuntimeError(f"only {len(stamps)} token lines")
    tok_s = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    sync_us = int(stats.group(2)) / steps if stats else float("nan")
    return tok_s, sync_us


def machine():
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 platform.processor())
    return f"{model}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"


def summarise(results, args):
    print(f"\n# dllama sync: {datetime.datetime.now():%Y-%m-%d %H:%M}, {machine()}")
    print(f"# command: {' '.join(shlex.quote(a) for a in sys.argv)}")
    print(f"# {args.rounds} interleaved rounds; medians (min-max); vs own = tbcoll tok/s over dllama's better own mode")
    split = " waiting / transfer us/token |" if args.split else ""
    print(f"| model | nodes | placement | load | sync | tok/s | sync us/token | vs own |{split}")
    print("|---|---|---|---|---|---|---|---|" + ("---|" if args.split else ""))
    groups = {}
    for key, runs in results.items():
        groups.setdefault(key[:4], {})[key[4]] = runs
    for group, syncs in groups.items():
        own = max((statistics.median(r[0] for r in syncs[s]) for s in OWN_MODES if s in syncs),
                  default=None)
        for sync, runs in syncs.items():
            tok = [r[0] for r in runs]
            sync_us = [r[1] for r in runs]
            ratio = f"{statistics.median(tok) / own:.2f}x" if own and sync.startswith("tbcoll") else ""
            parts = ""
            if args.split:
                waits, moves = [r[2] for r in runs], [r[3] for r in runs]
                parts = (f" {statistics.median(waits):,.1f} / {statistics.median(moves):,.1f} |"
                         if sync.startswith("tbcoll") else " |")
            print(f"| {group[0]} | {group[1]} | {group[2]} | {group[3]} | {sync} | {statistics.median(tok):,.0f} "
                  f"({min(tok):,.0f}-{max(tok):,.0f}) | {statistics.median(sync_us):,.1f} | {ratio} |{parts}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(PROJECT, "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--nodes", default="2,4")
    ap.add_argument("--models", default="tiny,syn-q40,syn-f32")
    ap.add_argument("--syncs", default="socket,socket-blocking,socket-root-blocking,tbcoll,tbcoll-tcp")
    ap.add_argument("--placements", default="host,netns")
    ap.add_argument("--loads", default="quiet,busy")
    ap.add_argument("--csv")
    ap.add_argument("--work", default=None, help="models and logs (default: BUILD/dllama-bench)")
    ap.add_argument("--split", action="store_true", help="tbcoll's sync time split into waiting and transfer")
    args = ap.parse_args()
    args.work = args.work or os.path.join(args.build, "dllama-bench")
    os.makedirs(args.work, exist_ok=True)
    run([os.path.join(INTEGRATION, "build.sh"), os.path.join(args.build, "dllama")],
        env=dict(os.environ, TBCOLL_BUILD=args.build), stdout=subprocess.DEVNULL)
    dllama = os.path.join(args.build, "dllama", "dllama")
    models = args.models.split(",")
    paths = prepare_models(args, models)
    placements = args.placements.split(",")
    namespaces = Namespaces() if "netns" in placements else None
    configs = [(m, int(n), p, l, s) for m in models for n in args.nodes.split(",") for p in placements
               for l in args.loads.split(",") for s in args.syncs.split(",")]
    results = {c: [] for c in configs}
    rows = []
    try:
        for round_index in range(args.rounds):
            for config in configs:
                model, nodes, place, load, sync = config
                spinner = None
                if load == "busy":
                    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                try:
                    tok_s, sync_us, wait_us, move_us = one_run(args, dllama, model, paths[model], nodes, sync,
                                                               place, namespaces)
                finally:
                    if spinner:
                        spinner.kill()
                        spinner.wait()
                results[config].append((tok_s, sync_us, wait_us, move_us))
                rows.append(dict(round=round_index, model=model, nodes=nodes, placement=place, load=load, sync=sync,
                                 tok_s=f"{tok_s:.1f}", sync_us_per_token=f"{sync_us:.2f}",
                                 waiting_us_per_token=f"{wait_us:.2f}", transfer_us_per_token=f"{move_us:.2f}"))
                split = f" (waiting {wait_us:,.1f}, transfer {move_us:,.1f})" if wait_us == wait_us else ""
                print(f"round {round_index + 1}/{args.rounds}: {model} {nodes} nodes {place} {load} {sync}: "
                      f"{tok_s:,.0f} tok/s, sync {sync_us:,.1f} us/token{split}", flush=True)
    finally:
        if namespaces:
            namespaces.close()
    summarise(results, args)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
