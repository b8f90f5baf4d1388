// ibverbs endpoint: one communicator's messages with one peer, over the connection (connection.h) its port
// shares with the peer's. Sends and receives queue FIFO, as on every transport; a message that arrives before its
// receive is kept (copied out of the registered buffer, whose receive is posted again at once).
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "tbcoll/transport.h"
#include "transports/ibverbs/connection.h"
#include "transports/queued_request.h"

namespace tbcoll::ibverbs {

struct Operation : transport::QueuedOperation {
  bool matched = false;          ///< receives: a message flows into it
  std::vector<uint8_t> storage;  ///< an unexpected message's bytes
};

class Endpoint final : public transport::Endpoint {
 public:
  Endpoint(std::shared_ptr<Connection> connection, int rank, int peer, uint64_t comm_id);
  ~Endpoint() override;

  std::unique_ptr<transport::Request> isend(const void* buf, size_t bytes, transport::Tag tag) override;
  std::unique_ptr<transport::Request> irecv(void* buf, size_t bytes, transport::Tag tag) override;
  int peer() const override { return peer_; }
  uint64_t comm_id() const { return comm_id_; }

  /// Drives the connection; throws IoError / MismatchError once this endpoint failed.
  void progress();
  void block(std::chrono::microseconds max_wait);
  /// Fails pending and later operations here, and tells the peer's endpoint. Any thread.
  void abort();
  /// A request dropped before completion: the stream is out of sync from here on.
  void abandon(const std::shared_ptr<Operation>& op);

  // Called by the connection, under its lock.
  /// The oldest send with frames left, or null.
  Operation* next_send();
  /// Payload bytes of op that went out in a frame.
  void framed(Operation* op, size_t payload);
  void on_frame(const wire::Header& header, const uint8_t* payload);
  /// The connection failed, or the peer aborted this communicator: every operation fails with why.
  void fail(const std::string& why);

 private:
  void check_locked();
  Operation* match_locked(const wire::Header& header);

  std::shared_ptr<Connection> connection_;
  int rank_;
  int peer_;
  uint64_t comm_id_;
  std::deque<std::shared_ptr<Operation>> sends_;
  std::deque<std::shared_ptr<Operation>> recvs_;       // posted, in order; the front ones may be matched
  std::deque<std::shared_ptr<Operation>> unexpected_;  // arrived before their receive
  Operation* incoming_ = nullptr;                      // the message whose frames arrive now
  size_t discard_ = 0;                                 // frames of a refused message still to drop
  std::string broken_;
  std::optional<MismatchError> mismatch_;
  std::atomic<bool> aborted_{false};
};

}  // namespace tbcoll::ibverbs
