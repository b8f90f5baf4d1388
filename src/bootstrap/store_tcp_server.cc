// The TCP rendezvous store's server: a single-threaded Boost.Asio server hosted by rank 0 (the blocking client is
// in store_tcp_client.cc). The protocol is in store_protocol.h; anything malformed closes that one connection and
// nothing else.
//
// Before a client has authenticated (token, and the secret's proof with one) it costs a descriptor and little
// else, and anyone who reaches the port can open such connections by the thousand: at most kMaxUnauthenticated
// are held at once, each for kHelloTimeout at most. At the cap, the oldest that has sent no hello for
// kEvictSilentAfter is dropped (a client of ours sends its hello as it connects: it is in the socket before the
// connection is even accepted), else the oldest once it has waited kEvictAfter, and until then no more are
// accepted (they wait in the kernel's backlog). A flood of silent connections is cycled through at the cap per
// kEvictSilentAfter, so the ranks behind it get in. Warnings about such connections are rate-limited
// (kLogBurst per kLogWindow, then one line counting the rest).
#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <list>
#include <map>
#include <optional>
#include <thread>

#include <boost/asio.hpp>
#include <fmt/format.h>

#include "bootstrap/store_protocol.h"
#include "common/auth.h"
#include "common/constant_time.h"
#include "common/log.h"
#include "common/net.h"
#include "platform/platform.h"
#include "tbcoll/error.hpp"
#include "tbcoll/store.hpp"

namespace tbcoll {

namespace asio = boost::asio;
using asio::ip::tcp;
namespace sp = store_protocol;

struct TBCOLL_LOCAL TcpStoreServer::Impl {
  class Session;

  static constexpr std::chrono::seconds kHelloTimeout{5};
  static constexpr size_t kMaxUnauthenticated = 128;
  static constexpr std::chrono::seconds kEvictAfter{1};
  static constexpr std::chrono::milliseconds kEvictSilentAfter{100};
  static constexpr int kLogBurst = 5;
  static constexpr std::chrono::seconds kLogWindow{10};
  // A request's key and value must arrive within this long of its header; they are read (and memory is taken)
  // in pieces of kBodyPiece as they come, so a header alone costs nothing.
  static constexpr std::chrono::seconds kBodyTimeout{10};
  static constexpr size_t kBodyPiece = 64 << 10;

  // Before io: sessions still queued in io when it goes update these.
  std::atomic<size_t> sessions{0};      // open connections
  std::list<Session*> unauthenticated;  // io thread only: sessions before their welcome, oldest first
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer retry{io};
  std::string token;
  std::string secret;  // the job secret ("" for none): clients must prove it
  std::thread thread;
  std::atomic<uint64_t> rejected{0};
  std::map<std::string, std::vector<uint8_t>> values;                     // io thread only
  std::atomic<uint64_t> stored_bytes{0};  // keys and values in `values`; written by the io thread only
  std::map<std::string, std::vector<std::shared_ptr<Session>>> waiters;  // io thread only
  asio::steady_timer log_window{io};    // ends the current window of rate-limited warnings
  int logged_in_window = 0;             // warnings written in it
  uint64_t suppressed = 0;              // and left out

  // A warning about one connection, rate-limited: at most kLogBurst per kLogWindow, then a line saying how many
  // were left out. io thread only.
  void warn_about_connection(const std::string& message) {
    if (logged_in_window == 0) {
      log_window.expires_after(kLogWindow);
      log_window.async_wait([this](boost::system::error_code ec) {
        if (ec) return;
        if (suppressed > 0) {
          log::warn("[store] {} more connection(s) dropped or rejected in the last {} s (at most {} warnings per {} s)",
                    suppressed, kLogWindow.count(), kLogBurst, kLogWindow.count());
        }
        suppressed = 0;
        logged_in_window = 0;
      });
    }
    if (logged_in_window < kLogBurst) {
      ++logged_in_window;
      log::warn("{}", message);
    } else {
      ++suppressed;
    }
  }

  class Session : public std::enable_shared_from_this<Session> {
   public:
    Session(Impl& server, tcp::socket socket)
        : server_(server), socket_(std::move(socket)), accepted_at_(Clock::now()) {
      server_.sessions++;
      place_ = server_.unauthenticated.insert(server_.unauthenticated.end(), this);
    }
    ~Session() {
      leave_unauthenticated();
      server_.sessions--;
    }

    Clock::time_point accepted_at() const { return accepted_at_; }
    bool heard() const { return heard_; }  ///< its hello arrived
    // Dropped to make room for a newer connection (the cap on unauthenticated ones).
    void evict() {
      server_.rejected++;
      leave_unauthenticated();
      hello_timer_.cancel();
      server_.warn_about_connection(fmt::format("[store] dropped a connection from {}: not through its handshake after {} s while {} "
                                                "others waited for theirs", peer_name(),
                                                heard_ ? std::chrono::duration<double>(kEvictAfter).count()
                                                       : std::chrono::duration<double>(kEvictSilentAfter).count(),
                                                kMaxUnauthenticated - 1));
      boost::system::error_code ignored;
      socket_.close(ignored);
    }

    void start() {
      auto self = shared_from_this();
      // A client that connects and does not authenticate in time is dropped (it would hold a descriptor).
      hello_timer_.expires_after(kHelloTimeout);
      hello_timer_.async_wait([this, self](auto ec) {
        if (ec || authenticated_) return;
        server_.rejected++;
        server_.warn_about_connection(
            fmt::format("[store] dropped a connection from {}: no hello within {} s", peer_name(), kHelloTimeout.count()));
        boost::system::error_code ignored;
        socket_.close(ignored);
      });
      // A client that closes before it is through is let go at once (the hello timer would hold it, and its
      // descriptor, for kHelloTimeout).
      asio::async_read(socket_, asio::buffer(&hello_, sizeof(hello_)), [this, self](auto ec, size_t) {
        if (ec) {
          hello_timer_.cancel();  // a client gone mid-hello: the session and its descriptor go now
          return;
        }
        heard_ = true;
        if (hello_.magic != sp::kMagic || hello_.token_len > sp::kMaxTokenBytes) return reject("bad magic", sp::Status::kBadRequest);
        if (hello_.version != sp::kVersion) return reject("protocol version mismatch", sp::Status::kBadVersion);
        const bool client_secret = (hello_.flags & sp::kFlagSecret) != 0;
        if ((hello_.flags & ~sp::kFlagSecret) != 0) return reject("unknown hello flags", sp::Status::kBadRequest);
        if (!server_.secret.empty() && !client_secret) return reject("no job secret", sp::Status::kNeedSecret);
        if (server_.secret.empty() && client_secret) return reject("a job secret this store lacks", sp::Status::kNoSecret);
        body_.resize(hello_.token_len + (client_secret ? auth::kNonceBytes : 0));
        asio::async_read(socket_, asio::buffer(body_), [this, self](auto ec2, size_t) {
          if (ec2) {
            hello_timer_.cancel();
            return;
          }
          if (server_.secret.empty()) return check_token();
          challenge();
        });
      });
    }

    // The secret's challenge-response (store_protocol.h): our proof over the client's nonce and a nonce of ours,
    // then the client's over ours; only then the token. The hello timer still runs.
    void challenge() {
      std::copy(body_.end() - auth::kNonceBytes, body_.end(), client_nonce_.begin());
      body_.resize(hello_.token_len);  // the token
      try {
        nonce_ = auth::nonce();
      } catch (const Error& error) {
        log::warn("[store] {}", error.what());
        return reject("no random source for a nonce", sp::Status::kBadRequest);
      }
      const std::string token(body_.begin(), body_.end());
      const auth::Proof proof = auth::proof(server_.secret, sp::kResponderLabel, client_nonce_, nonce_, token);
      auto out = std::make_shared<std::vector<uint8_t>>(sizeof(sp::Welcome) + nonce_.size() + proof.size());
      const sp::Welcome welcome{sp::kMagic, 0};
      std::memcpy(out->data(), &welcome, sizeof(welcome));
      std::memcpy(out->data() + sizeof(welcome), nonce_.data(), nonce_.size());
      std::memcpy(out->data() + sizeof(welcome) + nonce_.size(), proof.data(), proof.size());
      auto self = shared_from_this();
      asio::async_write(socket_, asio::buffer(*out), [this, self, out](auto ec, size_t) {
        if (ec) {
          hello_timer_.cancel();  // the client went mid-challenge: the session goes now
          return;
        }
        asio::async_read(socket_, asio::buffer(client_proof_), [this, self](auto ec2, size_t) {
          if (ec2) {
            hello_timer_.cancel();
            return;
          }
          const std::string token(body_.begin(), body_.end());
          if (!auth::same(client_proof_, auth::proof(server_.secret, sp::kInitiatorLabel, nonce_, client_nonce_, token))) {
            return reject("wrong job secret", sp::Status::kBadSecret);
          }
          check_token();
        });
      });
    }

    void check_token() {
      if (!constant_time_equal(std::string(body_.begin(), body_.begin() + hello_.token_len), server_.token)) {
        return reject("wrong job token", sp::Status::kBadToken);
      }
      authenticated_ = true;
      leave_unauthenticated();
      hello_timer_.cancel();
      auto self = shared_from_this();
      auto welcome = std::make_shared<sp::Welcome>(sp::Welcome{sp::kMagic, 0});
      asio::async_write(socket_, asio::buffer(welcome.get(), sizeof(*welcome)), [this, self, welcome](auto ec, size_t) {
        if (!ec) read_request();
      });
    }

    void reply(sp::Status status, const std::vector<uint8_t>& value) {
      parked_on_.reset();
      auto out = std::make_shared<std::vector<uint8_t>>(sizeof(sp::ResponseHeader) + value.size());
      sp::ResponseHeader header{static_cast<uint32_t>(status), static_cast<uint32_t>(value.size())};
      std::memcpy(out->data(), &header, sizeof(header));
      if (!value.empty()) std::memcpy(out->data() + sizeof(header), value.data(), value.size());
      auto self = shared_from_this();
      asio::async_write(socket_, asio::buffer(*out), [this, self, out](auto ec, size_t) {
        if (!ec) read_request();
      });
    }

   private:
    // A parked get reads nothing until the set answers it, so a client that gave up (timed out and closed)
    // would stay parked, holding its descriptor, until then: watch the socket and unpark on close. A parked
    // client must not send (it waits for the reply): anything it sends drops it.
    void watch_while_parked() {
      auto self = shared_from_this();
      const uint64_t parking = ++parkings_;
      socket_.async_wait(tcp::socket::wait_read, [this, self, parking](auto ec) {
        // Answered meanwhile (read_request() owns the socket again), perhaps parked again on a later get.
        if (!parked_on_ || parking != parkings_) return;
        auto found = server_.waiters.find(*parked_on_);
        if (found != server_.waiters.end()) {
          auto& list = found->second;
          list.erase(std::remove(list.begin(), list.end(), self), list.end());
          if (list.empty()) server_.waiters.erase(found);
        }
        parked_on_.reset();
        if (!ec) log::info("[store] dropped parked client {}: closed or sent while waiting", peer_name());
        boost::system::error_code ignored;
        socket_.close(ignored);
      });
    }

    // Tells the client why and closes (the hello timer is cancelled: this rejection is the one counted).
    void reject(const char* why, sp::Status status) {
      server_.rejected++;
      hello_timer_.cancel();
      server_.warn_about_connection(fmt::format("[store] rejected a connection from {}: {}", peer_name(), why));
      auto welcome = std::make_shared<sp::Welcome>(sp::Welcome{sp::kMagic, static_cast<uint32_t>(status)});
      auto self = shared_from_this();
      asio::async_write(socket_, asio::buffer(welcome.get(), sizeof(*welcome)), [this, self, welcome](auto, size_t) {
        boost::system::error_code ignored;
        socket_.shutdown(tcp::socket::shutdown_both, ignored);
        socket_.close(ignored);
      });
    }

    std::string peer_name() {
      boost::system::error_code ec;
      auto endpoint = socket_.remote_endpoint(ec);
      return ec ? std::string("?") : fmt::format("{}:{}", endpoint.address().to_string(), endpoint.port());
    }

    void read_request() {
      auto self = shared_from_this();
      asio::async_read(socket_, asio::buffer(&request_, sizeof(request_)), [this, self](auto ec, size_t) {
        if (ec) return;
        std::string problem = sp::check_request(request_);
        if (!problem.empty()) {
          server_.rejected++;
          server_.warn_about_connection(fmt::format("[store] dropped client {}: malformed request ({})", peer_name(), problem));
          return;
        }
        body_.clear();
        reading_body_ = true;
        const uint64_t request = ++requests_;
        body_timer_.expires_after(kBodyTimeout);
        // The expiry may already be queued when the body completes (cancel() cannot recall it then): only a
        // body still outstanding for this very request counts.
        body_timer_.async_wait([this, self, request](auto timer_ec) {
          if (timer_ec || !reading_body_ || request != requests_) return;
          server_.rejected++;
          log::warn("[store] dropped client {}: a request's {} bytes did not arrive within {} s", peer_name(),
                    request_.key_len + request_.value_len, kBodyTimeout.count());
          boost::system::error_code ignored;
          socket_.close(ignored);
        });
        read_body();
      });
    }

    void read_body() {
      const size_t total = size_t{request_.key_len} + request_.value_len;
      if (body_.size() == total) {
        reading_body_ = false;
        body_timer_.cancel();
        return handle();
      }
      const size_t have = body_.size(), piece = std::min(kBodyPiece, total - have);
      body_.resize(have + piece);
      auto self = shared_from_this();
      asio::async_read(socket_, asio::buffer(body_.data() + have, piece), [this, self](auto ec, size_t) {
        if (ec) {
          body_timer_.cancel();
          return;
        }
        read_body();
      });
    }

    // Accounts for key's value becoming `size` bytes; false, changing nothing, if the store would then hold
    // more than kMaxStoredBytes.
    bool make_room(const std::string& key, size_t size) {
      auto existing = server_.values.find(key);
      const uint64_t before = existing == server_.values.end() ? 0 : key.size() + existing->second.size();
      const uint64_t after = key.size() + size;
      if (server_.stored_bytes - before + after > sp::kMaxStoredBytes) {
        log::warn("[store] refused to store {} bytes under {:?} for {}: the store would hold more than {} bytes",
                  size, key, peer_name(), sp::kMaxStoredBytes);
        return false;
      }
      server_.stored_bytes = server_.stored_bytes - before + after;
      return true;
    }

    void handle() {
      std::string key(body_.begin(), body_.begin() + request_.key_len);
      std::vector<uint8_t> value(body_.begin() + request_.key_len, body_.end());
      switch (static_cast<sp::Op>(request_.op)) {
        case sp::Op::kSet: {
          if (!make_room(key, value.size())) {
            reply(sp::Status::kFull, {});
            break;
          }
          server_.values[key] = value;
          reply(sp::Status::kOk, {});
          auto parked = std::move(server_.waiters[key]);
          server_.waiters.erase(key);
          for (auto& waiter : parked) waiter->reply(sp::Status::kOk, value);
          break;
        }
        case sp::Op::kGet: {
          auto found = server_.values.find(key);
          if (found != server_.values.end()) {
            reply(sp::Status::kOk, found->second);
          } else {
            server_.waiters[key].push_back(shared_from_this());  // answered by the set
            parked_on_ = key;
            watch_while_parked();
          }
          break;
        }
        case sp::Op::kErase: {
          auto found = server_.values.find(key);
          if (found != server_.values.end()) {  // set: so no get is parked on it
            server_.stored_bytes = server_.stored_bytes - key.size() - found->second.size();
            server_.values.erase(found);
          }
          reply(sp::Status::kOk, {});
          break;
        }
        case sp::Op::kAdd: {
          int64_t delta = 0, current = 0;
          std::memcpy(&delta, value.data(), sizeof(delta));
          auto existing = server_.values.find(key);
          if (existing == server_.values.end() && delta == 0) {  // a read (of a counter): stores nothing
            reply(sp::Status::kOk, std::vector<uint8_t>(sizeof(current), 0));
            break;
          }
          if (existing != server_.values.end() && existing->second.size() == sizeof(current)) {
            std::memcpy(&current, existing->second.data(), sizeof(current));
          }
          if (__builtin_add_overflow(current, delta, &current)) {
            reply(sp::Status::kOverflow, {});
            break;
          }
          if (!make_room(key, sizeof(current))) {
            reply(sp::Status::kFull, {});
            break;
          }
          std::vector<uint8_t>& stored = server_.values[key];
          stored.resize(sizeof(current));
          std::memcpy(stored.data(), &current, sizeof(current));
          reply(sp::Status::kOk, stored);
          break;
        }
      }
    }

    void leave_unauthenticated() {
      if (place_ == server_.unauthenticated.end()) return;
      server_.unauthenticated.erase(place_);
      place_ = server_.unauthenticated.end();
    }

    Impl& server_;
    tcp::socket socket_;
    Clock::time_point accepted_at_;
    std::list<Session*>::iterator place_;  // in server_.unauthenticated, or its end() once out
    asio::steady_timer hello_timer_{socket_.get_executor()};
    asio::steady_timer body_timer_{socket_.get_executor()};
    bool reading_body_ = false;  // a request's key and value are being read
    uint64_t requests_ = 0;      // requests begun on this connection
    bool authenticated_ = false;
    bool heard_ = false;  // the hello arrived (a silent connection is the first to go at the cap)
    std::optional<std::string> parked_on_;  // key of a get waiting for its set
    uint64_t parkings_ = 0;                 // gets parked so far: tells a stale watch from the current one
    sp::Hello hello_{};
    auth::Nonce client_nonce_{}, nonce_{};
    auth::Proof client_proof_{};
    sp::RequestHeader request_{};
    std::vector<uint8_t> body_;
  };

  // Room for one more unauthenticated connection: the oldest dropped if it waited kEvictAfter; false (try again
  // shortly) if all are younger.
  bool make_room_for_one() {
    if (unauthenticated.size() < kMaxUnauthenticated) return true;
    const auto now = Clock::now();
    for (Session* session : unauthenticated) {  // oldest first
      if (now - session->accepted_at() < kEvictSilentAfter) break;
      if (!session->heard()) {
        session->evict();
        return true;
      }
    }
    Session* oldest = unauthenticated.front();
    if (now - oldest->accepted_at() < kEvictAfter) return false;
    oldest->evict();
    return true;
  }

  void accept() {
    if (!make_room_for_one()) {
      retry.expires_after(std::chrono::milliseconds(50));
      retry.async_wait([this](boost::system::error_code timer_ec) {
        if (!timer_ec) accept();
      });
      return;
    }
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) {
        socket.set_option(tcp::no_delay(true), ec);
        std::make_shared<Session>(*this, std::move(socket))->start();
        accept();
        return;
      }
      // Out of descriptors (or another accept error): retry a little later instead of spinning.
      warn_about_connection(fmt::format("[store] accept failed: {}; retrying in 50 ms", ec.message()));
      retry.expires_after(std::chrono::milliseconds(50));
      retry.async_wait([this](boost::system::error_code timer_ec) {
        if (!timer_ec) accept();
      });
    });
  }
};

TcpStoreServer::TcpStoreServer(const std::string& host, int port, const std::string& token, Deadline deadline)
    : TcpStoreServer(host, port, token, deadline, auth::job_secret_from_env()) {}

TcpStoreServer::TcpStoreServer(const std::string& host, int port, const std::string& token, Deadline deadline,
                               const std::string& secret)
    : impl_(std::make_unique<Impl>()) {
  impl_->token = token;
  impl_->secret = secret;
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host.empty() ? "0.0.0.0" : host, ec);
  if (ec) {
    addrinfo* found = net::resolve(host, std::to_string(port), AI_PASSIVE, deadline, "[store]");
    tcp::endpoint resolved;
    const size_t length = std::min<size_t>(found->ai_addrlen, resolved.capacity());
    std::memcpy(resolved.data(), found->ai_addr, length);
    freeaddrinfo(found);
    resolved.resize(length);
    address = resolved.address();
  }
  tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(endpoint, ec);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw IoError(fmt::format("[store] cannot listen on {}:{}: {}", host, port, ec.message()));
  start();
}

TcpStoreServer::TcpStoreServer(int listening_fd, const std::string& token)
    : TcpStoreServer(listening_fd, token, auth::job_secret_from_env()) {}

TcpStoreServer::TcpStoreServer(int listening_fd, const std::string& token, const std::string& secret)
    : impl_(std::make_unique<Impl>()) {
  impl_->token = token;
  impl_->secret = secret;
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(listening_fd, reinterpret_cast<sockaddr*>(&address), &length) != 0 ||
      (address.ss_family != AF_INET && address.ss_family != AF_INET6) ||
      !platform::is_listening_socket(listening_fd)) {
    close(listening_fd);
    throw InvalidArgument(fmt::format("[store] descriptor {} is not a listening TCP socket", listening_fd));
  }
  boost::system::error_code ec;
  impl_->acceptor.assign(address.ss_family == AF_INET ? tcp::v4() : tcp::v6(), listening_fd, ec);
  if (ec) {
    close(listening_fd);
    throw IoError(fmt::format("[store] cannot serve on descriptor {}: {}", listening_fd, ec.message()));
  }
  start();
}

void TcpStoreServer::start() {
  fcntl(impl_->acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  impl_->accept();
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
}

TcpStoreServer::~TcpStoreServer() {
  impl_->io.stop();
  impl_->thread.join();
}

int TcpStoreServer::port() const { return impl_->acceptor.local_endpoint().port(); }
uint64_t TcpStoreServer::rejected_connections() const { return impl_->rejected.load(); }
size_t TcpStoreServer::connections() const { return impl_->sessions.load(); }
uint64_t TcpStoreServer::stored_bytes() const { return impl_->stored_bytes.load(); }

}  // namespace tbcoll
