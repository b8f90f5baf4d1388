// The ibverbs transport over the fake fabric (tests/fake_verbs): Apple's limits enforced, faults injected. The
// device is registered as "fakeverbs" before the parameterised suites are built, so the conformance suite and
// the collective sweep run over it like over every transport.
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "collectives/checks.h"
#include "collectives/harness.h"
#include "fake_verbs/fake_verbs.h"
#include "transports/ibverbs/device.h"

namespace tbcoll::ibverbs {
namespace {

using test::check_all_gather;
using test::check_all_reduce;
using test::check_broadcast;
using test::error_of;
using test::run_ranks;

// Every test that changes the fabric (these, and the fake's own tests) leaves it as Apple's again: the suites that
// run over "fakeverbs" expect that, whatever ran before them in this process.
class ResetFabricAfterEachTest : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo&) override { fake::reset(); }
};

// Before main, so test_transports() (read when gtest builds the suites) lists it.
const bool registered = [] {
  fake::reset();
  transport::register_device(make_device(fake::verbs(), "fakeverbs", /*same_process_only=*/true));
  ::testing::UnitTest::GetInstance()->listeners().Append(new ResetFabricAfterEachTest);
  return true;
}();

// A fabric with these options for the test's duration (no port may be open across a reset), then Apple's again.
test::RankOptions over_fake(double timeout_s = 20) {
  test::RankOptions options{"fakeverbs", "", timeout_s};
  return options;
}

// Registered before the parameterised suites were built: they run over it as over every transport.
TEST(IbverbsFake, IsRegistered) {
  ASSERT_TRUE(registered);
  const std::vector<std::string>& names = test::test_transports();
  EXPECT_NE(std::find(names.begin(), names.end(), "fakeverbs"), names.end());
}

// Apple allows about 10 queue pairs per device in a process: a world and its splits share one per peer.
TEST(IbverbsFake, SplitsShareTheQueuePairs) {
  fake::ScopedFabric fabric(fake::Options{});
  fake::clear_calls();
  run_ranks(4, over_fake(), [&](Communicator& comm) {
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 1000, 0);
    auto halves = comm.split(comm.rank() % 2, comm.rank());
    auto whole = comm.split(0, comm.size() - comm.rank());  // reordered ranks, same processes
    ASSERT_TRUE(halves && whole);
    check_all_reduce(*halves, DataType::kInt32, ReduceOp::kMax, 333, 1);
    check_all_gather(*whole, DataType::kFloat64, 77);
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 10, 2);
  });
  // (TBCOLL_IB_MODE=auto, the default, tries no RC queue pair on Apple's rdma_enN: they are UC only.)
  EXPECT_EQ(fake::calls()["create_qp"], 2u * 4u * 3u)
      << "two queue pairs (the lanes) per pair of ranks and side, however many splits, and no RC probe";
}

TEST(IbverbsFake, UcModeUsesOnlyWhatApplesStackOffers) {
  fake::ScopedFabric fabric(fake::Options{});  // strict: RC, RDMA WRITE, a SEND without a posted receive would all fail
  fake::clear_calls();
  uint64_t dropped_while_running = 0;
  run_ranks(3, over_fake(), [&](Communicator& comm) {
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 100000, 0);
    check_broadcast(comm, DataType::kUint8, 5000, 2);
    comm.barrier();
    if (comm.rank() == 0) dropped_while_running = fake::counters().dropped_no_receive;
    comm.barrier();
  });
  const std::set<std::string> apple_subset = {"get_device_list", "free_device_list", "get_device_name", "open_device",
                                              "close_device",    "query_port",       "query_gid",       "alloc_pd",
                                              "dealloc_pd",      "reg_mr",           "dereg_mr",        "create_cq",
                                              "destroy_cq",      "create_qp",        "modify_qp",       "destroy_qp",
                                              "post_send",       "post_recv",        "poll_cq",         "query_device",
                                              "ipv4_prefix"};
  for (const auto& [name, count] : fake::calls()) EXPECT_TRUE(apple_subset.count(name)) << name << " x" << count;
  const fake::Counters counters = fake::counters();
  // (A credit-only frame may still meet a peer that is leaving at the end: harmless, so counted before.)
  EXPECT_EQ(dropped_while_running, 0u) << "every SEND found its receive posted (credits)";
  EXPECT_EQ(counters.length_errors, 0u) << "every SEND and its receive span one 4 KiB frame";
  EXPECT_GT(counters.delivered, 100u);
}

TEST(IbverbsFake, RcModeOnAPermissiveDevice) {
  fake::Options roce;
  roce.apple_strict = false;
  fake::ScopedFabric fabric(roce);
  test::RankOptions options = over_fake();
  options.knobs = {{"TBCOLL_IB_MODE", "rc"}};
  run_ranks(3, options, [&](Communicator& comm) {
    check_all_reduce(comm, DataType::kFloat64, ReduceOp::kSum, 70000, 0);
    check_all_gather(comm, DataType::kInt8, 9999);
  });
}

TEST(IbverbsFake, RcModeOnAppleSaysUcOnly) {
  fake::ScopedFabric fabric(fake::Options{});
  Config config;
  config.world_size = 2;
  config.transport = "fakeverbs";
  config.knobs = {{"TBCOLL_IB_MODE", "rc"}};
  config.timeout_s = 3;
  config.store = make_in_memory_store();
  std::string messages[2];
  Config second = config;  // copied before the thread starts (TSan)
  second.rank = 1;
  config.rank = 0;
  std::thread other([&] { messages[1] = error_of([&] { Communicator::init(second); }); });
  messages[0] = error_of([&] { Communicator::init(config); });
  other.join();
  // The rank that dials creates its queue pair first and says why; the other waits for it to the deadline.
  EXPECT_TRUE(messages[0].find("this device supports UC only") != std::string::npos ||
              messages[1].find("this device supports UC only") != std::string::npos)
      << messages[0] << " | " << messages[1];
}

// A stack that takes nothing above a 4 KiB frame (Apple's before macOS 26.3, read as MLX's JACCL reads it; here a
// port whose max_msg_sz says so): the links carry frames only, and large messages still arrive whole.
TEST(IbverbsFake, APortThatTakesOnlyFramesGetsFramesOnly) {
  fake::Options frames_only;
  frames_only.max_message_bytes = 4096;
  fake::ScopedFabric fabric(frames_only);
  run_ranks(2, over_fake(), [&](Communicator& comm) {
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 300000, 0);
    check_broadcast(comm, DataType::kUint8, 2 << 20, 1);
  });
  EXPECT_EQ(fake::counters().length_errors, 0u);
}

TEST(IbverbsFake, NoIpv4GidIsReportedWithItsFix) {
  fake::Options no_gid;
  no_gid.ipv4_gid_index = -1;
  fake::ScopedFabric fabric(no_gid);
  Config config;
  config.rank = 0;
  config.world_size = 2;
  config.transport = "fakeverbs";
  config.store = make_in_memory_store();
  config.timeout_s = 5;
  ::testing::internal::CaptureStderr();
  const std::string message = error_of([&] { Communicator::init(config); });
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(message.find("no IPv4-mapped GID"), std::string::npos) << message;
  EXPECT_NE(message.find("give en0 an IPv4 address (the network interface paired with rdma_en0"), std::string::npos)
      << message;
  EXPECT_NE(message.find("a /30 per cable"), std::string::npos) << message;
  // An active port left without an address is a warning (its traffic would go over tcp), said once per process
  // (ctest runs each test in a process of its own).
  const std::string warning = "[ibverbs] rdma_en0: no IPv4-mapped GID";
  const size_t first = log.find(warning);
  EXPECT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find(warning, first + 1), std::string::npos) << "warned more than once: " << log;
  EXPECT_NE(log.find("WARN"), std::string::npos) << log;
}

TEST(IbverbsFake, QueuePairLimitIsNamed) {
  fake::ScopedFabric fabric(fake::Options{});
  fake::fail_next_create_qp(EBUSY);
  const std::vector<std::string> messages = test::init_errors(2, [](int rank) {
    Config mine;
    mine.rank = rank;
    mine.world_size = 2;
    mine.transport = "fakeverbs";
    mine.timeout_s = 5;
    mine.knobs = {{"TBCOLL_IB_MODE", "uc"}};  // no RC probe: the first queue pair is a connection's
    return mine;
  });
  EXPECT_TRUE(messages[0].find("device QP limit reached (about 10 on macOS") != std::string::npos ||
              messages[1].find("device QP limit reached (about 10 on macOS") != std::string::npos)
      << messages[0] << " | " << messages[1];
}

// Apple's ibv_post_recv returns its error (-12) instead of setting errno: the message names ENOMEM and its fix.
TEST(IbverbsFake, ARefusedReceiveIsNamedFromTheReturnedCode) {
  fake::Options few;
  few.max_outstanding_recvs = 4;  // fewer than the transport posts per peer
  fake::ScopedFabric fabric(few);
  const std::vector<std::string> messages = test::init_errors(2, [](int rank) {
    Config mine;
    mine.rank = rank;
    mine.world_size = 2;
    mine.transport = "fakeverbs";
    mine.timeout_s = 3;
    return mine;
  });
  // The rank that posts first says why; its peer then sees it leave.
  const std::string why = "ibv_post_recv on rdma_en0 failed: errno 12 (Cannot allocate memory): more receives "
                          "outstanding than the device accepts";
  EXPECT_TRUE(messages[0].find(why) != std::string::npos || messages[1].find(why) != std::string::npos)
      << messages[0] << " | " << messages[1];
}

// The cost model prices a link by the floors tbcoll-rdma-check measured (TBCOLL_IB_LATENCY_US, TBCOLL_IB_GBPS),
// else by published figures (Thunderbolt 5's on Apple's librdma, 2 us and 10 GB/s elsewhere); a value that is no
// positive number is refused naming the knob.
TEST(IbverbsFake, TheCostModelTakesTheMeasuredFloorsFromTheKnobs) {
  const auto device = make_device(fake::verbs(), "costs", /*same_process_only=*/true);
  EXPECT_EQ(device->capabilities().latency_us, 2.0);
  EXPECT_EQ(device->capabilities().bandwidth_gbps, 10.0);
  setenv("TBCOLL_IB_LATENCY_US", "4.25", 1);
  setenv("TBCOLL_IB_GBPS", "8.5", 1);
  EXPECT_EQ(device->capabilities().latency_us, 4.25);
  EXPECT_EQ(device->capabilities().bandwidth_gbps, 8.5);
  setenv("TBCOLL_IB_GBPS", "0", 1);
  const std::string refused = error_of([&] { device->capabilities(); });
  unsetenv("TBCOLL_IB_LATENCY_US");
  unsetenv("TBCOLL_IB_GBPS");
  EXPECT_NE(refused.find("TBCOLL_IB_GBPS=0: a positive number, or auto"), std::string::npos) << refused;
  EXPECT_EQ(device->capabilities().latency_us, 2.0) << "unset again: the published figure";
}

// Apple's active Thunderbolt port is not always port 1: the transport uses the one query_port says is ACTIVE.
TEST(IbverbsFake, TheActivePortIsFoundByQuery) {
  fake::Options second_port;
  second_port.active_port = 2;
  fake::ScopedFabric fabric(second_port);
  run_ranks(2, over_fake(), [&](Communicator& comm) {
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 3000, 0);
  });
}

// UC drops what it cannot deliver: the receiver sees the gap in the sequence and says so, instead of delivering
// a message with a hole. (The sender got everything it expected: it may well succeed.)
TEST(IbverbsFake, LostFrameIsReportedNeverDeliveredAsData) {
  fake::ScopedFabric fabric(fake::Options{});
  std::vector<std::string> messages(2);
  run_ranks(2, over_fake(10), [&](Communicator& comm) {
    std::vector<float> data(20000, 1.0f), out(20000, 0.0f);
    // Rank 1 may still be in the barrier when the damage reaches it: it fails there, naming it, which is right.
    messages[comm.rank()] = error_of([&] {
      comm.barrier();
      if (comm.rank() == 0) fake::drop_next_sends(1);  // the first frame of the message (rank 1 only listens)
      if (comm.rank() == 0)
        comm.send(data.data(), data.size(), DataType::kFloat32, 1);
      else
        comm.recv(out.data(), out.size(), DataType::kFloat32, 0);
    });
  });
  EXPECT_NE(messages[1].find("were lost"), std::string::npos) << messages[1];
}

// With the payload sum on (TBCOLL_IB_PAYLOAD_SUM=1; off by default, the link's CRC guards the payload).
TEST(IbverbsFake, DamagedFrameIsReportedNeverDeliveredAsData) {
  fake::ScopedFabric fabric(fake::Options{});
  std::vector<std::string> messages(2);
  test::RankOptions options = over_fake(10);
  options.knobs = {{"TBCOLL_IB_PAYLOAD_SUM", "1"}};
  run_ranks(2, options, [&](Communicator& comm) {
    std::vector<float> data(5000, 3.0f), out(5000, 0.0f);
    messages[comm.rank()] = error_of([&] {
      comm.barrier();
      if (comm.rank() == 0) fake::corrupt_next_sends(1);
      if (comm.rank() == 0)
        comm.send(data.data(), data.size(), DataType::kFloat32, 1);
      else
        comm.recv(out.data(), out.size(), DataType::kFloat32, 0);
    });
  });
  EXPECT_NE(messages[1].find("corrupt data"), std::string::npos) << messages[1];
}

// A peer that goes away (its process ends, closing the side channel) fails the waiting rank at once, not at the
// deadline: UC itself never says so (public Mac stacks spin forever here).
TEST(IbverbsFake, PeerThatLeftFailsTheWaitingRankPromptly) {
  fake::ScopedFabric fabric(fake::Options{});
  std::string message;
  const auto start = std::chrono::steady_clock::now();
  run_ranks(2, over_fake(30), [&](Communicator& comm) {
    comm.barrier();
    if (comm.rank() == 1) return;  // leaves: its communicator, port and side channel close
    float x = 1;
    message = error_of([&] { comm.all_reduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum); });
  });
  EXPECT_NE(message.find("is gone"), std::string::npos) << message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "not the 30 s deadline";
}

}  // namespace
}  // namespace tbcoll::ibverbs
