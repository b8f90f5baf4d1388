// The second set-up round of the transport contract: a transport whose capabilities ask for per-peer addresses
// gets Context::address_for(peer) delivered to that peer alone, as PeerAddress::for_me, with the peer's identity.
// The transport here is loopback behind a wrapper that refuses to connect unless what it got is what was made
// for it.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include <fmt/format.h>

#include "collectives/checks.h"
#include "collectives/harness.h"
#include "collectives/wrapped_device.h"
#include "tbcoll/transport.hpp"

namespace tbcoll::test {
namespace {

std::atomic<int> addresses_made{0};

std::string made_for(int from, int to, uint64_t comm_id) { return fmt::format("qp {}->{} of {:x}", from, to, comm_id); }

class PairedContext final : public transport::Context {
 public:
  PairedContext(std::unique_ptr<transport::Context> inner, const transport::ContextArgs& args)
      : inner_(std::move(inner)), rank_(args.rank), comm_id_(args.comm_id) {}
  std::string address() const override { return inner_->address(); }
  std::string address_for(const transport::PeerAddress& peer) override {
    if (!peer.for_me.empty()) throw Error(tbcollInternalError, "address_for called after the exchange");
    addresses_made++;
    return made_for(rank_, peer.rank, comm_id_);
  }
  std::vector<std::unique_ptr<transport::Endpoint>> connect(const std::vector<transport::PeerAddress>& peers,
                                                            Deadline deadline) override {
    for (const transport::PeerAddress& peer : peers) {
      if (peer.for_me != made_for(peer.rank, rank_, comm_id_)) {
        throw RemoteError(fmt::format("[paired] rank {}: peer {} sent {:?}", rank_, peer.rank, peer.for_me));
      }
      if (peer.info.rank != peer.rank || peer.info.process_id == 0 || peer.info.host_id.empty()) {
        throw RemoteError(fmt::format("[paired] rank {}: no identity for peer {}", rank_, peer.rank));
      }
    }
    return inner_->connect(peers, deadline);
  }
  void abort() override { inner_->abort(); }

 private:
  std::unique_ptr<transport::Context> inner_;
  int rank_;
  uint64_t comm_id_;
};

class PairedDevice final : public WrappedDevice {
 public:
  explicit PairedDevice(std::shared_ptr<transport::Device> inner) : WrappedDevice("paired", std::move(inner)) {}
  transport::Capabilities capabilities() const override {
    transport::Capabilities caps = inner_->capabilities();
    caps.per_peer_addresses = true;
    return caps;
  }
  std::unique_ptr<transport::Context> create_context(const transport::ContextArgs& args) override {
    return std::make_unique<PairedContext>(inner_->create_context(args), args);
  }
};

void register_paired() { register_wrapped<PairedDevice>(); }

TEST(PeerExchange, EachPeerGetsWhatWasMadeForIt) {
  register_paired();
  addresses_made = 0;
  run_ranks(4, {"paired", ""}, [&](Communicator& comm) {
    EXPECT_EQ(comm.transport_name((comm.rank() + 1) % 4), "paired");
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 1000, 0);
    // A split forms anew: a second exchange under its own prefix.
    auto half = comm.split(comm.rank() % 2, comm.rank());
    ASSERT_TRUE(half.has_value());
    check_all_gather(*half, DataType::kInt32, 17);
  });
  EXPECT_EQ(addresses_made.load(), 4 * 3 + 4 * 1) << "one per peer: 4 ranks, then two pairs";
}

TEST(PeerExchange, TransportsThatDoNotAskGetNoSecondRound) {
  register_paired();
  addresses_made = 0;
  run_ranks(3, {"loopback", ""}, [&](Communicator& comm) {
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 10, 0);
  });
  EXPECT_EQ(addresses_made.load(), 0);
}

}  // namespace
}  // namespace tbcoll::test
