"""torch.distributed.all_reduce: gloo against tbcoll (shared memory and tcp), interleaved in one run.

    build/tbcoll-run -n 2 -x PYTHONPATH=build/python /usr/bin/python3 benchmarks/torch_allreduce.py \
        [--min 8] [--max 64M] [--rounds 5] [--csv FILE]

One process group per backend in the same processes (gloo as the default group, tbcoll over shm, tbcoll forced to
tcp). For each size, --rounds rounds, and in each round every backend in turn (the order rotating from round to
round), so the figures share the machine's state. Every call is timed on its own; a call's time is the slowest
rank's. Printed per size: each backend's median call time (us) and bus bandwidth (GB/s, 2(n-1)/n x bytes / time),
as tbcoll-perf reports time, and tbcoll's speed-ups over gloo: the ratio of the medians, and in the last columns
the ratio of the means (which a preempted call on a busy machine moves most).

Then the bindings' own cost, 8 B over shm: the numpy-level comm.all_reduce and torch's dist.all_reduce on the
tbcoll group against the same call in a C++ loop (each call timed alike), interleaved in rounds; the overhead is
the difference of the medians (of the means too). The process group is also called without torch's Python in
front (group.allreduce([t]).wait()), to tell the two apart.
"""
import argparse
import csv
import os
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist

import tbcoll
import tbcoll.torch_backend  # noqa: F401


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


parser = argparse.ArgumentParser()
parser.add_argument("--min", default="8")
parser.add_argument("--max", default="64M")
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--csv", default=None, help="also write every size's figures here")
parser.add_argument("--port", type=int, default=int(os.environ.get("TBCOLL_BENCH_PORT", "29731")))
args = parser.parse_args()

rank, size = int(os.environ["TBCOLL_RANK"]), int(os.environ["TBCOLL_WORLD_SIZE"])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=size)
groups = {"gloo": None}
os.environ.pop("TBCOLL_TRANSPORT", None)
groups["tbcoll-shm"] = dist.new_group(backend="tbcoll")
os.environ["TBCOLL_TRANSPORT"] = "tcp"
groups["tbcoll-tcp"] = dist.new_group(backend="tbcoll")
os.environ.pop("TBCOLL_TRANSPORT")
for name in ("tbcoll-shm", "tbcoll-tcp"):
    pg = groups[name]
    transport = (pg if hasattr(pg, "transport_name") else pg.communicator).transport_name((rank + 1) % size)
    assert transport == name.split("-")[1], f"{name} runs over {transport}"
names = list(groups)
now = time.perf_counter_ns


def slowest(times):
    """Per call, the slowest rank's time (ns), over the default (gloo) group, outside any timing."""
    box = torch.tensor(times, dtype=torch.int64)
    dist.all_reduce(box, op=dist.ReduceOp.MAX)
    return box.tolist()


def timed(group, t, iters):
    dist.all_reduce(t, group=group)
    dist.barrier(group=group)
    times = [0] * iters
    for i in range(iters):
        start = now()
        dist.all_reduce(t, group=group)
        times[i] = now() - start
    return slowest(times)


if rank == 0:
    print(f"# torch.distributed.all_reduce, {size} ranks, float32, torch {torch.__version__}, tbcoll's process group "
          f"in {tbcoll.torch_backend.IMPLEMENTATION}, {args.rounds} rounds; median us per call, slowest rank "
          f"(busbw GB/s); speed-up over gloo: of the medians, and of the means")
    print(f"{'bytes':>10} {'gloo':>18} {'tbcoll-shm':>18} {'tbcoll-tcp':>18} {'shm/gloo':>9} {'tcp/gloo':>9}"
          f" {'mean shm':>9} {'mean tcp':>9}", flush=True)
rows = []
nbytes = parse_size(args.min)
while nbytes <= parse_size(args.max):
    t = torch.ones(max(1, nbytes // 4))
    iters = int(max(3, min(400, 4e7 / max(nbytes, 1))))
    for group in groups.values():  # warm-up: connections, buffers, the tuner's first calls
        for _ in range(max(2, iters // 10)):
            dist.all_reduce(t, group=group)
    calls = {n: [] for n in names}
    for r in range(args.rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            calls[n] += timed(groups[n], t, iters)
    if rank == 0:
        bus = 2 * (size - 1) / size * t.numel() * 4
        median = {n: statistics.median(calls[n]) / 1e9 for n in names}
        mean = {n: statistics.fmean(calls[n]) / 1e9 for n in names}
        row = {"bytes": t.numel() * 4, **{f"{n} median s": median[n] for n in names},
               **{f"{n} mean s": mean[n] for n in names}}
        rows.append(row)
        cells = " ".join(f"{median[n] * 1e6:9.1f} ({bus / median[n] / 1e9:5.2f})" for n in names)
        print(f"{t.numel() * 4:>10} {cells} {median['gloo'] / median['tbcoll-shm']:8.1f}x "
              f"{median['gloo'] / median['tbcoll-tcp']:8.1f}x {mean['gloo'] / mean['tbcoll-shm']:8.1f}x "
              f"{mean['gloo'] / mean['tbcoll-tcp']:8.1f}x", flush=True)
    nbytes *= 4 if nbytes < (1 << 20) else 2
if rank == 0 and rows:
    for kind in ("median", "mean"):
        worst = {n: min(row[f"gloo {kind} s"] / row[f"{n} {kind} s"] for row in rows) for n in names[1:]}
        print(f"# slowest speed-up over gloo at any size ({kind}s): shm {worst['tbcoll-shm']:.2f}x, "
              f"tcp {worst['tbcoll-tcp']:.2f}x")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)

# The bindings' own cost, 8 bytes over shm: each call timed alike in a C++ loop, in Python through the numpy
# binding, and through torch.distributed on the tbcoll group; rounds interleaved.
comm = tbcoll.init(rank=rank, size=size, store=dist.distributed_c10d._get_default_store(), prefix="bench-binding")
x = np.ones(2, np.float32)
t = torch.ones(2)
p = x.ctypes.data
shm = groups["tbcoll-shm"]
iters = 20000
per = {"cpp": [], "numpy": [], "torch": [], "pg": []}
opts = dist.AllreduceOptions()
for rep in range(args.rounds):
    comm.barrier()
    per["cpp"] += comm._all_reduce_loop(p, 2, tbcoll.DataType.float32, iters, per_call=True)
    comm.barrier()
    times = [0] * iters
    for i in range(iters):
        start = now()
        comm.all_reduce(x)
        times[i] = now() - start
    per["numpy"] += times
    dist.barrier(group=shm)
    times = [0] * iters
    for i in range(iters):
        start = now()
        dist.all_reduce(t, group=shm)
        times[i] = now() - start
    per["torch"] += times
    dist.barrier(group=shm)
    times = [0] * iters
    for i in range(iters):  # the process group's own binding, without torch's Python in front
        start = now()
        shm.allreduce([t], opts).wait()
        times[i] = now() - start
    per["pg"] += times
if rank == 0:
    med = {k: statistics.median(v) / 1e3 for k, v in per.items()}
    avg = {k: statistics.fmean(v) / 1e3 for k, v in per.items()}
    print(f"# 8 B all_reduce over shm, rank 0, {args.rounds} x {iters} calls each, median (mean) us per call: "
          f"C++ loop {med['cpp']:.2f} ({avg['cpp']:.2f}), numpy comm.all_reduce {med['numpy']:.2f} "
          f"({avg['numpy']:.2f}), torch dist.all_reduce {med['torch']:.2f} ({avg['torch']:.2f}), of which the "
          f"process group called directly (group.allreduce([t]).wait()) {med['pg']:.2f} ({avg['pg']:.2f})")
    print(f"# binding overhead over the C++ call: numpy {med['numpy'] - med['cpp']:.2f} us "
          f"(means {avg['numpy'] - avg['cpp']:.2f}), torch.distributed and the process group "
          f"{med['torch'] - med['cpp']:.2f} us (means {avg['torch'] - avg['cpp']:.2f})", flush=True)
comm.close()
dist.destroy_process_group()
