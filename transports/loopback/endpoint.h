// Loopback transport: ranks that are threads of one process exchange messages through shared mailboxes.
// Used for tests and for in-process communicators. Sends copy eagerly (never block); receives match FIFO.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "tbcoll/transport.hpp"

namespace tbcoll::loopback {

/// One direction between two ranks.
struct Mailbox {
  struct Message {
    transport::Tag tag;
    std::vector<uint8_t> bytes;
  };
  /// A posted receive, for whichever test() reaches its ticket first: receives complete in posting order, and a
  /// test of a later one completes the earlier ones whose messages are here (as tcp and shm progress their
  /// queues), so a receive posted earlier and tested later (a deferred check) does not hold the others back.
  struct Posted {
    void* buf;
    size_t bytes;
    transport::Tag tag;
    bool* done;
  };
  std::mutex mutex;
  std::condition_variable arrived;
  std::deque<Message> messages;
  std::map<uint64_t, Posted> posted;  ///< by ticket, the receives not complete
  uint64_t next_recv_ticket = 0;  ///< receives complete in posting order
  uint64_t recv_tickets_issued = 0;
  bool closed = false;
};

/// Mailbox for messages from src to dst within communicator comm_id (created on first use).
std::shared_ptr<Mailbox> mailbox(uint64_t comm_id, int src, int dst);

class Endpoint final : public transport::Endpoint {
 public:
  Endpoint(int rank, int peer, uint64_t comm_id);
  ~Endpoint() override;
  std::unique_ptr<transport::Request> isend(const void* buf, size_t bytes, transport::Tag tag) override;
  std::unique_ptr<transport::Request> irecv(void* buf, size_t bytes, transport::Tag tag) override;
  std::optional<transport::Arrival> probe() override;
  int peer() const override { return peer_; }
  void abort();

 private:
  int rank_;
  int peer_;
  std::shared_ptr<Mailbox> outbox_;
  std::shared_ptr<Mailbox> inbox_;
};

}  // namespace tbcoll::loopback
