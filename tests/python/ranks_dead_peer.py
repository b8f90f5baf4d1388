"""Rank 1 dies (SIGKILL) after set-up; rank 0's next all_reduce must raise a tbcoll error within the deadline
(TBCOLL_TIMEOUT), naming the peer. Prints "RAISED after S s: <error>"."""
import os
import signal
import time

import numpy as np

import tbcoll

comm = tbcoll.init()
comm.barrier()
if comm.rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(0.2)
start = time.monotonic()
try:
    comm.all_reduce(np.zeros(1000, np.float32))
    print("NO ERROR", flush=True)
except tbcoll.Error as e:
    print(f"RAISED after {time.monotonic() - start:.2f} s: {type(e).__name__}: {e}", flush=True)
