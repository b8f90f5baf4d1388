// Receives from any source (Communicator::irecv_any / recv_any): the receiver learns the sender from the Work,
// takes each peer's messages in that pair's order, and gets clear errors for what cannot match.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "collectives/harness.h"

namespace tbcoll::test {
namespace {

class P2pAny : public ::testing::TestWithParam<std::string> {};

// PyTorch's test_send_recv_any_source, in C++: each rank in turn receives two messages from every other rank,
// once with recv_any and once with irecv_any; each message holds its sender's rank, which the call must name.
TEST_P(P2pAny, EveryRankInTurnNamesEachSender) {
  run_ranks(4, {GetParam(), "", 20}, [&](Communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    const size_t count = 10;
    std::vector<float> mine(count, static_cast<float>(r));
    std::map<int, int> heard;
    for (int receiver = 0; receiver < n; ++receiver) {
      if (receiver != r) {
        comm.send(mine.data(), count, DataType::kFloat32, receiver);
        comm.send(mine.data(), count, DataType::kFloat32, receiver);
        continue;
      }
      for (int i = 0; i < 2 * (n - 1); ++i) {
        std::vector<float> got(count, -1.0f);
        int source = -1;
        if (i % 2 == 0) {
          source = comm.recv_any(got.data(), count, DataType::kFloat32);
        } else {
          Work work = comm.irecv_any(got.data(), count, DataType::kFloat32);
          work.wait();
          source = work.source();
        }
        ASSERT_TRUE(source >= 0 && source < n && source != r) << source;
        EXPECT_EQ(got, std::vector<float>(count, static_cast<float>(source))) << "from " << source;
        heard[source]++;
      }
    }
    for (int peer = 0; peer < n; ++peer) {
      if (peer != r) {
        EXPECT_EQ(heard[peer], 2) << "rank " << r << " from " << peer;
      }
    }
    comm.barrier();  // every message was taken: the pairs are in step for a collective
  });
}

// A pair's messages keep their order whichever receive takes them: an irecv(peer) posted before irecv_any takes
// the first, irecv_any the second, a later recv(peer) the third. A message larger than a transport's largest
// message (several parts) comes whole.
TEST_P(P2pAny, NamedAndAnyReceivesKeepThePairsOrder) {
  run_ranks(3, {GetParam(), "", 20}, [&](Communicator& comm) {
    const int r = comm.rank();
    const size_t big = (size_t{5} << 20) + 3;
    if (r == 1) {
      for (int32_t m = 1; m <= 3; ++m) {
        std::vector<int32_t> out(m == 2 ? big : 1, m);
        comm.send(out.data(), out.size(), DataType::kInt32, 0);
      }
    } else if (r == 0) {
      int32_t first = 0, third = 0;
      std::vector<int32_t> second(big, 0);
      Work named = comm.irecv(&first, 1, DataType::kInt32, 1);
      Work any = comm.irecv_any(second.data(), big, DataType::kInt32);
      any.wait();
      named.wait();
      comm.recv(&third, 1, DataType::kInt32, 1);
      EXPECT_EQ(named.source(), 1);
      EXPECT_EQ(any.source(), 1);
      EXPECT_EQ(first, 1);
      EXPECT_EQ(std::count(second.begin(), second.end(), 2), static_cast<std::ptrdiff_t>(big));
      EXPECT_EQ(third, 3);
    }
    comm.barrier();
  });
}

// Two senders with messages waiting: the receiver takes them in turn, so neither is starved.
TEST_P(P2pAny, SendersWithMessagesWaitingTakeTurns) {
  run_ranks(3, {GetParam(), "", 20}, [&](Communicator& comm) {
    const int r = comm.rank();
    auto side = comm.split(0, r);  // its own connections: a barrier there leaves this pair's order alone
    ASSERT_TRUE(side);
    if (r != 0) {
      for (int32_t i = 0; i < 4; ++i) {
        const int32_t value = 100 * r + i;
        comm.send(&value, 1, DataType::kInt32, 0);
      }
      side->barrier();
    } else {
      side->barrier();  // the senders' messages were sent: wait for them to be in
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::vector<int> sources;
      std::map<int, int32_t> next = {{1, 100}, {2, 200}};
      for (int i = 0; i < 8; ++i) {
        int32_t value = -1;
        const int source = comm.recv_any(&value, 1, DataType::kInt32);
        EXPECT_EQ(value, next[source]++) << "from " << source;  // each pair in its order
        sources.push_back(source);
      }
      // Rotation: the first three receipts hold both senders.
      EXPECT_NE(std::find(sources.begin(), sources.begin() + 3, 1), sources.begin() + 3);
      EXPECT_NE(std::find(sources.begin(), sources.begin() + 3, 2), sources.begin() + 3);
    }
    comm.barrier();
  });
}

// A sender's count or dtype that differs fails the receive naming the sender (nothing copied); bad arguments are
// refused before anything is posted.
TEST_P(P2pAny, MismatchNamesTheSenderAndBadArgumentsAreRefused) {
  std::atomic<bool> rank0_done{false};  // rank 1 stays connected meanwhile
  run_ranks(2, {GetParam(), "", 5}, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      std::vector<float> out(4, 1.0f);
      comm.isend(out.data(), out.size(), DataType::kFloat32, 0);  // its Work may fail with the pair: not waited
      while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    float v = 0;
    EXPECT_NE(error_of([&] { comm.irecv_any(nullptr, 1, DataType::kFloat32); }).find("irecv_any"), std::string::npos);
    EXPECT_THROW(comm.irecv_any(&v, 1, static_cast<DataType>(99)), InvalidArgument);
    comm.group_start();
    EXPECT_THROW(comm.irecv_any(&v, 1, DataType::kFloat32), InvalidUsage);
    comm.group_end();
    std::vector<float> in(5, -1.0f);
    const std::string error = error_of([&] { comm.recv_any(in.data(), in.size(), DataType::kFloat32); });
    EXPECT_NE(error.find("peer 1"), std::string::npos) << error;
    EXPECT_NE(error.find("irecv_any"), std::string::npos) << error;
    EXPECT_EQ(in, std::vector<float>(5, -1.0f));
    EXPECT_TRUE(comm.broken());
    rank0_done = true;
  });
}

// Nobody sends: the receive fails at the deadline, saying so; polling test() alone gets there too.
TEST_P(P2pAny, NoSenderTimesOut) {
  std::atomic<bool> rank0_done{false};
  run_ranks(3, {GetParam(), "", 1}, [&](Communicator& comm) {
    if (comm.rank() != 0) {
      while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    int32_t v = 0;
    Work work = comm.irecv_any(&v, 1, DataType::kInt32);
    const auto start = std::chrono::steady_clock::now();
    std::string error;
    while (error.empty() && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
      error = error_of([&] { work.test(); });
    }
    EXPECT_NE(error.find("timed out"), std::string::npos) << error;
    EXPECT_NE(error.find("irecv_any(count=1, i32) from any peer"), std::string::npos) << error;
    EXPECT_TRUE(comm.broken());
    rank0_done = true;
  });
}

// A communicator of one rank has nobody to receive from.
TEST(P2pAnyAlone, OneRankIsRefused) {
  run_ranks(1, {"loopback", "", 5}, [&](Communicator& comm) {
    int32_t v = 0;
    const std::string error = error_of([&] { comm.recv_any(&v, 1, DataType::kInt32); });
    EXPECT_NE(error.find("no peer to receive from"), std::string::npos) << error;
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, P2pAny, ::testing::ValuesIn(test_transports()));

}  // namespace
}  // namespace tbcoll::test
