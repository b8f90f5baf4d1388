// Whether busy-waiting ranks should give their CPU away now and then.
#pragma once

#include <string>
#include <vector>

namespace tbcoll {

/// CPUs the calling thread may run on, ascending: its affinity, or every online CPU where the system has no
/// affinity (macOS); empty only when the count is unknown.
std::vector<int> allowed_cpus();
/// "0-3,6"-style text of a CPU list, and back (throws InvalidArgument on junk).
std::string format_cpus(const std::vector<int>& cpus);
std::vector<int> parse_cpus(const std::string& text);

/// True when a rank that spins in a wait should call sched_yield now and then: when another rank on the same
/// machine (same kernel) may run on one of its CPUs. Ranks placed on disjoint CPUs (tbcoll-run, mpirun
/// --bind-to core) do not: there a yield only costs a system call and lets other tasks in, which delays the
/// wake-up it waits for (measured: ~1.4 us more communication per decode token of the 2-rank inference example).
/// TBCOLL_SPIN_YIELD=1/0 forces it on/off; -1 (default) decides as above. The masks are read once, at init.
bool spin_should_yield(const std::vector<int>& mine, const std::vector<std::vector<int>>& same_machine_peers);

/// Marks the calling thread as one that shares its CPU with the thread that started it (the progress thread of
/// asynchronous calls): its spinning waits always yield now and then, whatever spin_should_yield() said.
void mark_thread_sharing_cpu();
bool thread_shares_cpu();

}  // namespace tbcoll
