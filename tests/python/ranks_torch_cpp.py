"""Under `tbcoll-run -n N`, nothing else: init_process_group("tbcoll") reads what tbcoll-run exports (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), then the process group's futures, point to point, coalesced calls, errors
that name the op, a timeout that says "Timed out", and (the C++ one) monitored_barrier. Prints "OK <rank> <what>"
lines. Whichever process group is importable runs (tests/python/test_torch_backend.py runs both)."""
import os
from datetime import timedelta

import torch
import torch.distributed as dist

import tbcoll.torch_backend

dist.init_process_group("tbcoll")  # env://: everything from tbcoll-run's environment
rank, size = dist.get_rank(), dist.get_world_size()
assert (rank, size) == (int(os.environ["TBCOLL_RANK"]), int(os.environ["TBCOLL_WORLD_SIZE"]))
assert os.environ["LOCAL_RANK"] == str(rank) and os.environ["LOCAL_WORLD_SIZE"] == str(size)
print(f"OK {rank} env rank {rank} of {size} implementation {tbcoll.torch_backend.IMPLEMENTATION}", flush=True)
pg = dist.distributed_c10d._get_default_group()
comm = pg if tbcoll.torch_backend.IMPLEMENTATION == "c++" else pg.communicator
assert comm.transport_name((rank + 1) % size) == "shm", comm.transport_name((rank + 1) % size)

# A future completes by itself (the progress thread finishes the call): nobody waits on the Work.
t = torch.full((1000,), float(rank + 1))
fut = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
assert fut.wait()[0].item() == 2 * sum(range(1, size + 1)), fut.wait()
print(f"OK {rank} future", flush=True)

# An async_op=True call nobody waits for yet still runs while its caller waits for something else: rank 0 waits
# (on the store) for rank 1 to have finished the all_reduce; and a call on another group does not wait for it.
import time  # noqa: E402
store = dist.distributed_c10d._get_default_store()
other = dist.new_group()
t = torch.full((4,), float(rank + 1))
u = torch.full((4,), float(rank + 1))
start = time.monotonic()
if rank == 0:
    held = dist.all_reduce(t, async_op=True)
    store.wait(["all_reduce done"], timedelta(seconds=20))
    held.wait()
    held = dist.all_reduce(t, async_op=True)
    dist.all_reduce(u, group=other)
    held.wait()
else:
    dist.all_reduce(t)
    store.set("all_reduce done", "1")
    dist.all_reduce(t)
    dist.all_reduce(u, group=other)
expected = float(sum(range(1, size + 1)))
assert t.tolist() == [expected * size] * 4 and u.tolist() == [expected] * 4, (t, u)
assert time.monotonic() - start < 10, time.monotonic() - start
print(f"OK {rank} unwaited async call runs", flush=True)

# Every rank receives before it sends, around the ring: non-blocking isend/irecv.
right, left = (rank + 1) % size, (rank + size - 1) % size
got = torch.zeros(100000)
reqs = dist.batch_isend_irecv([dist.P2POp(dist.irecv, got, left), dist.P2POp(dist.isend, torch.full((100000,),
                                                                                                    float(rank)), right)])
for r in reqs:
    r.wait()
assert got[-1].item() == left
print(f"OK {rank} batch_isend_irecv", flush=True)

# Receives from any source: every rank in turn hears from every other; dist.recv and irecv's Work name the sender.
for receiver in range(size):
    if rank != receiver:
        dist.send(torch.full((3,), float(rank)), receiver)
        dist.send(torch.full((3,), float(rank)), receiver)
        continue
    heard = []
    for _ in range(size - 1):
        t = torch.zeros(3)
        source = dist.recv(t)
        assert t.tolist() == [float(source)] * 3, (source, t)
        work = dist.irecv(t)
        work.wait()
        assert t.tolist() == [float(work._source_rank())] * 3, (work._source_rank(), t)
        heard += [source, work._source_rank()]
    assert sorted(heard) == sorted(2 * [r for r in range(size) if r != rank]), heard
print(f"OK {rank} recv from any source", flush=True)

# Coalesced calls: several tensors in one all-reduce, one all-gather.
a, b = torch.full((3,), float(rank)), torch.full((5,), 1.0, dtype=torch.float32)
dist.all_reduce_coalesced([a, b])
assert a.tolist() == [float(sum(range(size)))] * 3 and b.tolist() == [float(size)] * 5
outs = [[torch.zeros(2), torch.zeros(3)] for _ in range(size)]
dist.all_gather_coalesced(outs, [torch.full((2,), float(rank)), torch.full((3,), 10.0 + rank)])
assert all(outs[r][0].tolist() == [float(r)] * 2 and outs[r][1].tolist() == [10.0 + r] * 3 for r in range(size))
print(f"OK {rank} coalesced", flush=True)

# What is not supported says which op it is (each word, or one of a tuple's).
for call, words in [(lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND),
                     [("allreduce", "all_reduce"), "BAND"]),
                    (lambda: dist.reduce_scatter(torch.zeros(2), [torch.ones(2)] * size, op=dist.ReduceOp.BOR),
                     ["reduce_scatter", "BOR"]),
                    (lambda: dist.all_reduce(torch.ones(2, dtype=torch.int16)),
                     [("allreduce", "all_reduce"), ("dtype Short", "dtype torch.int16")]),
                    (lambda: dist.broadcast(torch.ones(4)[::2], 0), ["broadcast", "not contiguous"])]:
    try:
        call()
        raise AssertionError(f"no error for {words}")
    except RuntimeError as e:
        assert all(any(w in str(e) for w in ((w,) if isinstance(w, str) else w)) for w in words), str(e)
print(f"OK {rank} unsupported ops named", flush=True)

# torch 1.13's dist.monitored_barrier refuses every backend but gloo: tbcoll.torch_backend's is the same call.
if tbcoll.torch_backend.IMPLEMENTATION == "c++":
    tbcoll.torch_backend.monitored_barrier(timeout=timedelta(seconds=10))
    print(f"OK {rank} monitored_barrier", flush=True)

# A barrier only rank 0 enters times out with gloo's words, within the group's timeout.
group = dist.new_group(timeout=timedelta(seconds=1))
if rank == 0:
    try:
        dist.barrier(group)
        raise AssertionError("the lone barrier returned")
    except RuntimeError as e:
        assert " Timed out " in str(e), str(e)
    print(f"OK {rank} timed out", flush=True)
dist.barrier()  # on the default group, still whole
print(f"OK {rank} done", flush=True)
