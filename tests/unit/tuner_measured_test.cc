// TBCOLL_TUNER=measure's bookkeeping (tuner_measured.h): the model's shortlist, the trials in turn, the decision
// by the slowest rank's time, and octaves. Two MeasuredChoices stand for two ranks; the max over their times is
// what the communicator's agreement all_reduce computes (tests/collectives/measured_tuning_test.cc runs it).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <string>
#include <vector>

#include "common/env.h"
#include "tbcoll/error.hpp"
#include "tuner.h"
#include "tuner_measured.h"

namespace tbcoll {
namespace {

Tuner measuring_tuner(int world_size, const std::string& forced = "") {
  TunerConfig config;
  config.use_model = true;
  config.measure = true;
  return Tuner(config, world_size, parse_forced(forced, {}), {}, {});
}

algo::CallShape all_reduce(size_t bytes, int world_size = 4) { return {OpKind::kAllReduce, bytes, world_size}; }

TEST(MeasuredTuning, ShortlistIsTheModelsCheapestWithinTheFactor) {
  const Tuner tuner = measuring_tuner(4);
  for (size_t bytes : {size_t{64}, size_t{64} << 10, size_t{4} << 20, size_t{64} << 20}) {
    const algo::CallShape call = all_reduce(bytes);
    const std::vector<const Choice*> list = tuner.shortlist(call, 2.0, 4);
    ASSERT_FALSE(list.empty()) << bytes;
    std::vector<double> predicted;
    for (const Choice* choice : list) predicted.push_back(choice->cost(call, tuner.costs()));
    EXPECT_TRUE(std::is_sorted(predicted.begin(), predicted.end())) << bytes << " B: cheapest first";
    EXPECT_LE(predicted.back(), 2.0 * predicted.front()) << bytes;
    EXPECT_LE(list.size(), 4u);
    EXPECT_DOUBLE_EQ(predicted.front(), tuner.choose(call).cost(call, tuner.costs())) << "the model's pick leads";
    // Every row left out is beyond the factor (or the list is full).
    for (const Estimate& row : tuner.estimates(call)) {
      const bool listed = std::any_of(list.begin(), list.end(), [&](const Choice* c) { return c->name == row.name; });
      if (!listed && list.size() < 4 && row.refusal.empty() && row.seconds >= 0) {
        EXPECT_GT(row.seconds, 2.0 * predicted.front()) << bytes << " B: " << row.name << " left out";
      }
    }
  }
  EXPECT_TRUE(measuring_tuner(4, "allreduce:ring").shortlist(all_reduce(1 << 20), 2.0, 4).empty())
      << "a forced algorithm is not measured";
  TunerConfig ranges;  // TBCOLL_TUNER=ranges: the model does not decide, nothing to shortlist
  EXPECT_TRUE(Tuner(ranges, 4, {}, {}, {}).shortlist(all_reduce(1 << 20), 2.0, 4).empty());
}

TEST(MeasuredTuning, TrialsTakeTurnsThenTheSlowestRanksMedianRoundWins) {
  const Tuner tuner = measuring_tuner(4);
  const algo::CallShape call = all_reduce(1 << 20);
  const std::vector<const Choice*> list = tuner.shortlist(call, MeasuredChoices::kShortlistFactor,
                                                          MeasuredChoices::kMaxCandidates);
  const size_t m = list.size();
  ASSERT_GE(m, 2u) << "4 ranks, 1 MiB: the model finds several algorithms near each other";
  MeasuredChoices a(5), b(5);  // two ranks, at least 5 calls of each candidate
  const Choice& model = tuner.choose(call);
  // Rank a alone would pick candidate 0, rank b alone candidate 1; by the slowest rank (max) candidate 1 is
  // faster (3 against 4). Every candidate's first call is slow (set-up), and candidate 1's second (noise): the
  // lower median of the calls counts.
  std::vector<size_t> seen(m);  // calls of each candidate so far
  auto time_of = [&](int rank, size_t candidate, size_t nth) {
    if (nth == 0) return 10.0;
    if (candidate == 1 && nth == 1) return 20.0;
    if (candidate == 0) return rank == 0 ? 1.0 : 4.0;
    if (candidate == 1) return rank == 0 ? 2.0 : 3.0;
    return 5.0;
  };
  std::vector<double> times_a, times_b;
  size_t trials = 0;
  std::vector<size_t> order;  // the candidate of each trial
  for (bool last = false; !last; ++trials) {
    ASSERT_LT(trials, m * MeasuredChoices::kMaxCalls) << "at most kMaxCalls calls each";
    const MeasuredChoices::Pick pa = a.pick(call, model, tuner), pb = b.pick(call, model, tuner);
    ASSERT_EQ(pa.trial, static_cast<int>(trials));
    ASSERT_EQ(pb.trial, static_cast<int>(trials));
    const size_t c = static_cast<size_t>(std::find(list.begin(), list.end(), pa.choice) - list.begin());
    ASSERT_LT(c, m) << "trial " << trials << " runs a candidate";
    EXPECT_EQ(pa.choice->name, pb.choice->name);
    EXPECT_FALSE(pa.stand_in);
    EXPECT_EQ(a.decided(call), "") << "undecided until the agreement";
    order.push_back(c);
    const size_t nth = seen[c]++;
    last = a.record(call, pa, time_of(0, c, nth), &times_a);
    EXPECT_EQ(b.record(call, pb, time_of(1, c, nth), &times_b), last) << "every rank alike";
  }
  // The candidates in turn, in batches of one size, round after round; each as often, at least 3 times.
  size_t batch = 1;
  while (batch < order.size() && order[batch] == order[0]) ++batch;
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(order[i], i / batch % m) << "trial " << i << " (batch " << batch << ")";
  }
  EXPECT_EQ(trials % (m * batch), 0u) << "whole rounds";
  EXPECT_GE(trials / m, 5u) << "TBCOLL_TUNE_TRIALS (5) calls each at least";
  ASSERT_EQ(times_a.size(), trials);
  std::vector<double> slowest(times_a.size());
  for (size_t i = 0; i < slowest.size(); ++i) slowest[i] = std::max(times_a[i], times_b[i]);
  a.decide(call, slowest);
  b.decide(call, slowest);
  EXPECT_EQ(a.decided(call), list[1]->name);
  EXPECT_EQ(b.decided(call), list[1]->name);
  EXPECT_NE(a.describe(call).find(list[1]->name + " 3000000.0 us"), std::string::npos) << a.describe(call);
  EXPECT_NE(a.describe(call).find(list[0]->name + " 4000000.0 us"), std::string::npos) << a.describe(call);
  // Later calls of the octave run the decision, untimed; 1.5 MiB shares 1 MiB's octave, 2 MiB does not.
  for (size_t bytes : {size_t{1} << 20, size_t{3} << 19, (size_t{2} << 20) - 1}) {
    const MeasuredChoices::Pick later = a.pick(all_reduce(bytes), tuner.choose(all_reduce(bytes)), tuner);
    EXPECT_EQ(later.choice, list[1]) << bytes;
    EXPECT_EQ(later.trial, -1) << bytes;
  }
  EXPECT_EQ(a.decided(all_reduce(2 << 20)), "");
  EXPECT_EQ(a.pick(all_reduce(2 << 20), tuner.choose(all_reduce(2 << 20)), tuner).trial, 0) << "a fresh octave";
  EXPECT_EQ(a.decided({OpKind::kAllGather, 1 << 20, 4}), "") << "each collective its own";
}

TEST(MeasuredTuning, SmallCallsGetMoreTrialsThanLargeOnes) {
  const Tuner tuner = measuring_tuner(4);
  auto trials_until_decided = [&](size_t bytes) {
    MeasuredChoices measured;  // TBCOLL_TUNE_TRIALS' default, 6
    const algo::CallShape call = all_reduce(bytes);
    std::vector<double> times;
    size_t trials = 0;
    while (trials < 1000) {
      const MeasuredChoices::Pick pick = measured.pick(call, tuner.choose(call), tuner);
      ++trials;
      if (measured.record(call, pick, 1.0, &times)) break;
    }
    measured.decide(call, times);
    if (bytes == 64) {
      EXPECT_NE(measured.describe(call).find("lower median of 28 calls each"), std::string::npos)
          << "4 rounds of 8, each batch's first call left out: " << measured.describe(call);
    }
    return trials / tuner.shortlist(call, MeasuredChoices::kShortlistFactor, MeasuredChoices::kMaxCandidates).size();
  };
  EXPECT_EQ(trials_until_decided(64), static_cast<size_t>(MeasuredChoices::kMaxCalls))
      << "tens of us: 32 calls take far less than 50 ms";
  EXPECT_EQ(trials_until_decided(size_t{1} << 30), 6u) << "1 GiB: TBCOLL_TUNE_TRIALS (6), in 3 batches of 2";
}

TEST(MeasuredTuning, NotMeasuredWhereTheModelDoesNotChoose) {
  MeasuredChoices measured;
  const Tuner forced = measuring_tuner(4, "allreduce:ring");
  const algo::CallShape call = all_reduce(1 << 20);
  const MeasuredChoices::Pick pick = measured.pick(call, forced.choose(call), forced);
  EXPECT_EQ(pick.choice->name, "ring");
  EXPECT_EQ(pick.trial, -1) << "forced: the forced algorithm, untimed";
  Choice fast;  // a transport's fast path within its own range: as chosen
  fast.name = "oneshot";
  fast.fast_path_index = 0;
  const Tuner tuner = measuring_tuner(4);
  EXPECT_EQ(measured.pick(all_reduce(64), fast, tuner).choice, &fast);
  EXPECT_EQ(measured.pick(all_reduce(64), fast, tuner).trial, -1);
  EXPECT_EQ(MeasuredChoices::octave(0), 0);
  EXPECT_EQ(MeasuredChoices::octave(1), 0);
  EXPECT_EQ(MeasuredChoices::octave(1023), 9);
  EXPECT_EQ(MeasuredChoices::octave(1024), 10);
}

TEST(MeasuredTuning, RecordOutOfTurnIsAnInternalError) {
  const Tuner tuner = measuring_tuner(4);
  const algo::CallShape call = all_reduce(1 << 20);
  MeasuredChoices measured;
  MeasuredChoices::Pick pick = measured.pick(call, tuner.choose(call), tuner);
  pick.trial = 1;  // trial 0 is next
  std::vector<double> times;
  EXPECT_THROW(measured.record(call, pick, 1.0, &times), Error);
}

TEST(MeasuredTuning, KnobsAreReadAndBadOnesRefusedNamingThem) {
  using Knobs = std::map<std::string, std::string>;
  const TunerConfig config =
      TunerConfig::from_env(env::Settings(Knobs{{"TBCOLL_TUNER", "measure"}, {"TBCOLL_TUNE_TRIALS", "5"}}));
  EXPECT_TRUE(config.use_model);
  EXPECT_TRUE(config.measure);
  EXPECT_EQ(config.measure_trials, 5);
  EXPECT_FALSE(TunerConfig::from_env(env::Settings(Knobs{{"TBCOLL_TUNER", "model"}})).measure);
  for (const auto& [knob, value, said] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"TBCOLL_TUNE_TRIALS", "0", "TBCOLL_TUNE_TRIALS=0 is outside [1, 100]"},
           {"TBCOLL_TUNE_TRIALS", "101", "TBCOLL_TUNE_TRIALS=101 is outside [1, 100]"},
           {"TBCOLL_TUNER", "measured", "is not auto, model, measure or ranges"}}) {
    try {
      TunerConfig::from_env(env::Settings(Knobs{{knob, value}}));
      ADD_FAILURE() << knob << "=" << value << " accepted";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(said), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace tbcoll
