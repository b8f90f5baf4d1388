"""torch.distributed with backend "tbcoll" against "gloo": one script, every collective's result identical; a dead
rank makes the other raise within the backend's timeout."""
import functools
import json
import os
import tempfile

import pytest

from conftest import env, free_port, spawn_ranks, tbcoll_run

pytest.importorskip("torch")


@functools.lru_cache(maxsize=None)  # one run per backend and rank count serves every test that reads it
def results(backend, ranks):
    with tempfile.TemporaryDirectory() as tmp:
        code, out = tbcoll_run(ranks, "ranks_torch.py", backend,
                               extra_env={"TEST_PORT": free_port(), "RESULT_DIR": tmp}, timeout=600)
        assert code == 0, out
        by_rank = {}
        for rank in range(ranks):
            with open(os.path.join(tmp, f"{backend}.{rank}.json")) as f:
                by_rank[rank] = json.load(f)
    return by_rank


@pytest.mark.parametrize("ranks", [2, 3])
def test_every_collective_matches_gloo(ranks):
    ours, gloo = results("tbcoll", ranks), results("gloo", ranks)
    compared = 0
    for rank in range(ranks):
        for name, value in ours[rank].items():
            theirs = gloo[rank].get(name, "not asked of gloo (premul_sum)")
            if isinstance(theirs, str):  # gloo does not do it (reduce_scatter, bf16 ...): checked by the module tests
                continue
            assert value == theirs, f"rank {rank}: {name}: tbcoll {value} gloo {theirs}"
            compared += 1
    print(f"{compared} results identical to gloo's on {ranks} ranks")
    assert compared >= 40 * ranks


def test_reduce_scatter_which_gloo_lacks_is_right():
    ours = results("tbcoll", 2)
    for rank in range(2):
        # rank r's input i is ((arange*5 + r*3 + i) % 3 + 1); output = sum over ranks of input `rank`.
        want = [float(sum((k * 5 + r * 3 + rank) % 3 + 1 for r in range(2))) for k in range(5)]
        assert ours[rank]["reduce_scatter list torch.float32"] == [want]


def test_premul_sum_scales_each_input_then_sums():
    for size in (2, 3):
        ours = results("tbcoll", size)
        for rank in range(size):
            got = ours[rank]["premul_sum"]
            for i, f in enumerate((0.5, 0.25)):
                t, r, base_out, list_out, base_in = got[5 * i:5 * i + 5]
                assert t == [f * sum(q + 1 for q in range(size))] * 7
                if rank == 0:
                    assert r == [f * sum(q + 2 for q in range(size))] * 3
                assert base_out == [f * sum(2 * rank + k + q for q in range(size)) for k in range(2)]
                assert list_out == [f * sum(rank + q for q in range(size))] * 2
                assert base_in == [float(k + rank) for k in range(2 * size)], "the input was scaled in place"


def test_a_dead_rank_makes_the_other_raise_within_the_timeout():
    procs = spawn_ranks(2, "ranks_torch_dead.py", free_port())
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert procs[1].returncode == -9, outs[1]
    assert procs[0].returncode == 0 and "RAISED after" in outs[0], outs[0]
    seconds = float(outs[0].split("RAISED after ")[1].split()[0])
    assert seconds < 4 + 3, outs[0]


def python_only_package(tmp_path):
    """A copy of the built package without the C++ process group: the Python one stands in, as where it was not
    built."""
    import shutil
    from conftest import BUILD
    shutil.copytree(os.path.join(BUILD, "python", "tbcoll"), tmp_path / "tbcoll")
    for built in (tmp_path / "tbcoll").glob("_torch_pg*"):
        built.unlink()
    return str(tmp_path)


@pytest.mark.parametrize("implementation", ["c++", "python"])
def test_under_tbcoll_run_the_process_group_needs_nothing_more(implementation, tmp_path):
    extra = {"PYTHONPATH": python_only_package(tmp_path)} if implementation == "python" else {}
    code, out = tbcoll_run(2, "ranks_torch_cpp.py", timeout=300, extra_env=extra)
    assert code == 0, out
    for rank in range(2):
        assert f"OK {rank} env rank {rank} of 2 implementation {implementation}" in out, out
        for what in ("future", "unwaited async call runs", "batch_isend_irecv", "recv from any source", "coalesced",
                     "unsupported ops named", "done"):
            assert f"OK {rank} {what}" in out, out
        if implementation == "c++":
            assert f"OK {rank} monitored_barrier" in out, out
    assert "OK 0 timed out" in out, out


@pytest.mark.parametrize("implementation", ["c++", "python"])
def test_ddp_on_either_process_group(implementation, tmp_path):
    """The Python process group stands in where the C++ one was not built: a copy of the package without it."""
    import subprocess
    from conftest import BUILD, HERE, PYTHON, env
    package = python_only_package(tmp_path) if implementation == "python" else os.path.join(BUILD, "python")
    port = free_port()
    procs = [subprocess.Popen([PYTHON, os.path.join(HERE, "ranks_torch_ddp.py"), str(port), str(rank)],
                              env={**env(), "PYTHONPATH": package}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for rank in range(2)]
    try:
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:  # a hung rank must not outlive the test
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in zip(procs, outs):
        assert p.returncode == 0 and f"DDP OK {implementation}" in out, out


def test_torchrun_as_the_docs_spell_it(tmp_path):
    """torchrun with the spelling docs/python.md gives for the torch installed here starts both ranks, and the
    process group meets through torch's store."""
    import shutil
    import subprocess
    import sys
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("no torchrun on PATH")
    script = tmp_path / "train.py"
    script.write_text("import torch, torch.distributed as dist\n"
                      "import tbcoll.torch_backend\n"
                      "dist.init_process_group('tbcoll')\n"
                      "t = torch.ones(4) * (dist.get_rank() + 1)\n"
                      "dist.all_reduce(t)\n"
                      "print('RANK', dist.get_rank(), 'SUM', t[0].item(), flush=True)\n"
                      "dist.destroy_process_group()\n")
    import torch
    new_spelling = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 0)
    options = ["--nproc-per-node", "2"] if new_spelling else ["--nproc_per_node", "2", "--redirects", "1", "--tee", "1"]
    proc = subprocess.run([torchrun, *options, "--master_port", str(free_port()), str(script)],
                          env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.count("SUM 3.0") == 2, proc.stdout


class Relay:
    """The attacker's relay: listens on loopback, forwards one connection to the tcp address of a peer record and
    flips one byte of what the connecting side sends after its handshake (a float of the data). `rewritten` is the
    record pointing at the relay instead."""

    def __init__(self, record):
        import re
        import socket
        import threading
        text = record.decode("latin-1")
        match = re.search(r"dev\.tcp=([0-9.]+):([0-9]+)", text)
        assert match, text
        self.target = (match.group(1), int(match.group(2)))
        self.listener = socket.create_server(("127.0.0.1", 0))
        port = self.listener.getsockname()[1]
        self.rewritten = (text[:match.start()] + f"dev.tcp=127.0.0.1:{port}" + text[match.end():]).encode("latin-1")
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        import socket
        import threading
        client, _ = self.listener.accept()
        server = socket.create_connection(self.target)

        def pipe(src, dst, flip_at):
            seen = 0
            while True:
                data = src.recv(65536)
                if not data:
                    dst.close()
                    return
                if seen <= flip_at < seen + len(data):
                    data = bytearray(data)
                    data[flip_at - seen] ^= 0x40
                seen += len(data)
                dst.sendall(bytes(data))
        threading.Thread(target=pipe, args=(client, server, 1000), daemon=True).start()
        pipe(server, client, -1)


def test_a_record_rewritten_in_torchs_tcpstore_fails_the_setup_with_a_secret(tmp_path):
    """torch's TCPStore authenticates no one: a local user who reaches it can rewrite tbcoll's peer record to point
    rank 1 at a relay that alters the data (the job secret's handshake passes through a relay). With a job secret
    the records carry MACs: rank 1 refuses the rewritten record naming it, and no rank returns a (wrong) result."""
    import time
    from datetime import timedelta
    import torch.distributed as dist
    port = free_port()
    go = tmp_path / "go"
    procs = spawn_ranks(2, "ranks_torch_tampered.py", port, str(go),
                        extra_env={"TBCOLL_SECRET": "a-job-secret-for-this-test-0123", "TBCOLL_TRANSPORT": "tcp"})
    try:
        attacker = dist.TCPStore("127.0.0.1", port, 2, False, timeout=timedelta(seconds=30))
        attacker.set_timeout(timedelta(milliseconds=100))
        key, genuine = None, None
        deadline = time.monotonic() + 30
        while key is None and time.monotonic() < deadline:
            for candidate in ("default_pg/0/tbcoll/peer/0", "default_pg/tbcoll/peer/0", "0/tbcoll/peer/0",
                              "tbcoll/peer/0"):
                try:
                    genuine = attacker.get(candidate)  # waits for the key at most the store's timeout
                    key = candidate
                    break
                except RuntimeError:
                    pass
        assert key is not None, "rank 0's record never appeared in the TCPStore"
        relay = Relay(genuine)
        attacker.set(key, relay.rewritten)  # rank 1 is sent to the relay, which alters what it forwards
        go.write_text("")
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert "RESULT" not in outs[0] + outs[1], outs
    assert "[auth] rendezvous record" in outs[1] and "was not written by a rank of this job" in outs[1], outs[1]
