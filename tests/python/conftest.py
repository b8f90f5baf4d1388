"""Shared by the Python tests: where the build is, and how to start ranks.

TBCOLL_BUILD_DIR (set by ctest) is the build tree: the module is in $TBCOLL_BUILD_DIR/python, tbcoll-run beside.
"""
import os
import socket
import subprocess
import sys

import pytest

BUILD = os.environ.get("TBCOLL_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable
sys.path.insert(0, os.path.join(BUILD, "python"))


def env(**extra):
    out = dict(os.environ)
    out["PYTHONPATH"] = os.path.join(BUILD, "python") + os.pathsep + out.get("PYTHONPATH", "")
    out.update({k: str(v) for k, v in extra.items()})
    return out


_next_port = [5000 + os.getpid() % 4999]


def free_port():
    """A loopback port that was free a moment ago, below the ephemeral range (32768 up on Linux, 49152 up on
    macOS): no outgoing connection of a test running beside this one is given it before a rank binds it."""
    for _ in range(200):
        port = _next_port[0]
        _next_port[0] = 5000 if port + 1 >= 10000 else port + 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port in 5000-9999")


def tbcoll_run(n, script, *args, timeout=300, extra_env=None, run_args=()):
    """Runs `tbcoll-run -n N python3 tests/python/SCRIPT ARGS`; returns (returncode, output)."""
    cmd = [os.path.join(BUILD, "tbcoll-run"), "-n", str(n), *run_args, "--", PYTHON, os.path.join(HERE, script),
           *map(str, args)]
    proc = subprocess.run(cmd, env=env(**(extra_env or {})), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=timeout, text=True)
    return proc.returncode, proc.stdout


def spawn_ranks(n, script, *args, extra_env=None):
    """Starts N ranks of SCRIPT directly (no launcher: a rank may die without the job being torn down)."""
    port = free_port()
    procs = []
    for rank in range(n):
        e = env(TBCOLL_RANK=rank, TBCOLL_WORLD_SIZE=n, TBCOLL_ROOT=f"127.0.0.1:{port}", **(extra_env or {}))
        procs.append(subprocess.Popen([PYTHON, os.path.join(HERE, script), *map(str, args)], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return procs


@pytest.fixture
def torch():
    return pytest.importorskip("torch")
