# MLX's all_sum and a tensor-parallel MLP forward per token over three backends on this machine, in interleaved
# rounds: tbcoll forced to tcp (TBCOLL_TRANSPORT=tcp: ring is TCP too), MLX's ring, and tbcoll's default (shared
# memory between ranks on one host). Every job is started by tbcoll-run, ring's too (MLX_RANK from TBCOLL_RANK,
# a fresh MLX_HOSTFILE per job), so the processes sit on the same CPUs whatever the backend.
#
#   PYTHONPATH=build/mlx/python /usr/bin/python3 integrations/mlx/benchmark.py --run build/tbcoll-run \
#       [--ranks 2] [--rounds 5] [--csv out.csv]
#
# Per round each backend runs once (the order rotates from round to round); a job times, on rank 0, every all_sum
# size from 8 B to 64 MiB (float32; batches of calls, the median batch's time per call) and each MLP's forward
# per token (shard_linear "all-to-sharded" up, gelu, "sharded-to-all" down with its all_sum, a residual add;
# float32, batch 1). The table gives the median over rounds, and the ratios to ring's time (< 1: faster than
# ring). Needs MLX built with the backend (integrations/mlx/build.sh) on PYTHONPATH.
import argparse
import csv
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = [8, 64, 512, 4096, 32768, 65536, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
# MLP shapes: model dims x hidden dims x layers. The first a narrow model, where the all_sums are a large share
# of a token; the second a ~1B-class MLP width, where compute dominates.
MLPS = [(512, 2048, 8), (2048, 8192, 2)]
BACKENDS = ["tbcoll-tcp", "ring", "tbcoll-shm"]
# Beside them, the floor of the MLPs: one process computing one rank's shard (hidden / ranks) with no
# communication, what a token would cost if the all_sums were free.


def calls_per_batch(nbytes):
    return max(5, min(1000, (4 << 20) // max(nbytes, 1) // 4))


def time_batches(step, calls, batches=7):
    """Median over batches of the time per call, in microseconds (after one warm-up batch)."""
    times = []
    for b in range(batches + 1):
        start = time.perf_counter()
        for _ in range(calls):
            step()
        if b > 0:
            times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def bench_all_sum(group, emit):
    import mlx.core as mx

    for nbytes in SIZES:
        x = mx.ones((max(nbytes // 4, 1),))
        mx.eval(x)
        us = time_batches(lambda: mx.eval(mx.distributed.all_sum(x, group=group)), calls_per_batch(nbytes))
        emit({"what": "all_sum", "bytes": nbytes, "us": us})


def bench_mlp(group, emit, shards=1):
    """shards > 1 (with a group of one): one rank's share of the layers of a job of that many ranks."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.nn.layers.distributed import shard_linear

    for dims, full_hidden, layers in MLPS:
        hidden = full_hidden // shards
        mx.random.seed(0)
        blocks = []
        for _ in range(layers):
            up, down = nn.Linear(dims, hidden, bias=False), nn.Linear(hidden, dims, bias=False)
            blocks.append((shard_linear(up, "all-to-sharded", group=group),
                           shard_linear(down, "sharded-to-all", group=group)))
        mx.eval([b[0].parameters() for b in blocks], [b[1].parameters() for b in blocks])
        x = mx.random.normal((1, dims))

        def forward():
            y = x
            for up, down in blocks:
                y = y + down(nn.gelu(up(y)))
            mx.eval(y)

        us = time_batches(forward, 50)
        emit({"what": f"mlp {dims}x{full_hidden}x{layers}", "bytes": dims * 4, "us": us})


def worker(backend, ranks):
    import mlx.core as mx

    def emit(record):
        if group.rank() == 0:
            print("RESULT " + json.dumps(record), flush=True)

    if backend == "floor":  # a job of one rank: a group of one, whose all_sums are no-ops
        group = mx.distributed.init(strict=True, backend="tbcoll")
        return bench_mlp(group, emit, shards=ranks)
    group = mx.distributed.init(strict=True, backend=backend)
    bench_all_sum(group, emit)
    bench_mlp(group, emit)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(args, backend):
    """One job of `backend` under tbcoll-run; rank 0's records."""
    me = [sys.executable, os.path.abspath(__file__), "--worker", "--ranks", str(args.ranks)]
    me += ["--mlp", args.mlp] if args.mlp else []
    ranks = 1 if backend == "floor" else args.ranks
    command = [args.run, "-n", str(ranks), "--timeout", "900"]
    hostfile = None
    if backend == "ring":
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump([[f"127.0.0.1:{free_port()}"] for _ in range(args.ranks)], f)
            hostfile = f.name
        command += ["-x", f"MLX_HOSTFILE={hostfile}", "--", "sh", "-c",
                    'MLX_RANK=$TBCOLL_RANK exec "$@"', "sh"] + me + ["ring"]
    elif backend == "floor":
        command += ["--"] + me + ["floor"]
    else:
        command += ["-x", "TBCOLL_TRANSPORT=" + ("tcp" if backend == "tbcoll-tcp" else "")]
        command += ["--"] + me + ["tbcoll"]
    env = dict(os.environ)
    env.pop("TBCOLL_TRANSPORT", None)
    # One BLAS thread per rank: the ranks already take every CPU (OpenBLAS would start one thread per CPU in
    # each process, on the one CPU tbcoll-run pins the process to).
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    finally:
        if hostfile:
            os.unlink(hostfile)
    if out.returncode != 0:
        sys.exit(f"benchmark: {backend} job failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return [json.loads(line[7:]) for line in out.stdout.splitlines() if line.startswith("RESULT ")]


def human(nbytes):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def summarise(results):
    """{(what, bytes): {backend: [us of each round]}}."""
    table = {}
    for backend, records in results.items():
        for record in records:
            key = (record["what"], record["bytes"])
            table.setdefault(key, {}).setdefault(backend, []).append(record["us"])
    return table


def print_table(table, args):
    print(f"\n{args.ranks} ranks on one host, median of {args.rounds} interleaved rounds, time per call (us); "
          "ratio = tbcoll / ring")
    print("| what | size | ring | tbcoll tcp | tcp/ring | tbcoll shm | shm/ring | no communication |")
    print("|---|---|---|---|---|---|---|---|")
    for (what, nbytes), rounds in table.items():
        row = {b: statistics.median(v) for b, v in rounds.items()}
        ring, tcp, shm = row["ring"], row["tbcoll-tcp"], row["tbcoll-shm"]
        size = human(nbytes) if what == "all_sum" else f"all_sum of {human(nbytes)}"
        floor = f"{row['floor']:.1f}" if "floor" in row else ""
        print(f"| {what} | {size} | {ring:.1f} | {tcp:.1f} | {tcp / ring:.2f} | {shm:.1f} | {shm / ring:.2f} | {floor} |")
    print("\nSpread over the rounds (min-max, us):")
    for (what, nbytes), rounds in table.items():
        spread = ", ".join(f"{b} {min(v):.0f}-{max(v):.0f}" for b, v in rounds.items())
        print(f"  {what} {human(nbytes)}: {spread}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--mlp", help="the MLPs, DIMSxHIDDENxLAYERS,... (default: 512x2048x8,2048x8192x2)")
    parser.add_argument("backend", nargs="?")
    parser.add_argument("--run", default="build/tbcoll-run", help="tbcoll-run")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--csv", help="every round's figures, one line per (round, backend, what, size)")
    args = parser.parse_args()
    if args.mlp:
        MLPS[:] = [tuple(int(v) for v in spec.split("x")) for spec in args.mlp.split(",")]
    if args.worker:
        return worker(args.backend, args.ranks)
    results = {b: [] for b in BACKENDS + ["floor"]}
    rows = []
    for r in range(args.rounds):
        for backend in BACKENDS[r % 3:] + BACKENDS[:r % 3] + ["floor"]:
            records = run_job(args, backend)
            results[backend] += records
            rows += [(r, backend, rec["what"], rec["bytes"], f"{rec['us']:.2f}") for rec in records]
            print(f"round {r + 1}/{args.rounds}: {backend} done", file=sys.stderr, flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            csv.writer(f).writerows([("round", "backend", "what", "bytes", "us")] + rows)
    print_table(summarise(results), args)


if __name__ == "__main__":
    sys.exit(main())
