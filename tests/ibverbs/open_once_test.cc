// Start-up kind to the device, on the fake fabric: a process opens each RDMA device once (transports/ibverbs/
// probe.h opened_device), whatever it probes and however many communicators it makes; and the queue pairs follow
// what the device says (ibv_query_device's max_qp, the depths ibv_create_qp grants), not constants. A host of the
// fake (fake::set_thread_host) stands for a process: its threads share an opened device as a real process's do.
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/checks.h"
#include "collectives/harness.h"
#include "fake_verbs/fake_verbs.h"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll::ibverbs {
namespace {

using test::check_all_gather;
using test::check_all_reduce;

// n ranks as threads, rank r on host host_of(r), each running body(rank, store); what each threw ("" if nothing).
std::vector<std::string> run_on_hosts(int n, const std::function<int(int)>& host_of,
                                      const std::function<void(int, const std::shared_ptr<Store>&)>& body) {
  auto store = make_in_memory_store();
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      fake::set_thread_host(host_of(rank));
      errors[static_cast<size_t>(rank)] = test::error_of([&] { body(rank, store); });
      fake::set_thread_host(-1);
    });
  }
  for (auto& thread : threads) thread.join();
  return errors;
}

Config fake_config(int rank, int n, const std::shared_ptr<Store>& store, const std::string& prefix,
                   const std::map<std::string, std::string>& knobs = {}) {
  Config config;
  config.rank = rank;
  config.world_size = n;
  config.store = store;
  config.prefix = prefix;
  config.transport = "fakeverbs";
  config.timeout_s = 20;
  config.knobs = knobs;
  return config;
}

// A world, its split, a second communicator made while the first lives, and a third once both are gone: each
// process (host) opens each of its two devices once, and closes none of them.
TEST(IbverbsOpenOnce, EachProcessOpensEachDeviceOnceAcrossInitSplitAndLaterCommunicators) {
  fake::Options two_devices;
  two_devices.devices = 2;
  fake::ScopedFabric fabric(two_devices);
  fake::clear_calls();
  constexpr int kRanks = 3;
  const auto errors = run_on_hosts(kRanks, [](int rank) { return rank; }, [&](int rank, const auto& store) {
    {
      Communicator world = Communicator::init(fake_config(rank, kRanks, store, "first"));
      check_all_reduce(world, DataType::kFloat32, ReduceOp::kSum, 10007, 0);
      auto split = world.split(rank == 2 ? 1 : 0, rank);
      ASSERT_TRUE(split);
      check_all_gather(*split, DataType::kUint8, 3001);
      Communicator second = Communicator::init(fake_config(rank, kRanks, store, "second"));
      check_all_reduce(second, DataType::kInt32, ReduceOp::kMax, 77, 1);
      check_all_reduce(world, DataType::kFloat32, ReduceOp::kSum, 5, 2);
    }
    Communicator third = Communicator::init(fake_config(rank, kRanks, store, "third"));
    check_all_reduce(third, DataType::kFloat64, ReduceOp::kSum, 999, 3);
  });
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_EQ(errors[static_cast<size_t>(rank)], "") << "rank " << rank;
  auto calls = fake::calls();
  EXPECT_EQ(calls["open_device"], kRanks * 2u) << "one per device and process";
  EXPECT_EQ(calls["close_device"], 0u) << "kept open for the process";
  EXPECT_EQ(calls["alloc_pd"], kRanks * 2u) << "one protection domain per opened device";
}

// Ranks as threads of one process share the opened device (two ranks on host 0, one on host 1).
TEST(IbverbsOpenOnce, RanksAsThreadsOfOneProcessShareTheOpenedDevice) {
  fake::ScopedFabric fabric;
  fake::clear_calls();
  const auto errors = run_on_hosts(3, [](int rank) { return rank == 2 ? 1 : 0; }, [&](int rank, const auto& store) {
    Communicator world = Communicator::init(fake_config(rank, 3, store, "threads"));
    check_all_reduce(world, DataType::kFloat32, ReduceOp::kSum, 4099, 0);
    auto split = world.split(0, 2 - rank);
    ASSERT_TRUE(split);
    check_all_reduce(*split, DataType::kInt32, ReduceOp::kSum, 300, 1);
  });
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(errors[static_cast<size_t>(rank)], "") << "rank " << rank;
  EXPECT_EQ(fake::calls()["open_device"], 2u) << "host 0's two ranks share one";
  EXPECT_EQ(fake::calls()["close_device"], 0u);
}

// ---- the device's own limits -------------------------------------------------------------------------------

// A device that reports max_qp 4: four ranks, three peers each, fit in four queue pairs with one lane a peer (no
// bulk lane): the transport plans with 4, not Apple's 10 (which took a bulk lane per peer and met EBUSY at the 5th).
TEST(IbverbsDeviceLimits, TheQueuePairBudgetIsTheDevicesMaxQp) {
  fake::Options four;
  four.max_qps = 4;
  fake::ScopedFabric fabric(four);
  fake::clear_calls();
  test::RankOptions options{"fakeverbs", "", 20};
  test::run_ranks(4, options, [&](Communicator& comm) {
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 100003, 0);
    check_all_gather(comm, DataType::kUint8, 70001);
  });
  EXPECT_EQ(fake::calls()["create_qp"], 4u * 3u) << "one queue pair per peer";
}

// A forced mode past the device's max_qp is refused before any queue pair is made, naming the device and max_qp.
TEST(IbverbsDeviceLimits, OverTheDevicesMaxQpIsRefusedNamingIt) {
  fake::Options two;
  two.max_qps = 2;
  fake::ScopedFabric fabric(two);
  const auto errors = test::init_errors(4, [](int rank) {
    Config config;
    config.rank = rank;
    config.world_size = 4;
    config.transport = "fakeverbs";
    config.timeout_s = 10;
    config.knobs = {{"TBCOLL_IB_DEVICES", "rdma_en0"}, {"TBCOLL_IB_MODE", "uc"}};
    return config;
  });
  EXPECT_NE(errors[0].find("rdma_en0 would need 3 queue pairs (one per peer), over its limit of 2 (the device "
                           "reports max_qp 2"),
            std::string::npos)
      << errors[0];
}

// A provider that grants shorter queues than asked: the lanes take what was granted (the bulk lane one slot of
// 512 KiB instead of two) and every byte still arrives.
TEST(IbverbsDeviceLimits, ShorterQueuesThanAskedMakeShallowerLanes) {
  fake::Options granted;
  granted.max_granted_wr = 128;  // the small lane's 32 fit; the bulk lane asked 2 x 128 frames
  fake::ScopedFabric fabric(granted);
  test::RankOptions options{"fakeverbs", "", 20};
  options.knobs = {{"TBCOLL_IB_SLOT_BYTES", "524288"}};
  test::run_ranks(3, options, [&](Communicator& comm) {
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 1000003, 0);  // slots
    check_all_gather(comm, DataType::kUint8, 3 << 20);
  });
  EXPECT_EQ(fake::counters().length_errors, 0u);
}

// Both lanes shallower: 16 small frames instead of 32, 4 slots of 16 KiB instead of 16.
TEST(IbverbsDeviceLimits, ShorterQueuesMakeBothLanesShallower) {
  fake::Options granted;
  granted.max_granted_wr = 16;
  fake::ScopedFabric fabric(granted);
  test::RankOptions options{"fakeverbs", "", 20};
  options.knobs = {{"TBCOLL_IB_SLOT_BYTES", "16384"}};
  test::run_ranks(3, options, [&](Communicator& comm) {
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 300007, 0);
    check_all_reduce(comm, DataType::kInt32, ReduceOp::kMax, 3, 1);
    check_all_gather(comm, DataType::kUint8, 100001);
  });
  EXPECT_EQ(fake::counters().length_errors, 0u);
}

TEST(IbverbsDeviceLimits, QueuesTooShortForALaneAreRefusedNamingTheGrant) {
  fake::Options granted;
  granted.max_granted_wr = 4;  // below the 8 small frames a connection needs
  fake::ScopedFabric fabric(granted);
  const auto errors = test::init_errors(2, [](int rank) {
    Config config;
    config.rank = rank;
    config.world_size = 2;
    config.transport = "fakeverbs";
    config.timeout_s = 10;
    return config;
  });
  EXPECT_NE(errors[0].find("rdma_en0: ibv_create_qp granted max_send_wr 4 and max_recv_wr 4 for the small lane, "
                           "asked 32: below the 8 frames"),
            std::string::npos)
      << errors[0];
}

}  // namespace
}  // namespace tbcoll::ibverbs
