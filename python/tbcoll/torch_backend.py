"""torch.distributed backend "tbcoll": CPU tensors, every dtype tbcoll reduces, through one word.

    import torch.distributed as dist
    import tbcoll.torch_backend  # registers "tbcoll"
    dist.init_process_group("tbcoll", init_method="env://")   # or under torchrun; the c10d store is the rendezvous
    dist.all_reduce(t)

The process group is C++ (tbcoll._torch_pg, a c10d::ProcessGroup built against torch's C++ library: Debian's
libtorch-dev) wherever it was built: its Work objects are c10d's, with futures, so torch's C++ (DDP's reducer,
_broadcast_coalesced) waits on them as on gloo's. Where it was not built, the Python process group below stands in
(IMPLEMENTATION says which one runs). With the Python one:
calls go to the C++ library with the tensors' data pointers (no copy), on the communicator's queue: a blocking call
(async_op=False) runs on the calling thread as soon as torch waits for it, an async_op=True call runs on the
communicator's progress thread while Python computes. all_gather with a list of separate tensors, reduce_scatter
with a list and the coalesced calls go through one contiguous buffer and copy at wait(). send/recv are
non-blocking (batch_isend_irecv may post every receive first). all_to_all (equal or uneven splits, tensor or list
form), gather and scatter use tbcoll's own. The backend's timeout is every call's deadline; a call that passes it
raises "Timed out".

torch 1.13's dist.monitored_barrier refuses every backend but gloo by name: monitored_barrier() below is the same
call for "tbcoll" (the C++ process group's monitoredBarrier, as gloo's).
"""
from datetime import timedelta

import torch
import torch.distributed as dist

import tbcoll

_DTYPES = {
    torch.int8: tbcoll.DataType.int8,
    torch.uint8: tbcoll.DataType.uint8,
    torch.int32: tbcoll.DataType.int32,
    torch.int64: tbcoll.DataType.int64,
    torch.float16: tbcoll.DataType.float16,
    torch.bfloat16: tbcoll.DataType.bfloat16,
    torch.float32: tbcoll.DataType.float32,
    torch.float64: tbcoll.DataType.float64,
}

_OPS = [
    (dist.ReduceOp.SUM, tbcoll.ReduceOp.SUM),
    (dist.ReduceOp.PRODUCT, tbcoll.ReduceOp.PROD),
    (dist.ReduceOp.MAX, tbcoll.ReduceOp.MAX),
    (dist.ReduceOp.MIN, tbcoll.ReduceOp.MIN),
    (dist.ReduceOp.AVG, tbcoll.ReduceOp.AVG),
]


def _op_name(op):
    kind = getattr(op, "op", op)  # torch 1.13: a ReduceOp object holding its RedOpType
    return getattr(kind, "name", str(kind))


def _op(op, call):
    for theirs, ours in _OPS:
        if op == theirs:
            return ours
    raise tbcoll.InvalidArgument(
        f"tbcoll backend: {call}: reduction {_op_name(op)} is not supported (SUM, PRODUCT, MAX, MIN, AVG)")


def _op_of(opts, call):
    return tbcoll.ReduceOp.SUM if opts is None else _op(opts.reduceOp, call)


def _root_of(opts):
    return 0 if opts is None else opts.rootRank


def _dtype(t, what):
    try:
        return _DTYPES[t.dtype]
    except KeyError:
        raise tbcoll.InvalidArgument(
            f"tbcoll backend: {what} has dtype {t.dtype}, not one tbcoll supports "
            f"({', '.join(str(d) for d in _DTYPES)})") from None


def _one_dtype(tensors, what, noun):
    """The tbcoll dtype every one of tensors has (checked as _check does), or InvalidArgument naming the first that
    differs from tensor 0."""
    dtype = _check(tensors[0], f"{what}'s {noun} 0")
    for i, t in enumerate(tensors):
        if _check(t, f"{what}'s {noun} {i}") != dtype:
            raise tbcoll.InvalidArgument(f"tbcoll backend: {what}: {noun} {i} is {t.dtype} but {noun} 0 is "
                                         f"{tensors[0].dtype}: one dtype for all")
    return dtype


def _check(t, what):
    if not isinstance(t, torch.Tensor):
        raise tbcoll.InvalidArgument(f"tbcoll backend: {what} is a {type(t).__name__}, not a tensor")
    if t.device.type != "cpu":
        raise tbcoll.InvalidArgument(f"tbcoll backend: {what} is on {t.device}; tbcoll moves CPU tensors")
    if not t.is_contiguous():
        raise tbcoll.InvalidArgument(f"tbcoll backend: {what} is not contiguous; pass t.contiguous()")
    return _dtype(t, what)


def _one(tensors, what):
    if len(tensors) != 1:
        raise tbcoll.InvalidArgument(f"tbcoll backend: {what} takes one tensor per process, got {len(tensors)}")
    return tensors[0]


class _Work(dist.Work):
    """A tbcoll call as torch sees it: wait() blocks (GIL released) and then runs the copy-out, if any."""

    def __init__(self, work, keep, result, after=None, timeout_s=None):
        super().__init__()
        self._timeout_s = timeout_s
        self._work = work      # tbcoll.Work, or None once done (or for calls that ran at once)
        self._keep = keep      # the tensors the call reads and writes: alive until it completed
        self._result = result
        self._after = after
        self._waited = False   # wait() was called: whoever holds this Work has what it needs from it
        self._source = None    # a finished receive's source rank (the tbcoll Work's, kept once it is let go)

    def wait(self, timeout=None):
        self._waited = True
        if self._work is not None:
            try:
                self._work.wait()
            except tbcoll.TimeoutError as error:  # torch's backends say "Timed out" (and its tests look for it)
                raise tbcoll.TimeoutError(f"[tbcoll] Timed out after {self._timeout_s} s: {error}") from None
            self._source = self._work.source
            self._work = None
        if self._after is not None:
            after, self._after = self._after, None
            after()
        self._keep = None
        return True

    def is_completed(self):
        if self._work is None:
            return True
        if self._work.test():
            self._source = self._work.source
            return True
        return False

    def _source_rank(self):
        """The rank a recv's message came from (torch's Work.source_rank; dist.recv without src reads it)."""
        if self._source is None and self._work is not None and self._work.test():
            self._source = self._work.source
        if self._source is None or self._source < 0:
            raise RuntimeError("[tbcoll] the source rank is only known for a finished recv's Work")
        return self._source

    def _finished(self):
        try:
            return self._after is None and self.is_completed()
        except tbcoll.Error:
            return True

    # The most Works kept after they completed without anyone waiting (async_op=True calls dropped unwaited).
    _KEPT_UNWAITED = 1024

    def is_success(self):
        try:
            return self.is_completed()
        except tbcoll.Error:
            return False

    def result(self):
        self.wait()
        return self._result

    def get_future(self):
        future = torch.futures.Future()
        try:
            self.wait()
            future.set_result(self._result)
        except tbcoll.Error as error:
            future.set_exception(error)
        return future


class ProcessGroupTbcoll(dist.ProcessGroup):
    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
        self._comm = tbcoll.init(rank=rank, size=size, store=store, timeout=seconds, prefix="tbcoll")
        self._timeout_s = seconds
        self._size = size
        self._pending = []  # the Works not yet waited for: see _track

    def _track(self, work):
        """Keeps work alive until it was waited for. torch's C++ (DDP, _broadcast_coalesced) drops the Python
        object of a Work it got from a Python process group as soon as the call returned, and may wait for it
        later, after it completed: with the object gone, its wait() reaches c10d's base Work, which waits for a
        completion nobody signals. Works never waited for go once they completed and _KEPT_UNWAITED newer ones
        wait too."""
        work._timeout_s = self._timeout_s
        self._pending = [w for w in self._pending if not w._waited]
        if len(self._pending) > _Work._KEPT_UNWAITED:
            excess = len(self._pending) - _Work._KEPT_UNWAITED
            self._pending = [w for i, w in enumerate(self._pending) if i >= excess or not w._finished()]
        self._pending.append(work)
        return work

    def getBackendName(self):
        return "tbcoll"

    @property
    def communicator(self):
        """The tbcoll.Communicator underneath (transport_name(), algorithm(), ...)."""
        return self._comm

    # ---- collectives -----------------------------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        t = _one(tensors, "all_reduce")
        dtype = _check(t, "all_reduce's tensor")
        p = t.data_ptr()
        work = self._comm._all_reduce_raw(p, p, t.numel(), dtype, _op_of(opts, "all_reduce"), True)
        return self._track(_Work(work, tensors, tensors))

    def allreduce_coalesced(self, tensors, opts=None):
        """One all_reduce of the tensors laid end to end (one dtype), copied back at wait()."""
        if not tensors:
            raise tbcoll.InvalidArgument("tbcoll backend: allreduce_coalesced: no tensors")
        dtype = _one_dtype(tensors, "allreduce_coalesced", "tensor")
        flat = torch.cat([t.reshape(-1) for t in tensors])
        p = flat.data_ptr()
        work = self._comm._all_reduce_raw(p, p, flat.numel(), dtype, _op_of(opts, "allreduce_coalesced"), True)
        return self._track(_Work(work, [flat], tensors, lambda: _unflatten(flat, tensors)))

    def broadcast(self, tensors, opts=None):
        t = _one(tensors, "broadcast")
        dtype = _check(t, "broadcast's tensor")
        p = t.data_ptr()
        work = self._comm._broadcast_raw(p, p, t.numel(), dtype, _root_of(opts), True)
        return self._track(_Work(work, tensors, tensors))

    def reduce(self, tensors, opts=None):
        t = _one(tensors, "reduce")
        dtype = _check(t, "reduce's tensor")
        p = t.data_ptr()
        work = self._comm._reduce_raw(p, p, t.numel(), dtype, _op_of(opts, "reduce"), _root_of(opts), True)
        return self._track(_Work(work, tensors, tensors))

    def _allgather_base(self, output, input, opts=None):
        dtype = _check(input, "all_gather's input")
        if _check(output, "all_gather's output") != dtype or output.numel() != input.numel() * self._size:
            raise tbcoll.InvalidArgument(
                f"tbcoll backend: all_gather's output has {output.numel()} elements of {output.dtype}; it needs "
                f"{input.numel() * self._size} of {input.dtype} ({self._size} ranks x {input.numel()})")
        work = self._comm._all_gather_raw(input.data_ptr(), output.data_ptr(), input.numel(), dtype, True)
        return self._track(_Work(work, [output, input], [output]))

    def allgather(self, output_tensors, input_tensors, opts=None):
        outputs = _one(output_tensors, "all_gather")
        t = _one(input_tensors, "all_gather")
        dtype = _check(t, "all_gather's input")
        if len(outputs) != self._size:
            raise tbcoll.InvalidArgument(
                f"tbcoll backend: all_gather's output list has {len(outputs)} tensors for {self._size} ranks")
        n = t.numel()
        for i, out in enumerate(outputs):
            if _check(out, f"all_gather's output {i}") != dtype or out.numel() != n:
                raise tbcoll.InvalidArgument(
                    f"tbcoll backend: all_gather's output {i} has {out.numel()} elements of {out.dtype}; the input "
                    f"has {n} of {t.dtype}")
        step = n * t.element_size()
        base = outputs[0].data_ptr() if outputs else 0
        if all(out.data_ptr() == base + i * step for i, out in enumerate(outputs)):  # views of one buffer
            work = self._comm._all_gather_raw(t.data_ptr(), base, n, dtype, True)
            return self._track(_Work(work, [outputs, t], output_tensors))
        flat = torch.empty(n * self._size, dtype=t.dtype)
        work = self._comm._all_gather_raw(t.data_ptr(), flat.data_ptr(), n, dtype, True)
        return self._track(_Work(work, [flat, t], output_tensors, lambda: _unflatten(flat, outputs)))

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        """Rank r's inputs laid end to end are block r of one all_gather, copied into output_lists[r] at wait()."""
        if len(output_lists) != self._size:
            raise tbcoll.InvalidArgument(f"tbcoll backend: allgather_coalesced: {len(output_lists)} output lists "
                                         f"for {self._size} ranks")
        if not input_tensors:
            raise tbcoll.InvalidArgument("tbcoll backend: allgather_coalesced: no input tensors")
        dtype = _one_dtype(input_tensors, "allgather_coalesced", "input")
        for r, outs in enumerate(output_lists):
            if len(outs) != len(input_tensors) or any(
                    o.numel() != t.numel() or o.dtype != t.dtype for o, t in zip(outs, input_tensors)):
                raise tbcoll.InvalidArgument(f"tbcoll backend: allgather_coalesced: output list {r} does not match "
                                             f"the inputs (one tensor of the same size and dtype per input)")
        flat_in = torch.cat([t.reshape(-1) for t in input_tensors])
        flat_out = torch.empty(flat_in.numel() * self._size, dtype=flat_in.dtype)
        work = self._comm._all_gather_raw(flat_in.data_ptr(), flat_out.data_ptr(), flat_in.numel(), dtype, True)
        every = [o for outs in output_lists for o in outs]
        return self._track(_Work(work, [flat_in, flat_out], output_lists, lambda: _unflatten(flat_out, every)))

    def _reduce_scatter_base(self, output, input, opts=None):
        dtype = _check(input, "reduce_scatter's input")
        if _check(output, "reduce_scatter's output") != dtype or input.numel() != output.numel() * self._size:
            raise tbcoll.InvalidArgument(
                f"tbcoll backend: reduce_scatter's input has {input.numel()} elements; it needs {self._size} x "
                f"{output.numel()} (the output's)")
        work = self._comm._reduce_scatter_raw(input.data_ptr(), output.data_ptr(), output.numel(), dtype,
                                              _op_of(opts, "reduce_scatter"), True)
        return self._track(_Work(work, [output, input], [output]))

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        out = _one(output_tensors, "reduce_scatter")
        inputs = _one(input_tensors, "reduce_scatter")
        dtype = _check(out, "reduce_scatter's output")
        if len(inputs) != self._size:
            raise tbcoll.InvalidArgument(
                f"tbcoll backend: reduce_scatter's input list has {len(inputs)} tensors for {self._size} ranks")
        for i, t in enumerate(inputs):
            if _dtype(t, f"reduce_scatter's input {i}") != dtype or t.numel() != out.numel():
                raise tbcoll.InvalidArgument(
                    f"tbcoll backend: reduce_scatter's input {i} has {t.numel()} elements of {t.dtype}; the output "
                    f"has {out.numel()} of {out.dtype}")
        flat = torch.cat([t.reshape(-1) for t in inputs])
        work = self._comm._reduce_scatter_raw(flat.data_ptr(), out.data_ptr(), out.numel(), dtype,
                                              _op_of(opts, "reduce_scatter"), True)
        return self._track(_Work(work, [flat, out], output_tensors))

    def barrier(self, opts=None):
        return self._track(_Work(self._comm.barrier(async_op=True), None, None))

    # ---- point to point --------------------------------------------------------------------------------------

    def send(self, tensors, dst, tag=0):
        t = _one(tensors, "send")
        work = self._comm._isend_raw(t.data_ptr(), t.numel(), _check(t, "send's tensor"), dst)
        return self._track(_Work(work, tensors, tensors))

    def recv(self, tensors, src, tag=0):
        t = _one(tensors, "recv")
        work = self._comm._irecv_raw(t.data_ptr(), t.numel(), _check(t, "recv's tensor"), src)
        return self._track(_Work(work, tensors, tensors))

    def recv_anysource(self, tensors, tag=0):
        t = _one(tensors, "recv")
        work = self._comm._irecv_any_raw(t.data_ptr(), t.numel(), _check(t, "recv's tensor"))
        return self._track(_Work(work, tensors, tensors))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        n = self._size
        dtype = _check(input, "all_to_all's input")
        if _check(output, "all_to_all's output") != dtype:
            raise tbcoll.InvalidArgument(
                f"tbcoll backend: all_to_all's input is {input.dtype} but its output is {output.dtype}")

        def counts(t, sizes, what):
            rows = t.shape[0] if t.dim() > 0 else 1
            row = t.numel() // rows if rows else 0
            if not sizes:
                if rows % n != 0:
                    raise tbcoll.InvalidArgument(
                        f"tbcoll backend: all_to_all's {what} has {rows} rows, not a multiple of {n} ranks")
                sizes = [rows // n] * n
            if len(sizes) != n or sum(sizes) != rows:
                raise tbcoll.InvalidArgument(
                    f"tbcoll backend: all_to_all's {what} split sizes {list(sizes)} do not cover its {rows} rows "
                    f"in {n} blocks")
            return [k * row for k in sizes]

        send_counts = counts(input, input_split_sizes, "input")
        recv_counts = counts(output, output_split_sizes, "output")
        if not input_split_sizes and not output_split_sizes:
            work = self._comm.all_to_all(input, output, async_op=True)
        else:
            work = self._comm.all_to_allv(input, output, send_counts, recv_counts, async_op=True)
        return self._track(_Work(work, [output, input], [output]))

    def alltoall(self, output_tensors, input_tensors, opts=None):
        if len(output_tensors) != self._size or len(input_tensors) != self._size:
            raise tbcoll.InvalidArgument(
                f"tbcoll backend: all_to_all takes {self._size} input and output tensors, got "
                f"{len(input_tensors)} and {len(output_tensors)}")
        for i, (o, t) in enumerate(zip(output_tensors, input_tensors)):
            _check(o, f"all_to_all's output {i}")
            _check(t, f"all_to_all's input {i}")
        flat_in = torch.cat([t.reshape(-1) for t in input_tensors])
        flat_out = torch.empty(sum(o.numel() for o in output_tensors), dtype=output_tensors[0].dtype)
        work = self._comm.all_to_allv(flat_in, flat_out, [t.numel() for t in input_tensors],
                                      [o.numel() for o in output_tensors], async_op=True)
        return self._track(_Work(work, [flat_in, flat_out], output_tensors,
                                 lambda: _unflatten(flat_out, output_tensors)))

    def gather(self, output_tensors, input_tensors, opts=None):
        t = _one(input_tensors, "gather")
        dtype = _check(t, "gather's input")
        root = _root_of(opts)
        if self.rank() != root:
            work = self._comm._gather_raw(t.data_ptr(), 0, t.numel(), dtype, root, True)
            return self._track(_Work(work, [t], []))
        outputs = _one(output_tensors, "gather")
        if len(outputs) != self._size:
            raise tbcoll.InvalidArgument(
                f"tbcoll backend: gather's list has {len(outputs)} tensors for {self._size} ranks")
        for i, o in enumerate(outputs):
            if _check(o, f"gather's output {i}") != dtype or o.numel() != t.numel():
                raise tbcoll.InvalidArgument(
                    f"tbcoll backend: gather's output {i} has {o.numel()} elements of {o.dtype}; the input has "
                    f"{t.numel()} of {t.dtype}")
        flat = torch.empty(t.numel() * self._size, dtype=t.dtype)
        work = self._comm._gather_raw(t.data_ptr(), flat.data_ptr(), t.numel(), dtype, root, True)
        return self._track(_Work(work, [flat, t], output_tensors, lambda: _unflatten(flat, outputs)))

    def scatter(self, output_tensors, input_tensors, opts=None):
        t = _one(output_tensors, "scatter")
        dtype = _check(t, "scatter's output")
        root = _root_of(opts)
        if self.rank() != root:
            work = self._comm._scatter_raw(0, t.data_ptr(), t.numel(), dtype, root, True)
            return self._track(_Work(work, [t], output_tensors))
        inputs = _one(input_tensors, "scatter")
        if len(inputs) != self._size:
            raise tbcoll.InvalidArgument(
                f"tbcoll backend: scatter's list has {len(inputs)} tensors for {self._size} ranks")
        for i, x in enumerate(inputs):
            if _dtype(x, f"scatter's input {i}") != dtype or x.numel() != t.numel():
                raise tbcoll.InvalidArgument(
                    f"tbcoll backend: scatter's input {i} has {x.numel()} elements of {x.dtype}; the output has "
                    f"{t.numel()} of {t.dtype}")
        flat = torch.cat([x.reshape(-1) for x in inputs])
        work = self._comm._scatter_raw(flat.data_ptr(), t.data_ptr(), t.numel(), dtype, root, True)
        return self._track(_Work(work, [flat, t], output_tensors))


def _unflatten(flat, tensors):
    at = 0
    for t in tensors:
        t.copy_(flat[at:at + t.numel()].view_as(t))
        at += t.numel()


def _create_python(store, rank, size, timeout):
    return ProcessGroupTbcoll(store, rank, size, timeout)


try:
    from ._torch_pg import ProcessGroupTbcoll as CppProcessGroupTbcoll, create as _create_cpp
    IMPLEMENTATION = "c++"
except ImportError:  # the C++ process group was not built (no libtorch-dev where tbcoll was built)
    CppProcessGroupTbcoll, _create_cpp = None, None
    IMPLEMENTATION = "python"


def _create(store, rank, size, timeout):
    if _create_cpp is not None:
        return _create_cpp(store, rank, size, timeout)
    return _create_python(store, rank, size, timeout)


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """torch.distributed.monitored_barrier for a "tbcoll" group (torch 1.13's refuses every backend but gloo),
    gloo's too: rank 0 waits up to timeout (default: torch's default_pg_timeout, as dist.monitored_barrier) for
    every rank, then raises naming the first rank (all of them with wait_all_ranks) that did not come."""
    if dist.distributed_c10d._rank_not_in_group(group):
        return None
    pg = dist.distributed_c10d._get_default_group() if group is None else group
    if timeout is None:
        timeout = dist.distributed_c10d.default_pg_timeout
    if isinstance(pg, ProcessGroupTbcoll):
        raise RuntimeError("tbcoll backend: monitored_barrier needs the C++ process group (tbcoll._torch_pg); "
                           "this one is Python")
    return pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


if not hasattr(dist.Backend, "TBCOLL"):
    dist.Backend.register_backend("tbcoll", _create)
