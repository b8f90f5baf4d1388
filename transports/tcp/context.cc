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

#include "common/auth.h"
#include "common/env.h"
#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "transports/endpoint_list.h"
#include "transports/tcp/admission.h"
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
      : args_(args), admission_(args.rank), buffer_bytes_(socket_buffer_bytes(env::Settings(args.knobs))),
        integrity_(env::Settings(args.knobs).get_int("TBCOLL_INTEGRITY") != 0) {
    if (args_.token.size() > kMaxTokenBytes) throw InvalidArgument("[tcp] job token longer than 1024 bytes");
    if (integrity_ && args_.secret.empty()) {
      throw InvalidArgument("[tcp] TBCOLL_INTEGRITY=1 needs the job secret (TBCOLL_SECRET or TBCOLL_SECRET_FILE): the "
                            "messages' MAC keys are drawn from it");
    }
    if (integrity_) auth::MessageMac probe(auth::Proof{});  // libcrypto and its AES-GCM are there (InvalidArgument if not)
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
      out.push_back(endpoints_.add<transport::Endpoint>(std::make_unique<Endpoint>(
          fds.at(peer.rank), args_.rank, peer.rank, std::move(integrity_of_[peer.rank]))));
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
      const bool with_secret = !args_.secret.empty();
      Hello hello{kHelloMagic, kProtocolVersion, static_cast<uint16_t>(args_.token.size()), args_.rank, peer.rank,
                  args_.comm_id, (with_secret ? kFlagSecret : 0u) | (integrity_ ? kFlagIntegrity : 0u), 0};
      const auth::Nonce mine = with_secret ? auth::nonce() : auth::Nonce{};
      std::vector<uint8_t> out(sizeof(hello) + args_.token.size());
      std::memcpy(out.data(), &hello, sizeof(hello));
      std::memcpy(out.data() + sizeof(hello), args_.token.data(), args_.token.size());
      if (with_secret) out.insert(out.end(), mine.begin(), mine.end());
      net::write_all(fd, out.data(), out.size(), deadline, who, args_.cancelled);
      auto read_welcome = [&] {
        Welcome welcome{};
        net::read_exact(fd, &welcome, sizeof(welcome), deadline, who, args_.cancelled);
        if (welcome.magic != kHelloMagic) throw RemoteError(who + ": the peer does not speak the tbcoll protocol");
        if (welcome.status != 0) {
          throw InvalidUsage(fmt::format("{}: rejected by the peer: {}", who, welcome_status_name(welcome.status)));
        }
      };
      read_welcome();
      if (with_secret) {  // the peer proves the secret first, then we do (wire.h)
        auth::Nonce theirs{};
        auth::Proof their_proof{};
        net::read_exact(fd, theirs.data(), theirs.size(), deadline, who, args_.cancelled);
        net::read_exact(fd, their_proof.data(), their_proof.size(), deadline, who, args_.cancelled);
        const std::string context = proof_context(args_.token, hello);
        if (!auth::same(their_proof, auth::proof(args_.secret, kResponderLabel, mine, theirs, context))) {
          throw RemoteError(who + ": the peer could not prove it knows the job secret");
        }
        const auth::Proof proof = auth::proof(args_.secret, kInitiatorLabel, theirs, mine, context);
        net::write_all(fd, proof.data(), proof.size(), deadline, who, args_.cancelled);
        read_welcome();
        if (integrity_) {
          integrity_of_[peer.rank] = std::make_unique<Integrity>(
              auth::proof(args_.secret, kConnectorKeyLabel, mine, theirs, context),
              auth::proof(args_.secret, kAcceptorKeyLabel, mine, theirs, context));
        }
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
    Clock::time_point accepted;
    Clock::time_point limit;
    std::vector<uint8_t> in;  // Hello, the token (and nonce), then the connector's proof
    bool challenged = false;  // our nonce and proof went out (a job secret): the connector's proof comes next
    auth::Nonce nonce{};      // ours
  };

  // Reads what the connection has sent. Returns the peer rank once its handshake is complete and accepted,
  // -1 while it is incomplete, -2 when it was rejected or failed (the caller closes it).
  int advance(Pending& pending, const std::map<int, bool>& expected, const std::map<int, int>& have) {
    const std::string who = fmt::format("[tcp] rank {}: handshake", args_.rank);
    const bool with_secret = !args_.secret.empty();
    const size_t secret_bytes = with_secret ? auth::kNonceBytes + (pending.challenged ? auth::kProofBytes : 0) : 0;
    size_t want = sizeof(Hello);
    Hello hello{};
    if (pending.in.size() >= sizeof(Hello)) {
      std::memcpy(&hello, pending.in.data(), sizeof(hello));
      want += hello.token_len + secret_bytes;
    }
    while (pending.in.size() < want) {
      uint8_t buf[512];
      ssize_t got = recv(pending.fd, buf, std::min(sizeof(buf), want - pending.in.size()), MSG_DONTWAIT);
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return -1;
      if (got <= 0) {  // closed, or reset
        admission_.dropped();
        return -2;
      }
      pending.in.insert(pending.in.end(), buf, buf + got);
      if (pending.in.size() == sizeof(Hello)) {
        std::memcpy(&hello, pending.in.data(), sizeof(hello));
        if (hello.magic != kHelloMagic) {
          admission_.warn(fmt::format("[tcp] rank {}: rejected a connection: not a tbcoll handshake (magic {:#x})",
                                      args_.rank, hello.magic));
          admission_.rejected();
          return -2;  // garbage: don't even answer
        }
        if (hello.version != kProtocolVersion) return reject(pending.fd, hello, WelcomeStatus::kBadVersion, who);
        if (hello.token_len > kMaxTokenBytes) return reject(pending.fd, hello, WelcomeStatus::kBadToken, who);
        const bool theirs = (hello.flags & kFlagSecret) != 0;
        if (with_secret && !theirs) return reject(pending.fd, hello, WelcomeStatus::kNeedSecret, who);
        if (!with_secret && theirs) return reject(pending.fd, hello, WelcomeStatus::kNoSecret, who);
        if (((hello.flags & kFlagIntegrity) != 0) != integrity_) {
          return reject(pending.fd, hello, WelcomeStatus::kIntegrityDiffers, who);
        }
        want += hello.token_len + secret_bytes;
      }
    }
    const auto token_begin = pending.in.begin() + sizeof(Hello);
    const std::string token(token_begin, token_begin + hello.token_len);
    if (with_secret && !challenged(pending, hello, token, who)) return pending.challenged ? -1 : -2;
    const bool rank_wanted = expected.count(hello.from_rank) != 0 && have.count(hello.from_rank) == 0;
    const WelcomeStatus status = judge_hello(hello, token, args_.token, args_.comm_id, args_.rank, rank_wanted);
    if (status != WelcomeStatus::kAccepted) return reject(pending.fd, hello, status, who);
    try {
      Welcome welcome{kHelloMagic, static_cast<uint32_t>(status)};
      net::write_all(pending.fd, &welcome, sizeof(welcome), pending.limit, who);
    } catch (const Error& error) {
      admission_.warn(fmt::format("[tcp] rank {}: dropped a connection during the handshake: {}", args_.rank,
                                  error.what()));
      admission_.dropped();
      return -2;
    }
    if (integrity_) {
      const size_t nonce_at = sizeof(Hello) + hello.token_len;
      auth::Nonce theirs{};
      std::copy(pending.in.begin() + static_cast<std::ptrdiff_t>(nonce_at),
                pending.in.begin() + static_cast<std::ptrdiff_t>(nonce_at + theirs.size()), theirs.begin());
      const std::string context = proof_context(token, hello);
      integrity_of_[hello.from_rank] = std::make_unique<Integrity>(
          auth::proof(args_.secret, kAcceptorKeyLabel, theirs, pending.nonce, context),
          auth::proof(args_.secret, kConnectorKeyLabel, theirs, pending.nonce, context));
    }
    return hello.from_rank;
  }

  // The job secret's challenge-response (wire.h), driven by advance(): once the connector's nonce is in, sends
  // our proof (returns false: its proof is still to come); once its proof is in, true if it is right (else
  // rejects it and returns false with pending.challenged cleared, so the caller drops the connection).
  bool challenged(Pending& pending, const Hello& hello, const std::string& token, const std::string& who) {
    const size_t nonce_at = sizeof(Hello) + hello.token_len;
    auth::Nonce theirs{};
    std::copy(pending.in.begin() + static_cast<std::ptrdiff_t>(nonce_at),
              pending.in.begin() + static_cast<std::ptrdiff_t>(nonce_at + theirs.size()), theirs.begin());
    const std::string context = proof_context(token, hello);
    if (!pending.challenged) {
      try {
        pending.nonce = auth::nonce();
        const auth::Proof proof = auth::proof(args_.secret, kResponderLabel, theirs, pending.nonce, context);
        std::vector<uint8_t> out(sizeof(Welcome));
        const Welcome welcome{kHelloMagic, static_cast<uint32_t>(WelcomeStatus::kAccepted)};
        std::memcpy(out.data(), &welcome, sizeof(welcome));
        out.insert(out.end(), pending.nonce.begin(), pending.nonce.end());
        out.insert(out.end(), proof.begin(), proof.end());
        net::write_all(pending.fd, out.data(), out.size(), pending.limit, who);
        pending.challenged = true;
      } catch (const Error& error) {
        admission_.warn(fmt::format("[tcp] rank {}: dropped a connection during the handshake: {}", args_.rank,
                                    error.what()));
        admission_.dropped();
      }
      return false;
    }
    auth::Proof proof{};
    std::copy(pending.in.end() - static_cast<std::ptrdiff_t>(proof.size()), pending.in.end(), proof.begin());
    if (!auth::same(proof, auth::proof(args_.secret, kInitiatorLabel, pending.nonce, theirs, context))) {
      pending.challenged = false;
      reject(pending.fd, hello, WelcomeStatus::kBadSecret, who);
      return false;
    }
    return true;
  }

  int reject(int fd, const Hello& hello, WelcomeStatus status, const std::string& who) {
    // The status texts speak for the connector; the log speaks for us.
    const char* why = status == WelcomeStatus::kNeedSecret ? "it has no job secret (TBCOLL_SECRET)"
                      : status == WelcomeStatus::kIntegrityDiffers
                          ? (integrity_ ? "it does not run the integrity mode (TBCOLL_INTEGRITY) and this rank does"
                                        : "it runs the integrity mode (TBCOLL_INTEGRITY) and this rank does not")
                      : status == WelcomeStatus::kNoSecret ? "it has a job secret and this rank none"
                      : status == WelcomeStatus::kBadSecret ? "wrong proof of the job secret"
                                                            : welcome_status_name(static_cast<uint32_t>(status));
    admission_.warn(fmt::format("[tcp] rank {}: rejected a connection claiming rank {} (protocol {}): {}", args_.rank,
                                hello.from_rank, hello.version, why));
    admission_.rejected();
    try {
      Welcome welcome{kHelloMagic, static_cast<uint32_t>(status)};
      net::write_all(fd, &welcome, sizeof(welcome), Clock::now() + std::chrono::milliseconds(100), who);
    } catch (const Error&) {
    }
    return -2;
  }

  void accept_from(const std::map<int, bool>& expected, std::map<int, int>& fds, Deadline deadline) {
    std::vector<Pending> pending;
    try {
      size_t accepted = 0;
      while (accepted < expected.size()) {
        check_cancelled(args_.cancelled, fmt::format("[tcp] rank {}: accepting peers", args_.rank));
        std::vector<pollfd> pfds{{listen_fd_, POLLIN, 0}};
        for (const Pending& p : pending) pfds.push_back({p.fd, POLLIN, 0});
        const int left = remaining_ms(deadline);
        if (left <= 0) throw not_connected(expected, fds);
        poll(pfds.data(), pfds.size(), std::min(left, 100));
        accepted += advance_pending(pending, pfds, expected, fds);
        if ((pfds[0].revents & POLLIN) != 0) admit(pending, deadline);
      }
    } catch (...) {
      for (Pending& p : pending) close(p.fd);
      throw;
    }
    for (Pending& p : pending) close(p.fd);
  }

  TimeoutError not_connected(const std::map<int, bool>& expected, const std::map<int, int>& fds) const {
    std::string missing;
    for (const auto& [rank, unused] : expected) {
      if (fds.count(rank) == 0) missing += (missing.empty() ? "" : ", ") + std::to_string(rank);
    }
    return TimeoutError(fmt::format("[tcp] rank {}: peers {} did not connect before the deadline{}", args_.rank,
                                    missing, admission_.describe()));
  }

  // Moves every pending connection's handshake on (pfds[i + 1] is pending[i]'s); completed ones join fds, failed
  // and expired ones are closed. Returns how many peers completed.
  size_t advance_pending(std::vector<Pending>& pending, const std::vector<pollfd>& pfds,
                         const std::map<int, bool>& expected, std::map<int, int>& fds) {
    size_t completed = 0;
    const auto now = Clock::now();
    for (size_t i = pending.size(); i-- > 0;) {
      Pending& p = pending[i];
      int rank = -1;
      if (pfds[i + 1].revents != 0) rank = advance(p, expected, fds);
      if (rank == -1 && now >= p.limit) {
        admission_.warn(fmt::format("[tcp] rank {}: dropped a connection that sent no complete handshake within {} s",
                                    args_.rank, kHandshakeTimeout.count()));
        admission_.dropped();
        rank = -2;
      }
      if (rank == -1) continue;
      if (rank >= 0) {
        fds[rank] = p.fd;
        completed++;
      } else {
        close(p.fd);
      }
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    }
    return completed;
  }

  // Accepts what waits in the backlog, up to a batch, while Admission leaves room (a silent or old connection
  // evicted at the cap; none accepted when every held one is young: they wait in the backlog).
  void admit(std::vector<Pending>& pending, Deadline deadline) {
    for (int batch = 0; batch < 64; ++batch) {
      const auto now = Clock::now();
      const int victim = admission_.victim(pending, now);
      if (victim == -2) return;
      if (victim >= 0) {
        close(pending[static_cast<size_t>(victim)].fd);
        pending.erase(pending.begin() + victim);
        admission_.dropped();
        admission_.warn(fmt::format("[tcp] rank {}: {} connections wait for their handshake: dropped the one that "
                                    "waited longest", args_.rank, Admission::kMaxUnproven));
      }
      const int fd = net::accept_tcp(listen_fd_);
      if (fd < 0) return;
      set_buffers(fd, buffer_bytes_);
      pending.push_back({fd, now, std::min(deadline, now + kHandshakeTimeout), {}});
    }
  }

  transport::ContextArgs args_;
  Admission admission_;  // what the listener lets in while it waits for its peers
  int buffer_bytes_;  // SO_SNDBUF/SO_RCVBUF of data sockets, 0: kernel default
  bool integrity_;    // TBCOLL_INTEGRITY: every message carries a MAC (wire.h)
  std::map<int, std::unique_ptr<Integrity>> integrity_of_;  // peer rank -> its connection's MACs, once handshaken
  int listen_fd_ = -1;
  std::string address_;
  transport::EndpointList<Endpoint> endpoints_;
};

}  // namespace

std::unique_ptr<transport::Context> make_context(const transport::ContextArgs& args) {
  return std::make_unique<Context>(args);
}

}  // namespace tbcoll::tcp
