// TBCOLL_TUNER=measure on real communicators: every call right while the shortlist takes turns, every rank
// deciding alike through the agreement all_reduce, the asynchronous queue going through the same trials, forced
// algorithms left alone, and ranks tuned differently told so instead of hanging.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "collectives/checks.h"
#include "collectives/harness.h"

namespace tbcoll::test {
namespace {

RankOptions measuring(const std::string& transport, const std::string& algo = "") {
  RankOptions options{transport, algo};
  options.knobs = {{"TBCOLL_TUNER", "measure"}, {"TBCOLL_TUNE_TRIALS", "2"}};
  return options;
}

// Calls until the ranks decided for bytes' octave (the same call on every rank: the decision is part of it).
template <typename Call>
int calls_until_decided(Communicator& comm, const char* collective, size_t bytes, Call&& call) {
  int calls = 0;
  while (comm.explain(collective, bytes).measured.empty() && calls < 300) {
    call(calls);
    ++calls;
  }
  return calls;
}

// 3 ranks (not a power of two) over loopback and tcp: every call checked while the shortlist takes turns (each
// check makes 2 calls, out of place and in place); then every rank holds the same decision.
TEST(MeasuredTuningRuns, EveryCallRightAndEveryRankDecidesAlike) {
  const std::vector<size_t> counts = {7, 4096, (size_t{1} << 18) + 3};
  for (const char* transport : {"loopback", "tcp"}) {
    std::mutex mutex;
    std::vector<std::vector<std::string>> decided(3);  // per rank, per count
    run_ranks(3, measuring(transport), [&](Communicator& comm) {
      for (size_t count : counts) {
        const size_t bytes = count * 4;
        const int calls = calls_until_decided(comm, "all_reduce", bytes, [&](int call) {
          check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, count, call);
          if (call % 4 == 0) check_all_reduce(comm, DataType::kInt32, ReduceOp::kMax, count, call);
        });
        EXPECT_LT(calls, 300) << transport << ", " << bytes << " B: never decided";
        const Communicator::Explanation why = comm.explain("all_reduce", bytes);
        EXPECT_EQ(why.chosen, comm.all_reduce_algorithm(bytes));
        EXPECT_NE(why.measured.find(why.chosen + " "), std::string::npos) << why.measured;
        check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, count, 99);  // the decided one
        std::lock_guard<std::mutex> lock(mutex);
        decided[comm.rank()].push_back(comm.all_reduce_algorithm(bytes));
      }
      // Another collective, measured on its own, in place and out.
      EXPECT_LT(calls_until_decided(comm, "all_gather", 3 * 1000 * 4,
                                    [&](int) { check_all_gather(comm, DataType::kFloat32, 1000); }),
                300);
    });
    for (int rank = 1; rank < 3; ++rank) EXPECT_EQ(decided[rank], decided[0]) << transport << ": rank " << rank;
  }
}

TEST(MeasuredTuningRuns, AsynchronousCallsGoThroughTheSameTrials) {
  run_ranks(4, measuring("tcp"), [&](Communicator& comm) {
    const size_t count = 50000;
    int batches = 0;
    while (comm.explain("all_reduce", count * 4).measured.empty() && batches++ < 40) {
      std::vector<std::vector<float>> data(8, std::vector<float>(count));
      std::vector<Work> works;
      for (size_t i = 0; i < data.size(); ++i) {
        for (size_t e = 0; e < count; ++e) data[i][e] = static_cast<float>(comm.rank() + i + e % 5);
        works.push_back(comm.all_reduce_async(data[i].data(), data[i].data(), count, DataType::kFloat32,
                                              ReduceOp::kSum));
      }
      for (Work& work : works) work.wait();
      for (size_t i = 0; i < data.size(); ++i) {
        for (size_t e = 0; e < count; e += 997) {
          ASSERT_EQ(data[i][e], static_cast<float>(6 + 4 * (i + e % 5))) << "call " << i << ", element " << e;
        }
      }
    }
    EXPECT_FALSE(comm.explain("all_reduce", count * 4).measured.empty());
  });
}

TEST(MeasuredTuningRuns, ForcedAlgorithmIsNotMeasured) {
  run_ranks(3, measuring("loopback", "allreduce:tree"), [&](Communicator& comm) {
    for (int call = 0; call < 10; ++call) check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 5000, call);
    EXPECT_EQ(comm.all_reduce_algorithm(20000), "tree");
    EXPECT_EQ(comm.explain("all_reduce", 20000).measured, "");
  });
}

// One rank measures, the others take the model's pick: the first call where they differ fails on both sides
// with the schedules named, and nothing hangs (each wait has its deadline; the mismatch is told at once).
TEST(MeasuredTuningRuns, RanksTunedDifferentlyAreTold) {
  RankOptions options{"tcp", ""};
  options.timeout_s = 20;
  options.knobs_per_rank = {{{"TBCOLL_TUNER", "measure"}, {"TBCOLL_TUNE_TRIALS", "1"}},
                            {{"TBCOLL_TUNER", "model"}}};
  std::mutex mutex;
  std::vector<std::string> errors(2);
  run_ranks(2, options, [&](Communicator& comm) {
    std::vector<float> x(1 << 18, 1.0f);
    std::string error;
    for (int call = 0; call < 100 && error.empty(); ++call) {  // the first batch runs the model's own pick
      error = error_of([&] { comm.all_reduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum); });
    }
    std::lock_guard<std::mutex> lock(mutex);
    errors[comm.rank()] = error;
  });
  bool told = false;
  for (const std::string& error : errors) {
    EXPECT_FALSE(error.empty()) << "both ranks fail";
    told = told || error.find("TBCOLL_TUNER") != std::string::npos;
  }
  EXPECT_TRUE(told) << errors[0] << "\n" << errors[1];
}

}  // namespace
}  // namespace tbcoll::test
