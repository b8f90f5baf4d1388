// Call announcements (CallAnnounce in segment.h): which collective a rank is in and how it runs it, read by a
// peer that has waited past its spin phase, so ranks in different calls or tuned differently fail with an error
// that says so instead of waiting for the deadline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tbcoll/transport.hpp"
#include "transports/shm/segment.h"

namespace tbcoll::shm {

enum CallAlgorithm : uint64_t { kPointToPoint = 0, kOneShot = 1, kTwoShot = 2, kCrossMemory = 3 };

/// Writes the announcement (seqlock: tag = 0, meta, algorithm, tag).
inline void announce_call(CallAnnounce& call, const transport::Tag& tag, uint64_t algorithm) {
  call.tag.store(0, std::memory_order_relaxed);
  call.meta.store(tag.meta, std::memory_order_release);
  call.algorithm.store(algorithm, std::memory_order_release);
  call.tag.store(tag.tag, std::memory_order_release);
}

/// "[shm] rank R: peer P is in another call with the same sequence number (signature ..., ours ...)"
std::string another_call_message(int rank, int peer, uint64_t theirs, uint64_t ours);

/// Throws when the peer announced the call with tag.tag under another signature (MismatchError, with `bytes` as
/// the expected size) or another algorithm than `algorithm` (InvalidUsage). Does nothing when the peer announced
/// another call, none, or is rewriting its announcement.
void check_announcement(const CallAnnounce& announced, int rank, int peer, const transport::Tag& tag,
                        uint64_t algorithm, size_t bytes);

/// The messages waiting in a queue, when it holds any (check_unreceived).
void check_queued(const Queue& queue, int rank, int peer, const transport::Tag& tag);

/// Throws InvalidUsage when the queue from `peer` holds a message of a collective call before tag.tag: this
/// rank finished that call without receiving it, so the ranks' calls did not match there (a broadcast whose
/// ranks named different roots sends without anyone receiving). Costs two loads when the queue is empty.
/// Only the queue's consumer may call it.
inline void check_unreceived(const Queue& queue, int rank, int peer, const transport::Tag& tag) {
  // tail is ours (we are the consumer); an empty queue is the common case of every fast-path call.
  if (queue.head.load(std::memory_order_acquire) == queue.tail.load(std::memory_order_relaxed)) return;
  check_queued(queue, rank, peer, tag);
}

/// InvalidUsage: peer runs this call with algorithm `theirs`, this rank with `ours`.
[[noreturn]] void throw_tuned_differently(int rank, int peer, uint64_t theirs, uint64_t ours);

}  // namespace tbcoll::shm
