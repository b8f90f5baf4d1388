// Faults of whole ranks and links on the fake fabric (fake_verbs.h), for ranks run as threads: the analogues of a
// process stopped by SIGSTOP, a host that vanishes, a Thunderbolt cable pulled, and a queue pair broken by a fatal
// error. The fault matrix (tests/ibverbs/fault_matrix_test.cc) drives them.
//
// A rank names its own port with context_of_this_thread() after Communicator::init (the transport opens the device
// on the thread that initialises). Every control may be called from any thread; reset() undoes them all.
#pragma once

#include <infiniband/verbs.h>

namespace tbcoll::ibverbs::fake {

/// The device context the calling thread opened last since reset(), or null.
ibv_context* context_of_this_thread();

/// From now on poll_cq, post_send and post_recv on this context's CQs and QPs wait inside the call until
/// resume(context): the thread of the rank stops wherever it next touches the verbs, as a process stopped by SIGSTOP
/// does. Its HCA does not stop: frames sent to it still land in its posted receives (and RC ones are acknowledged),
/// so a peer that respects credits loses nothing.
void pause(ibv_context* context);
void resume(ibv_context* context);

/// Frames between a and b, both ways, are lost from now on (b null: between a and every other context, a host
/// gone). UC: nothing says so, the sender's completion reports success. RC: the sender's HCA retries, and after
/// the queue pair's retry time, 4.096 us x 2^timeout x (retry_cnt + 1) (0.54 s with timeout 14 and 7 retries),
/// the send completes with IBV_WC_RETRY_EXC_ERR and the queue pair goes to ERR (later sends are flushed).
void cut(ibv_context* a, ibv_context* b = nullptr);
/// Undoes cut(a, b) (the cable plugged back): UC frames sent meanwhile stay lost; RC sends still retrying are
/// delivered now, in order, as the HCA's next retransmission would.
void mend(ibv_context* a, ibv_context* b = nullptr);

/// Moves a's queue pairs that send to b (all of a's for null) to ERR, as a fatal local error would: its posted
/// receives complete with IBV_WC_WR_FLUSH_ERR, and so does every later post. Returns how many were moved.
int break_queue_pairs(ibv_context* a, ibv_context* b = nullptr);

}  // namespace tbcoll::ibverbs::fake
