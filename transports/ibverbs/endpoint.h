// ibverbs endpoint: one communicator's messages with one peer, over the connections (connection.h) its ports
// share with the peer's: one per rail (cable). Sends and receives queue FIFO, as on every transport, and are
// numbered: the k-th send meets the peer's k-th receive. A message below the stripe size goes on rail 0; a larger
// one is cut into one part per rail (wire::part_of), each rail framing its part in order; the receiver puts every
// frame where its header says, so the rails may run at their own pace. A message that arrives before its receive
// is kept (copied out of the registered buffers, whose receives are posted again at once).
//
// Locking: the endpoint's own mutex guards its queues. A connection calls in (fill_frame, on_frame, fail) with its
// own lock held; the endpoint never calls a connection while holding its mutex. So the order is always connection,
// then endpoint.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "tbcoll/transport.hpp"
#include "transports/ibverbs/connection.h"
#include "transports/queued_request.h"

namespace tbcoll::ibverbs {

struct Operation : transport::QueuedOperation {
  uint64_t number = 0;           ///< the message's number on this endpoint and direction
  bool matched = false;          ///< receives: the message's first frame was checked against it
  bool arrived = false;          ///< receives: a frame of it came (an empty message has one)
  wire::Part part0;               ///< sends: what rail 0 carries; begin advances as frames go
  std::vector<wire::Part> other_parts;  ///< sends: rails 1.. of a striped message (none for a small one)
  int parts_left = 0;            ///< sends: rails with frames still to go

  /// What rail `rail` carries of this send (null: nothing).
  wire::Part* part(size_t rail) {
    if (rail == 0) return &part0;
    return rail <= other_parts.size() ? &other_parts[rail - 1] : nullptr;
  }
  std::vector<uint8_t> storage;  ///< an unexpected message's bytes
};

class Endpoint final : public transport::Endpoint {
 public:
  /// rails: the connections to the peer, one per cable (at least one); stripe_bytes: from this size a message is
  /// cut across the rails.
  Endpoint(std::vector<std::shared_ptr<Connection>> rails, int rank, int peer, uint64_t comm_id, size_t stripe_bytes);
  ~Endpoint() override;

  std::unique_ptr<transport::Request> isend(const void* buf, size_t bytes, transport::Tag tag) override;
  std::unique_ptr<transport::Request> irecv(void* buf, size_t bytes, transport::Tag tag) override;
  int peer() const override { return peer_; }
  uint64_t comm_id() const { return comm_id_; }
  int rails() const { return static_cast<int>(rails_.size()); }
  const Connection& rail(int index) const { return *rails_[static_cast<size_t>(index)]; }

  /// Drives the connections; throws IoError / MismatchError once this endpoint failed.
  void progress();
  void block(std::chrono::microseconds max_wait);
  /// Fails pending and later operations here, and tells the peer's endpoint. Any thread.
  void abort();
  /// A request dropped before completion: the stream is out of sync from here on.
  void abandon(const std::shared_ptr<Operation>& op);

  // Called by the connection of rail `rail`, under its lock.
  /// The next frame of the oldest send with frames left on this rail: fills header's message fields and copies its
  /// payload to `payload` (room for wire::kPayloadBytes); *more says whether a frame for this rail is left after
  /// it. False if there is none.
  bool fill_frame(int rail, wire::Header* header, uint8_t* payload, bool* more);
  void on_frame(int rail, const wire::Header& header, const uint8_t* payload);
  /// The connection failed, or the peer aborted this communicator: every operation fails with why.
  void fail(const std::string& why);

 private:
  void check_locked();
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
  std::mutex mutex_;
  std::deque<std::shared_ptr<Operation>> sends_;  // numbers send_base_, send_base_ + 1, ...
  uint64_t send_base_ = 0;
  uint64_t sends_posted_ = 0;
  std::vector<uint64_t> rail_cursor_;             // per rail: no send before this number has frames left there
  std::deque<std::shared_ptr<Operation>> recvs_;  // posted, numbers recv_base_, ...; done ones leave the front
  uint64_t recv_base_ = 0;
  uint64_t recvs_posted_ = 0;
  std::map<uint64_t, std::shared_ptr<Operation>> unexpected_;  // arrived (in part) before their receive
  std::string broken_;
  std::optional<MismatchError> mismatch_;
  std::atomic<bool> aborted_{false};
};

}  // namespace tbcoll::ibverbs
