"""The tbcoll Python module: collectives on 2 and 3 processes against numpy, bad input, a dead peer within the
deadline, and no leak over 1,000 init/destroy cycles."""
import gc
import os
import threading
import time

import numpy as np
import pytest

from conftest import env, spawn_ranks, tbcoll_run

import tbcoll


@pytest.mark.parametrize("ranks,transport", [(2, ""), (3, ""), (2, "tcp")])
def test_every_collective_and_dtype_matches_numpy(ranks, transport):
    extra = {"TBCOLL_TRANSPORT": transport} if transport else {}
    code, out = tbcoll_run(ranks, "ranks_collectives.py", extra_env=extra)
    assert code == 0, out
    for rank in range(ranks):
        assert f"RANK {rank} OK" in out, out


def one_rank(**kw):
    return tbcoll.init(rank=0, size=1, **kw)


def test_buffers_are_refused_with_the_reason():
    with one_rank() as comm:
        with pytest.raises(tbcoll.InvalidArgument, match="C-contiguous"):
            comm.all_reduce(np.zeros((3, 3), np.float32)[:, 0])
        ro = np.zeros(3, np.float32)
        ro.setflags(write=False)
        with pytest.raises(tbcoll.InvalidArgument, match="read-only"):
            comm.all_reduce(ro)
        comm.all_reduce(ro, np.zeros(3, np.float32))  # a read-only input is fine out of place
        with pytest.raises(ValueError, match="not one tbcoll reduces"):
            comm.all_reduce(np.zeros(3, np.complex64))
        with pytest.raises(tbcoll.InvalidArgument, match="neither the buffer protocol nor __dlpack__"):
            comm.all_reduce(object())
        with pytest.raises(tbcoll.InvalidArgument, match="None"):
            comm.all_gather(np.zeros(3, np.float32), None)
        # dtype= reinterprets same-size elements (bf16 in uint16); a different size is refused.
        x = np.full(2, 0x4000, np.uint16)
        comm.all_reduce(x, dtype=tbcoll.DataType.bfloat16)
        assert list(x) == [0x4000, 0x4000]
        with pytest.raises(tbcoll.InvalidArgument, match="2-byte elements"):
            comm.all_reduce(np.zeros(2, np.float32), dtype="bf16")
        with pytest.raises(tbcoll.InvalidArgument, match="unknown dtype"):
            comm.all_reduce(np.zeros(2, np.float32), dtype="complex")
        assert tbcoll.dtype_size("bfloat16") == 2


def test_registered_memory_is_held_until_closed():
    with one_rank() as comm:
        x = np.arange(1 << 16, dtype=np.float32)
        with comm.register_memory(x) as registration:
            assert registration.transports == 0  # a world of one has no transport with anything to gain
            comm.all_reduce(x)
        assert x[5] == 5.0
        registration.close()  # again: nothing left to do
        with pytest.raises(tbcoll.InvalidArgument, match="neither the buffer protocol nor __dlpack__"):
            comm.register_memory(object())


def test_torch_tensors_go_through_dlpack(torch):
    with one_rank() as comm:
        t = torch.arange(6, dtype=torch.float32)
        assert comm.all_reduce(t) is t
        with pytest.raises(tbcoll.InvalidArgument, match="contiguous"):
            comm.all_reduce(torch.zeros(4, 4)[:, 1])
        with pytest.raises(tbcoll.InvalidArgument, match="not one tbcoll reduces"):
            comm.all_reduce(torch.zeros(4, dtype=torch.int16))
        with pytest.raises(tbcoll.InvalidArgument, match="DLPack.*Bool"):
            comm.all_reduce(torch.zeros(4, dtype=torch.bool))


def test_closed_communicator_and_errors_are_typed():
    comm = one_rank()
    comm.close()
    with pytest.raises(tbcoll.InvalidUsage, match="closed"):
        comm.barrier()
    assert issubclass(tbcoll.TimeoutError, TimeoutError)
    assert issubclass(tbcoll.IoError, OSError)
    assert issubclass(tbcoll.MismatchError, tbcoll.InvalidUsage)
    with pytest.raises(tbcoll.InvalidArgument, match="world size"):
        tbcoll.init(rank=0, size=0)


def test_a_second_thread_in_a_call_gets_an_error_not_a_race():
    with one_rank() as comm:
        big = np.zeros(1, np.float32)
        errors = []
        stop = threading.Event()

        def hammer():
            while not stop.is_set():
                try:
                    comm.all_reduce(big)
                except tbcoll.InvalidUsage as e:
                    errors.append(str(e))

        threads = [threading.Thread(target=hammer) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
        assert all("another thread" in e for e in errors)


def test_a_dead_peer_raises_within_the_deadline():
    procs = spawn_ranks(2, "ranks_dead_peer.py", extra_env={"TBCOLL_TIMEOUT": "4"})
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        outs.append(out)
    assert procs[1].returncode == -9, outs[1]
    assert procs[0].returncode == 0, outs[0]
    assert "RAISED" in outs[0], outs[0]
    seconds = float(outs[0].split("RAISED after ")[1].split()[0])
    assert seconds < 4 + 3, outs[0]  # the communicator's deadline (4 s), plus slack for a loaded machine


def fds():
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


def rss_kib():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def test_no_leak_across_1000_init_destroy_cycles():
    def cycle(i):
        comm = one_rank()
        x = np.full(64, i, np.float32)
        comm.all_reduce(x, async_op=True).wait()
        comm.close()

    for i in range(50):  # warm up allocators and caches
        cycle(i)
    gc.collect()
    fd0, rss0, threads0 = fds(), rss_kib(), threading.active_count()
    for i in range(1000):
        cycle(i)
    gc.collect()
    fd1, rss1, threads1 = fds(), rss_kib(), threading.active_count()
    print(f"fds {fd0} -> {fd1}, RSS {rss0} -> {rss1} KiB, threads {threads0} -> {threads1}")
    assert fd1 <= fd0
    assert threads1 <= threads0
    assert rss1 - rss0 < 8 * 1024, f"RSS grew by {rss1 - rss0} KiB over 1,000 cycles"


def test_two_ranks_as_threads_through_a_python_store_repeatedly():
    class DictStore:
        def __init__(self):
            self.d, self.cv = {}, threading.Condition()

        def set(self, k, v):
            with self.cv:
                self.d[k] = bytes(v)
                self.cv.notify_all()

        def get(self, k):
            with self.cv:
                self.cv.wait_for(lambda: k in self.d, timeout=30)
                return self.d[k]

        def add(self, k, n):
            with self.cv:
                self.d[k] = str(int(self.d.get(k, b"0")) + n).encode()
                self.cv.notify_all()
                return int(self.d[k])

    fd0 = None
    for cycle in range(30):
        store, results, errors = DictStore(), [None, None], []

        def rank(r):
            try:
                with tbcoll.init(rank=r, size=2, store=store, timeout=20) as comm:
                    x = np.full(5, r + 1, np.int32)
                    comm.all_reduce(x)
                    results[r] = x
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert all(list(r) == [3] * 5 for r in results)
        gc.collect()
        if cycle == 4:
            fd0 = fds()
    assert fds() <= fd0


def test_version_is_the_projects():
    import tbcoll
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "CMakeLists.txt")) as f:
        version = f.read().split("project(tbcoll VERSION ")[1].split()[0]
    assert tbcoll.__version__ == version


def test_the_secret_leaves_the_environment_once_tbcoll_is_imported():
    """Children of a process that imported tbcoll do not inherit the job secret: the library took it out of the C
    environment when it loaded, and the package out of os.environ."""
    import subprocess
    import sys
    code = ("import os, subprocess, tbcoll\n"
            "print('os.environ:', 'TBCOLL_SECRET' in os.environ)\n"
            "print('child:', subprocess.run(['sh', '-c', 'echo ${TBCOLL_SECRET+set}'], capture_output=True,"
            " text=True).stdout.strip() or 'none')\n")
    out = subprocess.run([sys.executable, "-c", code], env=env(TBCOLL_SECRET="a-secret-for-this-test-0123"),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "os.environ: False" in out.stdout and "child: none" in out.stdout, out.stdout
