"""torch.distributed with backend "tbcoll" meeting through torch's own TCPStore (tcp://), as 2 ranks started
directly: rank 1 waits for the file argv[2] before it joins, so the test can rewrite rank 0's record in the TCPStore
first, as a local user without the job secret could. Prints "RESULT <sum>" or "RAISED: <error>"."""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import tbcoll.torch_backend  # noqa: F401

rank = int(os.environ["TBCOLL_RANK"])
if rank == 1:
    deadline = time.monotonic() + 60
    while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
        time.sleep(0.05)
try:
    dist.init_process_group("tbcoll", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=10))
    t = torch.ones(4096) * (rank + 1)
    dist.all_reduce(t)
    print(f"RESULT {t.sum().item()} (right: {3.0 * 4096})", flush=True)
except RuntimeError as e:
    print(f"RAISED: {e}", flush=True)
