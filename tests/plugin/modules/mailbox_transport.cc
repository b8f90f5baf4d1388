// The "mailbox" transport: a transport plug-in built outside libtbcoll, as its own shared object, against the
// public headers only. It serves ranks that are threads of one process: each direction between two ranks of a
// communicator is a mailbox in a process-wide directory, an isend copies its bytes into the peer's mailbox at
// once (so it completes at once), and receives take the messages there in posting order (FIFO).
//
// The library finds it through tbcoll_transport_plugin() (tbcoll::transport::kPluginSymbol), which states the
// interface version it was built with.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tbcoll/error.hpp"
#include "tbcoll/transport.hpp"

namespace {

using tbcoll::transport::Arrival;
using tbcoll::transport::Capabilities;
using tbcoll::transport::ContextArgs;
using tbcoll::transport::PeerAddress;
using tbcoll::transport::PeerInfo;
using tbcoll::transport::Tag;

// One direction between two ranks of one communicator: the messages its sender copied in, oldest first.
struct Mailbox {
  struct Message {
    Tag tag;
    std::vector<uint8_t> bytes;
  };
  std::mutex mutex;
  std::condition_variable changed;  // a message arrived, the mailbox closed, or its reader's endpoint failed
  std::deque<Message> messages;
  bool closed = false;  // an end left or failed: nothing more comes in, what is queued may still be taken
};

// The mailbox from sender to receiver in communicator comm_id, from the process-wide directory (made by the
// first end that asks). A mailbox lives while an endpoint uses it; the directory also keeps it until its second
// end attached, so a message from a rank that sent and left before its peer connected still waits for the peer.
std::shared_ptr<Mailbox> attach(uint64_t comm_id, int sender, int receiver) {
  struct Entry {
    std::weak_ptr<Mailbox> box;
    std::shared_ptr<Mailbox> until_second_end;
  };
  static std::mutex mutex;
  static std::map<std::tuple<uint64_t, int, int>, Entry> directory;
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = directory.begin(); it != directory.end();) {  // forget mailboxes whose ends are all gone
    it = it->second.box.expired() ? directory.erase(it) : std::next(it);
  }
  Entry& entry = directory[{comm_id, sender, receiver}];
  std::shared_ptr<Mailbox> box = entry.box.lock();
  if (box) {
    entry.until_second_end.reset();
    return box;
  }
  box = std::make_shared<Mailbox>();
  entry.box = box;
  entry.until_second_end = box;
  return box;
}

// A receive posted on an endpoint and not yet matched. The request and the endpoint's queue share it.
struct PostedRecv {
  void* buf;
  size_t bytes;
  Tag tag;
  bool done = false;
};

// What an endpoint, its requests and its context (for abort) share: both mailboxes of the pair and the receive
// queue. The receive side (posted, taken, broken) is guarded by inbox->mutex. No code holds two mailbox locks at
// once, since the peer's link takes the same two in the other order.
struct Link {
  int rank;
  int peer;
  std::shared_ptr<Mailbox> inbox;   // peer -> rank
  std::shared_ptr<Mailbox> outbox;  // rank -> peer
  std::deque<std::shared_ptr<PostedRecv>> posted;  // oldest first
  uint64_t taken = 0;    // receives matched so far: the ticket of posted.front()
  uint64_t tickets = 0;  // receives posted so far
  std::string broken;    // why the endpoint failed ("" while it works); later operations fail with it

  std::string who() const {
    return "[mailbox] rank " + std::to_string(rank) + ": connection to peer " + std::to_string(peer);
  }

  // Closes the outbox: the peer takes what is queued, then its receives fail. Takes outbox->mutex only.
  void close_outbox() {
    std::lock_guard<std::mutex> lock(outbox->mutex);
    outbox->closed = true;
    outbox->changed.notify_all();
  }

  // Marks the endpoint failed (keeping the first reason), wakes its sleepers, and closes both directions so the
  // peer fails too instead of waiting for its deadline. Called with inbox->mutex held by `lock`; releases it.
  void fail(std::unique_lock<std::mutex>& lock, const std::string& why) {
    if (broken.empty()) broken = why;
    inbox->closed = true;
    inbox->changed.notify_all();
    lock.unlock();
    close_outbox();
  }

  // Context::abort(), from any thread: pending and later operations fail, and so do the peer's.
  void abort() {
    std::unique_lock<std::mutex> lock(inbox->mutex);
    fail(lock, who() + " was aborted");
  }

  // Throws the IoError of a failed endpoint. inbox->mutex held.
  void check() const {
    if (!broken.empty()) throw tbcoll::IoError(broken);
  }

  // Matches the posted receives through ticket `last` with the messages here, in order. A receive whose tag,
  // meta or size differs fails the endpoint with MismatchError, without copying. inbox->mutex held by `lock`.
  void take_through(uint64_t last, std::unique_lock<std::mutex>& lock) {
    while (!posted.empty() && taken <= last && !inbox->messages.empty()) {
      PostedRecv& to = *posted.front();
      Mailbox::Message& message = inbox->messages.front();
      if (message.tag.tag != to.tag.tag || message.tag.meta != to.tag.meta || message.bytes.size() != to.bytes) {
        throw_mismatch(to, message, lock);
      }
      if (to.bytes > 0) std::memcpy(to.buf, message.bytes.data(), to.bytes);
      to.done = true;
      posted.pop_front();
      inbox->messages.pop_front();
      ++taken;
    }
  }

  [[noreturn]] void throw_mismatch(const PostedRecv& to, const Mailbox::Message& got,
                                   std::unique_lock<std::mutex>& lock) {
    const Tag got_tag = got.tag;
    const size_t got_bytes = got.bytes.size();
    std::ostringstream what;
    what << "[mailbox] rank " << rank << ": message from peer " << peer << " does not match: expected tag "
         << to.tag.tag << " meta 0x" << std::hex << to.tag.meta << std::dec << " " << to.bytes << " B, got tag "
         << got_tag.tag << " meta 0x" << std::hex << got_tag.meta << std::dec << " " << got_bytes << " B";
    fail(lock, what.str());
    throw tbcoll::MismatchError(what.str(), peer, to.tag.meta, got_tag.meta, to.bytes, got_bytes);
  }

  // Fails the endpoint because its inbox closed with nothing left for a receive. inbox->mutex held by `lock`.
  [[noreturn]] void throw_closed(std::unique_lock<std::mutex>& lock) {
    const std::string why = who() + " closed (the peer aborted, failed or left)";
    fail(lock, why);
    throw tbcoll::IoError(why);
  }
};

// An isend's request: the bytes are in the peer's mailbox already.
class SentRequest final : public tbcoll::transport::Request {
 public:
  bool test() override { return true; }
  void block(std::chrono::microseconds) override {}
};

class RecvRequest final : public tbcoll::transport::Request {
 public:
  RecvRequest(std::shared_ptr<Link> link, std::shared_ptr<PostedRecv> slot, uint64_t ticket)
      : link_(std::move(link)), slot_(std::move(slot)), ticket_(ticket) {}

  // A receive dropped before it completed would hand its message to the next one: the endpoint fails instead.
  ~RecvRequest() override {
    std::unique_lock<std::mutex> lock(link_->inbox->mutex);
    if (slot_->done || !link_->broken.empty()) return;
    link_->fail(lock, link_->who() + " is out of sync (a receive was dropped before it completed)");
  }

  // Completes this receive and the earlier ones whose messages are here; never waits.
  bool test() override {
    std::unique_lock<std::mutex> lock(link_->inbox->mutex);
    if (slot_->done) return true;
    link_->check();
    link_->take_through(ticket_, lock);
    if (slot_->done) return true;
    if (link_->inbox->closed) link_->throw_closed(lock);  // this receive's message never comes
    return false;
  }

  // Sleeps until this receive's message is here, the endpoint fails or closes, or max_wait passed.
  void block(std::chrono::microseconds max_wait) override {
    std::unique_lock<std::mutex> lock(link_->inbox->mutex);
    Link& link = *link_;
    link.inbox->changed.wait_for(lock, max_wait, [&] {
      return slot_->done || !link.broken.empty() || link.inbox->closed ||
             link.inbox->messages.size() > ticket_ - link.taken;  // its message and those of earlier receives
    });
  }

 private:
  std::shared_ptr<Link> link_;
  std::shared_ptr<PostedRecv> slot_;
  uint64_t ticket_;
};

class Endpoint final : public tbcoll::transport::Endpoint {
 public:
  explicit Endpoint(std::shared_ptr<Link> link) : link_(std::move(link)) {}

  // Leaving closes both directions: the peer still takes what was sent, then sees the connection close.
  ~Endpoint() override {
    {
      std::lock_guard<std::mutex> lock(link_->inbox->mutex);
      link_->inbox->closed = true;
      link_->inbox->changed.notify_all();
    }
    link_->close_outbox();
  }

  std::unique_ptr<tbcoll::transport::Request> isend(const void* buf, size_t bytes, Tag tag) override {
    if (buf == nullptr && bytes > 0) throw tbcoll::InvalidArgument(link_->who() + ": isend of bytes from null");
    {
      std::lock_guard<std::mutex> lock(link_->inbox->mutex);
      link_->check();
    }
    const auto* begin = static_cast<const uint8_t*>(buf);
    std::vector<uint8_t> copy(begin, begin + bytes);  // outside the lock: the peer's receives go on meanwhile
    std::lock_guard<std::mutex> lock(link_->outbox->mutex);
    if (link_->outbox->closed) throw tbcoll::IoError(link_->who() + " closed (the peer aborted, failed or left)");
    link_->outbox->messages.push_back({tag, std::move(copy)});
    link_->outbox->changed.notify_all();
    return std::make_unique<SentRequest>();
  }

  std::unique_ptr<tbcoll::transport::Request> irecv(void* buf, size_t bytes, Tag tag) override {
    if (buf == nullptr && bytes > 0) throw tbcoll::InvalidArgument(link_->who() + ": irecv of bytes into null");
    auto slot = std::make_shared<PostedRecv>(PostedRecv{buf, bytes, tag});
    std::lock_guard<std::mutex> lock(link_->inbox->mutex);
    link_->posted.push_back(slot);
    return std::make_unique<RecvRequest>(link_, std::move(slot), link_->tickets++);
  }

  // Completes the posted receives whose messages are here; then, with none left posted, tells the next message.
  std::optional<Arrival> probe() override {
    std::unique_lock<std::mutex> lock(link_->inbox->mutex);
    link_->check();
    link_->take_through(UINT64_MAX, lock);
    if (!link_->posted.empty()) return std::nullopt;  // the next message is a posted receive's
    if (link_->inbox->messages.empty()) {
      if (link_->inbox->closed) link_->throw_closed(lock);
      return std::nullopt;
    }
    const Mailbox::Message& next = link_->inbox->messages.front();
    return Arrival{next.tag, next.bytes.size()};
  }

  int peer() const override { return link_->peer; }

 private:
  std::shared_ptr<Link> link_;
};

class Context final : public tbcoll::transport::Context {
 public:
  explicit Context(const ContextArgs& args) : rank_(args.rank), comm_id_(args.comm_id) {}

  // Every context of this process publishes the same address: the peers are threads of this process.
  std::string address() const override { return "mailbox:" + std::to_string(getpid()); }

  // Attaches to the pair's mailboxes without waiting for the peer: a message sent before the peer attached
  // waits in the mailbox for it, so the deadline is never reached.
  std::vector<std::unique_ptr<tbcoll::transport::Endpoint>> connect(const std::vector<PeerAddress>& peers,
                                                                    tbcoll::Deadline) override {
    std::vector<std::unique_ptr<tbcoll::transport::Endpoint>> endpoints;
    for (const PeerAddress& peer : peers) {
      if (peer.rank < 0) throw tbcoll::InvalidArgument("[mailbox] connect: negative peer rank");
      auto link = std::make_shared<Link>();
      link->rank = rank_;
      link->peer = peer.rank;
      link->outbox = attach(comm_id_, rank_, peer.rank);
      link->inbox = attach(comm_id_, peer.rank, rank_);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        links_.push_back(link);
      }
      endpoints.push_back(std::make_unique<Endpoint>(std::move(link)));
    }
    return endpoints;
  }

  // Any thread: fails every endpoint of this context, and the peers' receives from them.
  void abort() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& link : links_) link->abort();
  }

 private:
  int rank_;
  uint64_t comm_id_;
  std::mutex mutex_;  // abort() may come from another thread than connect()
  std::vector<std::shared_ptr<Link>> links_;
};

class Device final : public tbcoll::transport::Device {
 public:
  std::string name() const override { return "mailbox"; }

  Capabilities capabilities() const override {
    Capabilities caps;
    caps.latency_us = 0.5;           // a lock and a queue hand-off
    caps.bandwidth_gbps = 8;         // one memcpy into the mailbox, one out of it
    caps.message_overhead_us = 0.1;
    caps.same_process_only = true;
    caps.same_host_only = true;
    return caps;
  }

  bool can_connect(const PeerInfo& self, const PeerInfo& peer) const override {
    return self.host_id == peer.host_id && self.process_id == peer.process_id;
  }

  std::unique_ptr<tbcoll::transport::Context> create_context(const ContextArgs& args) override {
    return std::make_unique<Context>(args);
  }
};

std::shared_ptr<tbcoll::transport::Device> create_device() { return std::make_shared<Device>(); }

}  // namespace

extern "C" __attribute__((visibility("default"))) const tbcoll::transport::Plugin* tbcoll_transport_plugin() {
  static const tbcoll::transport::Plugin plugin{tbcoll::transport::kInterfaceVersion, "mailbox", &create_device};
  return &plugin;
}
