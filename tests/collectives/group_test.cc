// Grouped point-to-point: everything recorded between group_start and group_end runs at once.
#include <gtest/gtest.h>

#include <thread>

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

INSTANTIATE_TEST_SUITE_P(Transports, Group, ::testing::Values("loopback", "shm", "tcp"));

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

}  // namespace
}  // namespace tbcoll::test
