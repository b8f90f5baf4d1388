// Whether busy-waiting ranks should give their CPU away now and then.
#pragma once

namespace tbcoll {

/// True when a rank that spins in a wait should call sched_yield now and then: when it may share its CPU with
/// a rank it waits for. False when this thread is pinned to one CPU and the host's ranks fit one per online CPU
/// (as tbcoll-run and mpirun --bind-to core place them): there a yield only costs a system call and lets other
/// tasks in, which delays the wake-up it waits for (measured: ~1.4 us more communication per decode token of
/// the 2-rank inference example). TBCOLL_SPIN_YIELD=1/0 forces it on/off; -1 (default) decides as above.
/// local_ranks: ranks of the communicator on this host, this one included.
bool spin_should_yield(int local_ranks);

}  // namespace tbcoll
