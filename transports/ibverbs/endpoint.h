// ibverbs endpoint: one communicator's messages with one peer, over the connections (connection.h) its ports
// share with the peer's: one per rail (cable). Sends and receives queue FIFO, as on every transport, and are
// numbered: the k-th send meets the peer's k-th receive. A message below the stripe size goes on rail 0; a larger
// one is cut into one part per rail (wire::part_of), each rail sending its part as bulk slots and small frames
// (wire::split_lanes), each lane in order; the receiver puts every piece where its header says, so rails and lanes
// may run at their own pace. A message that arrives before its receive
// is kept (copied out of the registered buffers, whose receives are posted again at once). A send from memory the
// caller registered (registry.h) goes on each rail whose device took it as zero-copy slots (wire.h) from there, its
// remainder as usual; it completes once the adapter has read every zero-copy slot (their sends completed).
//
// Locking: the endpoint's own mutex guards its queues. A connection calls in (fill_piece, on_frame, fail) with its
// own lock held; the endpoint never calls a connection while holding its mutex. So the order is always connection,
// then endpoint.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "common/env.h"
#include "tbcoll/transport.hpp"
#include "transports/ibverbs/connection.h"
#include "transports/ibverbs/registry.h"
#include "transports/queued_request.h"

namespace tbcoll::ibverbs {

/// What one rail carries of a send: its part of the message (wire::part_of), in zero-copy slots from registered
/// memory first (none for other memory), then bulk slots, then small frames (wire::split_lanes); each region's
/// cursor advances as its pieces go.
struct RailPlan {
  size_t head_at = 0, head_end = 0;            ///< small lane: the bytes before the zero-copy region's aligned start
  size_t zero_copy_at = 0, zero_copy_end = 0;  ///< the zero-copy region still to go (whole slots)
  uint32_t lkey = 0;                           ///< the registration's key on the rail's device
  size_t bulk_at = 0, bulk_end = 0;  ///< the bulk region still to go: [bulk_at, bulk_end)
  size_t small_at = 0, end = 0;      ///< the small region still to go: [small_at, end)
  bool empty_frame = false;          ///< an empty message's one frame, still to go (rail 0)
  bool left(int lane) const {
    return lane == wire::kBulk ? zero_copy_at < zero_copy_end || bulk_at < bulk_end
                               : head_at < head_end || small_at < end || empty_frame;
  }
  unsigned lanes() const { return (left(wire::kSmall) ? 1u : 0u) | (left(wire::kBulk) ? 2u : 0u); }
};

struct Operation;

/// Where an operation keeps its request (endpoint.cc's Request: its vtable, endpoint and operation pointers), and
/// the way back to the operation from it.
struct RequestSlot {
  Operation* owner = nullptr;
  alignas(std::max_align_t) unsigned char bytes[3 * sizeof(void*)];
};

struct Operation : transport::QueuedOperation {
  uint64_t number = 0;    ///< the message's number on this endpoint and direction
  bool matched = false;   ///< receives: the message's first frame was checked against it
  bool arrived = false;   ///< receives: a frame of it came (an empty message has one)
  RailPlan plan0;                     ///< sends: what rail 0 carries
  std::vector<RailPlan> other_plans;  ///< sends: rails 1.. (a rail without a part has an empty plan)
  RailPlan& plan(size_t rail) { return rail == 0 ? plan0 : other_plans[rail - 1]; }
  int lanes_left = 0;     ///< sends: (rail, lane) pairs with pieces still to go
  int zero_copy_in_flight = 0;          ///< sends: zero-copy slots posted whose sends did not complete yet
  std::shared_ptr<const Region> region;  ///< sends from registered memory: the registration they use
  std::vector<uint8_t> storage;  ///< an unexpected message's bytes
  /// Where its request lives while the caller holds it, so a message allocates nothing for its requests. While
  /// the request lives, `requested` holds the operation and `request_live` is set; the request's delete, once the
  /// request is gone, lets go of the one and clears the other (release), and the endpoint reuses an operation only
  /// once it reads it clear (acquire) and holds the only reference.
  RequestSlot request;
  std::shared_ptr<Operation> requested;
  std::atomic<bool> request_live{false};
};

/// How block() passes the time while nothing moves (TBCOLL_IB_SPIN_US, TBCOLL_IB_NAP_US).
struct Pace {
  /// block() polls, yielding the CPU between polls, while traffic passed within this; then it naps. max(): it
  /// polls always (never naps).
  std::chrono::microseconds spin_after_traffic{200};
  std::chrono::microseconds nap{50};
  /// The knobs, else their defaults: on Apple's librdma poll always, as JACCL and llama.cpp's Apple transport do
  /// (tensor-parallel ranks often wait longer than 200 us for each other, and every nap would add to the token);
  /// elsewhere 200 us after the last traffic (well beyond a round trip), then naps of 50 us.
  static Pace from(const env::Settings& settings, bool apple);
};

class Endpoint final : public transport::Endpoint {
 public:
  /// rails: the connections to the peer, one per cable (at least one); stripe_bytes: from this size a message is
  /// cut across the rails.
  /// registry: the context's registered memory (may be null: every send is copied).
  Endpoint(std::vector<std::shared_ptr<Connection>> rails, int rank, int peer, uint64_t comm_id, size_t stripe_bytes,
           std::shared_ptr<const Registry> registry = nullptr, Pace pace = {});
  ~Endpoint() override;

  std::unique_ptr<transport::Request> isend(const void* buf, size_t bytes, transport::Tag tag) override;
  std::unique_ptr<transport::Request> irecv(void* buf, size_t bytes, transport::Tag tag) override;
  /// An unexpected message's first frame (any rail, any offset: each carries the message's tag and size).
  std::optional<transport::Arrival> probe() override;
  int peer() const override { return peer_; }
  uint64_t comm_id() const { return comm_id_; }
  int rails() const { return static_cast<int>(rails_.size()); }
  const Connection& rail(int index) const { return *rails_[static_cast<size_t>(index)]; }

  /// Drives the connections; throws IoError / MismatchError once this endpoint failed. Returns whether anything
  /// moved on them.
  bool progress();
  /// Waits up to max_wait for something to move on the rails: polls them, yielding the CPU between polls, while
  /// traffic passed within the pace's spin_after_traffic (so a reply or the next slot is never slept through), and
  /// only then naps for the pace's nap. Never throws: test() reports failures.
  void block(std::chrono::microseconds max_wait);
  const Pace& pace() const { return pace_; }
  /// Fails pending and later operations here, and tells the peer's endpoint. Any thread.
  void abort();
  /// A request dropped before completion: the stream is out of sync from here on. A send's zero-copy slots
  /// already posted are waited for (up to kZeroCopyDrain), so its memory is not read after the request is gone.
  void abandon(const std::shared_ptr<Operation>& op);
  static constexpr auto kZeroCopyDrain = std::chrono::seconds(2);

  // Called by the connection of rail `rail`, under its lock.
  /// The next piece for `lane` of the oldest send with pieces left there on this rail: fills header's message
  /// fields (a data frame's: kData, offset, payload bytes) and copies its payload (at most `capacity` bytes: the
  /// lane's frame or slot payload) to `payload` (kCopied). A zero-copy slot instead (a noted bulk lane: a whole
  /// slot of the message, no header) fills *zero_copy and copies nothing (kZeroCopy). *more says whether a piece for this
  /// rail and lane is left after it. kNone if there is none.
  Piece fill_piece(int rail, int lane, wire::Header* header, uint8_t* payload, size_t capacity, bool* more,
                   ZeroCopySlot* zero_copy);
  /// A zero-copy slot of op was sent (its send completed): the adapter is done with the caller's memory there.
  void zero_copy_sent(Operation* op);
  void on_frame(int rail, const wire::Header& header, const uint8_t* payload);
  /// The connection failed, or the peer aborted this communicator: every operation fails with why.
  void fail(const std::string& why);

 private:
  void check_locked();
  std::pair<std::unique_ptr<transport::Request>, Operation*> enqueue_locked(
      std::deque<std::shared_ptr<Operation>>& queue, const void* buf, size_t bytes, transport::Tag tag);
  /// Drops the queue's (complete) front, keeping it to reuse.
  void retire_front_locked(std::deque<std::shared_ptr<Operation>>& queue);
  /// Marks a send whose pieces all went, and whose zero-copy slots were all sent, complete; retires done ones.
  void finish_send_locked(Operation& op);
  /// Plans rail's part [begin, end) of a send: zero-copy slots where region (may be null) is registered on the
  /// rail's device, then bulk slots and frames.
  void plan_rail(Operation& op, size_t rail, size_t begin, size_t end, const Region* region);
  Operation* receive_for_locked(const wire::Header& header);
  void mismatch_locked(const transport::Tag& expected, size_t expected_bytes, const transport::Tag& got,
                       size_t got_bytes);
  void broken_locked(const std::string& why);
  /// why as "[ibverbs] rank R: peer P: ..." (a connection's failure names only its device and the peer's port key).
  std::string naming_peer(const std::string& why) const;

  std::vector<std::shared_ptr<Connection>> rails_;
  int rank_;
  int peer_;
  uint64_t comm_id_;
  size_t stripe_bytes_;
  std::shared_ptr<const Registry> registry_;
  Pace pace_;
  std::mutex mutex_;
  std::deque<std::shared_ptr<Operation>> sends_;  // numbers send_base_, send_base_ + 1, ...
  uint64_t send_base_ = 0;
  uint64_t sends_posted_ = 0;
  std::vector<uint64_t> rail_cursor_;  // per rail and lane (2 rail + lane): no send before it has pieces left there
  std::deque<std::shared_ptr<Operation>> recvs_;  // posted, numbers recv_base_, ...; done ones leave the front
  uint64_t recv_base_ = 0;
  uint64_t recvs_posted_ = 0;
  std::map<uint64_t, std::shared_ptr<Operation>> unexpected_;  // arrived (in part) before their receive
  std::string broken_;
  std::optional<MismatchError> mismatch_;
  std::atomic<bool> aborted_{false};
  static constexpr size_t kSpares = 16;
  std::vector<std::shared_ptr<Operation>> spare_;  // retired operations, reused once no request holds them
  std::atomic<bool> troubled_{false};              // broken_ or mismatch_ set: progress() must look
  uint64_t seen_traffic_ = 0;             // block(): the rails' traffic() when it last changed,
  Clock::time_point seen_traffic_at_{};  // and when that was (waits are one thread's at a time per endpoint)
};

}  // namespace tbcoll::ibverbs
