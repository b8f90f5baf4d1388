// Bad input gives a clear error naming what is wrong, never a crash, hang or silent garbage.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <limits>
#include <thread>

#include "collectives/harness.h"
#include "platform/platform.h"

namespace tbcoll::test {
namespace {

TEST(Errors, BadArgumentsAreRejectedBeforeAnyCommunication) {
  run_ranks(2, {"loopback", ""}, [&](Communicator& comm) {
    std::vector<float> buf(16);
    EXPECT_THROW(comm.all_reduce(nullptr, buf.data(), 4, DataType::kFloat32, ReduceOp::kSum), InvalidArgument);
    EXPECT_NE(error_of([&] { comm.all_reduce(buf.data(), nullptr, 4, DataType::kFloat32, ReduceOp::kSum); })
                  .find("recv buffer is null"), std::string::npos);
    EXPECT_NE(error_of([&] { comm.all_reduce(buf.data(), buf.data(), SIZE_MAX / 2, DataType::kFloat32, ReduceOp::kSum); })
                  .find("overflows"), std::string::npos);
    EXPECT_NE(error_of([&] { comm.all_reduce(buf.data(), buf.data(), 4, static_cast<DataType>(42), ReduceOp::kSum); })
                  .find("invalid dtype 42"), std::string::npos);
    EXPECT_NE(error_of([&] { comm.all_reduce(buf.data(), buf.data(), 4, DataType::kFloat32, static_cast<ReduceOp>(-1)); })
                  .find("invalid reduction op -1"), std::string::npos);
    EXPECT_NE(error_of([&] { comm.broadcast(buf.data(), buf.data(), 4, DataType::kFloat32, 2); })
                  .find("root 2 out of range"), std::string::npos);
    EXPECT_NE(error_of([&] { comm.send(buf.data(), 4, DataType::kFloat32, 5); }).find("peer 5 out of range"),
              std::string::npos);
    EXPECT_NE(error_of([&] { comm.recv(buf.data(), 4, DataType::kFloat32, -1); }).find("peer -1 out of range"),
              std::string::npos);
    EXPECT_THROW(comm.send(buf.data(), 4, DataType::kFloat32, comm.rank()), InvalidArgument);
    EXPECT_THROW(comm.all_gather(buf.data(), buf.data(), SIZE_MAX / 4, DataType::kFloat32), InvalidArgument);
    EXPECT_NE(error_of([&] { comm.reduce(buf.data(), buf.data(), 4, DataType::kFloat32, ReduceOp::kSum, -3); })
                  .find("root -3 out of range"), std::string::npos);
    EXPECT_THROW(comm.reduce_scatter(buf.data(), nullptr, 4, DataType::kFloat32, ReduceOp::kMax), InvalidArgument);
    EXPECT_THROW(comm.reduce_scatter(buf.data(), buf.data(), SIZE_MAX / 4, DataType::kFloat32, ReduceOp::kMax),
                 InvalidArgument);
    // Buffers that overlap other than in place (run, they would give wrong, rank-dependent results silently).
    std::vector<float> big(64);
    float* at = big.data();
    EXPECT_NE(error_of([&] { comm.all_reduce(at, at + 1, 8, DataType::kFloat32, ReduceOp::kSum); })
                  .find("overlap without being in place (in place means send == recv)"), std::string::npos);
    EXPECT_NE(error_of([&] { comm.broadcast(at + 3, at, 8, DataType::kFloat32, comm.rank()); }).find("overlap"),
              std::string::npos);
    // all_gather in place is send == recv + rank * count: send == recv is that on rank 0 only (refused on the
    // others: see RefusedOnSomeRanksFailsTheOthersPromptly). Here every rank passes a wrong layout.
    EXPECT_NE(error_of([&] { comm.all_gather(at + 1, at, 8, DataType::kFloat32); })
                  .find("in place means send == recv + rank * count"), std::string::npos);
    EXPECT_THROW(comm.reduce_scatter(at, at + 1, 8, DataType::kFloat32, ReduceOp::kSum), InvalidArgument);
    EXPECT_THROW(comm.reduce(at, at + 2, 8, DataType::kFloat32, ReduceOp::kSum, comm.rank()), InvalidArgument);
    // Argument errors don't break the communicator: a correct call still works.
    EXPECT_FALSE(comm.broken());
    std::vector<float> ones(16, 1.0f);
    comm.all_reduce(ones.data(), ones.data(), ones.size(), DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(ones[15], 2.0f);
    // The in-place layouts still work: all_gather from recv + rank * count, reduce_scatter into send + rank * count.
    std::vector<float> blocks(16, 0.0f);
    std::fill(blocks.begin() + 8 * comm.rank(), blocks.begin() + 8 * comm.rank() + 8, 1.0f + comm.rank());
    comm.all_gather(blocks.data() + 8 * comm.rank(), blocks.data(), 8, DataType::kFloat32);
    EXPECT_EQ(blocks[0] + blocks[15], 3.0f);
    comm.reduce_scatter(blocks.data(), blocks.data() + 8 * comm.rank(), 8, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(blocks[8 * comm.rank()], 2.0f * (1.0f + comm.rank()));
  });
}

TEST(Errors, InitRejectsBadConfig) {
  Config config;
  config.rank = 3;
  config.world_size = 2;
  EXPECT_THROW(Communicator::init(config), InvalidArgument);
  config.rank = 0;
  config.world_size = 2;
  EXPECT_NE(error_of([&] { Communicator::init(config); }).find("TBCOLL_ROOT"), std::string::npos);
  config.world_size = 1;
  config.algo = "bogus";
  EXPECT_NE(error_of([&] { Communicator::init(config); }).find("unknown algorithm"), std::string::npos);
}

TEST(Transports, AnUnknownNameListsTheRegisteredOnes) {
  const std::vector<std::string> errors = init_errors(2, [](int rank) {
    Config config;
    config.rank = rank;
    config.world_size = 2;
    config.transport = "infiniband";
    return config;
  });
  std::string names;
  for (const std::string& name : test_transports()) names += (names.empty() ? "" : ", ") + name;
  for (const std::string& error : errors) {
    EXPECT_NE(error.find("TBCOLL_TRANSPORT=\"infiniband\" names no transport of this process: " + names),
              std::string::npos) << error;
    EXPECT_NE(error.find("RDMA, InfiniBand and RoCE are ibverbs"), std::string::npos) << error;
  }
}

class Mismatch : public ::testing::TestWithParam<std::string> {};

TEST_P(Mismatch, DifferentCountsOrDtypesAreReported) {
  const std::string transport = GetParam();
  // Counts differ: both ranks get an InvalidUsage naming the peer's call.
  std::vector<std::string> messages(2);
  run_ranks(2, {transport, "direct", 10}, [&](Communicator& comm) {
    std::vector<float> buf(100, 1.0f);
    messages[comm.rank()] = error_of([&] {
      comm.all_reduce(buf.data(), buf.data(), comm.rank() == 0 ? 100 : 99, DataType::kFloat32, ReduceOp::kSum);
    });
    EXPECT_TRUE(comm.broken());
    EXPECT_THROW(comm.barrier(), InvalidUsage) << "a broken communicator fails fast";
  });
  // Each rank names the other's call: spotted itself ("peer 1 called ..."), or told by the peer that spotted it
  // first ("peer 1 failed ...: rank 1: all_reduce(count=99, ...) does not match").
  EXPECT_NE(messages[0].find("all_reduce(count=99, f32, sum)"), std::string::npos) << messages[0];
  EXPECT_NE(messages[1].find("all_reduce(count=100, f32, sum)"), std::string::npos) << messages[1];

  // Same byte size, different dtype: still detected by the signature.
  run_ranks(2, {transport, "ring", 10}, [&](Communicator& comm) {
    std::vector<int32_t> buf(50000, 1);
    std::string message = error_of([&] {
      comm.all_reduce(buf.data(), buf.data(), buf.size(), comm.rank() == 0 ? DataType::kInt32 : DataType::kFloat32,
                      ReduceOp::kSum);
    });
    EXPECT_NE(message.find("does not match the peer's call"), std::string::npos) << message;
  });

  // Different collectives.
  run_ranks(2, {transport, "", 10}, [&](Communicator& comm) {
    std::vector<float> buf(8, 1.0f);
    std::string message = error_of([&] {
      if (comm.rank() == 0) comm.all_reduce(buf.data(), buf.data(), 8, DataType::kFloat32, ReduceOp::kSum);
      else comm.broadcast(buf.data(), buf.data(), 8, DataType::kFloat32, 0);
    });
    // Rank 1 receives rank 0's all_reduce message and names it; rank 0 then sees rank 1 give up.
    if (comm.rank() == 1) {
      // Told by itself, or by rank 0 that spotted it first.
      EXPECT_NE(message.find("all_reduce(count=8, f32, sum)"), std::string::npos) << message;
    } else {
      EXPECT_NE(message, "") << "rank 0 must fail too, not hang";
    }
  });
}

// Ranks that each name themselves the root of a broadcast only send, so no receive checks the call: unchecked,
// each would return with its own data, and on shm no later call would fail either. Every rank fails, at the
// broadcast or at its next call, long before the deadline. Small messages (tree, then one-shot all-reduces on shm) and
// messages larger than what the transports buffer (senders block: shm, and tcp at 64 MiB).
TEST_P(Mismatch, BroadcastsWithDifferentRootsAreReported) {
  const std::string transport = GetParam();
  for (int n : {2, 3}) {
    for (size_t count : {size_t{64}, size_t{1} << 21, size_t{1} << 24}) {
      if (count > (size_t{1} << 21) && transport != "tcp") continue;  // beyond the sockets' buffers: senders block
      std::vector<std::string> messages(n);
      std::vector<int> broken(n);
      const auto start = std::chrono::steady_clock::now();
      run_ranks(n, {transport, count > 64 ? "broadcast:binomial,allreduce:direct" : "", 30}, [&](Communicator& comm) {
        std::vector<float> buf(count, static_cast<float>(comm.rank()));
        messages[comm.rank()] = error_of([&] {
          comm.broadcast(buf.data(), buf.data(), count, DataType::kFloat32, comm.rank());
          float x = 1.0f;
          for (int i = 0; i < 3; ++i) comm.all_reduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
        });
        broken[comm.rank()] = comm.broken();
      });
      bool named = false;
      for (int r = 0; r < n; ++r) {
        EXPECT_NE(messages[r], "") << transport << ", " << n << " ranks, count " << count << ": rank " << r;
        EXPECT_TRUE(broken[r]) << "a mismatch breaks the communicator: " << messages[r];
        named = named || messages[r].find("root=") != std::string::npos;
      }
      EXPECT_TRUE(named) << "some rank names the other root";
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "not the 30 s deadline";
    }
  }
}

// Ranks that name different roots of a broadcast or reduce: every rank fails, in that call (a rank that waits for
// data) or within the next calls (a rank that only sends does not wait for its neighbour's check, nor look at its
// peers' notices: it does once 8 checks wait, here the same mistake again and again), with an error naming both
// roots, well before the deadline. Small messages (point to point on shm too) and 32 KiB (shm reads the root in
// place).
TEST_P(Mismatch, DifferentRootsFailEveryRankByTheNextCallNamingBothRoots) {
  const std::string transport = GetParam();
  const std::vector<std::vector<int>> patterns = {{0, 1}, {0, 0, 1}, {0, 1, 2}, {2, 0, 2}};
  for (const std::vector<int>& roots : patterns) {
    const int n = static_cast<int>(roots.size());
    for (size_t count : {size_t{16}, size_t{8192}}) {
      for (bool reduce : {false, true}) {
        std::vector<std::string> messages(n);
        const auto start = std::chrono::steady_clock::now();
        run_ranks(n, {transport, "", 30}, [&](Communicator& comm) {
          std::vector<float> buf(count, static_cast<float>(comm.rank())), out(count);
          const int root = roots[comm.rank()];
          messages[comm.rank()] = error_of([&] {
            for (int call = 0; call < 20; ++call) {
              if (reduce) comm.reduce(buf.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum, root);
              else comm.broadcast(buf.data(), buf.data(), count, DataType::kFloat32, root);
            }
          });
        });
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        for (int r = 0; r < n; ++r) {
          const std::string what = transport + (reduce ? " reduce" : " broadcast") + ", count " +
                                   std::to_string(count) + ", rank " + std::to_string(r) + " of " +
                                   std::to_string(n) + ": ";
          bool other_named = false;
          for (int root : roots) {
            if (root != roots[r] && messages[r].find("root=" + std::to_string(root)) != std::string::npos) {
              other_named = true;
            }
          }
          EXPECT_NE(messages[r].find("root=" + std::to_string(roots[r])), std::string::npos) << what << messages[r];
          EXPECT_TRUE(other_named) << what << messages[r];
        }
        EXPECT_LT(seconds, 10) << transport << ": not the 30 s deadline";
      }
    }
  }
}

// A call refused on some ranks but valid on others (a port of MPI's in-place all_gather: send == recv is the in-place
// layout of rank 0 only): the refusing ranks tell the others, who fail at once with their reason instead of
// waiting out the deadline; a call all ranks refuse leaves the communicator usable.
TEST_P(Mismatch, RefusedOnSomeRanksFailsTheOthersPromptly) {
  const std::string transport = GetParam();
  for (size_t count : {size_t{4}, size_t{50000}}) {
    std::vector<std::string> messages(3), next(3);
    std::vector<double> seconds(3);
    run_ranks(3, {transport, "", 30}, [&](Communicator& comm) {
      std::vector<float> buf(3 * count, 1.0f);
      // Every rank refuses this one: the communicator stays usable.
      EXPECT_NE(error_of([&] { comm.all_gather(nullptr, buf.data(), count, DataType::kFloat32); }), "");
      float x = 1.0f;
      comm.all_reduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
      EXPECT_EQ(x, 3.0f);
      const auto start = std::chrono::steady_clock::now();
      messages[comm.rank()] = error_of([&] { comm.all_gather(buf.data(), buf.data(), count, DataType::kFloat32); });
      seconds[comm.rank()] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      // The refusing ranks stay away a while (as a program that stops at the error would): rank 0 must not wait.
      if (comm.rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(600));
      next[comm.rank()] = error_of([&] { comm.barrier(); });
    });
    for (int r = 1; r < 3; ++r) {
      EXPECT_NE(messages[r].find("in place means send == recv + rank * count"), std::string::npos) << messages[r];
    }
    EXPECT_NE(messages[0].find("refused this call"), std::string::npos) << transport << ": " << messages[0];
    EXPECT_NE(messages[0].find("in place means"), std::string::npos) << messages[0];
    EXPECT_LT(seconds[0], 0.5) << transport << ", count " << count << ": rank 0 waited (for the refusers' next call)";
    std::printf("[ time to error ] %s: call refused on 2 of 3 ranks, %zu floats: %.1f ms on the valid rank\n",
                transport.c_str(), count, seconds[0] * 1e3);
    for (int r = 0; r < 3; ++r) EXPECT_NE(next[r], "") << "rank " << r << ": ranks are out of step after it";
  }
}

// MPI_IN_PLACE (the address 1 in Open MPI and MPICH) is refused naming in-place usage, never dereferenced
// (dereferenced, it would crash the shm transport with SIGSEGV); a rank that passed it tells the others.
TEST_P(Mismatch, MpiInPlaceMarkerIsRefusedNamingInPlaceUsage) {
  const std::string transport = GetParam();
  void* const mpi_in_place = reinterpret_cast<void*>(1);
  std::vector<std::string> messages(2);
  run_ranks(2, {transport, "", 30}, [&](Communicator& comm) {
    std::vector<float> buf(64, 1.0f);
    const std::string all = error_of(
        [&] { comm.all_reduce(mpi_in_place, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum); });
    EXPECT_NE(all.find("points into the first page"), std::string::npos) << all;
    EXPECT_NE(all.find("MPI_IN_PLACE"), std::string::npos) << all;
    EXPECT_NE(all.find("in place means send == recv"), std::string::npos) << all;
    EXPECT_NE(error_of([&] { comm.send(reinterpret_cast<void*>(8), 4, DataType::kFloat32, 1 - comm.rank()); })
                  .find("first page"), std::string::npos);
    EXPECT_FALSE(comm.broken()) << "refused by every rank: still usable";
    comm.all_reduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(buf[63], 2.0f);
    // Rank 1 alone passes it.
    messages[comm.rank()] = error_of([&] {
      comm.all_gather(comm.rank() == 1 ? mpi_in_place : buf.data(), buf.data() + 32, 16, DataType::kFloat32);
    });
  });
  EXPECT_NE(messages[1].find("MPI_IN_PLACE"), std::string::npos) << messages[1];
  EXPECT_NE(messages[0].find("peer 1 refused this call"), std::string::npos) << messages[0];
  EXPECT_NE(messages[0].find("MPI_IN_PLACE"), std::string::npos) << messages[0];
}

INSTANTIATE_TEST_SUITE_P(Transports, Mismatch, ::testing::ValuesIn(test_transports()));

TEST(Errors, ShmOneShotMismatchIsReported) {
  std::vector<std::string> messages(2);
  run_ranks(2, {"shm", "", 10}, [&](Communicator& comm) {
    std::vector<float> buf(100, 1.0f);
    messages[comm.rank()] = error_of([&] {
      comm.all_reduce(buf.data(), buf.data(), comm.rank() == 0 ? 100 : 99, DataType::kFloat32, ReduceOp::kSum);
    });
  });
  EXPECT_NE(messages[0].find("all_reduce(count=99, f32, sum)"), std::string::npos) << messages[0];
  EXPECT_NE(messages[1].find("all_reduce(count=100, f32, sum)"), std::string::npos) << messages[1];
}

// Counts so different that the ranks run different shm algorithms (two-shot and one-shot): each names the
// other's call instead of waiting for the deadline.
TEST(Errors, ShmMismatchAcrossAlgorithmsIsReported) {
  std::vector<std::string> messages(2);
  auto start = std::chrono::steady_clock::now();
  run_ranks(2, {"shm", "", 30}, [&](Communicator& comm) {
    std::vector<float> buf(100000, 1.0f);
    messages[comm.rank()] = error_of([&] {
      comm.all_reduce(buf.data(), buf.data(), comm.rank() == 0 ? 100000 : 10, DataType::kFloat32, ReduceOp::kSum);
    });
  });
  EXPECT_NE(messages[0].find("all_reduce(count=10, f32, sum)"), std::string::npos) << messages[0];
  EXPECT_NE(messages[1].find("all_reduce(count=100000, f32, sum)"), std::string::npos) << messages[1];
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "not the 30 s deadline";
}

// A rank outside the fast path (here: broadcast over the shm queues) while the others wait in the one-shot:
// everyone learns of the mismatch from the call announcement, well before the deadline.
TEST(Errors, ShmMismatchWithANonFastPathCallIsReported) {
  std::vector<std::string> messages(3);
  auto start = std::chrono::steady_clock::now();
  run_ranks(3, {"shm", "", 30}, [&](Communicator& comm) {
    std::vector<float> buf(10, 1.0f);
    messages[comm.rank()] = error_of([&] {
      if (comm.rank() < 2) comm.all_reduce(buf.data(), buf.data(), 10, DataType::kFloat32, ReduceOp::kSum);
      else comm.broadcast(buf.data(), buf.data(), 10, DataType::kFloat32, 1);
    });
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(messages[r].find("broadcast(count=10, f32, root=1)"), std::string::npos) << messages[r];
  }
  // Told by itself, or by a peer that spotted it first.
  EXPECT_NE(messages[2].find("all_reduce(count=10, f32, sum)"), std::string::npos) << messages[2];
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "not the 30 s deadline";
}

// A rank on the shortest path (it repeats its last all_reduce on the same buffers) meets a peer in another call:
// another count, or a broadcast run point to point. Each names the other's call, well before the deadline (the
// broadcast's root only sends: it is told as its next call starts).
TEST(Errors, ShmMismatchOnARepeatedCallIsReported) {
  for (bool broadcast : {false, true}) {
    std::vector<std::string> messages(2);
    auto start = std::chrono::steady_clock::now();
    run_ranks(2, {"shm", "", 30}, [&](Communicator& comm) {
      std::vector<float> buf(4, 1.0f);
      for (int call = 0; call < 3; ++call) {
        comm.all_reduce(buf.data(), buf.data(), 4, DataType::kFloat32, ReduceOp::kSum);
      }
      messages[comm.rank()] = error_of([&] {
        if (comm.rank() == 0) {
          comm.all_reduce(buf.data(), buf.data(), 4, DataType::kFloat32, ReduceOp::kSum);
        } else if (broadcast) {
          comm.broadcast(buf.data(), buf.data(), 4, DataType::kFloat32, 1);
          comm.all_reduce(buf.data(), buf.data(), 4, DataType::kFloat32, ReduceOp::kSum);
        } else {
          comm.all_reduce(buf.data(), buf.data(), 3, DataType::kFloat32, ReduceOp::kSum);
        }
      });
    });
    const std::string theirs = broadcast ? "broadcast(count=4, f32, root=1)" : "all_reduce(count=3, f32, sum)";
    EXPECT_NE(messages[0].find(theirs), std::string::npos) << messages[0];
    EXPECT_NE(messages[1].find("all_reduce(count=4, f32, sum)"), std::string::npos) << messages[1];
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "not the 30 s deadline";
  }
}

// Ranks tuned differently run the same call with different algorithms: both say so, well before the deadline.
TEST(Errors, ShmRanksTunedDifferentlyAreTold) {
  std::vector<std::vector<std::string>> pairs = {{"oneshot", "twoshot"}, {"oneshot", "ring"}};
  if (platform::reads_process_memory()) pairs.push_back({"cma", "twoshot"});
  for (const auto& algos : pairs) {
    std::vector<std::string> messages(2);
    auto start = std::chrono::steady_clock::now();
    RankOptions options{"shm", "", 30};
    options.algo_per_rank = algos;
    run_ranks(2, options, [&](Communicator& comm) {
      std::vector<float> buf(100, 1.0f);
      messages[comm.rank()] = error_of([&] {
        comm.all_reduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
      });
    });
    for (int r = 0; r < 2; ++r) {
      // Each rank either spots the difference itself or sees the other give up first.
      EXPECT_TRUE(messages[r].find("tuned differently") != std::string::npos ||
                  messages[r].find("closed its end") != std::string::npos)
          << algos[0] << "/" << algos[1] << ": " << messages[r];
    }
    EXPECT_TRUE(messages[0].find("tuned differently") != std::string::npos ||
                messages[1].find("tuned differently") != std::string::npos)
        << messages[0] << " | " << messages[1];
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "not the 30 s deadline";
  }
}

// A root that ran its broadcast point to point has sent everything and moved on: its announcement no longer
// shows the call, but the message waiting in the queue does. The peer in cross-memory attach says so at once.
TEST(Errors, ShmPeerThatRanTheCallPointToPointAndMovedOnIsSpotted) {
  if (!platform::reads_process_memory()) GTEST_SKIP() << "no cross-memory reads on " << platform::flavour();
  std::vector<std::string> messages(2);
  auto start = std::chrono::steady_clock::now();
  RankOptions options{"shm", "", 30};
  options.algo_per_rank = {"broadcast:binomial,allreduce:direct", "cma"};
  run_ranks(2, options, [&](Communicator& comm) {
    std::vector<float> buf(16384, 1.0f);
    messages[comm.rank()] = error_of([&] {
      comm.broadcast(buf.data(), buf.data(), buf.size(), DataType::kFloat32, 0);
      comm.all_reduce(buf.data(), buf.data(), 4, DataType::kFloat32, ReduceOp::kSum);
    });
  });
  EXPECT_NE(messages[1].find("peer 0 runs this call with a point-to-point schedule"), std::string::npos)
      << messages[1];
  EXPECT_NE(messages[0], "") << "rank 0's next call fails too, once rank 1 gave up";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "not the 30 s deadline";
}

// Ranks whose point-to-point schedules differ are told, even where the messages have the same sizes (2 ranks,
// one element: the direct exchange and the ring send the same bytes, and untold, each rank would reduce other
// data).
TEST(Errors, RanksTunedToDifferentSchedulesAreTold) {
  for (const std::string& transport : test_transports()) {
    std::vector<std::string> messages(2);
    RankOptions options{transport, "", 10};
    options.algo_per_rank = {"direct", "ring"};
    run_ranks(2, options, [&](Communicator& comm) {
      float value = static_cast<float>(comm.rank() + 1);
      messages[comm.rank()] = error_of([&] { comm.all_reduce(&value, &value, 1, DataType::kFloat32, ReduceOp::kSum); });
    });
    EXPECT_TRUE(messages[0].find("tuned differently") != std::string::npos ||
                messages[1].find("tuned differently") != std::string::npos)
        << transport << ": " << messages[0] << " | " << messages[1];
    for (const std::string& message : messages) EXPECT_NE(message, "") << transport << ": a rank went on";
  }
}

// TBCOLL_TRANSPORT=shm on rank 0 only: rank 0 reaches everyone over shm, ranks 1 and 2 each other in process.
// The fast path is decided from every pair, so no rank takes it alone (if rank 0 did, the first small
// all-reduce would fail as "tuned differently").
TEST(Errors, TransportForcedOnOneRankOnlyStillWorks) {
  auto store = make_in_memory_store();
  std::vector<std::string> errors(3);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 3; ++rank) {
    ranks.emplace_back([&, rank] {
      errors[rank] = error_of([&] {
        Config config;
        config.rank = rank;
        config.world_size = 3;
        config.store = store;
        config.prefix = "forced-one";
        config.timeout_s = 10;
        if (rank == 0) config.transport = "shm";
        Communicator comm = Communicator::init(config);
        for (size_t count : {size_t{16}, size_t{100000}}) {
          std::vector<float> data(count, 1.0f);
          comm.all_reduce(data.data(), data.data(), count, DataType::kFloat32, ReduceOp::kSum);
          if (data[count - 1] != 3.0f) throw Error(tbcollInternalError, "wrong sum");
        }
      });
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(errors[rank], "") << "rank " << rank;
}

// Ranks started with different world sizes are told at init, not left to meet a timeout later.
TEST(Errors, RanksWithDifferentWorldSizesAreToldAtInit) {
  auto store = make_in_memory_store();
  std::vector<std::string> errors(2);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      Config config;
      config.rank = rank;
      config.world_size = rank == 0 ? 2 : 3;
      config.store = store;
      config.prefix = "worlds";
      config.timeout_s = 20;
      errors[rank] = error_of([&] { Communicator::init(config); });
    });
  }
  for (std::thread& rank : ranks) rank.join();
  EXPECT_NE(errors[0].find("peer 1 was started with world size 3, this rank with 2"), std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("peer 0 was started with world size 2, this rank with 3"), std::string::npos)
      << errors[1];
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "not the 20 s deadline";
}

// A rank started with another world size that arrives after the others formed their communicator (and removed its
// records) is told at once, not at its deadline.
TEST(Errors, ALateRankWithAnotherWorldSizeIsToldAtInit) {
  auto store = make_in_memory_store();
  auto config_of = [&](int rank, int size) {
    Config config;
    config.rank = rank;
    config.world_size = size;
    config.store = store;
    config.prefix = "late";
    config.timeout_s = 20;
    return config;
  };
  std::thread other([&] { Communicator::init(config_of(1, 2)).barrier(); });
  Communicator::init(config_of(0, 2)).barrier();
  other.join();
  const auto start = std::chrono::steady_clock::now();
  const std::string error = error_of([&] { Communicator::init(config_of(2, 3)); });
  EXPECT_NE(error.find("a communicator of 2 ranks was already formed under rendezvous prefix \"late\"; this rank was "
                       "started with world size 3"), std::string::npos) << error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << "not the 20 s deadline";
  // The same prefix and size again: a new communicator, whose ranks wait for its own rank 0's id.
  std::thread again([&] { Communicator::init(config_of(1, 2)).barrier(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 1 first: it sees the tombstone
  Communicator::init(config_of(0, 2)).barrier();
  again.join();
}

// Rank 0 of two, whose peer never shows up.
Config alone_of_two(double timeout_s) {
  Config config;
  config.rank = 0;
  config.world_size = 2;
  config.store = make_in_memory_store();
  config.timeout_s = timeout_s;
  return config;
}

// A rank that never shows up: init fails at its deadline, naming the rank and the call like a collective's error.
TEST(Errors, InitTimeoutNamesTheRankAndTheCall) {
  const auto start = std::chrono::steady_clock::now();
  try {
    Communicator::init(alone_of_two(0.5));
    FAIL() << "init without the other rank succeeded";
  } catch (const TimeoutError& error) {
    EXPECT_NE(std::string(error.what()).find("rank 0: init(world_size=2) failed: "), std::string::npos)
        << error.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// A rank whose rendezvous refuses it (a wrong TBCOLL_ROOT port, rank 0 not up) keeps trying to the deadline, as
// rank 0 may be slow to start, but says so early (a third of the way here; 3 s at most), naming the address and
// what it saw, and the error at the deadline names the address again.
TEST(Errors, ARefusedRendezvousIsNamedEarly) {
  int port = 0;
  {
    // A port that was free a moment ago: nothing listens there now.
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
    port = ntohs(address.sin_port);
    close(fd);
  }
  Config config;
  config.rank = 1;
  config.world_size = 2;
  config.root = "127.0.0.1:" + std::to_string(port);
  config.timeout_s = 1.5;
  ::testing::internal::CaptureStderr();
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of([&] { Communicator::init(config); });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string log = ::testing::internal::GetCapturedStderr();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  EXPECT_NE(log.find(address + " has not accepted a connection for "), std::string::npos) << log;
  EXPECT_NE(log.find("Connection refused"), std::string::npos) << log;
  EXPECT_NE(message.find(address), std::string::npos) << message;
  EXPECT_LT(took, 5.0) << message;
}

// Split and the C API's init spend part of the timeout before init (agreeing on colours, connecting to the
// store): they pass what is left as a deadline, so the whole call stays within one timeout.
TEST(Errors, InitWithADeadlineEndsThere) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(Communicator::init(alone_of_two(60), Clock::now() + std::chrono::milliseconds(300)), TimeoutError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// A timeout too large for the clock's nanosecond count (someone meaning "never") means no deadline: it must not
// wrap into the past.
TEST(Errors, HugeTimeoutsMeanNoDeadline) {
  for (double timeout : {1e10, std::numeric_limits<double>::infinity()}) {
    run_ranks(2, {"tcp", "", timeout}, [&](Communicator& comm) {
      int value = comm.rank() + 1;
      comm.all_reduce(&value, &value, 1, DataType::kInt32, ReduceOp::kSum);
      EXPECT_EQ(value, 3) << "timeout " << timeout;
    });
  }
}

TEST(Errors, TcpBufferSizeOutOfRangeIsRefused) {
  for (const char* value : {"4294967296", "4096", "-1"}) {
    setenv("TBCOLL_TCP_BUFFER_BYTES", value, 1);
    std::vector<std::string> messages(2);
    auto store = make_in_memory_store();
    std::vector<std::thread> ranks;
    for (int rank = 0; rank < 2; ++rank) {
      ranks.emplace_back([&, rank] {
        Config config;
        config.rank = rank;
        config.world_size = 2;
        config.store = store;
        config.prefix = std::string("tcpbuf") + value;
        config.timeout_s = 10;
        messages[rank] = error_of([&] { Communicator::init(config); });
      });
    }
    for (std::thread& rank : ranks) rank.join();
    for (const std::string& message : messages) {
      EXPECT_NE(message.find("TBCOLL_TCP_BUFFER_BYTES="), std::string::npos) << value << ": " << message;
    }
  }
  unsetenv("TBCOLL_TCP_BUFFER_BYTES");
}

// A chunk size beyond the range is refused by name (near 2^62 it would wrap the ring's scratch size).
TEST(Errors, ChunkSizeOutOfRangeIsRefused) {
  for (const char* value : {"4611686018427387904", "100", "-1"}) {
    setenv("TBCOLL_CHUNK_BYTES", value, 1);
    Config config;
    config.rank = 0;
    config.world_size = 1;
    std::string message = error_of([&] { Communicator::init(config); });
    EXPECT_NE(message.find("TBCOLL_CHUNK_BYTES="), std::string::npos) << value << ": " << message;
  }
  unsetenv("TBCOLL_CHUNK_BYTES");
}

TEST(Errors, SilentPeerTimesOutWithTheOpAndPeerNamed) {
  auto start = std::chrono::steady_clock::now();
  run_ranks(2, {"tcp", "", 1.0}, [&](Communicator& comm) {
    std::vector<float> buf(4, 1.0f);
    if (comm.rank() == 0) {
      std::string message = error_of([&] { comm.all_reduce(buf.data(), buf.data(), 4, DataType::kFloat32, ReduceOp::kSum); });
      EXPECT_NE(message.find("timed out waiting for peer 1"), std::string::npos) << message;
      EXPECT_NE(message.find("all_reduce(count=4, f32, sum)"), std::string::npos) << message;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // never joins the all_reduce
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// The same on the shortest path of shm (a repeated all_reduce, whose deadline is read only once its wait outlasts
// the spin): the call ends at its deadline, naming the peer and the call, not earlier and not much later.
TEST(Errors, SilentPeerTimesOutOnARepeatedShmCall) {
  run_ranks(2, {"shm", "", 1.0}, [&](Communicator& comm) {
    std::vector<float> buf(4, 1.0f);
    for (int call = 0; call < 3; ++call) {
      comm.all_reduce(buf.data(), buf.data(), 4, DataType::kFloat32, ReduceOp::kSum);
    }
    if (comm.rank() == 0) {
      const auto start = std::chrono::steady_clock::now();
      std::string message =
          error_of([&] { comm.all_reduce(buf.data(), buf.data(), 4, DataType::kFloat32, ReduceOp::kSum); });
      const auto waited = std::chrono::steady_clock::now() - start;
      EXPECT_NE(message.find("timed out waiting for peer 1"), std::string::npos) << message;
      EXPECT_NE(message.find("all_reduce(count=4, f32, sum)"), std::string::npos) << message;
      EXPECT_GE(waited, std::chrono::milliseconds(950));
      EXPECT_LT(waited, std::chrono::seconds(5));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // never joins the fourth all_reduce
    }
  });
}

TEST(Errors, AbortMakesThePeerFail) {
  run_ranks(2, {"tcp", "", 20}, [&](Communicator& comm) {
    std::vector<float> buf(4, 1.0f);
    if (comm.rank() == 1) {
      comm.abort();
      EXPECT_THROW(comm.barrier(), InvalidUsage);
    } else {
      auto start = std::chrono::steady_clock::now();
      EXPECT_THROW(comm.all_reduce(buf.data(), buf.data(), 4, DataType::kFloat32, ReduceOp::kSum), Error);
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << "should not wait for the deadline";
    }
  });
}


// A peer that aborts with a reason (it gave up because another communicator failed, say) is named with that
// reason in the call that fails on its closed connections, on every transport.
TEST(Errors, AnAbortsReasonReachesThePeer) {
  for (const std::string& transport : test_transports()) {
    std::atomic<bool> aborted{false};
    run_ranks(2, {transport, "", 20}, [&](Communicator& comm) {
      std::vector<float> buf(4, 1.0f);
      if (comm.rank() == 1) {
        comm.abort("the tensor-parallel group lost rank 3");
        aborted = true;
        return;
      }
      while (!aborted) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const std::string message = error_of([&] { comm.recv(buf.data(), 4, DataType::kFloat32, 1); });
      EXPECT_NE(message.find("peer 1 failed"), std::string::npos) << transport << ": " << message;
      EXPECT_NE(message.find("rank 1: aborted: the tensor-parallel group lost rank 3"), std::string::npos)
          << transport << ": " << message;
    });
  }
}

// The fault matrix's "abort from another thread", for every collective on every transport: rank 1 waits in a call
// rank 0 has not made, another thread of rank 1 aborts its communicator; rank 1's call fails at once, and rank 0's
// call then fails at once too, naming the peer, long before the 10 s deadline. No descriptor or thread is left.
TEST(Errors, AbortFromAnotherThreadEndsEveryCollective) {
  const size_t fds_before = entries_of("/proc/self/fd"), threads_before = entries_of("/proc/self/task");
  const std::vector<std::string> calls = {"all_reduce",     "all_reduce 4 MiB", "all_gather", "reduce_scatter",
                                          "broadcast",      "reduce",           "barrier",    "send/recv"};
  for (const std::string& transport : test_transports()) {
    for (const std::string& call : calls) {
      std::atomic<bool> aborted{false};
      double seconds[2] = {0, 0};
      std::string messages[2];
      bool next_call[2] = {false, false};
      run_ranks(2, {transport, "", 10}, [&](Communicator& comm) {
        const size_t count = call == "all_reduce 4 MiB" ? size_t{1} << 20 : 64;
        std::vector<float> send(2 * count, 1.0f), recv(2 * count);
        auto run = [&] {
          if (call.rfind("all_reduce", 0) == 0) {
            comm.all_reduce(send.data(), recv.data(), count, DataType::kFloat32, ReduceOp::kSum);
          } else if (call == "all_gather") {
            comm.all_gather(send.data(), recv.data(), count, DataType::kFloat32);
          } else if (call == "reduce_scatter") {
            comm.reduce_scatter(send.data(), recv.data(), count, DataType::kFloat32, ReduceOp::kSum);
          } else if (call == "broadcast") {
            comm.broadcast(send.data(), recv.data(), count, DataType::kFloat32, 0);
          } else if (call == "reduce") {
            comm.reduce(send.data(), recv.data(), count, DataType::kFloat32, ReduceOp::kSum, 1);
          } else if (call == "barrier") {
            comm.barrier();
          } else if (comm.rank() == 1) {
            comm.recv(recv.data(), count, DataType::kFloat32, 0);
          } else {
            comm.send(send.data(), count, DataType::kFloat32, 1);
          }
        };
        const int r = comm.rank();
        std::chrono::steady_clock::time_point start;
        if (r == 1) {
          std::thread aborter([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            start = std::chrono::steady_clock::now();
            comm.abort();
          });
          messages[r] = error_of(run);
          aborter.join();
          aborted = true;
        } else {
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
          while (!aborted && std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          start = std::chrono::steady_clock::now();
          messages[r] = error_of(run);
          // Rank 1 may have given all its part before it aborted (its input published on shm, a send buffered): then
          // rank 0's call completes with correct data, and its next call fails.
          if (messages[r].empty()) {
            next_call[r] = true;
            messages[r] = error_of([&] { comm.barrier(); });
          }
        }
        seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      });
      const std::string what = transport + ", " + call + ": ";
      EXPECT_NE(messages[1].find("abort"), std::string::npos) << what << messages[1];
      EXPECT_NE(messages[0], "") << what << "rank 0 must fail, in that call or the next";
      EXPECT_NE(messages[0].find("peer 1"), std::string::npos) << what << messages[0];
      EXPECT_LT(seconds[0], 2) << what << messages[0];
      EXPECT_LT(seconds[1], 2) << what << messages[1];
      std::printf("[ time to error ] abort from another thread | %s | %s | aborting rank %.1f ms, peer %.1f ms%s\n",
                  transport.c_str(), call.c_str(), seconds[1] * 1e3, seconds[0] * 1e3,
                  next_call[0] ? " (its call completed with rank 1's part: its next call failed)" : "");
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // threads that were told to end are gone
  EXPECT_EQ(entries_of("/proc/self/fd"), fds_before) << "descriptors left behind";
  EXPECT_EQ(entries_of("/proc/self/task"), threads_before) << "threads left behind";
}

}  // namespace
}  // namespace tbcoll::test
