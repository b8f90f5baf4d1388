"""torch.distributed with backend "tbcoll": rank 1 dies (SIGKILL) after init; rank 0's all_reduce raises within the
backend's timeout. Prints "RAISED after S s: <error>"."""
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import tbcoll.torch_backend  # noqa: F401

rank = int(os.environ["TBCOLL_RANK"])
dist.init_process_group("tbcoll", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=rank, world_size=2,
                        timeout=timedelta(seconds=4))
dist.barrier()
if rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(0.2)
start = time.monotonic()
try:
    dist.all_reduce(torch.zeros(1000))
    print("NO ERROR", flush=True)
except RuntimeError as e:
    print(f"RAISED after {time.monotonic() - start:.2f} s: {type(e).__name__}: {e}", flush=True)
