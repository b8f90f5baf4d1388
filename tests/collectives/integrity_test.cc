// The integrity mode (TBCOLL_INTEGRITY=1): an on-path relay that passes the handshake through (it cannot forge it:
// the job secret) and then alters one byte of data goes unnoticed with the secret alone, and fails the call with
// the integrity mode.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/rendezvous.h"
#include "bootstrap/store_auth.h"
#include "collectives/harness.h"
#include "common/auth.h"
#include "common/net.h"
#include "common/time.h"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll {
namespace {

// Accepts one connection, connects it to `target` and copies bytes both ways, flipping the byte at offset
// `flip_at` of the connector's stream. Stops when both sides closed or after 30 s.
class Relay {
 public:
  Relay(std::string target, size_t flip_at) : target_(std::move(target)), flip_at_(flip_at) {
    listen_fd_ = net::listen_tcp("127.0.0.1", &address_, "relay");
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() {
    stop_ = true;
    thread_.join();
    close(listen_fd_);
  }
  const std::string& address() const { return address_; }

 private:
  void run() {
    const auto until = Clock::now() + std::chrono::seconds(30);
    int from = -1;
    while (from < 0 && !stop_ && Clock::now() < until) {
      pollfd pfd{listen_fd_, POLLIN, 0};
      if (poll(&pfd, 1, 50) > 0) from = net::accept_tcp(listen_fd_);
    }
    if (from < 0) return;
    const int to = net::connect_tcp(net::parse_host_port(target_, "relay"), deadline_after(5), "relay");
    size_t forwarded = 0;
    bool open[2] = {true, true};
    while ((open[0] || open[1]) && !stop_ && Clock::now() < until) {
      pollfd pfds[2] = {{from, POLLIN, 0}, {to, POLLIN, 0}};
      if (poll(pfds, 2, 50) <= 0) continue;
      for (int side = 0; side < 2; ++side) {
        if (!open[side] || pfds[side].revents == 0) continue;
        char buffer[65536];
        const ssize_t got = recv(side == 0 ? from : to, buffer, sizeof(buffer), 0);
        if (got <= 0) {
          open[side] = false;
          shutdown(side == 0 ? to : from, SHUT_WR);
          continue;
        }
        if (side == 0) {
          if (forwarded <= flip_at_ && flip_at_ < forwarded + static_cast<size_t>(got)) buffer[flip_at_ - forwarded] ^= 0x40;
          forwarded += static_cast<size_t>(got);
        }
        try {
          net::write_all(side == 0 ? to : from, buffer, static_cast<size_t>(got), deadline_after(5), "relay");
        } catch (const Error&) {
          open[0] = open[1] = false;
        }
      }
    }
    close(from);
    close(to);
  }

  std::string target_;
  size_t flip_at_;
  int listen_fd_ = -1;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct Outcome {
  std::vector<float> result[2];
  std::string errors[2];
};

// Two ranks over tcp with the secret (and knobs); rank 1 reaches rank 0 through a relay that flips one byte of the
// first all-reduce's data (rank 1 sends 4096 floats of 1.0f; the handshake is some 140 bytes).
Outcome relayed_all_reduce(const std::map<std::string, std::string>& knobs) {
  auto store = make_in_memory_store();
  Outcome out;
  std::unique_ptr<Relay> relay;
  auto body = [&](int rank) {
    out.errors[rank] = test::error_of([&] {
      Config config;
      config.rank = rank;
      config.world_size = 2;
      config.store = store;
      config.transport = "tcp";
      config.timeout_s = 5;
      config.prefix = "relayed";
      config.knobs = knobs;
      config.algo = "direct";
      Communicator comm = Communicator::init(config);
      std::vector<float> data(4096, 1.0f);
      comm.all_reduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
      out.result[rank] = data;
    });
  };
  std::thread rank0(body, 0);
  // Rank 0's record, rewritten to send rank 1 to the relay before rank 1 reads it. With the secret, records carry
  // a MAC a rewrite cannot forge (store_auth.h): the test seals its rewrite with the secret, standing for an
  // attacker who redirects the traffic on the network instead (ARP, a router), which no record can prevent.
  const auto secret = knobs.find("TBCOLL_SECRET");
  const std::shared_ptr<Store> records =
      secret == knobs.end() ? store : bootstrap::authenticated(store, secret->second, "tbcoll");
  std::string record;
  try {
    record = bootstrap::text_of(records->get("relayed/peer/0", deadline_after(10)));
  } catch (const Error& error) {
    rank0.join();
    ADD_FAILURE() << error.what() << " | rank 0: " << out.errors[0];
    return out;
  }
  const size_t at = record.find("dev.tcp=");
  const size_t end = record.find('\n', at);
  relay = std::make_unique<Relay>(record.substr(at + 8, end - at - 8), 1000);
  const std::string rewritten = record.substr(0, at + 8) + relay->address() + record.substr(end);
  records->set("relayed/peer/0", bootstrap::bytes_of(rewritten), deadline_after(5));
  std::thread rank1(body, 1);
  rank0.join();
  rank1.join();
  return out;
}

TEST(Integrity, ARelayThatAltersDataFailsTheCallInTheIntegrityMode) {
  if (!auth::available()) GTEST_SKIP() << "no libcrypto";
  const std::string secret = "integrity-test-secret-0123456789";
  // The secret alone: the relay passes the proofs on, and the altered float goes unnoticed.
  Outcome plain = relayed_all_reduce({{"TBCOLL_SECRET", secret}});
  ASSERT_EQ(plain.errors[0], "");
  size_t wrong = 0;
  for (float value : plain.result[0]) wrong += value != 2.0f;
  EXPECT_EQ(wrong, 1u) << "the relay's change should reach rank 0 (the attack this mode is for)";
  // The integrity mode: rank 0 refuses the altered message, naming the check.
  Outcome checked = relayed_all_reduce({{"TBCOLL_SECRET", secret}, {"TBCOLL_INTEGRITY", "1"}});
  EXPECT_NE(checked.errors[0].find("failed its integrity check (TBCOLL_INTEGRITY)"), std::string::npos)
      << checked.errors[0];
  EXPECT_TRUE(checked.result[0].empty()) << "rank 0's call returned";
}

TEST(Integrity, JobsRunWithItAndItNeedsTheSecretAndEveryRank) {
  if (!auth::available()) GTEST_SKIP() << "no libcrypto";
  test::RankOptions options{"tcp", "", 20};
  options.knobs = {{"TBCOLL_SECRET", "integrity-secret-for-every-rank"}, {"TBCOLL_INTEGRITY", "1"}};
  for (size_t count : {size_t{0}, size_t{1}, size_t{4099}, (size_t{1} << 20) + 3}) {
    test::run_ranks(3, options, [&](Communicator& comm) {
      std::vector<float> buf(count, 1.0f);
      comm.all_reduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
      for (float value : buf) ASSERT_EQ(value, 3.0f) << count;
    });
  }
  // Without the secret: refused at once, naming what it needs.
  test::RankOptions no_secret{"tcp", "", 5};
  no_secret.knobs = {{"TBCOLL_INTEGRITY", "1"}};
  auto store = make_in_memory_store();
  Config config;
  config.rank = 0;
  config.world_size = 2;
  config.store = store;
  config.transport = "tcp";
  config.knobs = no_secret.knobs;
  EXPECT_NE(test::error_of([&] { Communicator::init(config); }).find("TBCOLL_INTEGRITY=1 needs the job secret"),
            std::string::npos);
  // On one rank only: the handshake says so.
  std::string errors[2];
  std::thread ranks[2];
  auto shared = make_in_memory_store();
  for (int rank = 0; rank < 2; ++rank) {
    ranks[rank] = std::thread([&, rank] {
      Config one;
      one.rank = rank;
      one.world_size = 2;
      one.store = shared;
      one.transport = "tcp";
      one.timeout_s = 2;
      one.knobs = {{"TBCOLL_SECRET", "integrity-secret-for-every-rank"}, {"TBCOLL_INTEGRITY", rank == 0 ? "1" : "0"}};
      errors[rank] = test::error_of([&] { Communicator::init(one); });
    });
  }
  for (auto& rank : ranks) rank.join();
  EXPECT_NE(errors[1].find("the integrity mode is on at one end only"), std::string::npos) << errors[1];
  EXPECT_NE(errors[0], "");
}

}  // namespace
}  // namespace tbcoll
