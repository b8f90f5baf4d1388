// The shm transport's whole-collective fast path: a one-shot all-reduce through each rank's collective slot.
//
//   call k, slot b = k & 1:
//     copy send into my slot b; publish seq = k (release; wake sleeping readers)
//     for each peer: wait until its slot b holds call k (acquire); check its signature
//     recv = slot_0 op slot_1 op ... op slot_(n-1)     (rank order: bitwise identical everywhere)
//   Slot b is free again at call k+2 without any acknowledgement: a peer publishes its input for k+1 only
//   after finishing call k, and we wait for every peer's k+1 input before starting k+2.
//
// Cost: one copy in, (n-1) reads of the peers' inputs, n-1 reductions; latency of one cache-line hand-off
// per peer for inputs up to 32 bytes (they share the line with seq).
#pragma once

#include <vector>

#include "tbcoll/transport.h"
#include "transports/shm/segment.h"

namespace tbcoll::shm {

class FastPath final : public transport::CollectiveFastPath {
 public:
  /// areas[r] / headers[r]: rank r's collective area and segment header as mapped here (own included).
  FastPath(int rank, std::vector<CollectiveArea*> areas, std::vector<SegmentHeader*> headers);
  ~FastPath() override;

  size_t max_all_reduce_bytes() const override { return kSlotBytes; }
  void all_reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, transport::Tag tag,
                  Deadline deadline, std::chrono::microseconds spin) override;

 private:
  // Waits until counter >= target: spin, then futex sleep (sleepers announces it to the writer).
  void wait_for(const std::atomic<uint64_t>& counter, uint64_t target, std::atomic<uint32_t>* sleepers, int peer,
                Deadline deadline, std::chrono::microseconds spin, const char* what, const transport::Tag* tag);
  // A peer stuck in another call with our tag shows it by the first message it queued to us.
  void check_peer_call(int peer, const transport::Tag& tag);
  void check_peer(int peer);

  int rank_;
  int size_;
  std::vector<CollectiveArea*> areas_;
  std::vector<SegmentHeader*> headers_;
  std::vector<int> pidfds_;
  uint64_t calls_ = 0;
};

}  // namespace tbcoll::shm
