// The ibverbs transport's device choice on the fake fabric: device matrices (cables per pair, null pairs on the
// next transport), several rails per peer (striping, per-rail faults), queue pair budgets and TBCOLL_IB_MODE=auto.
#include <thread>

#include <gtest/gtest.h>

#include "collectives/checks.h"
#include "collectives/harness.h"
#include "common/time.h"
#include "fake_verbs/endpoint_pair.h"
#include "fake_verbs/fake_verbs.h"
#include "transports/ibverbs/device.h"
#include "transports/ibverbs/endpoint.h"

namespace tbcoll::ibverbs {
namespace {

using test::check_all_gather;
using test::check_all_reduce;
using test::check_broadcast;
using test::error_of;
using test::run_ranks;

fake::Options devices(int count, bool strict = true) {
  fake::Options options;
  options.devices = count;
  options.apple_strict = strict;
  return options;
}

// The fake ibverbs device ahead of every other transport, so a pair it declines shows which transport takes it
// (loopback here: the ranks are threads). It joins only while `enabled` (a test's duration): every other
// communicator of this binary sees an address no pair accepts, and never touches the fake fabric.
std::atomic<bool> first_enabled{false};

class FirstDevice final : public transport::Device {
 public:
  FirstDevice() : inner_(make_device(fake::verbs(), "fakeverbs_first", /*same_process_only=*/true)) {}
  std::string name() const override { return "fakeverbs_first"; }
  transport::Capabilities capabilities() const override { return inner_->capabilities(); }
  bool can_connect(const transport::PeerInfo& self, const transport::PeerInfo& peer) const override {
    return inner_->can_connect(self, peer);
  }
  bool can_connect_addresses(const transport::PeerInfo& self, const std::string& self_address,
                             const transport::PeerInfo& peer, const std::string& peer_address,
                             std::string* why_not) const override {
    return !self_address.empty() && !peer_address.empty() &&
           inner_->can_connect_addresses(self, self_address, peer, peer_address, why_not);
  }
  std::unique_ptr<transport::Context> create_context(const transport::ContextArgs& args) override {
    if (first_enabled) return inner_->create_context(args);
    struct Idle final : transport::Context {
      std::string address() const override { return ""; }
      std::vector<std::unique_ptr<transport::Endpoint>> connect(const std::vector<transport::PeerAddress>&,
                                                                Deadline) override {
        throw InvalidUsage("fakeverbs_first is idle");
      }
      void abort() override {}
    };
    return std::make_unique<Idle>();
  }

 private:
  std::shared_ptr<transport::Device> inner_;
};

struct FirstTransport {
  FirstTransport() {
    static const bool registered = [] {
      transport::register_device(std::make_shared<FirstDevice>(), 0);
      return true;
    }();
    (void)registered;
    first_enabled = true;
  }
  ~FirstTransport() { first_enabled = false; }
};

// What init says on each of n ranks (threads) with these settings ("" where it succeeds).
std::vector<std::string> init_errors(int n, const std::string& transport, std::map<std::string, std::string> knobs,
                                     double timeout_s = 10) {
  std::vector<std::string> messages(static_cast<size_t>(n));
  auto store = make_in_memory_store();
  std::vector<Config> configs(static_cast<size_t>(n));
  for (int rank = 0; rank < n; ++rank) {
    Config& config = configs[static_cast<size_t>(rank)];
    config.rank = rank;
    config.world_size = n;
    config.store = store;
    config.transport = transport;
    config.timeout_s = timeout_s;
    config.knobs = knobs;
  }
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      messages[static_cast<size_t>(rank)] = error_of([&] { Communicator::init(configs[static_cast<size_t>(rank)]); });
    });
  }
  for (auto& thread : threads) thread.join();
  return messages;
}

#define EXPECT_SAYS(message, part) EXPECT_NE((message).find(part), std::string::npos) << (message)

// ---- device matrices -----------------------------------------------------------------------------------------

// Ranks 0 and 1 have two cables, rank 2 one to each, on its single device.
const char* const kThreeRanks = R"([[null, ["rdma_en0", "rdma_en1"], "rdma_en2"],
                                     [["rdma_en1", "rdma_en0"], null, "rdma_en2"],
                                     ["rdma_en0", "rdma_en0", null]])";

TEST(IbverbsMatrix, EveryPairUsesItsCables) {
  fake::ScopedFabric fabric(devices(3));
  fake::clear_calls();
  test::RankOptions options{"fakeverbs", "", 20};
  options.knobs = {{"TBCOLL_IB_DEVICES", kThreeRanks}, {"TBCOLL_IB_MODE", "uc"}, {"TBCOLL_IB_STRIPE_BYTES", "8192"}};
  run_ranks(3, options, [&](Communicator& comm) {
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 100003, 0);
    check_all_gather(comm, DataType::kUint8, 77777);
    check_broadcast(comm, DataType::kInt32, 5, 2);
  });
  EXPECT_EQ(fake::calls()["create_qp"], 16u) << "pair 0-1 two links a side, pairs 0-2 and 1-2 one; two lanes each";
  EXPECT_EQ(fake::calls()["open_device"], 3u + 3u + 1u) << "a port per device a rank's row names";
  EXPECT_EQ(fake::counters().length_errors, 0u);
}

TEST(IbverbsMatrix, APairWithoutCableUsesTheNextTransport) {
  fake::ScopedFabric fabric(devices(2));
  FirstTransport first;
  test::RankOptions options{"", "", 20};
  options.knobs = {{"TBCOLL_IB_DEVICES", R"([[null, "rdma_en0", null], ["rdma_en0", null, "rdma_en1"],
                                             [null, "rdma_en0", null]])"}};
  run_ranks(3, options, [&](Communicator& comm) {
    const int rank = comm.rank();
    for (int peer = 0; peer < 3; ++peer) {
      if (peer == rank) continue;
      const bool cabled = rank == 1 || peer == 1;
      EXPECT_EQ(comm.transport_name(peer), cabled ? "fakeverbs_first" : "loopback") << rank << "-" << peer;
    }
    check_all_reduce(comm, DataType::kFloat64, ReduceOp::kSum, 20000, 1);
  });
}

TEST(IbverbsMatrix, AForcedTransportSaysThePairHasNoCable) {
  fake::ScopedFabric fabric(devices(1));
  const auto messages = init_errors(3, "fakeverbs", {{"TBCOLL_IB_DEVICES", R"([[null, "rdma_en0", null],
      ["rdma_en0", null, "rdma_en0"], [null, "rdma_en0", null]])"}}, 2);
  EXPECT_SAYS(messages[0], "no transport can reach peer 2 with TBCOLL_TRANSPORT=fakeverbs");
  EXPECT_SAYS(messages[0], "the device matrix has no cable between ranks 0 and 2");
}

TEST(IbverbsMatrix, ErrorsNameTheMatrixRowAndColumn) {
  fake::ScopedFabric fabric(devices(2));
  auto first = [](std::map<std::string, std::string> knobs, int n = 2) { return init_errors(n, "fakeverbs", knobs, 1)[0]; };
  EXPECT_SAYS(first({{"TBCOLL_IB_DEVICES", R"([[null, "rdma_en7"], ["rdma_en0", null]])"}}),
              "row 0, column 1 names rdma_en7, which this host does not have (its RDMA devices: rdma_en0, rdma_en1)");
  EXPECT_SAYS(first({{"TBCOLL_IB_DEVICES", R"([[null, "rdma_en0"], ["rdma_en0", null]])"}}, 3),
              "is 2 x 2, but the job has 3 ranks");
  EXPECT_SAYS(first({{"TBCOLL_IB_DEVICES", "/nonexistent/devices.json"}}),
              "device matrix /nonexistent/devices.json: cannot read the file");
  EXPECT_SAYS(first({{"TBCOLL_IB_DEVICES", R"([[null, "rdma_en0"], ["rdma_en0", null])"}}),
              "TBCOLL_IB_DEVICES: malformed JSON at line 1, column 40");
}

// ---- rails ---------------------------------------------------------------------------------------------------

// Two ranks' endpoints over the fake, driven by this thread; knobs for both.
using Pair = fake::EndpointPair;
std::unique_ptr<Pair> connect_pair(std::map<std::string, std::string> knobs,
                                   std::map<std::string, std::string> rank1_knobs = {}) {
  return fake::connect_endpoint_pair(knobs, rank1_knobs);
}

std::vector<uint8_t> pattern(size_t bytes, int salt) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 131 + i / 4096 * 7 + static_cast<size_t>(salt));
  return out;
}

// Waits for every request, both ranks progressing (credits flow only so).
void finish(std::vector<std::unique_ptr<transport::Request>>& requests) {
  const Deadline deadline = deadline_after(20);
  for (bool all = false; !all;) {
    ASSERT_LT(Clock::now(), deadline) << "requests not done";
    all = true;
    for (auto& request : requests) all = request->test() && all;
  }
}

TEST(IbverbsRails, LargeMessagesAreStripedAndSmallOnesStayOnOneRail) {
  fake::ScopedFabric fabric(devices(2));
  auto pair = connect_pair({{"TBCOLL_IB_RAILS", "2"}, {"TBCOLL_IB_STRIPE_BYTES", "65536"}});
  ASSERT_EQ(pair->ib(0).rails(), 2);
  EXPECT_EQ(pair->ib(0).rail(0).device(), "rdma_en0");
  EXPECT_EQ(pair->ib(0).rail(1).device(), "rdma_en1");
  // Small ones first: all on rail 0.
  std::vector<std::unique_ptr<transport::Request>> requests;
  std::vector<std::vector<uint8_t>> small_in(20);
  const auto small_out = pattern(1000, 1);
  for (int i = 0; i < 20; ++i) {
    small_in[i].resize(small_out.size());
    requests.push_back(pair->endpoints[1]->irecv(small_in[i].data(), small_out.size(), {1, 2}));
    requests.push_back(pair->endpoints[0]->isend(small_out.data(), small_out.size(), {1, 2}));
  }
  finish(requests);
  for (const auto& in : small_in) EXPECT_EQ(in, small_out);
  EXPECT_EQ(pair->ib(0).rail(1).frames_sent(), 0u) << "below the stripe size: one rail";
  // Odd sizes around the stripe size and the frame size, many at once, the later ones sent before their receive.
  const std::vector<size_t> sizes = {0, 1, 4031, 4032, 4033, 65535, 65536, 65537, 100003, (1 << 20) + 3, 7};
  std::vector<std::vector<uint8_t>> outs, ins(sizes.size());
  requests.clear();
  for (size_t i = 0; i < sizes.size(); ++i) {
    outs.push_back(pattern(sizes[i], static_cast<int>(i)));
    ins[i].assign(sizes[i], 0xee);
    if (i < 5) requests.push_back(pair->endpoints[1]->irecv(ins[i].data(), sizes[i], {3, i}));
    requests.push_back(pair->endpoints[0]->isend(outs[i].data(), sizes[i], {3, i}));
  }
  for (size_t i = 5; i < sizes.size(); ++i) requests.push_back(pair->endpoints[1]->irecv(ins[i].data(), sizes[i], {3, i}));
  // ... and the other way at the same time.
  const auto back_out = pattern(300001, 9);
  std::vector<uint8_t> back_in(back_out.size());
  requests.push_back(pair->endpoints[0]->irecv(back_in.data(), back_in.size(), {4, 0}));
  requests.push_back(pair->endpoints[1]->isend(back_out.data(), back_out.size(), {4, 0}));
  finish(requests);
  for (size_t i = 0; i < sizes.size(); ++i) EXPECT_TRUE(ins[i] == outs[i]) << sizes[i] << " B";
  EXPECT_TRUE(back_in == back_out);
  const uint64_t rail0 = pair->ib(0).rail(0).payload_sent(), rail1 = pair->ib(0).rail(1).payload_sent();
  EXPECT_GT(rail1, 500000u) << "the large messages went half on rail 1";
  EXPECT_NEAR(static_cast<double>(rail0), static_cast<double>(rail1), 0.2 * static_cast<double>(rail0 + rail1))
      << "rail 0 " << rail0 << " B, rail 1 " << rail1 << " B";
  EXPECT_GT(pair->ib(1).rail(1).frames_sent(), 30u);
}

// A flaky cable: its loss is reported naming its device, and nothing is delivered with a hole.
TEST(IbverbsRails, ALossOnOneRailIsReportedNamingIt) {
  fake::Options options = devices(2);
  options.faulty_device = 1;
  fake::ScopedFabric fabric(options);
  auto pair = connect_pair({{"TBCOLL_IB_RAILS", "2"}, {"TBCOLL_IB_STRIPE_BYTES", "8192"}});
  const auto out = pattern(200000, 3);
  std::vector<uint8_t> in(out.size(), 0);
  fake::drop_next_sends(1);
  std::vector<std::unique_ptr<transport::Request>> requests;
  requests.push_back(pair->endpoints[1]->irecv(in.data(), in.size(), {1, 1}));
  requests.push_back(pair->endpoints[0]->isend(out.data(), out.size(), {1, 1}));
  std::string message;
  const Deadline deadline = deadline_after(10);
  while (message.empty() && Clock::now() < deadline) {
    message = error_of([&] {
      requests[0]->test();
      requests[1]->test();
    });
  }
  EXPECT_SAYS(message, "rdma_en1: frames from");
  EXPECT_SAYS(message, "were lost");
  EXPECT_EQ(fake::counters().dropped_injected, 1u);
}

TEST(IbverbsRails, ACorruptFrameOnOneRailIsReportedNamingIt) {
  fake::Options options = devices(2);
  options.faulty_device = 1;
  fake::ScopedFabric fabric(options);
  auto pair = connect_pair(
      {{"TBCOLL_IB_RAILS", "2"}, {"TBCOLL_IB_STRIPE_BYTES", "8192"}, {"TBCOLL_IB_PAYLOAD_SUM", "1"}});
  const auto out = pattern(50000, 4);
  std::vector<uint8_t> in(out.size(), 0);
  fake::corrupt_next_sends(1);
  auto recv = pair->endpoints[1]->irecv(in.data(), in.size(), {1, 1});
  auto send = pair->endpoints[0]->isend(out.data(), out.size(), {1, 1});
  std::string message;
  const Deadline deadline = deadline_after(10);
  while (message.empty() && Clock::now() < deadline) {
    message = error_of([&] {
      send->test();
      recv->test();
    });
  }
  EXPECT_SAYS(message, "rdma_en1: a damaged frame");
}

// The rails over a communicator: every collective, odd sizes, splits sharing the rails' queue pairs.
TEST(IbverbsRails, CollectivesOverTwoRails) {
  fake::ScopedFabric fabric(devices(2));
  fake::clear_calls();
  test::RankOptions options{"fakeverbs", "", 30};
  options.knobs = {{"TBCOLL_IB_RAILS", "2"}, {"TBCOLL_IB_STRIPE_BYTES", "16384"}};
  run_ranks(3, options, [&](Communicator& comm) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{4096}, size_t{(1 << 18) + 3}}) {
      check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, count, 0);
      check_all_gather(comm, DataType::kInt8, count);
    }
    auto half = comm.split(comm.rank() == 2 ? 1 : 0, comm.rank());
    ASSERT_TRUE(half);
    check_all_reduce(*half, DataType::kFloat64, ReduceOp::kMax, 99999, 3);
  });
  EXPECT_EQ(fake::calls()["create_qp"], 2u * 3u * 2u * 2u)
      << "two links per pair and side, two lanes each, no RC probe on rdma_enN";
}

// ---- lanes ----------------------------------------------------------------------------------------------------

// One message each way through the pair, checked; returns what rail 0 of rank 0 sent (slots, frames).
std::pair<uint64_t, uint64_t> through(Pair& pair, size_t bytes) {
  const uint64_t slots = pair.ib(0).rail(0).slots_sent(), frames = pair.ib(0).rail(0).frames_sent();
  const auto out = pattern(bytes, static_cast<int>(bytes % 251));
  std::vector<uint8_t> in(bytes, 0);
  std::vector<std::unique_ptr<transport::Request>> requests;
  requests.push_back(pair.endpoints[1]->irecv(in.data(), in.size(), {3, 3}));
  requests.push_back(pair.endpoints[0]->isend(out.data(), out.size(), {3, 3}));
  finish(requests);
  EXPECT_TRUE(in == out) << bytes << " B";
  return {pair.ib(0).rail(0).slots_sent() - slots, pair.ib(0).rail(0).frames_sent() - frames};
}

// Whole slots while a slot's worth is left, a padded one for a remainder of half a slot or more, frames for the
// rest and for small messages; every slot sent full into a receive of its size (the strict fabric counts frames).
// On a noted link (zero-copy on at both ends, the default off Apple's librdma) each slot also sends a note frame.
TEST(IbverbsLanes, LargeMessagesGoInFullSlotsSmallOnesAndTailsInFrames) {
  for (const char* zero_copy : {"1", "0"}) {
    SCOPED_TRACE(std::string("TBCOLL_IB_ZERO_COPY=") + zero_copy);
    fake::ScopedFabric fabric(devices(1));
    auto pair = connect_pair({{"TBCOLL_IB_ZERO_COPY", zero_copy}});
    const Connection& link = pair->ib(0).rail(0);
    ASSERT_TRUE(link.bulk());
    EXPECT_EQ(link.noted(), std::string(zero_copy) == "1");
    EXPECT_EQ(link.slot_bytes(), 512u * 1024);
    const size_t slot = link.slot_payload();
    EXPECT_EQ(slot, link.slot_bytes() - sizeof(wire::Header));
    // (slots, frames) for `slots` slots and `tail` frames of data.
    auto sent = [&](uint64_t slots, uint64_t tail) { return std::make_pair(slots, tail + (link.noted() ? slots : 0)); };
    EXPECT_EQ(through(*pair, 8), sent(0, 1));
    EXPECT_EQ(through(*pair, slot / 2), sent(0, (slot / 2 + 4031) / 4032));
    EXPECT_EQ(through(*pair, 3 * slot + 100), sent(3, 1)) << "the tail in a frame";
    EXPECT_EQ(through(*pair, 2 * slot + slot / 2 + 100), sent(3, 0)) << "half a slot or more: a padded slot";
    EXPECT_EQ(through(*pair, (size_t{16} << 20) + 5), sent((size_t{16} << 20) / slot, 1));
    EXPECT_EQ(fake::counters().length_errors, 0u);
  }
}

TEST(IbverbsLanes, TheSlotIsTheSmallerOfBothEnds) {
  fake::ScopedFabric fabric(devices(1));
  auto pair = connect_pair({{"TBCOLL_IB_SLOT_BYTES", "65536"}}, {{"TBCOLL_IB_SLOT_BYTES", "262144"}});
  EXPECT_EQ(pair->ib(0).rail(0).slot_bytes(), 65536u);
  EXPECT_EQ(pair->ib(1).rail(0).slot_bytes(), 65536u);
  EXPECT_EQ(through(*pair, 1 << 20).first, uint64_t{(1 << 20) / (65536 - 64)});
  EXPECT_EQ(fake::counters().length_errors, 0u);
  const auto bad = init_errors(2, "fakeverbs", {{"TBCOLL_IB_SLOT_BYTES", "5000"}}, 2);
  EXPECT_SAYS(bad[0], "TBCOLL_IB_SLOT_BYTES=5000: 0 (automatic), or a multiple of 4096 from 16384 to 1048576");
}

// A device without room for two queue pairs per peer: its links take one, and every message goes in frames.
TEST(IbverbsLanes, ALinkWithoutRoomForTwoQueuePairsUsesFramesAlone) {
  fake::ScopedFabric fabric(devices(1));
  fake::clear_calls();
  auto pair = connect_pair({{"TBCOLL_IB_MAX_QPS", "1"}, {"TBCOLL_IB_DEVICES", "rdma_en0"}});
  EXPECT_FALSE(pair->ib(0).rail(0).bulk());
  EXPECT_EQ(fake::calls()["create_qp"], 2u) << "one a side";
  EXPECT_EQ(through(*pair, (1 << 20) + 3), std::make_pair(uint64_t{0}, uint64_t{((1 << 20) + 3 + 4031) / 4032}));
}

// ---- queue pair budget ---------------------------------------------------------------------------------------

// Apple-strict: 10 queue pairs per device and process; 12 ranks over one device (TBCOLL_IB_DEVICES: every peer
// over it) would need 11 each. With more peers than half the budget a link takes one queue pair, not two.
TEST(IbverbsBudget, AutoModeSendsThePeersPastTheBudgetToTheNextTransport) {
  fake::ScopedFabric fabric(devices(1));
  FirstTransport first;
  fake::clear_calls();
  test::RankOptions options{"", "", 60};
  options.knobs = {{"TBCOLL_IB_DEVICES", "rdma_en0"}};
  run_ranks(12, options, [&](Communicator& comm) {
    for (int peer = 0; peer < 12; ++peer) {
      if (peer == comm.rank()) continue;
      const bool over_ib = comm.rank() != 11 && peer != 11;  // peers in world-rank order take the budget
      EXPECT_EQ(comm.transport_name(peer), over_ib ? "fakeverbs_first" : "loopback") << comm.rank() << "-" << peer;
    }
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 5000, 2);
  });
  // Ranks 0-10 joined pairwise, one lane each (10 peers on a device of 10), and no RC probe on Apple's rdma_enN.
  EXPECT_EQ(fake::calls()["create_qp"], 11u * 10u);
}

TEST(IbverbsBudget, AForcedModeOverTheBudgetSaysWhichDeviceAndLimit) {
  fake::ScopedFabric fabric(devices(1));
  const auto messages = init_errors(12, "fakeverbs", {{"TBCOLL_IB_MODE", "uc"}, {"TBCOLL_IB_DEVICES", "rdma_en0"}}, 10);
  EXPECT_SAYS(messages[3], "rank 3: rdma_en0 would need 11 queue pairs (one per peer), over its limit of 10");
  EXPECT_SAYS(messages[3], "TBCOLL_IB_MODE=auto");
  const auto limited = init_errors(
      4, "fakeverbs", {{"TBCOLL_IB_MODE", "uc"}, {"TBCOLL_IB_MAX_QPS", "2"}, {"TBCOLL_IB_DEVICES", "rdma_en0"}}, 10);
  EXPECT_SAYS(limited[0], "rdma_en0 would need 3 queue pairs (one per peer), over its limit of 2");
  // By subnet (no TBCOLL_IB_DEVICES) the peers over a device are known once all are: init fails naming it.
  const auto by_subnet = init_errors(4, "fakeverbs", {{"TBCOLL_IB_MAX_QPS", "2"}}, 10);
  EXPECT_SAYS(by_subnet[0], "rdma_en0 would need 3 queue pairs (one per peer at least, 3 peers on its subnet), over "
                            "its limit of 2");
}

TEST(IbverbsBudget, AForcedTransportInAutoModeSaysWhyAPeerIsUnreachable) {
  fake::ScopedFabric fabric(devices(1));
  const auto messages = init_errors(4, "fakeverbs", {{"TBCOLL_IB_MAX_QPS", "2"}, {"TBCOLL_IB_DEVICES", "rdma_en0"}}, 10);
  EXPECT_SAYS(messages[0], "no transport can reach peer 3 with TBCOLL_TRANSPORT=fakeverbs");
  EXPECT_SAYS(messages[0], "rdma_en0 of rank 0 has queue pairs for 2 peers");
}

// ---- TBCOLL_IB_MODE=auto -------------------------------------------------------------------------------------

TEST(IbverbsAutoMode, UcOnAppleRcWhereTheDeviceHasIt) {
  for (bool strict : {true, false}) {
    fake::ScopedFabric fabric(devices(1, strict));
    auto pair = connect_pair({});  // TBCOLL_IB_MODE defaults to auto
    EXPECT_EQ(pair->ib(0).rail(0).mode(), strict ? Mode::kUc : Mode::kRc) << "strict " << strict;
    EXPECT_EQ(pair->ib(1).rail(0).mode(), strict ? Mode::kUc : Mode::kRc) << "strict " << strict;
    const auto out = pattern(70000, 5);
    std::vector<uint8_t> in(out.size());
    std::vector<std::unique_ptr<transport::Request>> requests;
    requests.push_back(pair->endpoints[1]->irecv(in.data(), in.size(), {1, 1}));
    requests.push_back(pair->endpoints[0]->isend(out.data(), out.size(), {1, 1}));
    finish(requests);
    EXPECT_TRUE(in == out);
  }
}

TEST(IbverbsAutoMode, PortsThatDifferMeetInUcOrFailWhenBothAreForced) {
  EXPECT_EQ(pair_mode(Mode::kRc, true, Mode::kUc, true, "x"), Mode::kUc);
  EXPECT_EQ(pair_mode(Mode::kRc, true, Mode::kRc, true, "x"), Mode::kRc);
  EXPECT_EQ(pair_mode(Mode::kRc, false, Mode::kUc, true, "x"), Mode::kUc);
  EXPECT_EQ(pair_mode(Mode::kUc, false, Mode::kRc, true, "x"), Mode::kUc);
  EXPECT_THROW(pair_mode(Mode::kRc, false, Mode::kUc, false, "x"), IoError);
  // One rank forced to UC, the other automatic on an RC device: they meet in UC.
  fake::ScopedFabric fabric(devices(1, /*strict=*/false));
  std::vector<std::string> errors(2);
  auto store = make_in_memory_store();
  std::vector<Config> configs(2);
  for (int rank = 0; rank < 2; ++rank) {
    configs[rank].rank = rank;
    configs[rank].world_size = 2;
    configs[rank].store = store;
    configs[rank].transport = "fakeverbs";
    configs[rank].timeout_s = 10;
    configs[rank].knobs = {{"TBCOLL_IB_MODE", rank == 0 ? "uc" : "auto"}};
  }
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      errors[rank] = error_of([&] {
        Communicator comm = Communicator::init(configs[rank]);
        check_all_reduce(comm, DataType::kInt32, ReduceOp::kSum, 10000, 0);
      });
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  // Forced both ways, differently: the message says what to set.
  configs[0].knobs = {{"TBCOLL_IB_MODE", "uc"}};
  configs[1].knobs = {{"TBCOLL_IB_MODE", "rc"}};
  configs[0].store = configs[1].store = make_in_memory_store();
  configs[0].timeout_s = configs[1].timeout_s = 1;
  threads.clear();
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] { errors[rank] = error_of([&] { Communicator::init(configs[rank]); }); });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(errors[0].find("set TBCOLL_IB_MODE alike on every rank") != std::string::npos ||
              errors[1].find("set TBCOLL_IB_MODE alike on every rank") != std::string::npos)
      << errors[0] << " | " << errors[1];
}

}  // namespace
}  // namespace tbcoll::ibverbs
