#include "transports/shm/announce.h"

#include <fmt/format.h>

#include "tbcoll/collective_fast_path.hpp"

namespace tbcoll::shm {
namespace {

const char* algorithm_name(uint64_t algorithm) {
  switch (algorithm) {
    case kPointToPoint: return "a point-to-point schedule (ring, direct, tree)";
    case kOneShot: return "the shm one-shot";
    case kTwoShot: return "the shm two-shot";
    case kCrossMemory: return "cross-memory attach";
  }
  return "an unknown algorithm";
}

}  // namespace

std::string another_call_message(int rank, int peer, uint64_t theirs, uint64_t ours) {
  return fmt::format("[shm] rank {}: peer {} is in another call with the same sequence number (signature {:#x}, "
                     "ours {:#x})", rank, peer, theirs, ours);
}

void check_announcement(const CallAnnounce& announced, int rank, int peer, const transport::Tag& tag,
                        uint64_t algorithm, size_t bytes) {
  const uint64_t first = announced.tag.load(std::memory_order_acquire);
  const uint64_t meta = announced.meta.load(std::memory_order_acquire);
  const uint64_t theirs = announced.algorithm.load(std::memory_order_acquire);
  if (first == 0 || first != tag.tag || announced.tag.load(std::memory_order_acquire) != first) return;
  if (!transport::same_call(meta, tag.meta)) {  // announced without the schedule point-to-point messages add
    throw MismatchError(another_call_message(rank, peer, meta, tag.meta), peer, tag.meta, meta, bytes, 0);
  }
  if (theirs != algorithm) throw_tuned_differently(rank, peer, theirs, algorithm);
}

void check_queued(const Queue& queue, int rank, int peer, const transport::Tag& tag) {
  const uint64_t tail = queue.tail.load(std::memory_order_relaxed);  // ours: we are the consumer
  const uint64_t head = queue.head.load(std::memory_order_acquire);
  for (uint64_t i = tail; i != head; ++i) {  // published frames stay put until we advance tail
    const FrameHeader& frame = queue.frames[i % kFrames].header;
    const bool collective = !transport::is_p2p_tag(frame.tag);
    if (frame.first != 1 || !collective) continue;
    if (frame.tag >= tag.tag) return;  // collective messages queue in call order: no earlier one behind it
    throw InvalidUsage(fmt::format(
        "[shm] rank {}: peer {} sent a message for an earlier collective call (call {}, {}) that this rank "
        "finished without receiving it: the ranks' calls did not match there (a broadcast or reduce whose "
        "ranks named different roots?)", rank, peer, frame.tag, transport::describe_signature(frame.meta)));
  }
}

void throw_tuned_differently(int rank, int peer, uint64_t theirs, uint64_t ours) {
  throw InvalidUsage(fmt::format("[shm] rank {}: peer {} runs this call with {}, this rank with {}: the ranks are "
                                 "tuned differently (TBCOLL_ALGO, TBCOLL_*_BYTES, TBCOLL_SHM_CMA and "
                                 "TBCOLL_LINK_DELAY_US and TBCOLL_LINK_EMULATION must be the same on every rank)",
                                 rank, peer, algorithm_name(theirs), algorithm_name(ours)));
}

}  // namespace tbcoll::shm
