// The ibverbs side channel's handshake (transports/ibverbs/port.cc) against an on-path relay: with a job secret,
// the proofs are bound to both ports' keys (wire::side_channel_context), so a relay that takes a rank's call to
// one port and hands it to another, rewriting the hellos' keys so neither end notices, is refused by both.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/auth.h"
#include "common/net.h"
#include "common/time.h"
#include "fake_verbs/fake_verbs.h"
#include "transports/ibverbs/port.h"
#include "transports/ibverbs/wire.h"

namespace tbcoll::ibverbs {
namespace {

PortOptions with_secret() {
  PortOptions options;
  options.mode = Mode::kUc;
  options.listen_host = "127.0.0.1";
  options.token = "job";
  options.secret = "a secret of at least sixteen bytes";
  return options;
}

// A man in the middle on one TCP connection: forwards bytes both ways, and in every Hello that passes rewrites
// the key fields: towards the acceptor, the port the dialer meant becomes the acceptor's own key; towards the
// dialer, the acceptor's key becomes the one the dialer meant. Bytes are held back only while a Hello may be
// starting, and never longer than 10 ms.
class Relay {
 public:
  Relay(std::string meant_key, std::string actual_key, std::string actual_address)
      : meant_(std::move(meant_key)), actual_(std::move(actual_key)), target_(std::move(actual_address)) {
    listen_fd_ = net::listen_tcp("127.0.0.1", &address_, "relay");
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() {
    stop_ = true;
    thread_.join();
    close(listen_fd_);
  }
  const std::string& address() const { return address_; }
  int hellos_rewritten() const { return rewritten_; }

 private:
  struct Direction {
    int from = -1, to = -1;
    std::vector<uint8_t> pending;
    bool towards_acceptor = false;
  };

  void run() {
    int dialer = -1;
    while (!stop_ && dialer < 0) {
      pollfd watch{listen_fd_, POLLIN, 0};
      if (poll(&watch, 1, 10) > 0) dialer = net::accept_tcp(listen_fd_);
    }
    if (dialer < 0) return;
    const int acceptor = net::connect_tcp(net::parse_host_port(target_, "relay"), deadline_after(5), "relay");
    Direction up{dialer, acceptor, {}, true}, down{acceptor, dialer, {}, false};
    while (!stop_ && pump(up) && pump(down)) {
    }
    close(dialer);
    close(acceptor);
  }

  // Moves what `from` has to `to`, rewriting hellos; false once either side closed.
  bool pump(Direction& d) {
    pollfd watch{d.from, POLLIN, 0};
    const int ready = poll(&watch, 1, 5);
    if (ready > 0) {
      uint8_t buffer[4096];
      const ssize_t got = recv(d.from, buffer, sizeof(buffer), 0);
      if (got <= 0) return false;
      d.pending.insert(d.pending.end(), buffer, buffer + got);
    }
    forward(d, ready <= 0);
    return true;
  }

  void forward(Direction& d, bool idle) {
    uint32_t magic = wire::kHelloMagic;
    uint8_t pattern[4];
    std::memcpy(pattern, &magic, 4);
    for (;;) {
      auto at = std::search(d.pending.begin(), d.pending.end(), pattern, pattern + 4);
      const size_t start = static_cast<size_t>(at - d.pending.begin());
      if (at != d.pending.end() && d.pending.size() - start >= sizeof(wire::Hello)) {
        wire::Hello hello;
        std::memcpy(&hello, &d.pending[start], sizeof(hello));
        char* field = d.towards_acceptor ? hello.peer_key : hello.key;
        const std::string& from = d.towards_acceptor ? meant_ : actual_;
        const std::string& to = d.towards_acceptor ? actual_ : meant_;
        if (from == field) {
          std::memset(field, 0, wire::kMaxKeyBytes);
          std::memcpy(field, to.data(), to.size());
          ++rewritten_;
        }
        std::memcpy(&d.pending[start], &hello, sizeof(hello));
        send_all(d.to, d.pending.data(), start + sizeof(hello));
        d.pending.erase(d.pending.begin(), d.pending.begin() + static_cast<std::ptrdiff_t>(start + sizeof(hello)));
        continue;
      }
      // Everything before a possible hello goes now; the rest once the peer has been quiet a moment.
      const size_t tail = idle ? 0 : std::min<size_t>(3, d.pending.size());
      const size_t safe = at != d.pending.end() ? start : d.pending.size() - tail;
      send_all(d.to, d.pending.data(), safe);
      d.pending.erase(d.pending.begin(), d.pending.begin() + static_cast<std::ptrdiff_t>(safe));
      return;
    }
  }

  static void send_all(int fd, const uint8_t* data, size_t bytes) {
    if (bytes > 0) net::write_all(fd, data, bytes, deadline_after(5), "relay");
  }

  std::string meant_, actual_, target_, address_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int> rewritten_{0};
  std::thread thread_;
};

// The acceptor's side: accepts calls on `port` until told to stop.
class Accepting {
 public:
  explicit Accepting(Port& port) : port_(port), thread_([this] { run(); }) {}
  ~Accepting() {
    stop_ = true;
    thread_.join();
  }

 private:
  void run() {
    while (!stop_) {
      try {
        port_.accept_one(deadline_after(10), nullptr, std::chrono::milliseconds(10));
      } catch (const Error&) {
      }
    }
  }
  Port& port_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(IbverbsSideChannel, AProofRelayedToAnotherPortIsRefused) {
  std::string why;
  if (!auth::available(&why)) GTEST_SKIP() << "no libcrypto: " << why;
  fake::ScopedFabric fabric;
  const PortOptions options = with_secret();
  Port dialer(*fake::verbs(), "a.0", "rdma_en0", options);
  Port meant(*fake::verbs(), "c.2", "rdma_en0", options);   // the port the dialer means to reach
  Port other(*fake::verbs(), "b.1", "rdma_en0", options);   // where the relay takes it instead
  const PortAddress to_other = Port::parse(other.address());
  Relay relay(meant.key(), other.key(), to_other.side_channel);
  PortAddress published = Port::parse(meant.address());
  published.side_channel = relay.address();  // the relay sits where the dialer looks for `meant`
  Accepting accepting(other);
  std::string failure;
  try {
    dialer.dial(published, deadline_after(5), nullptr);
  } catch (const Error& error) {
    failure = error.what();
  }
  EXPECT_GE(relay.hellos_rewritten(), 1) << "the relay saw the dialer's hello";
  EXPECT_NE(failure.find("could not prove it knows the job secret"), std::string::npos) << failure;
  EXPECT_EQ(other.find(dialer.key()), nullptr) << "the port the call was taken to filed no connection";
}

// The same ports without the relay: the call goes through, proofs and all.
TEST(IbverbsSideChannel, PortsWithTheSameSecretConnect) {
  std::string why;
  if (!auth::available(&why)) GTEST_SKIP() << "no libcrypto: " << why;
  fake::ScopedFabric fabric;
  const PortOptions options = with_secret();
  Port dialer(*fake::verbs(), "a.0", "rdma_en0", options);
  Port acceptor(*fake::verbs(), "b.1", "rdma_en0", options);
  Accepting accepting(acceptor);
  auto connection = dialer.dial(Port::parse(acceptor.address()), deadline_after(5), nullptr);
  ASSERT_TRUE(connection);
  EXPECT_TRUE(connection->alive());
}

}  // namespace
}  // namespace tbcoll::ibverbs
