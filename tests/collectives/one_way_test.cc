// Rooted calls cost one message each way their data needs: a rank that only sends (a broadcast's root) does not
// wait for its neighbour's check of the call, but it never runs more than 8 such calls ahead of it, and the
// checks it did not wait for are settled later (as its communicator is destroyed, at the latest), so the data is
// right and nothing fails at the end.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "collectives/harness.h"

namespace tbcoll::test {
namespace {

class OneWay : public ::testing::TestWithParam<std::string> {};

TEST_P(OneWay, ARootRunsAheadOfALateRankByEightCallsAtMost) {
  constexpr int kCalls = 30;
  std::atomic<bool> late_started{false};
  std::atomic<int> ahead{0};
  run_ranks(2, {GetParam(), "broadcast:binomial"}, [&](Communicator& comm) {
    std::vector<int32_t> buf(4);
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      late_started = true;
    }
    for (int call = 0; call < kCalls; ++call) {
      if (comm.rank() == 0) buf.assign(4, call);
      comm.broadcast(buf.data(), buf.data(), buf.size(), DataType::kInt32, 0);
      if (comm.rank() == 0 && !late_started) ahead = call + 1;
      if (comm.rank() == 1) {
        ASSERT_EQ(buf, std::vector<int32_t>(4, call)) << "call " << call;
      }
    }
  });
  EXPECT_GE(ahead.load(), 1) << "the root waited for the late rank at its first call";
  EXPECT_LE(ahead.load(), 9) << "the root ran " << ahead.load() << " calls ahead of a rank that had not started";
}

// A last broadcast whose root destroys its communicator at once: the late rank's check of it must still leave
// (and the root must not have gone when it does).
TEST_P(OneWay, ALastOneWayCallAndAnEarlyExitFailNothing) {
  for (int round = 0; round < 5; ++round) {
    run_ranks(3, {GetParam(), ""}, [&](Communicator& comm) {
      std::vector<float> buf(8, static_cast<float>(comm.rank()));
      if (comm.rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(10 * comm.rank()));
      comm.broadcast(buf.data(), buf.data(), buf.size(), DataType::kFloat32, 0);
      ASSERT_EQ(buf[7], 0.0f);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, OneWay, ::testing::Values("loopback", "shm", "tcp"));

}  // namespace
}  // namespace tbcoll::test
