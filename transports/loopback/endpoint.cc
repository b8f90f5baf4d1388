#include "transports/loopback/endpoint.h"

#include <cstring>
#include <map>
#include <tuple>

#include <fmt/format.h>

namespace tbcoll::loopback {

std::shared_ptr<Mailbox> mailbox(uint64_t comm_id, int src, int dst) {
  // Two endpoints attach to a mailbox: the sender's and the receiver's. Until the second has, the registry keeps
  // it alive: a sender may send and be destroyed before its receiver attaches, and the message must wait there.
  struct Entry {
    std::weak_ptr<Mailbox> box;
    std::shared_ptr<Mailbox> until_both_attached;
  };
  static std::mutex registry_mutex;
  static std::map<std::tuple<uint64_t, int, int>, Entry> registry;
  std::lock_guard<std::mutex> lock(registry_mutex);
  // Drop entries whose endpoints are gone, so long-running processes don't accumulate them.
  for (auto it = registry.begin(); it != registry.end();) {
    it = it->second.box.expired() ? registry.erase(it) : std::next(it);
  }
  Entry& entry = registry[{comm_id, src, dst}];
  std::shared_ptr<Mailbox> box = entry.box.lock();
  if (!box) {  // first end
    box = std::make_shared<Mailbox>();
    entry.box = box;
    entry.until_both_attached = box;
  } else {  // second end
    entry.until_both_attached.reset();
  }
  return box;
}

namespace {

class DoneRequest final : public transport::Request {
 public:
  bool test() override { return true; }
  void block(std::chrono::microseconds) override {}
};

class RecvRequest final : public transport::Request {
 public:
  RecvRequest(std::shared_ptr<Mailbox> inbox, uint64_t ticket, void* buf, size_t bytes, transport::Tag tag, int rank,
              int peer)
      : inbox_(std::move(inbox)), ticket_(ticket), rank_(rank), peer_(peer) {
    std::lock_guard<std::mutex> lock(inbox_->mutex);
    inbox_->posted[ticket_] = {buf, bytes, tag, &done_};
  }

  ~RecvRequest() override {
    std::lock_guard<std::mutex> lock(inbox_->mutex);
    if (done_) return;
    // An abandoned receive would desynchronise the ticket order: close the channel instead.
    inbox_->posted.erase(ticket_);
    inbox_->closed = true;
    inbox_->arrived.notify_all();
  }

  bool test() override {
    std::unique_lock<std::mutex> lock(inbox_->mutex);
    if (done_) return true;
    return try_complete();
  }

  void block(std::chrono::microseconds max_wait) override {
    std::unique_lock<std::mutex> lock(inbox_->mutex);
    inbox_->arrived.wait_for(lock, max_wait, [&] { return done_ || inbox_->closed || ready(); });
  }

 private:
  // The messages up to this ticket's are here (the earlier receives' first).
  bool ready() const { return inbox_->messages.size() > ticket_ - inbox_->next_recv_ticket; }

  bool try_complete() {
    // Closed and no message left for this ticket (those queued are the earlier tickets'): it never comes.
    if (inbox_->closed && !ready()) {
      throw IoError(fmt::format("[loopback] rank {}: connection to peer {} closed (peer aborted or gone)", rank_,
                                peer_));
    }
    if (!ready()) return false;
    while (!done_) {  // the earlier receives first, in order
      auto posted = inbox_->posted.find(inbox_->next_recv_ticket);
      if (posted == inbox_->posted.end()) return false;  // an earlier receive not posted yet cannot be: defensive
      deliver(posted->second);
      inbox_->posted.erase(posted);
    }
    return true;
  }

  void deliver(const Mailbox::Posted& to) {
    Mailbox::Message& message = inbox_->messages.front();
    if (message.tag.tag != to.tag.tag || message.tag.meta != to.tag.meta || message.bytes.size() != to.bytes) {
      auto got_meta = message.tag.meta;
      auto got_bytes = message.bytes.size();
      inbox_->closed = true;
      throw MismatchError(fmt::format("[loopback] rank {}: message from peer {} does not match: expected tag {} "
                                      "meta {:#x} {} B, got tag {} meta {:#x} {} B",
                                      rank_, peer_, to.tag.tag, to.tag.meta, to.bytes, message.tag.tag, got_meta,
                                      got_bytes),
                          peer_, to.tag.meta, got_meta, to.bytes, got_bytes);
    }
    if (to.bytes > 0) std::memcpy(to.buf, message.bytes.data(), to.bytes);
    inbox_->messages.pop_front();
    inbox_->next_recv_ticket++;
    *to.done = true;
    inbox_->arrived.notify_all();
  }

  std::shared_ptr<Mailbox> inbox_;
  uint64_t ticket_;
  int rank_;
  int peer_;
  bool done_ = false;
};

}  // namespace

Endpoint::Endpoint(int rank, int peer, uint64_t comm_id)
    : rank_(rank), peer_(peer), outbox_(mailbox(comm_id, rank, peer)), inbox_(mailbox(comm_id, peer, rank)) {}

Endpoint::~Endpoint() { abort(); }

void Endpoint::abort() {
  for (auto* box : {outbox_.get(), inbox_.get()}) {
    std::lock_guard<std::mutex> lock(box->mutex);
    box->closed = true;
    box->arrived.notify_all();
  }
}

std::unique_ptr<transport::Request> Endpoint::isend(const void* buf, size_t bytes, transport::Tag tag) {
  std::lock_guard<std::mutex> lock(outbox_->mutex);
  if (outbox_->closed) {
    throw IoError(fmt::format("[loopback] rank {}: connection to peer {} closed (peer aborted or gone)", rank_, peer_));
  }
  const auto* begin = static_cast<const uint8_t*>(buf);
  outbox_->messages.push_back({tag, std::vector<uint8_t>(begin, begin + bytes)});
  outbox_->arrived.notify_all();
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<transport::Request> Endpoint::irecv(void* buf, size_t bytes, transport::Tag tag) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(inbox_->mutex);
    ticket = inbox_->recv_tickets_issued++;
  }
  return std::make_unique<RecvRequest>(inbox_, ticket, buf, bytes, tag, rank_, peer_);
}

std::optional<transport::Arrival> Endpoint::probe() {
  std::lock_guard<std::mutex> lock(inbox_->mutex);
  if (inbox_->recv_tickets_issued != inbox_->next_recv_ticket) return std::nullopt;  // receives posted
  if (inbox_->messages.empty()) {
    if (inbox_->closed) {
      throw IoError(fmt::format("[loopback] rank {}: connection to peer {} closed (peer aborted or gone)", rank_,
                                peer_));
    }
    return std::nullopt;
  }
  const Mailbox::Message& next = inbox_->messages.front();
  return transport::Arrival{next.tag, next.bytes.size()};
}

}  // namespace tbcoll::loopback
