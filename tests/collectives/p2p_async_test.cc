// Non-blocking send and receive (Communicator::isend / irecv): posted at once, driven by test() and wait().
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/harness.h"

namespace tbcoll::test {
namespace {

class P2pAsync : public ::testing::TestWithParam<std::string> {};

// Both ranks receive before they send (what torch's batch_isend_irecv does): with blocking calls each would wait
// for the other's send until the deadline. Large messages too (beyond socket buffers and shm queues).
TEST_P(P2pAsync, BothRanksPostTheirReceiveFirst) {
  run_ranks(2, {GetParam(), "", 20}, [&](Communicator& comm) {
    const int r = comm.rank(), other = 1 - r;
    for (size_t count : {size_t{1}, size_t{7}, size_t{(1 << 20) + 3}}) {
      std::vector<uint8_t> out = make_input(DataType::kFloat32, r, count, 3);
      std::vector<uint8_t> in(out.size(), 0);
      Work received = comm.irecv(in.data(), count, DataType::kFloat32, other);
      Work sent = comm.isend(out.data(), count, DataType::kFloat32, other);
      received.wait();
      sent.wait();
      EXPECT_EQ(in, make_input(DataType::kFloat32, other, count, 3)) << count;
    }
    comm.barrier();
  });
}

// A ring of three: every rank posts a receive from its left, a send to its right, and waits for its send first;
// test() never blocks and turns true once both are done; blocking send/recv pair with them in call order.
TEST_P(P2pAsync, RingTestNeverBlocksAndMatchesBlockingCalls) {
  run_ranks(3, {GetParam(), "", 20}, [&](Communicator& comm) {
    const int n = comm.size(), r = comm.rank(), right = (r + 1) % n, left = (r + n - 1) % n;
    const size_t count = 300000;
    std::vector<int32_t> out(count, 10 * r), in(count, -1);
    Work received = comm.irecv(in.data(), count, DataType::kInt32, left);
    Work sent = comm.isend(out.data(), count, DataType::kInt32, right);
    sent.wait();
    const auto start = std::chrono::steady_clock::now();
    while (!received.test()) {
      ASSERT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << "never completed";
    }
    EXPECT_EQ(in[count - 1], 10 * left);
    int32_t token = 100 + r, got = -1;  // a blocking pair after the non-blocking one, and the other way round
    if (r % 2 == 0) {
      comm.send(&token, 1, DataType::kInt32, right);
      comm.irecv(&got, 1, DataType::kInt32, left).wait();
    } else {
      Work w = comm.irecv(&got, 1, DataType::kInt32, left);
      comm.send(&token, 1, DataType::kInt32, right);
      w.wait();
    }
    EXPECT_EQ(got, 100 + left);
  });
}

// on_done runs once the call finished: at once for a finished one, else on the thread that completes it.
TEST_P(P2pAsync, OnDoneRunsWhenTheCallCompletes) {
  run_ranks(2, {GetParam(), "", 20}, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> x(5000, 1.0f);
    std::atomic<int> calls{0};
    Work w = comm.all_reduce_async(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
    w.on_done([&](std::exception_ptr error) { calls += error == nullptr ? 1 : 100; });
    w.wait();
    w.on_done([&](std::exception_ptr error) { calls += error == nullptr ? 1 : 100; });
    EXPECT_EQ(calls.load(), 2);
    EXPECT_EQ(x[4999], 2.0f);
    int32_t v = r, got = -1;
    Work rw = comm.irecv(&got, 1, DataType::kInt32, 1 - r);
    rw.on_done([&](std::exception_ptr error) { calls += error == nullptr ? 1 : 100; });
    comm.isend(&v, 1, DataType::kInt32, 1 - r).wait();
    rw.wait();
    EXPECT_EQ(calls.load(), 3);
    EXPECT_EQ(got, 1 - r);
  });
}

// A receive nobody sends to fails at the deadline with TimeoutError naming the call and the peer, and breaks the
// communicator; bad arguments are refused at once.
TEST_P(P2pAsync, UnmatchedReceiveTimesOutAndBadArgumentsAreRefused) {
  std::atomic<bool> rank0_done{false};  // rank 1 stays connected meanwhile: its leaving would fail the receive
  run_ranks(2, {GetParam(), "", 1}, [&](Communicator& comm) {
    const int r = comm.rank();
    int32_t v = 0;
    EXPECT_THROW(comm.isend(&v, 1, DataType::kInt32, 2), InvalidArgument);
    EXPECT_THROW(comm.irecv(&v, 1, DataType::kInt32, r), InvalidArgument);
    EXPECT_THROW(comm.irecv(nullptr, 1, DataType::kInt32, 1 - r), InvalidArgument);
    if (r == 0) {
      Work w = comm.irecv(&v, 1, DataType::kInt32, 1);
      const auto start = std::chrono::steady_clock::now();
      try {
        w.wait();
        ADD_FAILURE() << "an unmatched receive completed";
      } catch (const TimeoutError& e) {
        EXPECT_NE(std::string(e.what()).find("irecv(count=1, i32, peer=1)"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("peer 1"), std::string::npos) << e.what();
      }
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
      EXPECT_TRUE(comm.broken());
      rank0_done = true;
    } else {
      while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
}

// Polling test() alone also ends at the deadline: the receive nobody sends to throws TimeoutError from test().
TEST_P(P2pAsync, PollingAnUnmatchedReceiveThrowsAtTheDeadline) {
  std::atomic<bool> rank0_done{false};
  run_ranks(2, {GetParam(), "", 1}, [&](Communicator& comm) {
    if (comm.rank() == 0) {
      int32_t v = 0;
      Work w = comm.irecv(&v, 1, DataType::kInt32, 1);
      const auto start = std::chrono::steady_clock::now();
      bool timed_out = false;
      while (std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
        try {
          if (w.test()) break;
        } catch (const TimeoutError& e) {
          timed_out = true;
          EXPECT_NE(std::string(e.what()).find("irecv(count=1, i32, peer=1)"), std::string::npos) << e.what();
          break;
        }
      }
      EXPECT_TRUE(timed_out) << "test() never saw the deadline pass";
      EXPECT_TRUE(comm.broken());
      rank0_done = true;
    } else {
      while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
}

// Destroying the communicator with a call still posted fails its Work (the buffers are no longer touched): as
// InvalidUsage, or as the I/O error of the peer's leaving, when this rank's endpoint saw it first.
TEST_P(P2pAsync, DestroyingTheCommunicatorFailsPendingCalls) {
  run_ranks(2, {GetParam(), "", 20}, [&](Communicator& comm) {
    Work w;
    int32_t v = 0;
    {
      std::optional<Communicator> child = comm.split(0, comm.rank());
      ASSERT_TRUE(child.has_value());
      if (comm.rank() == 0) w = child->irecv(&v, 1, DataType::kInt32, 1);  // rank 1 never sends
    }
    if (comm.rank() == 0) {
      EXPECT_THROW(w.wait(), Error);
    }
  });
}

// A send posted and not waited for moves while this rank waits in later calls (a blocking receive from another
// peer, a collective, an asynchronous one): its peer receives it with blocking calls first, which would hold
// everyone until the deadline otherwise. Large enough to need the sender's progress on every transport.
TEST_P(P2pAsync, PostedSendsMoveWhileLaterCallsWait) {
  run_ranks(3, {GetParam(), "", 20}, [&](Communicator& comm) {
    const int r = comm.rank();
    const size_t count = (4 << 20) + 5;
    std::vector<float> big(count, 1.0f + r), got(count, 0.0f);
    std::vector<float> small(1000, 1.0f);
    if (r == 0) {
      Work to1 = comm.isend(big.data(), count, DataType::kFloat32, 1);
      int32_t token = 0;
      comm.recv(&token, 1, DataType::kInt32, 2);  // rank 2 sends only once rank 1 has the big message
      EXPECT_EQ(token, 7);
      Work to2 = comm.isend(big.data(), count, DataType::kFloat32, 2);
      comm.all_reduce(small.data(), small.data(), small.size(), DataType::kFloat32, ReduceOp::kSum);
      Work again = comm.isend(big.data(), count, DataType::kFloat32, 1);
      Work queued = comm.all_reduce_async(big.data(), got.data(), count, DataType::kFloat32, ReduceOp::kSum);
      queued.wait();
      again.wait();
      to1.wait();
      to2.wait();
    } else if (r == 1) {
      comm.recv(got.data(), count, DataType::kFloat32, 0);
      EXPECT_EQ(got[count - 1], 1.0f);
      int32_t token = 7;
      comm.send(&token, 1, DataType::kInt32, 2);
      comm.all_reduce(small.data(), small.data(), small.size(), DataType::kFloat32, ReduceOp::kSum);
      comm.recv(got.data(), count, DataType::kFloat32, 0);
      EXPECT_EQ(got[count - 1], 1.0f);
      std::vector<float> sum(count);
      comm.all_reduce(big.data(), sum.data(), count, DataType::kFloat32, ReduceOp::kSum);
    } else {
      int32_t token = 0;
      comm.recv(&token, 1, DataType::kInt32, 1);
      comm.send(&token, 1, DataType::kInt32, 0);
      comm.recv(got.data(), count, DataType::kFloat32, 0);
      EXPECT_EQ(got[count - 1], 1.0f);
      comm.all_reduce(small.data(), small.data(), small.size(), DataType::kFloat32, ReduceOp::kSum);
      std::vector<float> sum(count);
      comm.all_reduce(big.data(), sum.data(), count, DataType::kFloat32, ReduceOp::kSum);
    }
    EXPECT_EQ(small[0], 3.0f);
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, P2pAsync, ::testing::ValuesIn(test_transports()));

}  // namespace
}  // namespace tbcoll::test
