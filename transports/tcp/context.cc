// TCP context: a listener per communicator and the connection handshake.
//
// Rank r connects to every peer with a lower rank and accepts every peer with a higher rank, so no two ranks
// wait on each other in a cycle. The connector sends Hello|token; the acceptor checks magic, protocol
// version, job token, communicator id and ranks, and answers with a Welcome. A bad handshake (garbage, wrong
// token, old version, unknown rank) is logged and closed while the acceptor keeps waiting for real peers.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "common/env.h"
#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "transports/endpoint_list.h"
#include "transports/tcp/context.h"
#include "transports/tcp/endpoint.h"
#include "transports/tcp/wire.h"

namespace tbcoll::tcp {
namespace {

constexpr auto kHandshakeTimeout = std::chrono::seconds(5);

// TBCOLL_TCP_BUFFER_BYTES: 0 keeps the kernel's default; otherwise 64 KiB (one loopback packet: less stalls the
// stream) to 1 GiB (the kernel doubles the value into an int).
int socket_buffer_bytes(const env::Settings& settings) {
  constexpr long long kMin = 64 << 10, kMax = 1 << 30;
  const long long bytes = settings.get_int("TBCOLL_TCP_BUFFER_BYTES");
  if (bytes != 0 && (bytes < kMin || bytes > kMax)) {
    throw InvalidArgument(fmt::format("[env] TBCOLL_TCP_BUFFER_BYTES={} is outside [{}, {}] (0: the kernel's default)",
                                      bytes, kMin, kMax));
  }
  return static_cast<int>(bytes);
}

void set_buffers(int fd, int bytes) {
  if (bytes == 0) return;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

class Context final : public transport::Context {
 public:
  explicit Context(const transport::ContextArgs& args)
      : args_(args), buffer_bytes_(socket_buffer_bytes(env::Settings(args.knobs))) {
    if (args_.token.size() > kMaxTokenBytes) throw InvalidArgument("[tcp] job token longer than 1024 bytes");
    const std::string who = fmt::format("[tcp] rank {}", args_.rank);
    const std::string host = net::listen_host(env::Settings(args.knobs), args_.bind_host, who);
    listen_fd_ = net::listen_tcp(host, &address_, who);
  }

  ~Context() override {
    if (listen_fd_ >= 0) close(listen_fd_);
  }

  std::string address() const override { return address_; }

  std::vector<std::unique_ptr<transport::Endpoint>> connect(const std::vector<transport::PeerAddress>& peers,
                                                            Deadline deadline) override {
    std::map<int, int> fds;  // peer rank -> connected socket
    try {
      for (const auto& peer : peers) {
        if (peer.rank < args_.rank) fds[peer.rank] = connect_to(peer, deadline);
      }
      std::map<int, bool> expected;
      for (const auto& peer : peers) {
        if (peer.rank > args_.rank) expected[peer.rank] = true;
      }
      accept_from(expected, fds, deadline);
    } catch (...) {
      for (auto& [rank, fd] : fds) close(fd);
      throw;
    }
    close(listen_fd_);  // everyone is connected: later connection attempts are simply refused
    listen_fd_ = -1;
    std::vector<std::unique_ptr<transport::Endpoint>> out;
    for (const auto& peer : peers) {
      out.push_back(endpoints_.add<transport::Endpoint>(
          std::make_unique<Endpoint>(fds.at(peer.rank), args_.rank, peer.rank)));
    }
    return out;
  }

  void abort() override { endpoints_.abort_all(); }

 private:
  int connect_to(const transport::PeerAddress& peer, Deadline deadline) {
    std::string who = fmt::format("[tcp] rank {}: connecting to peer {} at {}", args_.rank, peer.rank, peer.address);
    int fd = net::connect_tcp(net::parse_host_port(peer.address, "peer address"), deadline, who, args_.cancelled);
    try {
      set_buffers(fd, buffer_bytes_);
      Hello hello{kHelloMagic, kProtocolVersion, static_cast<uint16_t>(args_.token.size()), args_.rank, peer.rank,
                  args_.comm_id};
      std::vector<uint8_t> out(sizeof(hello) + args_.token.size());
      std::memcpy(out.data(), &hello, sizeof(hello));
      std::memcpy(out.data() + sizeof(hello), args_.token.data(), args_.token.size());
      net::write_all(fd, out.data(), out.size(), deadline, who, args_.cancelled);
      Welcome welcome{};
      net::read_exact(fd, &welcome, sizeof(welcome), deadline, who, args_.cancelled);
      if (welcome.magic != kHelloMagic) throw RemoteError(who + ": the peer does not speak the tbcoll protocol");
      if (welcome.status != 0) {
        throw InvalidUsage(fmt::format("{}: rejected by the peer: {}", who, welcome_status_name(welcome.status)));
      }
      return fd;
    } catch (...) {
      close(fd);
      throw;
    }
  }

  // A connection accepted but not yet through its handshake. All of them are served at once (poll), each with
  // its own time limit, so connections that never speak cannot hold up the peers behind them.
  struct Pending {
    int fd;
    Clock::time_point limit;
    std::vector<uint8_t> in;  // Hello, then the token
  };

  // Reads what the connection has sent. Returns the peer rank once its handshake is complete and accepted,
  // -1 while it is incomplete, -2 when it was rejected or failed (the caller closes it).
  int advance(Pending& pending, const std::map<int, bool>& expected, const std::map<int, int>& have) {
    const std::string who = fmt::format("[tcp] rank {}: handshake", args_.rank);
    Hello hello{};
    std::string token;
    for (;;) {
      size_t want = 0;
      const HelloParse parsed = parse_hello(pending.in.data(), pending.in.size(), &hello, &token, &want);
      if (parsed == HelloParse::kComplete) break;
      if (parsed == HelloParse::kNotTbcoll) {
        log::warn("[tcp] rank {}: rejected a connection: not a tbcoll handshake (magic {:#x})", args_.rank,
                  hello.magic);
        return -2;  // garbage: don't even answer
      }
      if (parsed == HelloParse::kTokenTooLong) return reject(pending.fd, hello, WelcomeStatus::kBadToken, who);
      uint8_t buf[512];
      ssize_t got = recv(pending.fd, buf, std::min(sizeof(buf), want - pending.in.size()), MSG_DONTWAIT);
      if (got == 0) return -2;  // closed
      if (got < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -1 : -2;
      pending.in.insert(pending.in.end(), buf, buf + got);
    }
    const bool rank_wanted = expected.count(hello.from_rank) != 0 && have.count(hello.from_rank) == 0;
    const WelcomeStatus status = judge_hello(hello, token, args_.token, args_.comm_id, args_.rank, rank_wanted);
    if (status != WelcomeStatus::kAccepted) return reject(pending.fd, hello, status, who);
    try {
      Welcome welcome{kHelloMagic, static_cast<uint32_t>(status)};
      net::write_all(pending.fd, &welcome, sizeof(welcome), pending.limit, who);
    } catch (const Error& error) {
      log::warn("[tcp] rank {}: dropped a connection during the handshake: {}", args_.rank, error.what());
      return -2;
    }
    return hello.from_rank;
  }

  int reject(int fd, const Hello& hello, WelcomeStatus status, const std::string& who) {
    log::warn("[tcp] rank {}: rejected a connection claiming rank {} (protocol {}): {}", args_.rank, hello.from_rank,
              hello.version, welcome_status_name(static_cast<uint32_t>(status)));
    try {
      Welcome welcome{kHelloMagic, static_cast<uint32_t>(status)};
      net::write_all(fd, &welcome, sizeof(welcome), Clock::now() + std::chrono::milliseconds(100), who);
    } catch (const Error&) {
    }
    return -2;
  }

  void accept_from(const std::map<int, bool>& expected, std::map<int, int>& fds, Deadline deadline) {
    std::vector<Pending> pending;
    auto drop_all = [&] {
      for (Pending& p : pending) close(p.fd);
    };
    try {
      size_t accepted = 0;
      while (accepted < expected.size()) {
        check_cancelled(args_.cancelled, fmt::format("[tcp] rank {}: accepting peers", args_.rank));
        std::vector<pollfd> pfds{{listen_fd_, POLLIN, 0}};
        for (const Pending& p : pending) pfds.push_back({p.fd, POLLIN, 0});
        int left = remaining_ms(deadline);
        if (left <= 0) {
          std::string missing;
          for (const auto& [rank, unused] : expected) {
            if (fds.count(rank) == 0) missing += (missing.empty() ? "" : ", ") + std::to_string(rank);
          }
          throw TimeoutError(fmt::format("[tcp] rank {}: peers {} did not connect before the deadline", args_.rank,
                                         missing));
        }
        poll(pfds.data(), pfds.size(), std::min(left, 100));
        const auto now = Clock::now();
        for (size_t i = pending.size(); i-- > 0;) {
          Pending& p = pending[i];
          int rank = -1;
          if (pfds[i + 1].revents != 0) rank = advance(p, expected, fds);
          if (rank == -1 && now >= p.limit) {
            log::warn("[tcp] rank {}: dropped a connection that sent no complete handshake within {} s", args_.rank,
                      kHandshakeTimeout.count());
            rank = -2;
          }
          if (rank == -1) continue;
          if (rank >= 0) {
            fds[rank] = p.fd;
            accepted++;
          } else {
            close(p.fd);
          }
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
        }
        if ((pfds[0].revents & POLLIN) != 0) {
          const int fd = net::accept_tcp(listen_fd_);
          if (fd < 0) continue;
          set_buffers(fd, buffer_bytes_);
          pending.push_back({fd, std::min(deadline, Clock::now() + kHandshakeTimeout), {}});
        }
      }
    } catch (...) {
      drop_all();
      throw;
    }
    drop_all();
  }

  transport::ContextArgs args_;
  int buffer_bytes_;  // SO_SNDBUF/SO_RCVBUF of data sockets, 0: kernel default
  int listen_fd_ = -1;
  std::string address_;
  transport::EndpointList<Endpoint> endpoints_;
};

}  // namespace

std::unique_ptr<transport::Context> make_context(const transport::ContextArgs& args) {
  return std::make_unique<Context>(args);
}

}  // namespace tbcoll::tcp
