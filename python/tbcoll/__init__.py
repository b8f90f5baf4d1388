"""tbcoll: collectives for CPU clusters (shared memory, TCP, RDMA over Thunderbolt or RoCE) from Python.

    import numpy as np, tbcoll
    comm = tbcoll.init()                      # TBCOLL_RANK/WORLD_SIZE/ROOT (tbcoll-run sets them), mpirun, srun
    x = np.ones(4096, dtype=np.float32)
    comm.all_reduce(x)                        # in place; comm.all_reduce(x, out) out of place

Buffers: numpy arrays (buffer protocol) or anything with __dlpack__ (torch tensors...), C-contiguous, in CPU
memory, taken without a copy. Every call blocks (the GIL released) until this rank's part is done or the
communicator's timeout passes; with async_op=True it returns a Work (wait(), test()) that keeps the buffers alive.
Errors are tbcoll.Error subclasses with the C++ library's messages: InvalidArgument (also a ValueError),
InvalidUsage, MismatchError, TimeoutError (also the builtin TimeoutError), IoError (also an OSError), RemoteError.

torch.distributed: `import tbcoll.torch_backend` registers the "tbcoll" backend
(dist.init_process_group("tbcoll", ...)).
"""
import contextlib as _contextlib

from ._tbcoll import (  # noqa: F401  (the public names)
    Communicator,
    DataType,
    Error,
    InvalidArgument,
    InvalidUsage,
    IoError,
    MismatchError,
    ReduceOp,
    Registration,
    RemoteError,
    TimeoutError,
    UniqueId,
    Work,
    dtype_size,
    init_with_id,
)
from . import _tbcoll
from ._version import __version__  # noqa: F401

# The library took the job secret out of the process environment when it loaded (children do not inherit it);
# os.environ is Python's own copy, which subprocesses get: it goes too.
import os as _os
_os.environ.pop("TBCOLL_SECRET", None)

SUM, PROD, MAX, MIN, AVG = ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.AVG


def init(rank=None, size=None, root=None, *, timeout=None, transport=None, algo=None, token=None, knobs=None,
         store=None, prefix=None):
    """A communicator: rank `rank` of `size`, meeting at the store `root` (host:port, hosted by rank 0).

    Unset arguments come from the environment as in C++ Config::from_env (TBCOLL_RANK, TBCOLL_WORLD_SIZE,
    TBCOLL_ROOT, TBCOLL_TIMEOUT, TBCOLL_TRANSPORT, TBCOLL_ALGO, or OpenMPI/PMI/Slurm variables). store: an object
    with set/get/add (a torch.distributed store) to meet through instead of a TBCOLL_ROOT. knobs: {"TBCOLL_...":
    "value"} for this communicator. timeout: seconds, for every blocking call.
    """
    return _tbcoll.init(rank, size, root, timeout, transport, algo, token, knobs, store, prefix)


@_contextlib.contextmanager
def group(comm):
    """Grouped point-to-point calls: sends and receives inside run together at the end (no ordering deadlock).

        with tbcoll.group(comm):
            comm.send(a, peer=1)
            comm.recv(b, peer=1)

    The arrays must stay alive until the block ends.
    """
    comm.group_start()
    try:
        yield comm
    finally:
        comm.group_end()


def _enter(self):
    return self


def _exit(self, *exc):
    self.close()
    return False


Communicator.__enter__ = _enter
Communicator.__exit__ = _exit

__all__ = ["__version__", "init", "init_with_id", "group", "Communicator", "Registration", "Work", "UniqueId", "DataType", "ReduceOp", "SUM", "PROD",
           "MAX", "MIN", "AVG", "Error", "InvalidArgument", "InvalidUsage", "MismatchError", "TimeoutError", "IoError",
           "RemoteError", "dtype_size"]
