// TBCOLL_TUNER=measure on real communicators: every call right while the shortlist takes turns, every rank
// deciding alike through the agreement all_reduce, the asynchronous queue going through the same trials, forced
// algorithms left alone, and ranks tuned differently told so instead of hanging. And TBCOLL_TUNE_FILE: what one
// job measured, the next job starts from; a file that does not fit refused on every rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "algorithms/registry.h"
#include "collectives/checks.h"
#include "collectives/harness.h"
#include "tbcoll/store.hpp"

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

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string temporary_path(const char* name) {
  return fmt::format("{}/tbcoll-tune-{}-{}.txt", ::testing::TempDir(), name, getpid());
}

// Job 1 measures 3 ranks over loopback into the file; rank 0 writes the decision. Job 2 (the model, reading only)
// runs the saved algorithm from its first call; job 3 (measuring) takes it without trials. A hand-edited file
// naming an algorithm the model would not pick changes the model's choice to it, with every result right.
TEST(TuneFile, AFileWrittenByOneJobChangesTheNextJobsChoices) {
  const std::string path = temporary_path("next-job");
  std::remove(path.c_str());
  const size_t count = 20000, bytes = count * 4;
  std::string decided;
  RankOptions options = measuring("loopback");
  options.knobs["TBCOLL_TUNE_FILE"] = path;
  std::mutex mutex;
  run_ranks(3, options, [&](Communicator& comm) {
    EXPECT_LT(calls_until_decided(comm, "all_reduce", bytes,
                                  [&](int call) { check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, count, call); }),
              300);
    std::lock_guard<std::mutex> lock(mutex);
    decided = comm.all_reduce_algorithm(bytes);
  });
  const std::string written = read_file(path);
  EXPECT_NE(written.find(fmt::format("decision all_reduce 3 3 1 loopback off 65536 131071 {} ", decided)),
            std::string::npos) << written;
  RankOptions model{"loopback", ""};
  model.knobs = {{"TBCOLL_TUNER", "model"}, {"TBCOLL_TUNE_FILE", path}};
  run_ranks(3, model, [&](Communicator& comm) {
    const Communicator::Explanation why = comm.explain("all_reduce", bytes);
    EXPECT_EQ(why.chosen, decided);
    EXPECT_NE(why.measured.find("saved in " + path), std::string::npos) << why.measured;
    EXPECT_FALSE(why.measuring);
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, count, 0);
  });
  run_ranks(3, options, [&](Communicator& comm) {
    EXPECT_EQ(comm.all_reduce_algorithm(bytes), decided) << "no trials: the saved decision from the first call";
    EXPECT_FALSE(comm.explain("all_reduce", bytes).measuring);
  });
  // An edited decision: the algorithm the model ranks last of those it may pick.
  std::string model_pick, other;
  run_ranks(3, {"loopback", ""}, [&](Communicator& comm) {
    const Communicator::Explanation why = comm.explain("all_reduce", bytes);
    std::lock_guard<std::mutex> lock(mutex);
    model_pick = why.chosen;
    double most = -1;
    for (const auto& row : why.algorithms) {
      if (row.cannot_run.empty() && row.predicted_us > most && row.name != "hierarchical") {
        most = row.predicted_us;
        other = row.name;
      }
    }
  });
  ASSERT_NE(other, model_pick);
  std::string edited = written;
  const size_t at = edited.find(" 65536 131071 ") + 14;
  edited.replace(at, edited.find(' ', at) - at, other);
  write_file(path, edited);
  run_ranks(3, model, [&](Communicator& comm) {
    EXPECT_EQ(comm.all_reduce_algorithm(bytes), other);
    EXPECT_EQ(comm.all_reduce_algorithm(bytes / 4), model_pick) << "another octave: the model's";
    for (int call = 0; call < 3; ++call) check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, count, call);
  });
  std::remove(path.c_str());
}

// Every rank's set-up error with these knobs (3 ranks, loopback, threads of this process).
std::vector<std::string> init_errors(const std::map<std::string, std::string>& knobs) {
  static int generation = 0;
  const std::string prefix = fmt::format("tune-refusal{}", generation++);
  return test::init_errors(3, [&](int rank) {
    Config config;
    config.rank = rank;
    config.world_size = 3;
    config.prefix = prefix;
    config.transport = "loopback";
    config.timeout_s = 20;
    config.knobs = knobs;
    return config;
  });
}

// A file that does not fit is refused on every rank, with rank 0's reason: stale (another algorithm table), wrong
// (a record that does not parse, an algorithm that cannot run here), missing where only the model reads it.
TEST(TuneFile, AFileThatDoesNotFitIsRefusedOnEveryRank) {
  const std::string path = temporary_path("refused");
  const std::string good_head = "tbcoll-tune-file 1\nalgorithms all_reduce " + [] {
    std::string names;
    for (const auto& row : algo::algorithms_for(OpKind::kAllReduce)) names += (names.empty() ? "" : ",") + std::string(row.name);
    return names;
  }() + "\n";
  const std::pair<std::string, std::string> cases[] = {
      {"tbcoll-tune-file 1\nalgorithms all_reduce direct,ring\n", "line 2: stale: measured by a build whose all_reduce"},
      {"tbcoll-tune-file 2\n", "line 1: format version 2"},
      {"ring 1 2 3\n", "line 1: not a tune file"},
      {good_head + "decision all_reduce 3 3 1 loopback off 65536 131071 warp ring=1\n", "line 3: all_reduce has no algorithm \"warp\""},
      {good_head + "decision all_reduce 3 3 1 loopback off 65536 99999 ring ring=1\n", "line 3: 65536-99999 bytes is not one octave"},
      {good_head + "decision all_reduce 3 3 1 loopback off 65536 131071 hierarchical hierarchical=1\n",
       "line 3: hierarchical cannot run all_reduce"},
      {good_head + "decision all_reduce 3 3 1 loopback off 65536 131071 ring\n", "line 3: a decision has 10 fields"},
  };
  for (const auto& [text, message] : cases) {
    write_file(path, text);
    for (const std::string& error : init_errors({{"TBCOLL_TUNE_FILE", path}})) {
      EXPECT_NE(error.find("TBCOLL_TUNE_FILE=" + path + " " + message), std::string::npos) << text << "\n" << error;
    }
  }
  std::remove(path.c_str());
  for (const std::string& error : init_errors({{"TBCOLL_TUNE_FILE", path}})) {
    EXPECT_NE(error.find("no such file (TBCOLL_TUNER=measure writes it"), std::string::npos) << error;
  }
  for (const std::string& error : init_errors({{"TBCOLL_TUNE_FILE", "/nonexistent-dir/tune.txt"}, {"TBCOLL_TUNER", "measure"}})) {
    EXPECT_NE(error.find("cannot create it in /nonexistent-dir"), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace tbcoll::test
