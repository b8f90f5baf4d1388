// Asynchronous collectives: queued calls complete in order, mix with blocking calls, report errors.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "collectives/harness.h"

namespace tbcoll::test {
namespace {

class Async : public ::testing::TestWithParam<std::string> {};

TEST_P(Async, QueuedCallsCompleteInOrderAndMixWithBlockingOnes) {
  run_ranks(3, {GetParam(), ""}, [&](Communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    std::vector<std::vector<float>> buffers;
    std::vector<Work> works;
    for (int i = 0; i < 6; ++i) {
      buffers.emplace_back(i % 2 == 0 ? 5 : 300000, static_cast<float>(r + i));  // one-shot and large paths
    }
    for (int i = 0; i < 6; ++i) {
      works.push_back(comm.all_reduce_async(buffers[i].data(), buffers[i].data(), buffers[i].size(),
                                            DataType::kFloat32, ReduceOp::kSum));
    }
    // A blocking call waits for the queue, so its order matches on every rank.
    std::vector<int32_t> mine(4, r), all(4 * n);
    comm.all_gather(mine.data(), all.data(), 4, DataType::kInt32);
    for (int p = 0; p < n; ++p) EXPECT_EQ(all[4 * p], p);
    for (int i = 0; i < 6; ++i) {
      works[i].wait();
      EXPECT_TRUE(works[i].test());
      float want = static_cast<float>(n * (n - 1) / 2 + n * i);
      EXPECT_EQ(buffers[i].front(), want) << "call " << i;
      EXPECT_EQ(buffers[i].back(), want) << "call " << i;
    }
    Work nothing;
    EXPECT_TRUE(nothing.test());
  });
}

// Every collective has an asynchronous form; queued back to back, each result matches its blocking reference.
TEST_P(Async, EveryCollectiveQueuedBackToBack) {
  run_ranks(3, {GetParam(), ""}, [&](Communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    const size_t count = 1001;  // odd, and one element more than a multiple of n
    std::vector<int32_t> mine(count), gathered(count * n), blocks(count * n), scattered(count), reduced(count);
    std::vector<int32_t> bcast(count, r == 1 ? 42 : -1);
    for (size_t i = 0; i < count; ++i) mine[i] = static_cast<int32_t>(i) * (r + 1);
    for (size_t i = 0; i < count * n; ++i) blocks[i] = static_cast<int32_t>(i) + r;
    std::vector<Work> works;
    works.push_back(comm.all_gather_async(mine.data(), gathered.data(), count, DataType::kInt32));
    works.push_back(comm.reduce_scatter_async(blocks.data(), scattered.data(), count, DataType::kInt32,
                                              ReduceOp::kSum));
    works.push_back(comm.reduce_async(mine.data(), r == 2 ? reduced.data() : nullptr, count, DataType::kInt32,
                                      ReduceOp::kMax, 2));
    works.push_back(comm.broadcast_async(bcast.data(), bcast.data(), count, DataType::kInt32, 1));
    works.push_back(comm.barrier_async());
    for (Work& work : works) work.wait();
    for (int p = 0; p < n; ++p) {
      for (size_t i = 0; i < count; i += 250) {
        ASSERT_EQ(gathered[p * count + i], static_cast<int32_t>(i) * (p + 1)) << "all_gather, rank " << p;
      }
    }
    for (size_t i = 0; i < count; i += 250) {
      ASSERT_EQ(scattered[i], n * static_cast<int32_t>(r * count + i) + n * (n - 1) / 2) << "reduce_scatter";
      if (r == 2) {
        ASSERT_EQ(reduced[i], static_cast<int32_t>(i) * n) << "reduce (max)";
      }
      ASSERT_EQ(bcast[i], 42) << "broadcast";
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, Async, ::testing::ValuesIn(test_transports()));

TEST(AsyncErrors, AnErrorReachesTheWorkAndLaterCallsFailFast) {
  run_ranks(2, {"tcp", "", 10}, [&](Communicator& comm) {
    std::vector<float> buf(16, 1.0f);
    if (comm.rank() == 1) {
      comm.abort();
      return;
    }
    Work work = comm.all_reduce_async(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    EXPECT_THROW(work.wait(), Error);
    EXPECT_THROW(work.test(), Error) << "test() reports the failure too";
    Work later = comm.all_reduce_async(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    try {
      later.wait();
      ADD_FAILURE() << "a call queued after a failed one ran";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("broken communicator"), std::string::npos) << error.what();
    }
  });
}

// A split waits for the queued calls before its deadline starts: their time is theirs. Rank 0's queue takes
// ~1.6 s against a 1 s timeout, each call well in time (counted against the split, it would time the split out
// in the child's set-up).
TEST(AsyncSplit, QueuedCallsDoNotEatTheSplitsTime) {
  for (const std::string& transport : test_transports()) {
    run_ranks(2, {transport, "", 1}, [&](Communicator& comm) {
      std::vector<float> x(16, 1.0f);
      std::vector<Work> works;
      for (int i = 0; i < 4; ++i) {
        if (comm.rank() == 0) {
          works.push_back(comm.all_reduce_async(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum));
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(400));  // a slow peer
          comm.all_reduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
        }
      }
      std::optional<Communicator> child = comm.split(0, comm.rank());
      for (Work& work : works) work.wait();
      ASSERT_TRUE(child.has_value());
      child->barrier();
    });
  }
}

// A forced algorithm that cannot run a call (oneshot beyond its 64 KiB slots) is refused by the async call itself,
// as by the blocking one, naming the call; the communicator stays usable (failing in the queue would break
// the communicator).
TEST(AsyncErrors, ForcedAlgorithmThatCannotRunIsRefusedBeforeQueuing) {
  run_ranks(2, {"shm", "oneshot", 10}, [&](Communicator& comm) {
    std::vector<float> big(20000, 1.0f);
    const std::string blocking = error_of([&] {
      comm.all_reduce(big.data(), big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum);
    });
    EXPECT_NE(blocking.find("rank " + std::to_string(comm.rank()) + ": all_reduce: algorithm \"oneshot\""),
              std::string::npos) << blocking;
    EXPECT_THROW(comm.all_reduce_async(big.data(), big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum),
                 InvalidArgument);
    EXPECT_FALSE(comm.broken());
    float x = 1.0f;
    comm.all_reduce_async(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum).wait();
    EXPECT_EQ(x, 2.0f);
  });
}

// Every call on a moved-from communicator is a clear error, never a null dereference.
TEST(AsyncErrors, MovedFromCommunicatorIsAnError) {
  run_ranks(1, {"loopback", ""}, [&](Communicator& comm) {
    Communicator moved = std::move(comm);
    float x = 1.0f;
    EXPECT_THROW(comm.rank(), InvalidUsage);
    EXPECT_THROW(comm.broken(), InvalidUsage);
    EXPECT_THROW(comm.all_reduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum), InvalidUsage);
    EXPECT_THROW(comm.all_reduce_async(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum), InvalidUsage);
    EXPECT_THROW(comm.split(0, 0), InvalidUsage);
    moved.all_reduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(x, 1.0f);
    comm = std::move(moved);  // the harness still uses it
  });
}

// Bad arguments are refused before anything is queued, so the calls queued after them stay in step with the
// peers' (otherwise rank 0 would run its second call as the peer's first: wrong data, no error).
TEST(AsyncErrors, BadArgumentsAreRefusedBeforeQueuing) {
  for (const std::string& transport : test_transports()) {
    // Every rank refuses the same calls (a call refused on some ranks only fails the others: errors_test), with
    // calls queued before them, which run first; the calls after pair up as usual.
    run_ranks(2, {transport, "", 10}, [&](Communicator& comm) {
      std::vector<float> a(4, comm.rank() == 0 ? 100.0f : 20.0f), b(4, comm.rank() == 0 ? 100.0f : 200.0f);
      Work first = comm.all_reduce_async(a.data(), a.data(), 4, DataType::kFloat32, ReduceOp::kSum);
      EXPECT_THROW(comm.all_reduce_async(a.data(), nullptr, 4, DataType::kFloat32, ReduceOp::kSum), InvalidArgument);
      EXPECT_THROW(comm.all_reduce_async(a.data(), a.data() + 1, 3, DataType::kFloat32, ReduceOp::kSum),
                   InvalidArgument);
      EXPECT_THROW(comm.broadcast_async(a.data(), b.data(), 4, DataType::kFloat32, 5), InvalidArgument);
      EXPECT_THROW(comm.reduce_async(a.data(), a.data(), 4, static_cast<DataType>(99), ReduceOp::kSum, 0),
                   InvalidArgument);
      Work work = comm.all_reduce_async(b.data(), b.data(), 4, DataType::kFloat32, ReduceOp::kSum);
      first.wait();
      work.wait();
      EXPECT_EQ(a[0], 120.0f) << transport;
      EXPECT_EQ(b[0], 300.0f) << transport;
      EXPECT_FALSE(comm.broken()) << transport;
    });
  }
}

}  // namespace
}  // namespace tbcoll::test
