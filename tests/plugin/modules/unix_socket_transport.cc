// The "unixsock" transport: a transport plug-in built outside libtbcoll, against the public headers only, for ranks
// on one machine (separate processes, or threads of one) over Unix-domain stream sockets.
//
//   Context   listens on a socket in a private directory (mkdtemp: mode 0700, so only this user can connect) under
//             $TMPDIR or /tmp; address() is the socket's path. connect(): the lower rank of each pair connects to
//             the higher rank's listener and sends a Hello (magic, interface version, communicator, both ranks, job
//             token); the listener answers with a Welcome (accepted, or why not). A listener's backlog takes a
//             connection before its owner accepts it, so connecting never waits for the peer; the Welcomes and the
//             accepted connections are then served together in one poll() loop, so no two ranks wait on each other.
//   Endpoint  one non-blocking socket per peer. Each message is a Header (magic, tag, meta, byte count) and its
//             payload. Sends and receives queue FIFO and move as many bytes as the socket takes whenever the caller
//             posts, tests or probes; block() sleeps in poll() for what the queued work needs.
//
// The job secret (ContextArgs::secret) is not proven on its connections: the private directory is what keeps other
// users out, and only this machine's processes of this user can reach a listener.
//
// The library finds it through tbcoll_transport_plugin() (tbcoll::transport::kPluginSymbol).
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tbcoll/error.hpp"
#include "tbcoll/transport.hpp"

namespace {

using tbcoll::Clock;
using tbcoll::transport::Arrival;
using tbcoll::transport::ContextArgs;
using tbcoll::transport::PeerAddress;
using tbcoll::transport::Tag;

// ---- wire formats (both ends run on this machine: native byte order) --------------------------------------------

constexpr uint32_t kHelloMagic = 0x48535854;    // the handshake's Hello and Welcome
constexpr uint32_t kMessageMagic = 0x4d535854;  // every message's Header
constexpr size_t kMaxTokenBytes = 1024;

struct Hello {  // connector -> listener, followed by token_bytes bytes of the job token
  uint32_t magic;
  int32_t version;  // kInterfaceVersion
  uint64_t comm_id;
  int32_t from_rank, to_rank;
  uint32_t token_bytes, reserved;
};

enum Status : uint32_t { kAccepted = 0, kBadVersion, kBadToken, kOtherCommunicator, kUnexpectedRank };

struct Welcome {  // listener -> connector: the verdict
  uint32_t magic, status;
};

struct Header {  // before every message's payload
  uint32_t magic, reserved;
  uint64_t tag, meta, bytes;
};

const char* status_text(uint32_t status) {
  static const char* const texts[] = {"accepted", "another interface version", "wrong job token",
                                      "another communicator", "a rank it does not expect (or has already)"};
  return status <= kUnexpectedRank ? texts[status] : "unknown status";
}

// ---- socket helpers ---------------------------------------------------------------------------------------------

#ifdef MSG_NOSIGNAL
constexpr int kSendFlags = MSG_NOSIGNAL;  // a write to a closed peer fails with EPIPE instead of raising SIGPIPE
#else
constexpr int kSendFlags = 0;  // macOS: SO_NOSIGPIPE instead, set by new_socket()
#endif

// Makes fd non-blocking and close-on-exec (ranks may start other programs), without SIGPIPE. False on failure.
bool prepare_socket(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) return false;
#if !defined(MSG_NOSIGNAL) && defined(SO_NOSIGPIPE)
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof(one));
#endif
  return true;
}

int new_socket(const std::string& who) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd >= 0 && prepare_socket(fd)) return fd;
  const std::string why = strerror(errno);
  if (fd >= 0) close(fd);
  throw tbcoll::IoError(who + ": cannot create a Unix socket: " + why);
}

bool would_block(int error) { return error == EAGAIN || error == EWOULDBLOCK || error == EINTR; }

sockaddr_un unix_address(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    throw tbcoll::InvalidArgument("[unixsock] socket path '" + path + "' is empty or too long for sockaddr_un");
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

// Sleeps until fd is ready for `events` or fails, or max_wait passed. poll() counts whole milliseconds: rounding
// down keeps the sleep within max_wait (the library waits in slices of 1 ms; shorter waits only check). With no
// events it just sleeps: nothing on the socket could end the wait.
void wait_for(int fd, short events, std::chrono::microseconds max_wait) {
  if (max_wait.count() <= 0) return;
  if (events == 0) return std::this_thread::sleep_for(max_wait);
  pollfd pfd{fd, events, 0};
  poll(&pfd, 1, static_cast<int>(std::min<long long>(max_wait.count() / 1000, INT_MAX)));
}

// ---- endpoint -----------------------------------------------------------------------------------------------------

// One queued send or receive, shared by its request and the endpoint's queue.
struct Op {
  uint8_t* buf = nullptr;  // null once its request was dropped: the memory is no longer the caller's
  size_t bytes = 0;
  Tag tag;
  Header header{};           // sends: what goes before the payload
  size_t done = 0;           // sends: bytes written, header included; receives: payload bytes received
  bool header_done = false;  // receives: the message's header was read and matched
  bool later = false;        // isend_later: may wait for the next send, a flush, or more of its kind
  bool complete = false;
};

// One connection to a peer and its queues, shared by the Endpoint, its requests (which may outlive it) and the
// context (for abort). One thread drives it at a time; abort() may come from any thread.
class Conn {
 public:
  Conn(int fd, int rank, int peer) : fd_(fd), rank_(rank), peer_(peer), staging_(kStagingBytes) {}
  ~Conn() { close_socket(); }

  int peer() const { return peer_; }

  std::shared_ptr<Op> post(const void* buf, size_t bytes, Tag tag, bool send, bool later = false) {
    if (buf == nullptr && bytes > 0) throw tbcoll::InvalidArgument(who() + ": a transfer of bytes at null");
    auto op = std::make_shared<Op>();
    op->buf = static_cast<uint8_t*>(const_cast<void*>(buf));
    op->bytes = bytes;
    op->tag = tag;
    if (!send) {
      recvs_.push_back(op);
      return op;
    }
    op->header = Header{kMessageMagic, 0, tag.tag, tag.meta, bytes};
    op->later = later;
    sends_.push_back(op);
    later_count_ += later ? 1 : 0;
    // A send starts at once (with the isend_later messages before it): a small one leaves in this call. isend_later
    // messages leave once more than kLaterAtMost wait. Errors wait for the requests' test().
    if (later ? later_count_ > kLaterAtMost : sends_.size() == later_count_ + 1) send_quietly();
    return op;
  }

  // Sends what isend_later left waiting, as far as the socket takes it now; the rest leaves at the next progress.
  void flush() {
    if (sends_.empty()) return;
    flush_requested_ = true;
    send_quietly();
  }

  // Moves bytes both ways without blocking. Throws IoError (the endpoint failed) or MismatchError.
  void progress() {
    if (!broken_.empty()) throw tbcoll::IoError(broken_);
    if (aborted_) fail(who() + " was aborted");
    send_queued();
    receive_queued();
  }

  // The next message's tag and size, without taking it, once its header is here and no receive is posted.
  std::optional<Arrival> probe() {
    progress();
    if (!recvs_.empty() || !buffer_header()) return std::nullopt;
    const Header header = buffered_header();
    return Arrival{Tag{header.tag, header.meta}, static_cast<size_t>(header.bytes)};
  }

  // Sleeps at most max_wait until the socket can move what the queues need: readable for receives, writable for
  // sends that want to write (not for isend_later messages that wait: the socket has room, so a wait for room would
  // end at once and spin). Returns at once when a failure waits to be reported or a message's header is buffered.
  void block(std::chrono::microseconds max_wait) {
    if (!broken_.empty() || aborted_ || fd_ < 0) return;
    if (!recvs_.empty() && end_ - begin_ >= sizeof(Header)) return;
    short events = 0;
    if (!recvs_.empty()) events |= POLLIN;
    if (!sends_.empty() && !sends_wait()) events |= POLLOUT;
    wait_for(fd_, events, max_wait);
  }

  // A request dropped before it completed: this side and the peer's are out of step from here on.
  void abandon(Op& op) {
    if (broken_.empty()) broken_ = who() + " is out of sync (a request was dropped before it completed)";
    op.buf = nullptr;
  }

  // The endpoint goes away: what isend_later left waiting leaves first (a peer may wait for it), then the socket
  // closes, which the peer reads as the end of the stream.
  void leave() {
    if (later_count_ > 0) flush();
    if (broken_.empty()) broken_ = who() + " was closed (its endpoint was destroyed)";
    close_socket();
  }

  // Any thread: shuts the socket down both ways. Our requests fail at their next test(); the peer reads the end of
  // the stream, so its pending receives fail too.
  void abort() {
    aborted_ = true;
    std::lock_guard<std::mutex> lock(fd_mutex_);
    if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
  }

 private:
  static constexpr size_t kStagingBytes = 64 * 1024;
  static constexpr size_t kDirectReadBytes = 16 * 1024;  // larger payload rests are read straight into the buffer
  static constexpr size_t kSendsPerWrite = 16;           // messages one sendmsg() takes at most
  static constexpr size_t kLaterAtMost = 3;              // isend_later messages that may wait; one more: all leave

  std::string who() const {
    return "[unixsock] rank " + std::to_string(rank_) + ": connection to peer " + std::to_string(peer_);
  }

  [[noreturn]] void fail(const std::string& why) {
    if (broken_.empty()) broken_ = why;
    throw tbcoll::IoError(why);
  }

  // The end of the stream, or a reset: the peer closed its socket (it aborted, failed, left or died).
  [[noreturn]] void fail_closed() {
    fail("[unixsock] rank " + std::to_string(rank_) + ": peer " + std::to_string(peer_) +
         " closed the connection (it aborted, failed or left)");
  }

  void close_socket() {
    std::lock_guard<std::mutex> lock(fd_mutex_);  // abort() may be using fd_ in another thread
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  // Sends from a posting call: failures are kept in broken_ for the requests' test() to report.
  void send_quietly() {
    if (!broken_.empty() || aborted_) return;
    try {
      send_queued();
    } catch (const tbcoll::IoError&) {
    }
  }

  // Only isend_later messages are queued, none started, few enough, and no flush asked for: they wait.
  bool sends_wait() const {
    return !sends_.empty() && later_count_ == sends_.size() && later_count_ <= kLaterAtMost && !flush_requested_ &&
           sends_.front()->done == 0;
  }

  // Writes the queued sends, up to kSendsPerWrite messages per sendmsg() (several small messages, one system call),
  // each from where the last write stopped, until the queue is empty or the socket full.
  void send_queued() {
    while (!sends_.empty() && !sends_wait()) {
      iovec iov[2 * kSendsPerWrite];
      int count = 0;
      for (size_t i = 0; i < sends_.size() && i < kSendsPerWrite; ++i) {
        Op& op = *sends_[i];
        if (op.done < sizeof(Header)) {
          iov[count++] = {reinterpret_cast<uint8_t*>(&op.header) + op.done, sizeof(Header) - op.done};
        }
        const size_t payload_done = op.done > sizeof(Header) ? op.done - sizeof(Header) : 0;
        if (payload_done < op.bytes) iov[count++] = {op.buf + payload_done, op.bytes - payload_done};
      }
      msghdr message{};
      message.msg_iov = iov;
      message.msg_iovlen = static_cast<decltype(message.msg_iovlen)>(count);
      const ssize_t sent = sendmsg(fd_, &message, kSendFlags);
      if (sent < 0 && would_block(errno)) return;
      if (sent < 0 && (errno == EPIPE || errno == ECONNRESET)) fail_closed();
      if (sent < 0) fail(who() + ": send failed: " + strerror(errno));
      if (!account_sent(static_cast<size_t>(sent))) return;  // the socket took less than offered: it is full
    }
    if (sends_.empty()) flush_requested_ = false;
  }

  // Credits `sent` bytes to the sends in queue order, completing those written whole. False if one is left partial.
  bool account_sent(size_t sent) {
    while (!sends_.empty()) {
      Op& op = *sends_.front();
      const size_t take = std::min(sent, sizeof(Header) + op.bytes - op.done);
      op.done += take;
      sent -= take;
      if (op.done < sizeof(Header) + op.bytes) return false;
      op.complete = true;
      later_count_ -= op.later ? 1 : 0;
      sends_.pop_front();
      if (sent == 0) break;
    }
    return true;
  }

  // Completes the posted receives, in order, with what arrives. Each message's header is matched before any of its
  // payload is copied; payloads come through the staging buffer, or straight into the caller's buffer when large.
  void receive_queued() {
    while (!recvs_.empty()) {
      Op& op = *recvs_.front();
      if (!op.header_done) {
        if (!buffer_header()) return;
        match_header(op);
      }
      while (op.done < op.bytes) {
        const size_t buffered = end_ - begin_;
        if (buffered > 0) {
          const size_t take = std::min(buffered, op.bytes - op.done);
          std::memcpy(op.buf + op.done, staging_.data() + begin_, take);
          begin_ += take;
          op.done += take;
        } else if (op.bytes - op.done >= kDirectReadBytes) {
          const size_t got = read_some(op.buf + op.done, op.bytes - op.done);
          if (got == 0) return;
          op.done += got;
        } else if (!fill()) {
          return;
        }
      }
      op.complete = true;
      recvs_.pop_front();
    }
  }

  Header buffered_header() {
    Header header;
    std::memcpy(&header, staging_.data() + begin_, sizeof(header));
    if (header.magic != kMessageMagic) fail(who() + ": garbage from the peer (bad message magic)");
    return header;
  }

  // Takes the buffered header for receive op; a mismatch breaks the endpoint, and nothing is copied.
  void match_header(Op& op) {
    const Header got = buffered_header();
    if (got.tag != op.tag.tag || got.meta != op.tag.meta || got.bytes != op.bytes) {
      using ull = unsigned long long;
      char what[256];
      snprintf(what, sizeof(what), "[unixsock] rank %d: message from peer %d does not match: expected tag %llu meta "
               "0x%llx %zu B, got tag %llu meta 0x%llx %llu B", rank_, peer_, ull{op.tag.tag}, ull{op.tag.meta},
               op.bytes, ull{got.tag}, ull{got.meta}, ull{got.bytes});
      if (broken_.empty()) broken_ = what;
      throw tbcoll::MismatchError(what, peer_, op.tag.meta, got.meta, op.bytes, got.bytes);
    }
    begin_ += sizeof(Header);
    op.header_done = true;
  }

  // Reads until a whole header is in the staging buffer; false if the socket has no more now.
  bool buffer_header() {
    while (end_ - begin_ < sizeof(Header)) {
      if (!fill()) return false;
    }
    return true;
  }

  // Reads what the socket has into the staging buffer (moving a partial header to its front first); false if
  // nothing came.
  bool fill() {
    if (begin_ == end_) begin_ = end_ = 0;
    if (begin_ > 0 && (end_ == staging_.size() || end_ - begin_ < sizeof(Header))) {
      std::memmove(staging_.data(), staging_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (end_ == staging_.size()) return false;
    const size_t got = read_some(staging_.data() + end_, staging_.size() - end_);
    end_ += got;
    return got > 0;
  }

  // One non-blocking recv(): the bytes it got, 0 if none are there yet. The end of the stream fails the endpoint.
  size_t read_some(uint8_t* to, size_t bytes) {
    const ssize_t got = recv(fd_, to, bytes, 0);
    if (got > 0) return static_cast<size_t>(got);
    if (got == 0 || errno == ECONNRESET) fail_closed();
    if (would_block(errno)) return 0;
    fail(who() + ": receive failed: " + strerror(errno));
  }

  int fd_;
  std::mutex fd_mutex_;  // guards closing fd_ against abort() from another thread
  std::atomic<bool> aborted_{false};
  int rank_;
  int peer_;
  std::deque<std::shared_ptr<Op>> sends_;  // oldest first; the front may be partly written
  std::deque<std::shared_ptr<Op>> recvs_;  // oldest first
  size_t later_count_ = 0;                 // isend_later messages in sends_
  bool flush_requested_ = false;           // flush(): the waiting isend_later messages leave
  std::vector<uint8_t> staging_;           // bytes read ahead: [begin_, end_)
  size_t begin_ = 0;
  size_t end_ = 0;
  std::string broken_;  // why the endpoint failed ("" while it works); later operations fail with it
};

class Request final : public tbcoll::transport::Request {
 public:
  Request(std::shared_ptr<Conn> conn, std::shared_ptr<Op> op) : conn_(std::move(conn)), op_(std::move(op)) {}
  ~Request() override {
    if (!op_->complete) conn_->abandon(*op_);
  }
  bool test() override {
    if (op_->complete) return true;
    conn_->progress();
    return op_->complete;
  }
  void block(std::chrono::microseconds max_wait) override {
    if (!op_->complete) conn_->block(max_wait);
  }

 private:
  std::shared_ptr<Conn> conn_;
  std::shared_ptr<Op> op_;
};

class Endpoint final : public tbcoll::transport::Endpoint {
 public:
  explicit Endpoint(std::shared_ptr<Conn> conn) : conn_(std::move(conn)) {}
  ~Endpoint() override { conn_->leave(); }

  std::unique_ptr<tbcoll::transport::Request> isend(const void* buf, size_t bytes, Tag tag) override {
    return std::make_unique<Request>(conn_, conn_->post(buf, bytes, tag, true));
  }
  std::unique_ptr<tbcoll::transport::Request> irecv(void* buf, size_t bytes, Tag tag) override {
    return std::make_unique<Request>(conn_, conn_->post(buf, bytes, tag, false));
  }
  std::unique_ptr<tbcoll::transport::Request> isend_later(Tag tag) override {
    return std::make_unique<Request>(conn_, conn_->post(nullptr, 0, tag, true, true));
  }
  void flush() override { conn_->flush(); }
  std::optional<Arrival> probe() override { return conn_->probe(); }
  int peer() const override { return conn_->peer(); }

 private:
  std::shared_ptr<Conn> conn_;
};

// ---- context: listener and connection set-up ----------------------------------------------------------------------

constexpr const char* kSocketName = "/sock";
constexpr auto kSlice = std::chrono::milliseconds(10);  // set-up looks at cancel, abort and the deadline this often

// A private directory for the listener (mkdtemp: mode 0700, a random suffix): under $TMPDIR where the socket's path
// fits in sockaddr_un (macOS's $TMPDIR is long), else under /tmp.
std::string make_private_dir(const ContextArgs& args) {
  char name[96];
  snprintf(name, sizeof(name), "tbcoll-unixsock-%ld-%llx-%d-XXXXXX", static_cast<long>(getpid()),
           static_cast<unsigned long long>(args.comm_id), args.rank);
  const char* tmpdir = getenv("TMPDIR");
  std::string base = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  if (base.size() + 1 + strlen(name) + strlen(kSocketName) >= sizeof(sockaddr_un{}.sun_path)) base = "/tmp";
  std::string pattern = base + "/" + name;
  if (mkdtemp(&pattern[0]) == nullptr) {
    throw tbcoll::IoError("[unixsock] rank " + std::to_string(args.rank) + ": cannot create a directory like " +
                          pattern + ": " + strerror(errno));
  }
  return pattern;
}

// A connection in set-up: ours to a higher rank, waiting for its Welcome, or one accepted, waiting for its Hello.
struct Pending {
  int fd = -1;
  int rank = -1;            // the peer's (ours: known; accepted: once its Hello said)
  std::vector<uint8_t> in;  // what arrived so far
};

// Reads into p.in until it holds `want` bytes (never more: messages may follow): 1 once it does, 0 if more must
// come, -1 if the connection ended.
int read_up_to(Pending& p, size_t want) {
  while (p.in.size() < want) {
    uint8_t buf[256];
    const ssize_t got = recv(p.fd, buf, std::min(sizeof(buf), want - p.in.size()), 0);
    if (got < 0 && would_block(errno)) return 0;
    if (got <= 0) return -1;
    p.in.insert(p.in.end(), buf, buf + got);
  }
  return 1;
}

class Context final : public tbcoll::transport::Context {
 public:
  explicit Context(const ContextArgs& args) : args_(args), who_("[unixsock] rank " + std::to_string(args.rank)) {
    if (args_.token.size() > kMaxTokenBytes) throw tbcoll::InvalidArgument(who_ + ": job token longer than 1024 B");
    dir_ = make_private_dir(args_);
    path_ = dir_ + kSocketName;
    try {
      listen_fd_ = new_socket(who_);
      const sockaddr_un address = unix_address(path_);
      if (bind(listen_fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 ||
          listen(listen_fd_, SOMAXCONN) != 0) {
        throw tbcoll::IoError(who_ + ": cannot listen at " + path_ + ": " + strerror(errno));
      }
    } catch (...) {
      stop_listening();
      throw;
    }
  }
  ~Context() override { stop_listening(); }

  std::string address() const override { return path_; }

  std::vector<std::unique_ptr<tbcoll::transport::Endpoint>> connect(const std::vector<PeerAddress>& peers,
                                                                    tbcoll::Deadline deadline) override {
    std::set<int> expected, seen;           // expected: the lower ranks, which connect to us
    std::map<int, int> fds;                 // peer rank -> socket through its handshake
    std::vector<Pending> dials, callers;    // ours waiting for a Welcome; accepted ones waiting for a Hello
    for (const PeerAddress& peer : peers) {
      if (peer.rank < 0 || peer.rank == args_.rank || !seen.insert(peer.rank).second) {
        throw tbcoll::InvalidArgument(who_ + ": connect: bad or repeated peer rank " + std::to_string(peer.rank));
      }
      if (peer.rank < args_.rank) expected.insert(peer.rank);
    }
    try {
      for (const PeerAddress& peer : peers) {
        if (peer.rank > args_.rank) dials.push_back(dial(peer, peers, fds, deadline));
      }
      while (fds.size() < peers.size()) {
        check_going_on(peers, fds, deadline);
        wait_for_handshakes(dials, callers, deadline);
        take_welcomes(dials, fds);
        take_hellos(callers, expected, fds);
        accept_callers(callers);
      }
    } catch (...) {
      for (auto* pending : {&dials, &callers}) {
        for (Pending& p : *pending) close(p.fd);
      }
      for (auto& [rank, fd] : fds) close(fd);
      throw;
    }
    for (Pending& c : callers) close(c.fd);
    stop_listening();  // everyone is here: later connection attempts are refused
    return make_endpoints(peers, fds);
  }

  void abort() override {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
    for (const auto& weak : conns_) {
      if (auto conn = weak.lock()) conn->abort();
    }
  }

 private:
  // Throws when set-up must stop: cancelled (InvalidUsage), aborted (IoError), or past the deadline (TimeoutError
  // naming the peers not connected yet).
  void check_going_on(const std::vector<PeerAddress>& peers, const std::map<int, int>& fds, tbcoll::Deadline deadline) {
    if (args_.cancelled != nullptr && args_.cancelled->load()) {
      throw tbcoll::InvalidUsage(who_ + ": connection set-up cancelled (the parent communicator was aborted)");
    }
    if (aborted_) throw tbcoll::IoError(who_ + ": connection set-up aborted");
    if (Clock::now() < deadline) return;
    std::string missing;
    for (const PeerAddress& peer : peers) {
      if (fds.count(peer.rank) == 0) missing += (missing.empty() ? "" : ", ") + std::to_string(peer.rank);
    }
    const char* peers_word = missing.find(',') == std::string::npos ? ": peer " : ": peers ";
    throw tbcoll::TimeoutError(who_ + peers_word + missing + " did not connect before the deadline");
  }

  // Connects to a higher rank's listener and sends our Hello. The listener's backlog holds the connection until
  // the peer accepts it, so this does not wait for the peer; an attempt refused (no listener yet, backlog full) is
  // repeated every kSlice until set-up must stop.
  Pending dial(const PeerAddress& peer, const std::vector<PeerAddress>& peers, const std::map<int, int>& fds,
               tbcoll::Deadline deadline) {
    const sockaddr_un address = unix_address(peer.address);
    const std::string to = who_ + ": connecting to peer " + std::to_string(peer.rank) + " at " + peer.address;
    Pending d;
    d.rank = peer.rank;
    for (;;) {
      check_going_on(peers, fds, deadline);
      d.fd = new_socket(to);
      if (::connect(d.fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) break;
      const int error = errno;
      pollfd pfd{d.fd, POLLOUT, 0};
      int late_error = -1;
      socklen_t length = sizeof(late_error);
      if (error == EINPROGRESS && poll(&pfd, 1, static_cast<int>(kSlice.count())) > 0 &&
          getsockopt(d.fd, SOL_SOCKET, SO_ERROR, &late_error, &length) == 0 && late_error == 0) {
        break;
      }
      close(d.fd);
      if (error != EAGAIN && error != ECONNREFUSED && error != ENOENT && error != EINTR && error != EINPROGRESS) {
        throw tbcoll::IoError(to + ": " + strerror(error));
      }
      std::this_thread::sleep_for(kSlice);
    }
    const Hello hello{kHelloMagic, tbcoll::transport::kInterfaceVersion, args_.comm_id, args_.rank, peer.rank,
                      static_cast<uint32_t>(args_.token.size()), 0};
    std::vector<uint8_t> out(sizeof(hello));
    std::memcpy(out.data(), &hello, sizeof(hello));
    out.insert(out.end(), args_.token.begin(), args_.token.end());
    if (send(d.fd, out.data(), out.size(), kSendFlags) != static_cast<ssize_t>(out.size())) {  // a new socket takes it
      close(d.fd);
      throw tbcoll::IoError(to + ": cannot send the handshake: " + strerror(errno));
    }
    return d;
  }

  // Sleeps in poll() until a handshake can move, at most kSlice (or to the deadline).
  void wait_for_handshakes(const std::vector<Pending>& dials, const std::vector<Pending>& callers,
                           tbcoll::Deadline deadline) {
    std::vector<pollfd> pfds{{listen_fd_, POLLIN, 0}};
    for (const auto* pending : {&dials, &callers}) {
      for (const Pending& p : *pending) pfds.push_back({p.fd, POLLIN, 0});
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    poll(pfds.data(), pfds.size(), static_cast<int>(std::max<long long>(0, std::min<long long>(left, kSlice.count()))));
  }

  // Reads the Welcomes of our connections; accepted ones join fds. A peer that rejects us or hangs up is a set-up
  // error (another job or communicator at that address, a peer that failed), not something to wait out.
  void take_welcomes(std::vector<Pending>& dials, std::map<int, int>& fds) {
    for (size_t i = dials.size(); i-- > 0;) {
      Pending& d = dials[i];
      const int got = read_up_to(d, sizeof(Welcome));
      if (got == 0) continue;
      const std::string peer = who_ + ": peer " + std::to_string(d.rank);
      if (got < 0) throw tbcoll::IoError(peer + " closed the connection during the handshake");
      Welcome welcome;
      std::memcpy(&welcome, d.in.data(), sizeof(welcome));
      if (welcome.magic != kHelloMagic) throw tbcoll::RemoteError(peer + " does not speak the unixsock handshake");
      if (welcome.status != kAccepted) {
        throw tbcoll::InvalidUsage(peer + " rejected the connection: " + status_text(welcome.status));
      }
      fds[d.rank] = d.fd;
      dials.erase(dials.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  // Moves the accepted connections' handshakes on: accepted peers join fds, rejected and broken ones close. One
  // that says nothing holds up no one (all are served at once); it is closed when set-up ends.
  void take_hellos(std::vector<Pending>& callers, const std::set<int>& expected, std::map<int, int>& fds) {
    for (size_t i = callers.size(); i-- > 0;) {
      const int rank = judge(callers[i], expected, fds);
      if (rank == -1) continue;  // more of its Hello to come
      if (rank >= 0) fds[rank] = callers[i].fd;
      if (rank < 0) close(callers[i].fd);
      callers.erase(callers.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  // Reads a caller's Hello and token. Returns its rank once accepted (a Welcome went out), -1 while incomplete, -2
  // when it was rejected (with a Welcome saying why, and a warning) or its connection ended.
  int judge(Pending& c, const std::set<int>& expected, const std::map<int, int>& fds) {
    int got = read_up_to(c, sizeof(Hello));
    if (got <= 0) return got == 0 ? -1 : -2;
    Hello hello;
    std::memcpy(&hello, c.in.data(), sizeof(hello));
    if (hello.magic != kHelloMagic || hello.token_bytes > kMaxTokenBytes) {
      warn("rejected a connection: not a unixsock handshake");
      return -2;  // garbage: no answer
    }
    got = read_up_to(c, sizeof(Hello) + hello.token_bytes);
    if (got <= 0) return got == 0 ? -1 : -2;
    const std::string token(c.in.begin() + sizeof(Hello), c.in.end());
    Status status = kAccepted;
    if (hello.version != tbcoll::transport::kInterfaceVersion) {
      status = kBadVersion;
    } else if (token != args_.token) {
      status = kBadToken;
    } else if (hello.comm_id != args_.comm_id) {
      status = kOtherCommunicator;
    } else if (hello.to_rank != args_.rank || expected.count(hello.from_rank) == 0 || fds.count(hello.from_rank) != 0) {
      status = kUnexpectedRank;
    }
    const Welcome welcome{kHelloMagic, status};
    const bool answered = send(c.fd, &welcome, sizeof(welcome), kSendFlags) == static_cast<ssize_t>(sizeof(welcome));
    if (status == kAccepted) return answered ? hello.from_rank : -2;  // a new socket takes 8 bytes
    warn("rejected a connection claiming rank " + std::to_string(hello.from_rank) + ": " + status_text(status));
    return -2;
  }

  void accept_callers(std::vector<Pending>& callers) {
    for (int fd; (fd = accept(listen_fd_, nullptr, nullptr)) >= 0;) {  // until none waits (or a passing failure)
      if (prepare_socket(fd)) {
        callers.push_back(Pending{fd, -1, {}});
      } else {
        close(fd);
      }
    }
  }

  std::vector<std::unique_ptr<tbcoll::transport::Endpoint>> make_endpoints(const std::vector<PeerAddress>& peers,
                                                                           const std::map<int, int>& fds) {
    std::vector<std::unique_ptr<tbcoll::transport::Endpoint>> endpoints;
    std::lock_guard<std::mutex> lock(mutex_);
    for (const PeerAddress& peer : peers) {
      auto conn = std::make_shared<Conn>(fds.at(peer.rank), args_.rank, peer.rank);
      if (aborted_) conn->abort();  // abort() came while the last handshakes finished
      conns_.push_back(conn);
      endpoints.push_back(std::make_unique<Endpoint>(std::move(conn)));
    }
    return endpoints;
  }

  // Closes the listener and removes its socket file and directory.
  void stop_listening() {
    if (listen_fd_ >= 0) close(listen_fd_);
    listen_fd_ = -1;
    if (!path_.empty()) unlink(path_.c_str());
    if (!dir_.empty()) rmdir(dir_.c_str());
    path_.clear();
    dir_.clear();
  }

  void warn(const std::string& what) const { fprintf(stderr, "%s: %s\n", who_.c_str(), what.c_str()); }

  ContextArgs args_;
  std::string who_;
  std::string dir_;   // the listener's private directory
  std::string path_;  // the listener's socket: address()
  int listen_fd_ = -1;
  std::mutex mutex_;  // guards conns_: abort() may come from another thread than connect()
  std::atomic<bool> aborted_{false};
  std::vector<std::weak_ptr<Conn>> conns_;
};

// ---- device and entry point -------------------------------------------------------------------------------------

class Device final : public tbcoll::transport::Device {
 public:
  std::string name() const override { return "unixsock"; }

  tbcoll::transport::Capabilities capabilities() const override {
    tbcoll::transport::Capabilities caps;
    caps.latency_us = 5;             // a send, a wake-up and a receive through the kernel
    caps.bandwidth_gbps = 3;         // two copies through the socket's buffer
    caps.message_overhead_us = 1.5;  // a system call each way, often a poll()
    caps.same_host_only = true;
    return caps;
  }

  bool can_connect(const tbcoll::transport::PeerInfo& self, const tbcoll::transport::PeerInfo& peer) const override {
    return self.host_id == peer.host_id;
  }

  std::unique_ptr<tbcoll::transport::Context> create_context(const ContextArgs& args) override {
    return std::make_unique<Context>(args);
  }
};

std::shared_ptr<tbcoll::transport::Device> create_device() { return std::make_shared<Device>(); }

}  // namespace

extern "C" __attribute__((visibility("default"))) const tbcoll::transport::Plugin* tbcoll_transport_plugin() {
  static const tbcoll::transport::Plugin plugin{tbcoll::transport::kInterfaceVersion, "unixsock", &create_device};
  return &plugin;
}
