// Calls that have not started yet: where a small collective waits until someone needs it.
//
// Queuing a call on the communicator wakes its progress thread. Where the ranks keep every core busy (two ranks
// spinning on two cores) that wake costs more than a small call itself: 8 B over shm took ~7.7 us queued and then
// waited for, ~1 us run on the waiting thread. torch's blocking form (dist.all_reduce(t)) is exactly that: the
// call, then wait() at once. So a small call is not queued at once: it waits in the process's one slot, and starts
//   - on the thread that waits for it, run there (the blocking form: no other thread involved);
//   - queued, as soon as anything else happens first: the next call of any tbcoll process group of the process, a
//     test of it, its future being asked for, the process group going; else after kGrace (a flusher thread that
//     ticks while calls are being made).
// So an async_op=True call still runs while the caller computes, starting at most ~2 x kGrace later, and no call
// waits in the slot while this process waits for something else (another backend, the store) that a peer can only
// give once it finished this call.
//
// Threads: any. Every start of a held call happens under the slot's lock, so calls are queued in call order.
#pragma once

#include <chrono>
#include <cstddef>

#include <c10/util/intrusive_ptr.h>

namespace tbcoll::torch_pg {

class WorkTbcoll;

namespace deferred {

/// The largest call (bytes a rank sends or receives) held back; larger ones are queued at once (their time hides
/// the wake).
constexpr size_t kMostBytes = 256 << 10;
/// How long a held call may wait for its waiter before the flusher queues it.
constexpr std::chrono::microseconds kGrace{1000};

/// Queues the held call, if any (WorkTbcoll::start). Every call of a process group does this first.
void flush();
/// Holds work (unstarted) in the slot, queuing the one held before.
void hold(const c10::intrusive_ptr<WorkTbcoll>& work);
/// Takes work out of the slot: true if it was held, and the caller now runs it (unstarted) itself.
bool take(const WorkTbcoll* work);
/// Queues the held call if it is work (a test or a future of it wants it going).
void start(const WorkTbcoll* work);
/// Queues the held call if it belongs to owner (a process group going away).
void flush_owned_by(const void* owner);

}  // namespace deferred
}  // namespace tbcoll::torch_pg
