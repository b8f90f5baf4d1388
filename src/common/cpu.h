// Whether busy-waiting ranks should give their CPU away now and then.
#pragma once

#include <string>
#include <vector>

#include "tbcoll/collective_fast_path.hpp"

namespace tbcoll {

/// CPUs the calling thread may run on, ascending: its affinity, or every online CPU where the system has no
/// affinity (macOS); empty only when the count is unknown.
std::vector<int> allowed_cpus();
/// "0-3,6"-style text of a CPU list, and back (throws InvalidArgument on junk).
std::string format_cpus(const std::vector<int>& cpus);
std::vector<int> parse_cpus(const std::string& text);

/// How a rank that spins in a wait should share its CPU (transport::SpinYield):
/// - kEveryPoll when crowded (the machine runs more ranks than the CPUs they may use): the peer a rank waits for
///   is then often runnable but not running, and each poll held back from it delays the whole call;
/// - kNowAndThen when another rank on the same machine (same kernel) may run on one of its CPUs;
/// - kNever for ranks placed on disjoint CPUs (tbcoll-run, mpirun --bind-to core): there a yield only costs a
///   system call and lets other tasks in, which delays the wake-up it waits for (measured: ~1.4 us more
///   communication per decode token of the 2-rank inference example).
/// TBCOLL_SPIN_YIELD=0/1/2 forces never / now and then / every poll; -1 (default) decides as above. The masks are
/// read once, at init.
transport::SpinYield spin_yield_policy(const std::vector<int>& mine,
                                       const std::vector<std::vector<int>>& same_machine_peers, bool crowded);

/// The most ranks per CPU on any one machine (>= 1): per machine (kernel), its ranks over the CPUs any of them may
/// use; a rank that could not read its mask counts as a CPU of its own. cpus_by_rank and kernel_by_rank by rank.
double machine_crowding(const std::vector<std::vector<int>>& cpus_by_rank, const std::vector<std::string>& kernel_by_rank);

/// Marks the calling thread as one that shares its CPU with the thread that started it (the progress thread of
/// asynchronous calls): its spinning waits always yield now and then, whatever spin_yield_policy() said.
void mark_thread_sharing_cpu();
bool thread_shares_cpu();

/// Whether a spinning wait should call sched_yield at its poll-th poll: at every poll under kEveryPoll; every
/// `every` polls under kNowAndThen or on a thread that shares its CPU; else never.
inline bool yield_now(transport::SpinYield policy, unsigned poll, unsigned every) {
  if (policy == transport::SpinYield::kEveryPoll) return true;
  return poll % every == 0 && (policy == transport::SpinYield::kNowAndThen || thread_shares_cpu());
}

}  // namespace tbcoll
