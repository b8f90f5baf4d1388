// The shm flagged calls' prefetch choice (transports/shm/prefetch_learner.h): each way tried in its window,
// timed, and the faster kept for the rest of the period, in every period anew.
#include <gtest/gtest.h>

#include <chrono>

#include "transports/shm/prefetch_learner.h"

namespace tbcoll::shm {
namespace {

using std::chrono::nanoseconds;

// Runs calls first..last, each taking `without` or `with` depending on how it runs; returns how many of the
// calls after the windows ran with the prefetch.
uint64_t run_period(PrefetchLearner& learner, uint64_t first, nanoseconds without, nanoseconds with) {
  uint64_t prefetched_after = 0;
  for (uint64_t k = first; k < first + PrefetchLearner::kPeriod; ++k) {
    const bool on = learner.prefetched(k);
    if (PrefetchLearner::timed(k)) {
      learner.record(k, on ? with : without);
    } else if (on) {
      ++prefetched_after;
    }
  }
  return prefetched_after;
}

TEST(PrefetchLearner, TriesBothWaysThenKeepsTheFasterOneAndLearnsAgain) {
  PrefetchLearner learner;
  constexpr uint64_t kAfter = PrefetchLearner::kPeriod - 2 * PrefetchLearner::kWindow;
  // The timed calls alternate, in every period, whatever was chosen before.
  for (uint64_t k = 0; k < 2 * PrefetchLearner::kWindow; ++k) {
    EXPECT_TRUE(PrefetchLearner::timed(k)) << k;
    EXPECT_EQ(learner.prefetched(k), (k & 1) != 0) << k;
  }
  // Slow hand-offs: the prefetch wins and stays.
  EXPECT_EQ(run_period(learner, 0, nanoseconds(440), nanoseconds(330)), kAfter);
  EXPECT_TRUE(learner.chosen());
  EXPECT_EQ(learner.mean(true), nanoseconds(330));
  EXPECT_EQ(learner.mean(false), nanoseconds(440));
  // The machine changed: without it is faster now, learnt in the next period.
  EXPECT_EQ(run_period(learner, PrefetchLearner::kPeriod, nanoseconds(150), nanoseconds(200)), 0u);
  EXPECT_FALSE(learner.timed(PrefetchLearner::kPeriod + 2 * PrefetchLearner::kWindow));
  EXPECT_EQ(run_period(learner, 2 * PrefetchLearner::kPeriod, nanoseconds(500), nanoseconds(300)), kAfter);
}

// A few very slow calls (the first of a job, one the OS interrupted) do not outvote the rest.
TEST(PrefetchLearner, AFewSlowCallsDoNotDecide) {
  PrefetchLearner learner;
  for (uint64_t k = 0; k < 2 * PrefetchLearner::kWindow; ++k) {
    const bool with = learner.prefetched(k);
    nanoseconds spent = with ? nanoseconds(200) : nanoseconds(350);
    if (with && k < 10) spent = nanoseconds(100000);
    learner.record(k, spent);
  }
  EXPECT_TRUE(learner.chosen());
  EXPECT_GT(learner.mean(true), learner.mean(false));  // by the means it would have lost
}

}  // namespace
}  // namespace tbcoll::shm
