// Every collective against a reference: the full dtype x op table on one path, then each transport x
// algorithm x world size x count with a few dtypes, in place and out of place.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "collectives/checks.h"
#include "collectives/harness.h"
#include "platform/platform.h"
#include "reduce/reduce.h"

namespace tbcoll::test {
namespace {

const size_t kCounts[] = {0, 1, 7, 4096, (1u << 20) + 3};


TEST(Collectives, DtypeOpTableOnLoopback) {
  for (std::string algo : {"direct", "ring"}) {
    run_ranks(3, {"loopback", algo}, [&](Communicator& comm) {
      for (DataType dtype : all_dtypes()) {
        for (ReduceOp op : all_ops()) {
          for (size_t count : {size_t{1}, size_t{7}, size_t{1000 + 3}}) check_all_reduce(comm, dtype, op, count, 0);
          check_reduce_scatter(comm, dtype, op, 33, 1);
          check_reduce(comm, dtype, op, 17, 2);
        }
      }
    });
  }
}

class Sweep : public ::testing::TestWithParam<TransportWorld> {};

TEST_P(Sweep, AllCollectives) {
  const TransportWorld& param = GetParam();
  for (std::string algo : {"ring", "direct"}) {
    SCOPED_TRACE("algo=" + algo);
    run_ranks(param.world_size, {param.transport, algo}, [&](Communicator& comm) {
      for (size_t count : kCounts) {
        check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, count, 0);
        if (count <= 4096) {
          check_all_reduce(comm, DataType::kBfloat16, ReduceOp::kAvg, count, 1);
          check_all_reduce(comm, DataType::kInt64, ReduceOp::kMax, count, 2);
          check_all_reduce(comm, DataType::kInt8, ReduceOp::kProd, count, 3);
        }
        check_all_gather(comm, count > 4096 ? DataType::kFloat32 : DataType::kInt8, count);
        check_broadcast(comm, DataType::kFloat64, count / 2 + 1, comm.size() - 1);
        check_broadcast(comm, DataType::kInt8, count, 0);
        check_send_recv(comm, count);
        check_reduce_scatter(comm, DataType::kFloat32, ReduceOp::kSum, count / 2 + (count % 3), 5);
        check_reduce(comm, count > 4096 ? DataType::kFloat32 : DataType::kInt8, ReduceOp::kProd, count,
                     static_cast<int>(count % comm.size()));
        comm.barrier();
      }
    });
  }
}

std::vector<TransportWorld> world_params() {
  std::vector<TransportWorld> out;
  for (const std::string& transport : test_transports()) {
    for (int n : {1, 2, 3, 4, 5, 7, 8}) out.push_back({transport, n});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(TransportsAndSizes, Sweep, ::testing::ValuesIn(world_params()),
                         [](const ::testing::TestParamInfo<TransportWorld>& info) { return name_of(info.param); });

// The shm one-shot fast path: the dtype x op table, every world size, interleaved with p2p collectives.
TEST(Collectives, ShmOneShotFastPath) {
  run_ranks(3, {"shm", "oneshot"}, [&](Communicator& comm) {
    EXPECT_EQ(comm.all_reduce_algorithm(8), "oneshot");
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000}}) {
      check_all_gather(comm, DataType::kFloat64, count);  // one-shot all_gather through the same slots
      check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, count, 4);
    }
    for (DataType dtype : all_dtypes()) {
      for (ReduceOp op : all_ops()) {
        for (size_t count : {size_t{1}, size_t{7}, size_t{1000 + 3}}) check_all_reduce(comm, dtype, op, count, 0);
      }
    }
    std::vector<float> too_big(20000);
    EXPECT_THROW(comm.all_reduce(too_big.data(), too_big.data(), too_big.size(), DataType::kFloat32, ReduceOp::kSum),
                 InvalidArgument) << "a forced oneshot beyond the slot is refused, not silently replaced";
  });
  for (int n : {2, 4, 5, 8}) {
    run_ranks(n, {"shm", "oneshot"}, [&](Communicator& comm) {
      for (int round = 0; round < 5; ++round) {  // back-to-back calls reuse both slots
        for (size_t count : {size_t{1}, size_t{8}, size_t{4099}, size_t{16384}}) {
          check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, count, round);
          check_all_reduce(comm, DataType::kBfloat16, ReduceOp::kMax, count, round + 1);
        }
        comm.barrier();
      }
    });
    run_ranks(n, {"shm", ""}, [&](Communicator& comm) {
      EXPECT_EQ(comm.all_reduce_algorithm(8), "oneshot");
      EXPECT_EQ(comm.all_reduce_algorithm(2048), "oneshot");
      // Between the fast paths' ranges, a point-to-point schedule the cost model picks (direct, or recursive
      // doubling at 8 ranks with a CPU each): whichever, the one its explanation names.
      EXPECT_EQ(comm.all_reduce_algorithm(4096), comm.explain("all_reduce", 4096).chosen);
      EXPECT_NE(comm.all_reduce_algorithm(4096), "oneshot");
      EXPECT_NE(comm.all_reduce_algorithm(4096), "twoshot");
      EXPECT_EQ(comm.all_reduce_algorithm(1 << 20), "twoshot");
      for (int round = 0; round < 3; ++round) {  // tuner mixes oneshot and p2p schedules call by call
        for (size_t count : {size_t{1}, size_t{300}, size_t{2000}, size_t{70000}}) {
          check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, count, round);
        }
      }
    });
  }
}

// A call that repeats its shape runs through the fast path's preparation of it (the 2-rank all_reduce of one
// flagged line has one of its own): the same buffers call after call with new inputs (the shortest path: nothing
// is checked again), then in place, every dtype and op, one line and several.
TEST(Collectives, ShmRepeatedShapesFollowTheirInputs) {
  for (int n : {2, 3}) {
    run_ranks(n, {"shm", "oneshot"}, [&](Communicator& comm) {
      for (DataType dtype : all_dtypes()) {
        for (ReduceOp op : all_ops()) {
          for (size_t count : {size_t{1}, 48 / dtype_size(dtype), size_t{200}}) {
            SCOPED_TRACE(fmt::format("all_reduce count={} {} {} n={}", count, to_string(dtype), to_string(op), n));
            const size_t bytes = count * dtype_size(dtype);
            std::vector<uint8_t> send(bytes), out(bytes), in_place(bytes);
            for (bool same_buffer : {false, true}) {
              for (int salt = 0; salt < 4; ++salt) {
                const std::vector<uint8_t> input = make_input(dtype, comm.rank(), count, salt);
                std::memcpy(same_buffer ? in_place.data() : send.data(), input.data(), bytes);
                if (same_buffer) {
                  comm.all_reduce(in_place.data(), in_place.data(), count, dtype, op);
                } else {
                  comm.all_reduce(send.data(), out.data(), count, dtype, op);
                }
                EXPECT_EQ(count_wrong(dtype, same_buffer ? in_place : out,
                                      reference_all_reduce(dtype, op, n, count, salt)), 0u)
                    << (same_buffer ? "in place" : "out of place") << ", call " << salt;
              }
            }
          }
        }
      }
    });
  }
}

// The shm direct path: peers read each other's buffers in place (cross-memory attach).
TEST(Collectives, ShmCrossMemoryAttach) {
  if (!platform::reads_process_memory()) GTEST_SKIP() << "no cross-memory reads on " << platform::flavour();
  for (int n : {2, 3, 5, 8}) {
    run_ranks(n, {"shm", "cma"}, [&](Communicator& comm) {
      EXPECT_EQ(comm.all_reduce_algorithm(8), "cma");
      for (size_t count : {size_t{1}, size_t{7}, size_t{4096}, size_t{(1u << 20) + 3}}) {
        check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, count, 0);
        check_all_gather(comm, DataType::kFloat32, count);
        check_broadcast(comm, DataType::kUint8, count, static_cast<int>(count % comm.size()));
        if (count <= 4096) {
          check_all_reduce(comm, DataType::kBfloat16, ReduceOp::kAvg, count, 1);
          check_all_reduce(comm, DataType::kInt64, ReduceOp::kMax, count, 2);
          check_all_reduce(comm, DataType::kFloat16, ReduceOp::kProd, count, 3);
        }
      }
    });
  }
  run_ranks(2, {"shm", ""}, [&](Communicator& comm) {
    EXPECT_EQ(comm.all_reduce_algorithm(4 << 20), "cma") << "the tuner picks it for large messages on one host";
    EXPECT_EQ(comm.all_reduce_algorithm(64 << 20), "twoshot") << "DRAM-sized: the two-shot with streaming stores";
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, (1u << 20) + 3, 0);
  });
}

// The shm two-shot through the segment: round and slice boundaries (a round is world_size slices of up to
// 128 KiB), several rounds, back-to-back calls of different sizes (buffer parity crosses calls), every world
// size, in place and out of place, and the non-temporal output path (16 MiB and more, out of place).
TEST(Collectives, ShmTwoShot) {
  for (int n : {2, 3, 5, 8}) {
    run_ranks(n, {"shm", "twoshot"}, [&](Communicator& comm) {
      EXPECT_EQ(comm.all_reduce_algorithm(8), "twoshot");
      // f32 elements per round: n slices of min(128 KiB, 512 KiB / n rounded down to a cache line)
      const size_t slice_bytes = std::min<size_t>(128 * 1024, 512 * 1024 / static_cast<size_t>(n) / 64 * 64);
      const size_t round = slice_bytes / 4 * static_cast<size_t>(n);
      for (size_t count : {size_t{1}, size_t{7}, size_t{17}, size_t{4099}, round - 1, round, round + 1,
                           3 * round + 5, size_t{(1u << 20) + 3}}) {
        check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, count, static_cast<int>(count % 3));
      }
      for (size_t count : {size_t{5}, size_t{100003}}) {
        check_all_reduce(comm, DataType::kBfloat16, ReduceOp::kAvg, count, 1);
        check_all_reduce(comm, DataType::kInt64, ReduceOp::kMax, count, 2);
        check_all_reduce(comm, DataType::kFloat16, ReduceOp::kProd, count, 3);
        check_all_reduce(comm, DataType::kUint8, ReduceOp::kMin, count, 4);
        check_all_reduce(comm, DataType::kFloat64, ReduceOp::kSum, count, 5);
      }
    });
  }
  run_ranks(2, {"shm", "twoshot"}, [&](Communicator& comm) {
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, (size_t{4} << 20) + 5, 0);  // 16 MiB: streaming
  });
}

// An f16 average of inputs near 65504 is representable although their sum is not: every algorithm divides first.
TEST(Collectives, Float16AverageDoesNotOverflowWhereTheAverageFits) {
  const std::vector<float> values = {40000.f, -60000.f, 65000.f, 30000.f, -0.5f};
  const size_t count = 4100;  // several lines and a tail
  auto check = [&](Communicator& comm, const std::vector<uint16_t>& got, size_t first) {
    for (size_t i = 0; i < got.size(); ++i) {
      const float want = values[(first + i) % values.size()], value = reduce::half_to_float(got[i]);
      ASSERT_TRUE(std::fabs(value - want) <= 1e-3f * std::fabs(want))
          << "rank " << comm.rank() << " element " << first + i << ": " << value << " instead of " << want;
    }
  };
  std::vector<std::pair<std::string, std::string>> paths = {
      {"loopback", "direct"}, {"loopback", "ring"}, {"shm", "oneshot"}, {"shm", "twoshot"}};
  if (platform::reads_process_memory()) paths.push_back({"shm", "cma"});
  for (const auto& path : paths) {
    const std::string& transport = path.first;  // not a structured binding: the lambda below captures it
    const std::string& algo = path.second;
    SCOPED_TRACE(transport + " " + algo);
    run_ranks(3, {transport, algo}, [&](Communicator& comm) {
      const int n = comm.size();
      std::vector<uint16_t> input(count * n), out(count * n);
      for (size_t i = 0; i < input.size(); ++i) input[i] = reduce::float_to_half(values[i % values.size()]);
      comm.all_reduce(input.data(), out.data(), count, DataType::kFloat16, ReduceOp::kAvg);
      check(comm, {out.begin(), out.begin() + count}, 0);
      std::vector<uint16_t> in_place(input.begin(), input.begin() + count);
      comm.all_reduce(in_place.data(), in_place.data(), count, DataType::kFloat16, ReduceOp::kAvg);
      check(comm, in_place, 0);
      if (transport != "loopback") return;
      comm.reduce_scatter(input.data(), out.data(), count, DataType::kFloat16, ReduceOp::kAvg);
      check(comm, {out.begin(), out.begin() + count}, static_cast<size_t>(comm.rank()) * count);
      comm.reduce(input.data(), out.data(), count, DataType::kFloat16, ReduceOp::kAvg, 1);
      if (comm.rank() == 1) check(comm, {out.begin(), out.begin() + count}, 0);
    });
  }
}

// Link emulation (TBCOLL_LINK_DELAY_US): every receive is held back by the delay, results stay right, and on
// one host the shm fast paths are off (they would bypass the emulated link).
TEST(Collectives, EmulatedLinkDelaysEveryMessage) {
  setenv("TBCOLL_LINK_DELAY_US", "3000", 1);
  for (const char* transport : {"tcp", "shm"}) {
    run_ranks(3, {transport, ""}, [&](Communicator& comm) {
      EXPECT_EQ(comm.all_reduce_algorithm(8), "direct") << transport;
      comm.barrier();
      auto start = std::chrono::steady_clock::now();
      check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 7, 0);  // 3 dependent exchanges at least
      EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::microseconds(3 * 3000)) << transport;
      check_all_reduce(comm, DataType::kInt32, ReduceOp::kMax, 100003, 1);
      check_all_gather(comm, DataType::kUint8, 4099);
      check_broadcast(comm, DataType::kFloat64, 77, 2);
    });
  }
  unsetenv("TBCOLL_LINK_DELAY_US");
}

// Messages in flight together pay the emulated delay together, as on a real link. Ten messages sent 2 ms apart,
// while the receiver already waits for them all, complete about one delay L after the last was sent. Checked as a
// property, not a speed: the emulated delays are floors that no load can lower, and an emulation that paid them
// one after another takes at least 10 L; one that started the delay of a message arriving while an earlier one
// waited out its own only once that one completed (the fault this test guards against) at least 2 L; a right one
// about L + 20 ms. So: at least L every time, under 2 L in one of three tries (a busy host would have to add some
// L - 20 ms = 280 ms to every try to fail a right emulation).
TEST(Collectives, EmulatedLinkDelaysOfMessagesInFlightOverlap) {
  using std::chrono::milliseconds;
  constexpr milliseconds kDelay(300);
  RankOptions options{"loopback", "", 20};
  options.knobs = {{"TBCOLL_LINK_DELAY_US", std::to_string(std::chrono::microseconds(kDelay).count())}};
  auto best = std::chrono::steady_clock::duration::max();
  for (int attempt = 0; attempt < 3 && best >= 2 * kDelay; ++attempt) {
    run_ranks(2, options, [&](Communicator& comm) {
      std::vector<std::vector<int>> messages(10, std::vector<int>(16, comm.rank()));
      // No barrier first (it would pay L too): the receiver stamps messages that came early when it first looks,
      // and a sender that starts late only adds time.
      auto start = std::chrono::steady_clock::now();
      if (comm.rank() == 0) {
        for (auto& message : messages) {
          std::this_thread::sleep_for(milliseconds(2));
          comm.send(message.data(), message.size(), DataType::kInt32, 1);
        }
        return;
      }
      comm.group_start();
      for (auto& message : messages) comm.recv(message.data(), message.size(), DataType::kInt32, 0);
      comm.group_end();
      const auto took = std::chrono::steady_clock::now() - start;
      EXPECT_GE(took, kDelay) << "took " << std::chrono::duration<double, std::milli>(took).count() << " ms";
      best = std::min(best, took);
      for (const auto& message : messages) EXPECT_EQ(message[15], 0);
    });
  }
  EXPECT_LT(best, 2 * kDelay) << "best of the tries: " << std::chrono::duration<double, std::milli>(best).count()
                              << " ms: the delays of messages in flight together were paid one after another";
}

TEST(Collectives, BroadcastTreeAndChainEveryRoot) {
  for (std::string algo : {"binomial", "chain"}) {
    run_ranks(5, {"tcp", algo}, [&](Communicator& comm) {
      for (int root = 0; root < comm.size(); ++root) {
        for (size_t count : {size_t{1}, size_t{333}, size_t{300000}}) check_broadcast(comm, DataType::kUint32, count, root);
      }
    });
  }
}

TEST(Collectives, TunerPicksDirectForSmallAndTheModelsChoiceForLarge) {
  run_ranks(2, {"loopback", ""}, [&](Communicator& comm) {
    EXPECT_EQ(comm.all_reduce_algorithm(8), "direct");
    EXPECT_EQ(comm.all_reduce_algorithm(64 << 20), comm.explain("all_reduce", 64 << 20).chosen);
    EXPECT_NE(comm.all_reduce_algorithm(64 << 20), "direct") << "64 MiB of scratch per peer";
    EXPECT_EQ(comm.algorithm("all_gather", 64 << 20), comm.explain("all_gather", 64 << 20).chosen);
    EXPECT_EQ(comm.algorithm("reduce_scatter", 64 << 20), "direct");
    EXPECT_EQ(comm.algorithm("broadcast", 8), "binomial");
    EXPECT_EQ(comm.algorithm("barrier", 0), "dissemination");
    EXPECT_THROW(comm.algorithm("allreduce", 8), InvalidArgument);
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, (1u << 20) + 3, 0);
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 5, 0);
  });
}

TEST(Collectives, TransportNamesFollowTheForcedTransport) {
  run_ranks(3, {"tcp", ""}, [&](Communicator& comm) {
    for (int p = 0; p < comm.size(); ++p) EXPECT_EQ(comm.transport_name(p), p == comm.rank() ? "self" : "tcp");
  });
  run_ranks(2, {"", ""}, [&](Communicator& comm) {
    EXPECT_EQ(comm.transport_name(1 - comm.rank()), "loopback") << "threads of one process prefer loopback";
  });
}

}  // namespace
}  // namespace tbcoll::test
