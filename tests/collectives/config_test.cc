// Per-communicator settings (Config::knobs) and the C++ unique id: what a porter from NCCL or MPI expects to
// set without touching the environment.
#include <gtest/gtest.h>

#include <thread>

#include "collectives/checks.h"
#include "collectives/harness.h"

namespace tbcoll::test {
namespace {

TEST(ConfigKnobs, TuningKnobsApplyToThisCommunicatorOnly) {
  RankOptions small_direct{"loopback", ""};
  small_direct.knobs = {{"TBCOLL_DIRECT_MAX_BYTES", "0"}, {"TBCOLL_CHUNK_BYTES", "4096"}};
  run_ranks(3, small_direct, [&](Communicator& comm) {
    EXPECT_EQ(comm.all_reduce_algorithm(8), "ring");
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 70000, 0);  // many 4 KiB chunks
    auto half = comm.split(0, comm.rank());
    ASSERT_TRUE(half.has_value());
    EXPECT_EQ(half->all_reduce_algorithm(8), "ring") << "a split inherits the knobs";
  });
  run_ranks(3, {"loopback", ""}, [&](Communicator& comm) {
    // The defaults: the cost model decides (which algorithm depends on this machine's CPUs), not the ring.
    const Communicator::Explanation why = comm.explain("all_reduce", 8);
    EXPECT_TRUE(why.model_decides) << "other communicators keep the defaults";
    EXPECT_EQ(comm.all_reduce_algorithm(8), why.chosen);
    EXPECT_NE(why.chosen, "ring");
  });
}

TEST(ConfigKnobs, TransportKnobsReachTheTransport) {
  RankOptions no_cma{"shm", ""};
  no_cma.knobs = {{"TBCOLL_SHM_CMA", "0"}, {"TBCOLL_ONESHOT_MAX_BYTES", "64"}};
  run_ranks(2, no_cma, [&](Communicator& comm) {
    EXPECT_EQ(comm.all_reduce_algorithm(4 << 20), "twoshot") << "cross-memory attach off";
    EXPECT_EQ(comm.all_reduce_algorithm(64), "oneshot");
    EXPECT_EQ(comm.all_reduce_algorithm(128), "direct");
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 1 << 20, 0);
  });
}

TEST(ConfigKnobs, BadKnobsFailInitNamingThem) {
  for (const auto& [name, value, said] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"TBCOLL_CHUNK_SIZE", "1", "\"TBCOLL_CHUNK_SIZE\" is not a knob"},
           {"TBCOLL_RANK", "1", "TBCOLL_RANK cannot be set per communicator"},
           {"TBCOLL_CHUNK_BYTES", "12", "TBCOLL_CHUNK_BYTES=12 is outside"},
           {"TBCOLL_SPIN_US", "soon", "TBCOLL_SPIN_US=\"soon\" is not an integer"}}) {
    Config config;
    config.rank = 0;
    config.world_size = 1;
    config.knobs = {{name, value}};
    const std::string message = error_of([&] { Communicator::init(config); });
    EXPECT_NE(message.find(said), std::string::npos) << message;
  }
}

TEST(UniqueIdInit, RanksMeetThroughAnIdTheNcclWay) {
  const UniqueId id = UniqueId::create();
  const std::string text = id.to_string();  // what rank 0 would send to the others
  const int n = 3;
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      errors[rank] = error_of([&] {
        Config config;
        config.timeout_s = 20;
        Communicator comm = Communicator::init(UniqueId::from_string(text), rank, n, config);
        EXPECT_EQ(comm.rank(), rank);
        EXPECT_EQ(comm.size(), n);
        check_all_reduce(comm, DataType::kInt32, ReduceOp::kSum, 1000, 0);
        check_broadcast(comm, DataType::kFloat32, 33, 2);
      });
    });
  }
  for (auto& thread : threads) thread.join();
  for (int rank = 0; rank < n; ++rank) EXPECT_EQ(errors[rank], "") << "rank " << rank;
  EXPECT_EQ(id.token().size(), 16u);
  EXPECT_NE(id.root().find(':'), std::string::npos);
}

TEST(UniqueIdInit, MalformedIdsAndRanksAreRefused) {
  EXPECT_THROW(UniqueId::from_string("no newline"), InvalidArgument);
  EXPECT_THROW(UniqueId::from_string("\ntoken"), InvalidArgument);
  EXPECT_THROW(UniqueId::from_string(std::string(300, 'x') + "\nt"), InvalidArgument);
  const UniqueId id = UniqueId::create();
  EXPECT_THROW(Communicator::init(id, 3, 3), InvalidArgument);
  EXPECT_THROW(Communicator::init(id, 0, 0), InvalidArgument);
}

}  // namespace
}  // namespace tbcoll::test
