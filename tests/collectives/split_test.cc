// Communicator::split: groups by color, order by key, collectives inside each group, nested splits.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "collectives/harness.h"
#include "tbcoll/tbcoll.h"

namespace tbcoll::test {
namespace {

class Split : public ::testing::TestWithParam<std::string> {};

TEST_P(Split, GroupsByColorOrdersByKeyAndWorks) {
  const int n = 5;
  run_ranks(n, {GetParam(), ""}, [&](Communicator& comm) {
    const int r = comm.rank();
    // Colors: even ranks / odd ranks; keys reverse the order; rank 4 opts out.
    std::optional<Communicator> part = comm.split(r == 4 ? Communicator::kSplitNoColor : r % 2, -r);
    if (r == 4) {
      EXPECT_FALSE(part.has_value());
    } else {
      ASSERT_TRUE(part.has_value());
      EXPECT_EQ(part->size(), 2);
      // Even group {0, 2} ordered by key -r: rank 2 first. Odd group {1, 3}: rank 3 first.
      EXPECT_EQ(part->rank(), (r == 2 || r == 3) ? 0 : 1);
      float value = static_cast<float>(r), sum = 0;
      part->all_reduce(&value, &sum, 1, DataType::kFloat32, ReduceOp::kSum);
      EXPECT_EQ(sum, r % 2 == 0 ? 2.0f : 4.0f);
      std::optional<Communicator> single = part->split(part->rank(), 0);  // nested: one rank each
      ASSERT_TRUE(single.has_value());
      EXPECT_EQ(single->size(), 1);
      single->all_reduce(&value, &sum, 1, DataType::kFloat32, ReduceOp::kMax);
      EXPECT_EQ(sum, value);
    }
    // The parent still works after splitting, and a second split gets fresh rendezvous keys.
    std::vector<int64_t> ones(3, 1), total(3);
    comm.all_reduce(ones.data(), total.data(), 3, DataType::kInt64, ReduceOp::kSum);
    EXPECT_EQ(total[2], n);
    std::optional<Communicator> everyone = comm.split(7, r);
    ASSERT_TRUE(everyone.has_value());
    EXPECT_EQ(everyone->size(), n);
    EXPECT_EQ(everyone->rank(), r);
    everyone->barrier();
  });
}

// abort() from another thread ends a split waiting in the child's set-up: here rank 1 takes part in the split's
// exchange of colours (an all_gather of two int32, as split runs it), then stalls. The split must not wait for
// its whole timeout, and a watchdog's tbcollCommAbort with it.
TEST_P(Split, AbortEndsASplitWaitingInTheChildsSetUp) {
  std::atomic<bool> done{false};
  run_ranks(2, {GetParam(), "", 30}, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      int32_t mine[2] = {0, 1}, all[4];
      comm.all_gather(mine, all, 2, DataType::kInt32);
      for (int i = 0; i < 3000 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    std::thread watchdog([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm.abort();
    });
    const auto start = std::chrono::steady_clock::now();
    const std::string error = error_of([&] { comm.split(0, 0); });
    const auto waited = std::chrono::steady_clock::now() - start;
    watchdog.join();
    done = true;
    EXPECT_NE(error.find("aborted"), std::string::npos) << error;
    EXPECT_LT(waited, std::chrono::seconds(5)) << "the split waited for its deadline";
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, Split, ::testing::ValuesIn(test_transports()));

// Every init removes its rendezvous records once all ranks read them, but for a tombstone of its id (tens of
// bytes, so a late rank with another world size is told at once): rank 0's store kept every record (~460 B per
// communicator of 3 ranks here), and a long job could fill its 256 MiB.
TEST(SplitStore, RendezvousRecordsAreRemovedOnceRead) {
  TcpStoreServer server("127.0.0.1", 0, "records");
  const std::string where = "127.0.0.1:" + std::to_string(server.port());
  std::vector<std::thread> ranks;
  std::vector<uint64_t> after_init(3), after_splits(3);
  for (int rank = 0; rank < 3; ++rank) {
    ranks.emplace_back([&, rank] {
      Config config;
      config.rank = rank;
      config.world_size = 3;
      config.store = connect_tcp_store(where, "records", Clock::now() + std::chrono::seconds(10));
      config.transport = "loopback";
      config.timeout_s = 20;
      Communicator comm = Communicator::init(config);
      comm.barrier();  // every rank is past init, so the last reader removed the records
      after_init[rank] = server.stored_bytes();
      for (int i = 0; i < 20; ++i) {
        std::optional<Communicator> part = comm.split(rank % 2, rank);
        ASSERT_TRUE(part.has_value());
        part->barrier();
      }
      comm.barrier();
      after_splits[rank] = server.stored_bytes();
    });
  }
  for (auto& thread : ranks) thread.join();
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_LE(after_init[rank], 32u) << "rank " << rank;
    EXPECT_LE(after_splits[rank], 21u * 48u) << "rank " << rank << ": 21 communicators used the store";
  }
}

TEST(SplitCApi, NoColorGivesNullAndOthersAPair) {
  tbcollUniqueId id;
  ASSERT_EQ(tbcollGetUniqueId(&id), tbcollSuccess);
  std::vector<std::thread> threads;
  std::vector<int> sizes(4, -1);
  for (int rank = 0; rank < 4; ++rank) {
    threads.emplace_back([&, rank] {
      tbcollComm_t comm = nullptr, half = nullptr;
      if (tbcollCommInitRank(&comm, 4, id, rank) != tbcollSuccess) return;
      if (tbcollCommSplit(comm, rank < 2 ? 0 : TBCOLL_SPLIT_NOCOLOR, rank, &half) == tbcollSuccess) {
        if (half != nullptr) tbcollCommCount(half, &sizes[rank]);
        else sizes[rank] = 0;
      }
      tbcollCommDestroy(half);
      tbcollCommDestroy(comm);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(sizes, (std::vector<int>{2, 2, 0, 0}));
}

}  // namespace
}  // namespace tbcoll::test
