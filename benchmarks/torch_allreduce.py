"""torch.distributed.all_reduce: gloo against tbcoll (shared memory and tcp), interleaved in one run.

    build/tbcoll-run -n 2 -x PYTHONPATH=build/python /usr/bin/python3 benchmarks/torch_allreduce.py [--max 64M]

One process group per backend in the same processes (gloo as the default group, tbcoll over shm, tbcoll forced to
tcp), and for each size every backend in turn, so the figures share the machine's state. Prints, per size, each
backend's mean latency (us) and bus bandwidth (GB/s, 2(n-1)/n x bytes / time), and tbcoll's speed-up over gloo.
Also the tbcoll module's own numpy-level call against the same call made in a C++ loop (the binding's overhead).
"""
import argparse
import os
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
    peer = (rank + 1) % size
    pg = groups[name]
    transport = (pg if hasattr(pg, "transport_name") else pg.communicator).transport_name(peer)
    assert transport == name.split("-")[1], f"{name} runs over {transport}"


def timed(group, t, iters):
    for _ in range(max(2, iters // 10)):
        dist.all_reduce(t, group=group)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t, group=group)
    elapsed = time.perf_counter() - start
    box = torch.tensor([elapsed])
    dist.all_reduce(box, op=dist.ReduceOp.MAX)  # the slowest rank's time
    return box.item() / iters


if rank == 0:
    print(f"# torch.distributed.all_reduce, {size} ranks, float32, torch {torch.__version__}, tbcoll's process group "
          f"in {tbcoll.torch_backend.IMPLEMENTATION}; latency us (busbw GB/s)")
    print(f"{'bytes':>10} {'gloo':>18} {'tbcoll-shm':>18} {'tbcoll-tcp':>18} {'shm/gloo':>9} {'tcp/gloo':>9}")
nbytes = parse_size(args.min)
worst = {"tbcoll-shm": float("inf"), "tbcoll-tcp": float("inf")}
while nbytes <= parse_size(args.max):
    t = torch.ones(max(1, nbytes // 4))
    iters = int(max(5, min(2000, 2e8 / max(nbytes, 1) / 4)))
    row = {name: timed(group, t, iters) for name, group in groups.items()}
    if rank == 0:
        bus = 2 * (size - 1) / size * t.numel() * 4
        cells = " ".join(f"{row[n] * 1e6:9.1f} ({bus / row[n] / 1e9:5.2f})" for n in groups)
        shm, tcp = row["gloo"] / row["tbcoll-shm"], row["gloo"] / row["tbcoll-tcp"]
        worst = {"tbcoll-shm": min(worst["tbcoll-shm"], shm), "tbcoll-tcp": min(worst["tbcoll-tcp"], tcp)}
        print(f"{t.numel() * 4:>10} {cells} {shm:8.1f}x {tcp:8.1f}x", flush=True)
    nbytes *= 4 if nbytes < (1 << 20) else 2
if rank == 0:
    print(f"# slowest speed-up over gloo at any size: shm {worst['tbcoll-shm']:.2f}x, tcp {worst['tbcoll-tcp']:.2f}x")

# The bindings' own cost, 8 bytes over shm: the numpy-level comm.all_reduce and torch's dist.all_reduce on the
# tbcoll group, each against the same call in a C++ loop, interleaved.
comm = tbcoll.init(rank=rank, size=size, store=dist.distributed_c10d._get_default_store(), prefix="bench-binding")
x = np.ones(2, np.float32)
t = torch.ones(2)
p = x.ctypes.data
for rep in range(3):
    comm.barrier()
    cpp = comm._all_reduce_loop(p, 2, tbcoll.DataType.float32, 20000) / 20000
    comm.barrier()
    start = time.perf_counter()
    for _ in range(20000):
        comm.all_reduce(x)
    py = (time.perf_counter() - start) / 20000
    dist.barrier(groups["tbcoll-shm"])
    start = time.perf_counter()
    for _ in range(20000):
        dist.all_reduce(t, group=groups["tbcoll-shm"])
    th = (time.perf_counter() - start) / 20000
    if rank == 0:
        print(f"# 8 B all_reduce over shm: C++ loop {cpp * 1e6:.2f} us, numpy comm.all_reduce {py * 1e6:.2f} us "
              f"(binding overhead {(py - cpp) * 1e6:.2f} us), torch dist.all_reduce {th * 1e6:.2f} us "
              f"(torch's path and the process group {(th - cpp) * 1e6:.2f} us)", flush=True)
comm.close()
dist.destroy_process_group()
