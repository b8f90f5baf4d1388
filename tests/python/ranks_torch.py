"""One torch.distributed script for any backend (tests/python/test_torch_backend.py runs it with "gloo" and
"tbcoll" on 2 and 3 ranks and compares): every collective, every dtype, async calls. Writes
$RESULT_DIR/<backend>.<rank>.json: each call's output (or "unsupported: ..." where the backend refuses it)."""
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import tbcoll.torch_backend  # noqa: F401  (registers "tbcoll")

backend = sys.argv[1]
rank, size = int(os.environ["TBCOLL_RANK"]), int(os.environ["TBCOLL_WORLD_SIZE"])
dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{os.environ['TEST_PORT']}", rank=rank,
                        world_size=size, timeout=timedelta(seconds=30))
results = {}


def record(name, fn):
    try:
        out = fn()
        results[name] = [t.double().tolist() for t in out]
    except RuntimeError as e:  # gloo's "not supported" (tbcoll supports everything this script asks)
        if backend == "tbcoll":
            raise
        results[name] = "unsupported: " + str(e).splitlines()[0]


DTYPES = [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64]
OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def inp(n, dtype, salt=0):
    return ((torch.arange(n) * 5 + rank * 3 + salt) % 3 + 1).to(dtype)


for dtype in DTYPES:
    for name, op in OPS.items():
        def ar(dtype=dtype, op=op):
            t = inp(33, dtype)
            dist.all_reduce(t, op=op)
            return [t]
        record(f"all_reduce {dtype} {name}", ar)

for dtype in (torch.float32, torch.int64, torch.float16):
    def ag(dtype=dtype):
        outs = [torch.zeros(7, dtype=dtype) for _ in range(size)]
        dist.all_gather(outs, inp(7, dtype, 1))
        return outs
    record(f"all_gather list {dtype}", ag)

    def ag_tensor(dtype=dtype):
        out = torch.zeros(7 * size, dtype=dtype)
        dist.all_gather_into_tensor(out, inp(7, dtype, 1))
        return [out]
    record(f"all_gather tensor {dtype}", ag_tensor)

    def bc(dtype=dtype):
        outs = []
        for root in range(size):
            t = inp(9, dtype, 2)
            dist.broadcast(t, root)
            outs.append(t)
        return outs
    record(f"broadcast {dtype}", bc)

    def rd(dtype=dtype):
        t = inp(9, dtype, 3)
        dist.reduce(t, size - 1, op=dist.ReduceOp.MAX)
        return [t] if rank == size - 1 else []
    record(f"reduce {dtype}", rd)

    def rs(dtype=dtype):
        out = torch.zeros(5, dtype=dtype)
        dist.reduce_scatter(out, [inp(5, dtype, i) for i in range(size)])
        return [out]
    record(f"reduce_scatter list {dtype}", rs)

    def rs_tensor(dtype=dtype):
        out = torch.zeros(5, dtype=dtype)
        dist.reduce_scatter_tensor(out, inp(5 * size, dtype, 4)) if hasattr(dist, "reduce_scatter_tensor") \
            else dist._reduce_scatter_base(out, inp(5 * size, dtype, 4))
        return [out]
    record(f"reduce_scatter tensor {dtype}", rs_tensor)

    def a2a(dtype=dtype):
        out = torch.zeros(2 * size, dtype=dtype)
        dist.all_to_all_single(out, (torch.arange(2 * size) + 10 * rank).to(dtype))
        return [out]
    record(f"all_to_all_single {dtype}", a2a)

    def a2a_uneven(dtype=dtype):
        # rank r sends r+1+i elements to rank i: uneven splits, every rank's own rows differ.
        send_splits = [rank + 1 + i for i in range(size)]
        recv_splits = [r + 1 + rank for r in range(size)]
        out = torch.zeros(sum(recv_splits), dtype=dtype)
        dist.all_to_all_single(out, (torch.arange(sum(send_splits)) + 100 * rank).to(dtype), recv_splits, send_splits)
        return [out]
    record(f"all_to_all_single uneven {dtype}", a2a_uneven)


for dtype in (torch.float32, torch.int64):
    def gather(dtype=dtype):
        outs = []
        for root in range(size):
            lst = [torch.zeros(4, dtype=dtype) for _ in range(size)] if rank == root else None
            dist.gather(inp(4, dtype, root), lst, dst=root)
            outs += lst if rank == root else []
        return outs
    record(f"gather {dtype}", gather)

    def scatter(dtype=dtype):
        outs = []
        for root in range(size):
            t = torch.zeros(4, dtype=dtype)
            dist.scatter(t, [inp(4, dtype, i) for i in range(size)] if rank == root else None, src=root)
            outs.append(t)
        return outs
    record(f"scatter {dtype}", scatter)

    def a2a_list(dtype=dtype):
        outs = [torch.zeros(rank + 1, dtype=dtype) for _ in range(size)]
        dist.all_to_all(outs, [torch.full((p + 1,), 10 * rank + p).to(dtype) for p in range(size)])
        return outs
    record(f"all_to_all list {dtype}", a2a_list)


def p2p():
    t = torch.zeros(4)
    if rank == 0:
        dist.send(torch.arange(4.0) + 1, 1)
    elif rank == 1:
        dist.recv(t, 0)
    return [t]


record("send/recv", p2p)


def asyncs():
    works, ts = [], []
    for i in range(4):
        t = inp(1000 + i, torch.float32, i)
        works.append(dist.all_reduce(t, async_op=True))
        ts.append(t)
    out = torch.zeros(3 * size)
    works.append(dist.all_gather_into_tensor(out, inp(3, torch.float32), async_op=True))
    for w in works:
        w.wait()
    return [t[:5] for t in ts] + [out]


record("async", asyncs)


def premul_sum():
    # NCCL's pre-multiplied sum (what DDP's gradient averaging can ask for): each rank's input times the factor,
    # summed; a number or a one-element tensor as the factor; all_reduce, reduce and both reduce_scatters.
    out = []
    for factor in (0.5, [torch.tensor([0.25])]):
        op = dist._make_nccl_premul_sum(factor)
        t = torch.full((7,), float(rank + 1))
        dist.all_reduce(t, op=op)
        r = torch.full((3,), float(rank + 2))
        dist.reduce(r, dst=0, op=op)
        base_in = torch.arange(2.0 * size) + rank
        base_out = torch.zeros(2)
        (dist.reduce_scatter_tensor if hasattr(dist, "reduce_scatter_tensor") else dist._reduce_scatter_base)(
            base_out, base_in, op=op)
        list_out = torch.zeros(2)
        dist.reduce_scatter(list_out, [torch.full((2,), float(i + rank)) for i in range(size)], op=op)
        out += [t, r if rank == 0 else torch.zeros(3), base_out, list_out, base_in]
    return out


if backend == "tbcoll":
    record("premul_sum", premul_sum)
    try:  # a negative split size is named as negative, not wrapped to 18446744073709551612
        dist.all_to_all_single(torch.zeros(size), torch.zeros(size), [size + 1] + [-1] + [1] * (size - 2),
                               [1] * size)
        raise AssertionError("a negative split size was taken")
    except RuntimeError as e:
        assert "split size 1 is -1" in str(e), str(e)


def overlap():
    # Rank 0 starts an all_reduce that cannot finish before rank 1 joins 0.5 s later: the call returns at once, the
    # Work is not complete, rank 0 computes meanwhile, and wait() returns the right sum.
    import time
    t = torch.full((1 << 16,), float(rank + 1))
    if rank == 1:
        time.sleep(0.5)
    start = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    returned = time.monotonic() - start
    pending = not work.is_completed()
    m = torch.randn(64, 64)
    for _ in range(20):
        m = m @ m / 64  # the computation the call overlaps with
    work.wait()
    if rank == 0:
        assert returned < 0.25, f"async all_reduce took {returned:.3f} s to return"
        assert pending, "the Work was complete before the peer joined"
    return [torch.tensor([1.0 if rank != 0 or (returned < 0.25 and pending) else 0.0]), t[:3]]


record("async overlaps", overlap)
dist.barrier()
with open(os.path.join(os.environ["RESULT_DIR"], f"{backend}.{rank}.json"), "w") as f:
    json.dump(results, f, sort_keys=True)
dist.destroy_process_group()
