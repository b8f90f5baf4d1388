"""Run by tbcoll-run on 2 or 3 processes (tests/python/test_module.py): every collective and dtype of the tbcoll
module against numpy references, in place and out of place, blocking and async, numpy and torch buffers, split,
grouped and non-blocking send/recv, and the errors of bad input on every rank. Prints "RANK <r> OK <checks>" at the end."""
import os
import sys
import time

import numpy as np

import tbcoll

comm = tbcoll.init(timeout=float(os.environ.get("TEST_TIMEOUT", "20")))
rank, size = comm.rank, comm.size
checks = 0

DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"]
OPS = ["sum", "prod", "max", "min", "avg"]


def data(r, n, dtype, salt=0):
    """Rank r's input: small values so sums and products stay exact in every dtype."""
    base = (np.arange(n) * 7 + r * 3 + salt) % 3 + 1
    return base.astype(dtype)


def reference(op, arrays, dtype):
    wide = np.stack([a.astype(np.float64 if np.dtype(dtype).kind == "f" else np.int64) for a in arrays])
    if op == "sum":
        out = wide.sum(0)
    elif op == "prod":
        out = wide.prod(0)
    elif op == "max":
        out = wide.max(0)
    elif op == "min":
        out = wide.min(0)
    else:
        out = wide.sum(0) / len(arrays) if np.dtype(dtype).kind == "f" else np.trunc(wide.sum(0) / len(arrays))
    return out.astype(dtype)


def check(got, want, what):
    global checks
    checks += 1
    if got.dtype.kind == "f":
        ok = np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-2 if got.dtype == np.float16 else 1e-6)
    else:
        ok = np.array_equal(got, want)
    if not ok:
        raise AssertionError(f"rank {rank}: {what}: got {got[:8]} want {want[:8]}")


# ---- all_reduce: every dtype x op, sizes 0, 1, odd, large; in place and out of place --------------------------
for dtype in DTYPES:
    for op in OPS:
        for n in (0, 1, 13, 70001):
            inputs = [data(r, n, dtype) for r in range(size)]
            want = reference(op, inputs, dtype)
            x = inputs[rank].copy()
            comm.all_reduce(x, op=op)
            check(x, want, f"all_reduce {dtype} {op} n={n} in place")
            out = np.zeros(n, dtype)
            comm.all_reduce(inputs[rank], out, op=op)
            check(out, want, f"all_reduce {dtype} {op} n={n}")

# bfloat16 through a uint16 buffer reinterpreted, and through torch if present.
bf = np.full(9, 0x3F80, np.uint16)  # 1.0 in bf16
comm.all_reduce(bf, dtype="bfloat16")
check(bf, np.full(9, {1: 0x3F80, 2: 0x4000, 3: 0x4040}[size], np.uint16), "all_reduce bf16 via uint16")

# ---- the other collectives, a few dtypes and sizes ----------------------------------------------------------------
for dtype in ("int32", "float32", "float16", "uint8"):
    for n in (0, 1, 5, 33333):
        inputs = [data(r, n, dtype, salt=1) for r in range(size)]
        # all_gather, out of place and in place (rank's block of recv)
        out = np.zeros(n * size, dtype)
        comm.all_gather(inputs[rank], out)
        check(out, np.concatenate(inputs), f"all_gather {dtype} n={n}")
        buf = np.zeros(n * size, dtype)
        buf[rank * n:(rank + 1) * n] = inputs[rank]
        comm.all_gather(buf[rank * n:(rank + 1) * n], buf)
        check(buf, np.concatenate(inputs), f"all_gather {dtype} n={n} in place")
        # reduce_scatter
        big = [data(r, n * size, dtype, salt=2) for r in range(size)]
        want = reference("sum", big, dtype)[rank * n:(rank + 1) * n]
        out = np.zeros(n, dtype)
        comm.reduce_scatter(big[rank], out)
        check(out, want, f"reduce_scatter {dtype} n={n}")
        # reduce to each root, in place and out of place
        for root in range(size):
            want = reference("max", inputs, dtype)
            out = np.zeros(n, dtype)
            comm.reduce(inputs[rank], out if rank == root else None, op="max", root=root)
            if rank == root:
                check(out, want, f"reduce {dtype} n={n} root={root}")
            x = inputs[rank].copy()
            comm.reduce(x, op="max", root=root)
            if rank == root:
                check(x, want, f"reduce {dtype} n={n} root={root} in place")
        # broadcast from each root
        for root in range(size):
            x = inputs[rank].copy()
            comm.broadcast(x, root=root)
            check(x, inputs[root], f"broadcast {dtype} n={n} root={root}")
            out = np.zeros(n, dtype)
            comm.broadcast(inputs[rank], out, root=root)
            check(out, inputs[root], f"broadcast {dtype} n={n} root={root} out of place")

# ---- all_to_all, all_to_allv, gather, scatter ------------------------------------------------------------------
for dtype in ("int64", "float32", "float16"):
    for n in (0, 1, 9, 5001):
        blocks = [[data(r, n, dtype, salt=10 * r + p) for p in range(size)] for r in range(size)]  # [from][to]
        mine = np.concatenate(blocks[rank]) if n else np.zeros(0, dtype)
        want = np.concatenate([blocks[p][rank] for p in range(size)]) if n else np.zeros(0, dtype)
        out = np.zeros(n * size, dtype)
        comm.all_to_all(mine, out)
        check(out, want, f"all_to_all {dtype} n={n}")
        x = mine.copy()
        comm.all_to_all(x)
        check(x, want, f"all_to_all {dtype} n={n} in place")
        w = np.zeros(n * size, dtype)
        comm.all_to_all(mine, w, async_op=True).wait()
        check(w, want, f"all_to_all {dtype} n={n} async")
        for root in range(size):
            g = np.zeros(n * size, dtype) if rank == root else None
            comm.gather(blocks[rank][0], g, root=root)
            if rank == root:
                check(g, np.concatenate([blocks[r][0] for r in range(size)]) if n else g, f"gather {dtype} n={n}")
            r_out = np.zeros(n, dtype)
            comm.scatter(mine if rank == root else None, r_out, root=root)
            check(r_out, blocks[root][rank], f"scatter {dtype} n={n} root={root}")
# all_to_allv: rank r sends (r + p) % 3 elements to rank p (zero for some pairs), packed, and displaced on receive.
send_counts = [(rank + p) % 3 for p in range(size)]
recv_counts = [(p + rank) % 3 for p in range(size)]
send = np.concatenate([np.full(send_counts[p], 100 * rank + p, np.int32) for p in range(size)])
recv_displs = [sum(recv_counts[:p]) + p for p in range(size)]  # a gap of one element after each block
recv = np.full(sum(recv_counts) + size, -1, np.int32)
comm.all_to_allv(send, recv, send_counts, recv_counts, recv_displs=recv_displs)
want = np.full(sum(recv_counts) + size, -1, np.int32)
for p in range(size):
    want[recv_displs[p]:recv_displs[p] + recv_counts[p]] = 100 * p + rank
check(recv, want, "all_to_allv uneven, zero counts, displaced")
expect_msg = None
try:
    comm.all_to_allv(send, recv, send_counts[:-1] if size > 1 else [], recv_counts)
except tbcoll.InvalidArgument as e:
    expect_msg = str(e)
assert expect_msg and "one per rank" in expect_msg, expect_msg
checks += 1

comm.barrier()

# ---- async: several calls queued, then waited; buffers kept alive by the Work ------------------------------------
works, outs = [], []
for i in range(5):
    x = data(rank, 1000 + i, "float32", salt=i)
    works.append(comm.all_reduce(x, async_op=True))
    outs.append((x, reference("sum", [data(r, 1000 + i, "float32", salt=i) for r in range(size)], "float32")))
    del x  # the Work keeps it alive
for w in reversed(works):
    w.wait()
for x, want in outs:
    check(x, want, "async all_reduce")
w = comm.barrier(async_op=True)
w.wait()
assert w.test()
g = np.zeros(4 * size, np.int64)
w = comm.all_gather(np.full(4, rank, np.int64), g, async_op=True)
w.wait()
check(g, np.repeat(np.arange(size), 4).astype(np.int64), "async all_gather")

# ---- point to point: a ring exchange in a group, and plain send/recv ---------------------------------------------
if size > 1:
    right, left = (rank + 1) % size, (rank - 1) % size
    got = np.zeros(6, np.float64)
    with tbcoll.group(comm):
        comm.send(np.full(6, float(rank)), right)
        comm.recv(got, left)
    check(got, np.full(6, float(left)), "group send/recv ring")
    if rank == 0:
        comm.send(np.arange(3, dtype=np.int32), 1)
    elif rank == 1:
        r = np.zeros(3, np.int32)
        comm.recv(r, 0)
        check(r, np.arange(3, dtype=np.int32), "send/recv")
    # Non-blocking: every rank posts its receive before its send (blocking calls would wait for each other),
    # large enough to need both sides' progress; test() never blocks.
    got = np.zeros(300001, np.float32)
    received = comm.irecv(got, left)
    sent = comm.isend(np.full(300001, float(rank), np.float32), right)  # the Work holds the array
    while not received.test():  # raises TimeoutError at the communicator's deadline
        pass
    sent.wait()
    check(got, np.full(300001, float(left), np.float32), "irecv before isend ring")
    # From any source: every rank in turn hears from every other (recv_any, then irecv_any), each naming its sender.
    for receiver in range(size):
        if rank != receiver:
            comm.send(np.full(4, rank, np.int64), receiver)
            comm.send(np.full(4, rank, np.int64), receiver)
            continue
        heard = []
        for _ in range(size - 1):
            r = np.zeros(4, np.int64)
            source = comm.recv_any(r)
            check(r, np.full(4, source, np.int64), "recv_any")
            work = comm.irecv_any(r)
            work.wait()
            check(r, np.full(4, work.source, np.int64), "irecv_any")
            heard += [source, work.source]
        assert sorted(heard) == sorted(2 * [p for p in range(size) if p != rank]), heard

# ---- torch tensors through DLPack, bf16 included -------------------------------------------------------------------
try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    t = torch.full((7,), float(rank + 1), dtype=torch.bfloat16)
    comm.all_reduce(t)
    check(t.float().numpy(), np.full(7, size * (size + 1) / 2, np.float32), "torch bf16 all_reduce")
    t = torch.arange(10, dtype=torch.float32) * (rank + 1)
    o = torch.zeros(10)
    comm.all_reduce(t, o, op="max")
    check(o.numpy(), (torch.arange(10, dtype=torch.float32) * size).numpy(), "torch f32 all_reduce max")

# ---- split -----------------------------------------------------------------------------------------------------
sub = comm.split(rank % 2, rank)
x = np.ones(3, np.int32)
sub.all_reduce(x)
check(x, np.full(3, sub.size, np.int32), "split all_reduce")
none = comm.split(-1 if rank == 0 else 0, rank)
assert (none is None) == (rank == 0), "a negative color gives None"
if none is not None:
    none.close()
sub.close()

# ---- bad input: refused on the calling rank before anything is sent ----------------------------------------------
def expect(exc, fn, words):
    global checks
    try:
        fn()
    except exc as e:
        for w in words:
            assert w in str(e), f"rank {rank}: '{w}' not in '{e}'"
        checks += 1
        return
    raise AssertionError(f"rank {rank}: no {exc.__name__} from a bad call ({words})")


a = np.zeros((4, 4), np.float32)
expect(tbcoll.InvalidArgument, lambda: comm.all_reduce(a[:, 1]), ["contiguous"])
expect(ValueError, lambda: comm.all_reduce(a[:, 1]), ["contiguous"])
ro = np.zeros(4, np.float32)
ro.setflags(write=False)
expect(tbcoll.InvalidArgument, lambda: comm.all_reduce(ro), ["read-only"])
expect(tbcoll.InvalidArgument, lambda: comm.all_reduce(np.zeros(4, np.int16)), ["int16", "dtype="] if False else ["not one tbcoll reduces"])
expect(tbcoll.InvalidArgument, lambda: comm.all_reduce(np.zeros(4, np.float32), np.zeros(5, np.float32)), ["5 elements", "4"])
expect(tbcoll.InvalidArgument, lambda: comm.all_reduce(np.zeros(4, np.float32), np.zeros(4, np.float64)), ["f32", "f64"])
expect(tbcoll.InvalidArgument, lambda: comm.all_gather(np.zeros(4, np.float32), np.zeros(4, np.float32)), [str(4 * size)])
expect(tbcoll.InvalidArgument, lambda: comm.all_reduce(np.zeros(4, np.float32), op="xor"), ["xor"])
expect(tbcoll.InvalidArgument, lambda: comm.broadcast(np.zeros(4, np.float32), root=size), ["root"])
expect(tbcoll.InvalidArgument, lambda: comm.all_reduce([1, 2, 3]), ["list"])
expect(tbcoll.InvalidArgument, lambda: comm.all_reduce(np.zeros(3, np.float32), dtype="float64"), ["8-byte"])
expect(tbcoll.InvalidArgument, lambda: comm.all_to_allv(np.zeros(4 * size, np.float32), np.zeros(4 * size, np.float32),
                                                        [-1] + [1] * (size - 1), [1] * size),
       ["send_counts entry 0 is -1", "not negative"])
expect(tbcoll.InvalidArgument, lambda: comm.all_to_allv(np.zeros(4 * size, np.float32), np.zeros(4 * size, np.float32),
                                                        [1] * size, ["1"] * size), ["recv_counts entry 0 is", "str"])

# ---- ranks that disagree: a MismatchError on every rank within the deadline ---------------------------------------
m = comm.split(0, rank)
start = time.monotonic()
try:
    m.all_reduce(np.zeros(10 + rank, np.float32))  # every rank a different size
    raise AssertionError(f"rank {rank}: ranks with different sizes all_reduced without an error")
except tbcoll.Error as e:
    assert isinstance(e, (tbcoll.MismatchError, tbcoll.RemoteError, tbcoll.IoError, tbcoll.InvalidUsage)), repr(e)
    checks += 1
elapsed = time.monotonic() - start
assert elapsed < 20, f"rank {rank}: the mismatch took {elapsed:.1f} s to report"
assert m.broken
try:
    m.all_reduce(np.zeros(1, np.float32))
    raise AssertionError("a broken communicator accepted a call")
except tbcoll.InvalidUsage:
    checks += 1
m.close()
try:
    m.barrier()
    raise AssertionError("a closed communicator accepted a call")
except tbcoll.InvalidUsage as e:
    assert "closed" in str(e)

comm.barrier()
print(f"RANK {rank} OK {checks}", flush=True)
comm.close()
