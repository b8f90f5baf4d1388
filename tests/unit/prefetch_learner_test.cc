// The shm flagged calls' prefetch choice (transports/shm/prefetch_learner.h): each way tried in alternate blocks
// of calls, timed, and the faster kept for the rest of the period, in every period anew.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>

#include "transports/shm/prefetch_learner.h"

namespace tbcoll::shm {
namespace {

using std::chrono::nanoseconds;
using Learner = PrefetchLearner;
constexpr uint64_t kTimedCalls = Learner::kBlock * Learner::kBlocks;
// The calls after the first untimed one: that one still runs the way chosen before (it asks before it starts,
// which is where the last timed block ends and the learner decides).
constexpr uint64_t kAfter = Learner::kPeriod - kTimedCalls - 1;

// Runs calls first..first + kPeriod - 1 on a simulated clock, call k taking spent(k, whether it runs with the
// prefetch), reading the clock where the learner asks; returns how many of the calls after the first untimed one
// ran with the prefetch.
struct Calls {
  Learner& learner;
  Clock::time_point now{};
  int decisions = 0;
  void call(uint64_t k, nanoseconds spent) {
    if (learner.needs_clock(k) && learner.start(k, now)) ++decisions;
    now += spent;
  }
};

uint64_t run_period(Calls& run, uint64_t first, const std::function<nanoseconds(uint64_t, bool)>& spent) {
  uint64_t prefetched_after = 0;
  for (uint64_t k = first; k < first + Learner::kPeriod; ++k) {
    const bool on = run.learner.prefetched(k);
    if (k > first + kTimedCalls && on) ++prefetched_after;
    run.call(k, spent(k, on));
  }
  return prefetched_after;
}

std::function<nanoseconds(uint64_t, bool)> costs(nanoseconds without, nanoseconds with) {
  return [=](uint64_t, bool on) { return on ? with : without; };
}

TEST(PrefetchLearner, TriesBothWaysInBlocksThenKeepsTheFasterOneAndLearnsAgain) {
  Learner learner;
  Calls run{learner};
  // The timed calls run in blocks, without then with, in every period, whatever was chosen before.
  for (uint64_t k = 0; k < kTimedCalls; ++k) {
    EXPECT_TRUE(Learner::timed(k)) << k;
    EXPECT_EQ(learner.prefetched(k), (k / Learner::kBlock) % 2 == 1) << k;
  }
  EXPECT_FALSE(Learner::timed(kTimedCalls));
  // Slow hand-offs: the prefetch wins and stays.
  EXPECT_EQ(run_period(run, 0, costs(nanoseconds(440), nanoseconds(330))), kAfter);
  EXPECT_TRUE(learner.chosen());
  EXPECT_EQ(learner.mean(true), nanoseconds(330));
  EXPECT_EQ(learner.mean(false), nanoseconds(440));
  // The machine changed: without it is faster now, learnt in the next period.
  EXPECT_EQ(run_period(run, Learner::kPeriod, costs(nanoseconds(150), nanoseconds(200))), 0u);
  EXPECT_FALSE(learner.chosen());
  EXPECT_EQ(run_period(run, 2 * Learner::kPeriod, costs(nanoseconds(500), nanoseconds(300))), kAfter);
}

// A few very slow calls (the first of a job, one the OS interrupted) cost their blocks a vote each, no more.
TEST(PrefetchLearner, AFewSlowCallsDoNotDecide) {
  Learner learner;
  Calls run{learner};
  auto spent = [](uint64_t k, bool on) -> nanoseconds {
    if (k == Learner::kBlock + 1) return std::chrono::milliseconds(1);  // in the first block with
    return on ? nanoseconds(200) : nanoseconds(350);
  };
  EXPECT_EQ(run_period(run, 0, spent), kAfter);
  EXPECT_GT(learner.mean(true), learner.mean(false));  // by the means it would have lost
}

// Ranks in lock step: what a call costs shows up in the peer's next wait, so a call's time here depends on how
// the call before ran. Calls that alternated one by one would credit each way with the other's effect (and
// choose the slower one); in blocks only a block's first call carries its neighbour's.
TEST(PrefetchLearner, AnEffectThatShowsInTheNextCallIsCreditedToItsOwnWay) {
  Learner learner;
  Calls run{learner};
  auto spent = [&learner](uint64_t k, bool) {
    return learner.prefetched(k - 1) ? nanoseconds(100) : nanoseconds(300);
  };
  EXPECT_EQ(run_period(run, 0, spent), kAfter);
  EXPECT_TRUE(learner.chosen());
}

// Calls of other kinds take call numbers in between (the shm slots share the count) and read no clock: a block's
// time is per call number, and a period whose last timed calls were of another kind decides at the next flagged
// call.
TEST(PrefetchLearner, CallNumbersTakenByOtherCallsLeaveTheBlocksWhole) {
  Learner learner;
  Calls run{learner};
  for (uint64_t k = 0; k <= 2 * Learner::kPeriod; ++k) {  // the second period decides at call 2 * kPeriod
    const nanoseconds spent = learner.prefetched(k) ? nanoseconds(100) : nanoseconds(250);
    if (k % 3 == 2 || (k % Learner::kPeriod >= kTimedCalls - 40 && k % Learner::kPeriod < kTimedCalls + 8)) {
      run.now += spent;  // another kind of call, as slow
    } else {
      run.call(k, spent);
    }
  }
  EXPECT_EQ(run.decisions, 2);
  EXPECT_TRUE(learner.chosen());
  EXPECT_LT(learner.mean(true), learner.mean(false));
}

// Past the timed blocks a call reads no clock.
TEST(PrefetchLearner, UntimedCallsReadNoClock) {
  Learner learner;
  Calls run{learner};
  int clocks = 0;
  for (uint64_t k = 1; k < Learner::kPeriod; ++k) {
    if (learner.needs_clock(k)) ++clocks;
    run.call(k, nanoseconds(100));
  }
  EXPECT_EQ(clocks, static_cast<int>(Learner::kBlocks) + 1);  // each timed block's first call, and the one after
}

}  // namespace
}  // namespace tbcoll::shm
