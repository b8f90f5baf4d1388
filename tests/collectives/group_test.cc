// Grouped point-to-point: everything recorded between group_start and group_end runs at once.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/harness.h"
#include "tbcoll/tbcoll.h"

namespace tbcoll::test {
namespace {

class Group : public ::testing::TestWithParam<std::string> {};

TEST_P(Group, RingExchangeOfLargeMessagesAndSelfCopy) {
  run_ranks(3, {GetParam(), "", 20}, [&](Communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    const size_t count = (1 << 20) + 5;  // far beyond socket buffers: unordered blocking sends would deadlock
    std::vector<uint8_t> to_right = make_input(DataType::kFloat32, r, count, 1);
    std::vector<uint8_t> from_left(to_right.size(), 0), mine(64, static_cast<uint8_t>(r)), copy(64, 0);
    comm.group_start();
    comm.send(to_right.data(), count, DataType::kFloat32, (r + 1) % n);
    comm.recv(from_left.data(), count, DataType::kFloat32, (r + n - 1) % n);
    comm.group_start();  // nested groups run at the outermost end
    comm.send(mine.data(), 64, DataType::kUint8, r);
    comm.recv(copy.data(), 64, DataType::kUint8, r);
    comm.group_end();
    EXPECT_EQ(copy[0], 0) << "nothing runs before the outermost group_end";
    EXPECT_THROW(comm.barrier(), InvalidUsage) << "collectives are refused inside a group";
    comm.group_end();
    EXPECT_EQ(from_left, make_input(DataType::kFloat32, (r + n - 1) % n, count, 1));
    EXPECT_EQ(copy, mine);
    EXPECT_THROW(comm.group_end(), InvalidUsage);
    comm.barrier();  // usable again after the group
  });
}

// Queued asynchronous calls run before a group that follows them (in call order on every rank), and none may
// be queued inside a group.
TEST_P(Group, FollowsQueuedAsynchronousCallsAndRefusesNewOnes) {
  run_ranks(2, {GetParam(), "", 20}, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> sums(1000, static_cast<float>(r + 1));
    std::vector<Work> works;
    for (int i = 0; i < 4; ++i) {
      works.push_back(comm.all_reduce_async(sums.data(), sums.data(), sums.size(), DataType::kFloat32,
                                            ReduceOp::kSum));
    }
    int32_t out = 100 + r, in = -1;
    comm.group_start();
    EXPECT_THROW(comm.all_gather_async(&out, &in, 1, DataType::kInt32), InvalidUsage);
    comm.send(&out, 1, DataType::kInt32, 1 - r);
    comm.recv(&in, 1, DataType::kInt32, 1 - r);
    comm.group_end();
    EXPECT_EQ(in, 101 - r);
    for (Work& work : works) work.wait();
    EXPECT_EQ(sums[999], 3.0f * 8.0f) << "four sums of 1 + 2, each doubling";
  });
}

// A communicator destroyed with calls still queued finishes them first (their Work completes).
TEST_P(Group, DestroyingACommunicatorFinishesItsQueuedCalls) {
  run_ranks(2, {GetParam(), "", 20}, [&](Communicator& comm) {
    std::vector<std::vector<float>> buffers(6, std::vector<float>(50000, 1.0f));
    std::vector<Work> works;
    {
      std::optional<Communicator> child = comm.split(0, comm.rank());
      ASSERT_TRUE(child.has_value());
      for (auto& buffer : buffers) {
        works.push_back(child->all_reduce_async(buffer.data(), buffer.data(), buffer.size(), DataType::kFloat32,
                                                ReduceOp::kSum));
      }
    }  // destroyed here, calls still queued
    for (Work& work : works) EXPECT_TRUE(work.test());
    for (auto& buffer : buffers) EXPECT_EQ(buffer[49999], 2.0f);
  });
}

// Each rank sends first, then receives: rank 0 a message larger than the socket buffers, rank 1 a small one. Legal
// (sends are buffered or progress while waiting); both directions' first send/recv tags are equal. tcp must
// not take the peer's small message for a mismatched call while its own large send waits.
TEST_P(Group, LargeSendCrossingASmallOneIsNoMismatch) {
  run_ranks(2, {GetParam(), "", 30}, [&](Communicator& comm) {
    std::vector<float> big(size_t{1} << 24, static_cast<float>(comm.rank() + 1));
    float small = static_cast<float>(comm.rank() + 10);
    if (comm.rank() == 0) {
      comm.send(big.data(), big.size(), DataType::kFloat32, 1);
      comm.recv(&small, 1, DataType::kFloat32, 1);
      EXPECT_EQ(small, 11.0f);
    } else {
      comm.send(&small, 1, DataType::kFloat32, 0);
      comm.recv(big.data(), big.size(), DataType::kFloat32, 0);
      EXPECT_EQ(big.back(), 1.0f);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, Group, ::testing::ValuesIn(test_transports()));

// Send/recv tags count per peer pair, so they must not be announced like a collective's sequence number: rank 2,
// waiting for rank 0's second message, would take rank 0's announced first receive (tag 0 of another pair,
// another size) for a mismatch of its own call and fail a correct program.
TEST(PointToPoint, OtherPairsCallsAreNoMismatch) {
  for (const std::string& transport : test_transports()) {
    run_ranks(3, {transport, "", 10}, [&](Communicator& comm) {
      std::vector<float> ten(10, 1.0f), twenty(20, 2.0f);
      if (comm.rank() == 0) {
        comm.recv(ten.data(), ten.size(), DataType::kFloat32, 1);
        comm.send(twenty.data(), twenty.size(), DataType::kFloat32, 2);
      } else if (comm.rank() == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 0 waits in its receive meanwhile
        comm.send(ten.data(), ten.size(), DataType::kFloat32, 0);
      } else {
        std::vector<float> got(20, 0.0f);
        comm.recv(got.data(), got.size(), DataType::kFloat32, 0);
        EXPECT_EQ(got, twenty) << transport;
      }
    });
  }
}

TEST(GroupCApi, SendRecvPairsInOneGroup) {
  tbcollUniqueId id;
  ASSERT_EQ(tbcollGetUniqueId(&id), tbcollSuccess);
  std::vector<int> got(2, -1);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      tbcollComm_t comm = nullptr;
      if (tbcollCommInitRank(&comm, 2, id, rank) != tbcollSuccess) return;
      std::vector<int32_t> out(300000, rank + 10), in(300000, 0);
      tbcollGroupStart();
      tbcollSend(out.data(), out.size(), tbcollInt32, 1 - rank, comm);
      tbcollRecv(in.data(), in.size(), tbcollInt32, 1 - rank, comm);
      if (tbcollGroupEnd() == tbcollSuccess) got[rank] = in[299999];
      tbcollCommDestroy(comm);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(got, (std::vector<int>{11, 10}));
  EXPECT_EQ(tbcollGroupEnd(), tbcollInvalidUsage);
}

// A group over two communicators where one fails at tbcollGroupEnd: the other still runs its operations and
// leaves the group (usable afterwards); a communicator destroyed inside a group leaves it.
TEST(GroupCApi, EveryCommunicatorLeavesTheGroupWhenOneFails) {
  tbcollUniqueId id_a, id_b, id_c;
  ASSERT_EQ(tbcollGetUniqueId(&id_a), tbcollSuccess);
  ASSERT_EQ(tbcollGetUniqueId(&id_b), tbcollSuccess);
  ASSERT_EQ(tbcollGetUniqueId(&id_c), tbcollSuccess);
  tbcollComm_t a = nullptr, b = nullptr, c = nullptr;
  ASSERT_EQ(tbcollCommInitRank(&a, 1, id_a, 0), tbcollSuccess);
  ASSERT_EQ(tbcollCommInitRank(&b, 1, id_b, 0), tbcollSuccess);
  ASSERT_EQ(tbcollCommInitRank(&c, 1, id_c, 0), tbcollSuccess);
  int32_t value = 7, copy = 0, lonely = 1;
  ASSERT_EQ(tbcollGroupStart(), tbcollSuccess);
  ASSERT_EQ(tbcollSend(&lonely, 1, tbcollInt32, 0, a), tbcollSuccess);  // a send to self with no receive
  ASSERT_EQ(tbcollSend(&value, 1, tbcollInt32, 0, b), tbcollSuccess);
  ASSERT_EQ(tbcollRecv(&copy, 1, tbcollInt32, 0, b), tbcollSuccess);
  ASSERT_EQ(tbcollSend(&value, 1, tbcollInt32, 0, c), tbcollSuccess);
  ASSERT_EQ(tbcollCommDestroy(c), tbcollSuccess);
  EXPECT_EQ(tbcollGroupEnd(), tbcollInvalidUsage) << "a's unmatched send to self";
  EXPECT_NE(std::string(tbcollGetLastError(nullptr)).find("sends to self"), std::string::npos);
  EXPECT_EQ(copy, 7) << "b's operations ran";
  float x = 2, y = 0;
  EXPECT_EQ(tbcollAllReduce(&x, &y, 1, tbcollFloat32, tbcollSum, b), tbcollSuccess) << "b is out of the group";
  EXPECT_EQ(y, 2.0f);
  EXPECT_NE(tbcollAllReduce(&x, &y, 1, tbcollFloat32, tbcollSum, a), tbcollSuccess) << "a is broken";
  tbcollCommDestroy(a);
  tbcollCommDestroy(b);
}

}  // namespace
}  // namespace tbcoll::test
