# A rank killed (or stopped: --signal STOP, a hung process or a host gone silent) in the middle of a stream of
# all_sum calls, and what the other ranks do: MLX's ring backend or tbcoll's. The ranks are started here, by hand (tbcoll-run would end the whole job at the first death, which is
# what a launcher should do, but hides what the survivors' own calls report):
#
#   /usr/bin/python3 dead_peer.py --backend tbcoll --ranks 3 --timeout 5    survivors must fail within the
#                                                                           deadline naming the killed rank
#   /usr/bin/python3 dead_peer.py --backend ring --ranks 3 --wait 30        reports what ring's survivors do
#
# tbcoll: exit 0 when every survivor exited with an error naming the killed rank ("peer K") within TBCOLL_TIMEOUT
# plus 5 s of start-up slack; 1 otherwise. ring: reports each survivor's fate (its error, or "still waiting" after
# --wait seconds, when it is killed) and exits 0: that is the observation the README's comparison quotes.
# Needs MLX's python/ on PYTHONPATH (integrations/mlx/test.sh sets it).
import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(backend, count):
    import mlx.core as mx

    group = mx.distributed.init(strict=True, backend=backend)
    x = mx.ones((count,))
    calls = 0
    try:
        while True:
            mx.eval(mx.distributed.all_sum(x, group=group))
            calls += 1
            if calls == 20:
                print("ready", flush=True)
    except Exception as error:  # the stream's error, raised by eval
        print(f"error after {calls} calls: {type(error).__name__}: {error}", flush=True)
        sys.exit(3)


def environment(backend, rank, ranks, port, hostfile, timeout):
    env = dict(os.environ)
    for name in ("TBCOLL_RANK", "TBCOLL_WORLD_SIZE", "TBCOLL_ROOT", "MLX_RANK", "MLX_HOSTFILE"):
        env.pop(name, None)
    if backend == "tbcoll":
        env.update(TBCOLL_RANK=str(rank), TBCOLL_WORLD_SIZE=str(ranks), TBCOLL_ROOT=f"127.0.0.1:{port}",
                   TBCOLL_TIMEOUT=str(timeout))
    else:
        env.update(MLX_RANK=str(rank), MLX_HOSTFILE=hostfile)
    return env


def start_ranks(args, hostfile):
    port = free_port()
    procs = []
    for rank in range(args.ranks):
        env = environment(args.backend, rank, args.ranks, port, hostfile, args.timeout)
        command = [sys.executable, __file__, "--worker", "--backend", args.backend, "--count", str(args.count)]
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, start_new_session=True))
    return procs


def wait_ready(procs, seconds):
    deadline = time.monotonic() + seconds
    waiting = {p.stdout.fileno(): p for p in procs}
    while waiting and time.monotonic() < deadline:
        readable, _, _ = select.select(list(waiting), [], [], 0.5)
        for fd in readable:
            line = waiting[fd].stdout.readline()
            if line.strip() == "ready" or not line:
                del waiting[fd]
    return not waiting


def observe(survivors, killed_at, wait):
    """Each survivor's exit (status, seconds after the kill, last line) or None if still running after wait."""
    results = {}
    deadline = killed_at + wait
    while len(results) < len(survivors) and time.monotonic() < deadline:
        for rank, p in survivors.items():
            if rank not in results and p.poll() is not None:
                results[rank] = (p.returncode, time.monotonic() - killed_at, p.stdout.read().strip())
        time.sleep(0.01)
    for rank, p in survivors.items():
        if rank not in results:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            results[rank] = None
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["tbcoll", "ring"], required=True)
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--victim", type=int, default=1)
    parser.add_argument("--signal", choices=["KILL", "STOP"], default="KILL")
    parser.add_argument("--timeout", type=float, default=5.0, help="TBCOLL_TIMEOUT of the ranks")
    parser.add_argument("--wait", type=float, default=0, help="how long to watch the survivors (default: timeout + 5)")
    parser.add_argument("--count", type=int, default=1 << 18, help="float32 elements per all_sum")
    parser.add_argument("--worker", action="store_true")
    args = parser.parse_args()
    if args.worker:
        return worker(args.backend, args.count)
    wait = args.wait or args.timeout + 5
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([[f"127.0.0.1:{free_port()}"] for _ in range(args.ranks)], f)
        hostfile = f.name
    procs = start_ranks(args, hostfile)
    try:
        if not wait_ready(procs, 60):
            print(f"{args.backend}: the ranks did not all run 20 calls within 60 s")
            return 1
        time.sleep(0.2)
        os.killpg(procs[args.victim].pid, getattr(signal, "SIG" + args.signal))
        killed_at = time.monotonic()
        survivors = {r: p for r, p in enumerate(procs) if r != args.victim}
        results = observe(survivors, killed_at, wait)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        os.unlink(hostfile)
    return report(args, results)


def report(args, results):
    transport = os.environ.get("TBCOLL_TRANSPORT", "default") if args.backend == "tbcoll" else "tcp"
    what = "killed (SIGKILL)" if args.signal == "KILL" else "stopped (SIGSTOP)"
    print(f"{args.backend} ({transport}), {args.ranks} ranks, rank {args.victim} {what} mid all_sum:")
    ok = True
    for rank, result in sorted(results.items()):
        if result is None:
            print(f"  rank {rank}: still waiting {args.wait or args.timeout + 5:.0f} s after the signal (then killed)")
            ok = False
            continue
        status, seconds, output = result
        last = output.splitlines()[-1] if output else ""
        print(f"  rank {rank}: exit {status} after {seconds:.2f} s: {last}")
        names_victim = f"peer {args.victim}" in last or f"rank {args.victim}" in last
        ok = ok and status != 0 and seconds <= args.timeout + 5 and names_victim
    if args.backend == "ring":
        return 0
    print("dead peer: " + ("PASS" if ok else "FAIL: a survivor did not fail in time naming the killed rank"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
