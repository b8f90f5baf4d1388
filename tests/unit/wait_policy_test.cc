// The communicator's wait policy (TBCOLL_WAIT): what each mode tells a wait, and the knob that chooses it.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "common/env.h"
#include "tbcoll/collective_fast_path.hpp"
#include "tbcoll/error.hpp"
#include "tuner_config.h"

namespace tbcoll::transport {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

int quiet_machine() { return 1; }
int busy_machine() { return 3; }  // on 2 CPUs
int machine_that_does_not_tell() { return -1; }

// A wait on a machine as the test says, without looking at the real one.
WaitPolicy auto_policy(WaitPolicy::MachineProbe probe = quiet_machine) {
  WaitPolicy wait(WaitPolicy::Mode::kAuto, microseconds(20000), SpinYield::kNever);
  wait.set_machine_probe(probe, 2);
  return wait;
}

// Clock reads every `step` from `from` until `until`: whether the wait spun through all of them.
bool spins_through(WaitPolicy& wait, Clock::time_point from, Clock::time_point until, microseconds step) {
  for (Clock::time_point at = from; at < until; at += step) {
    if (!wait.spinning(at)) return false;
  }
  return true;
}

TEST(WaitPolicy, AutoSpinsUpToItsCapThenSleeps) {
  WaitPolicy wait = auto_policy();
  const Clock::time_point now = Clock::now();
  wait.begin(now);
  EXPECT_TRUE(spins_through(wait, now, now + milliseconds(20), microseconds(50)));
  EXPECT_FALSE(wait.spinning(now + milliseconds(20)));
  EXPECT_TRUE(wait.sleeps());
  EXPECT_EQ(wait.describe(), "auto (spin up to 20000 us, then sleep; sleep at once on busy CPUs)");
}

TEST(WaitPolicy, ASpinThatLosesItsCpuTwiceMakesAutoSleepAtOnceForAWhile) {
  WaitPolicy wait = auto_policy();
  const Clock::time_point now = Clock::now();
  wait.begin(now);
  EXPECT_TRUE(wait.spinning(now + WaitPolicy::kPreemptedGap)) << "one gap: a passing task";
  EXPECT_FALSE(wait.spinning(now + 2 * WaitPolicy::kPreemptedGap)) << "a second within kConfirmWithin ends the spin";
  const Clock::time_point later = now + milliseconds(1);
  wait.begin(later);
  EXPECT_FALSE(wait.spinning(later)) << "contended: the next wait sleeps at once";
  const Clock::time_point after = later + WaitPolicy::kContendedFor;
  wait.begin(after);
  EXPECT_TRUE(spins_through(wait, after, after + milliseconds(2), microseconds(50))) << "kContendedFor later";
}

TEST(WaitPolicy, GapsFurtherApartThanTheConfirmationWindowAreNotContention) {
  WaitPolicy wait = auto_policy();
  const Clock::time_point now = Clock::now();
  wait.begin(now);
  Clock::time_point at = now;
  for (int gap = 0; gap < 3; ++gap) {
    at += WaitPolicy::kPreemptedGap;
    EXPECT_TRUE(wait.spinning(at)) << "gap " << gap;
    const Clock::time_point next = at + WaitPolicy::kConfirmWithin;
    EXPECT_TRUE(spins_through(wait, at, next, microseconds(50)));
    at = next;
  }
}

TEST(WaitPolicy, AYieldThatLetAnotherThreadRunIsASign) {
  WaitPolicy wait = auto_policy();
  const Clock::time_point now = Clock::now();
  wait.begin(now);
  wait.yielded();
  EXPECT_TRUE(wait.spinning(now + microseconds(5))) << "a yield with nothing else to run";
  wait.yielded();
  EXPECT_TRUE(wait.spinning(now + microseconds(5) + WaitPolicy::kYieldedGap)) << "first sign";
  EXPECT_TRUE(wait.spinning(now + microseconds(10) + WaitPolicy::kYieldedGap)) << "no yield since: no sign";
  wait.yielded();
  EXPECT_FALSE(wait.spinning(now + microseconds(10) + 2 * WaitPolicy::kYieldedGap)) << "second sign";
}

TEST(WaitPolicy, MoreRunnableThreadsThanCpusEndALongSpin) {
  WaitPolicy busy = auto_policy(busy_machine);
  const Clock::time_point now = Clock::now();
  busy.begin(now);
  EXPECT_TRUE(spins_through(busy, now, now + WaitPolicy::kLookAfter + WaitPolicy::kLookEvery, microseconds(10)))
      << "the first look is one sign";
  EXPECT_FALSE(busy.spinning(now + WaitPolicy::kLookAfter + WaitPolicy::kLookEvery)) << "the second look";
  for (WaitPolicy::MachineProbe probe : {quiet_machine, machine_that_does_not_tell}) {
    WaitPolicy wait = auto_policy(probe);
    wait.begin(now);
    EXPECT_TRUE(spins_through(wait, now, now + milliseconds(20), microseconds(10)));
  }
}

TEST(WaitPolicy, ForcedModesIgnoreContention) {
  WaitPolicy spin(WaitPolicy::Mode::kSpin, microseconds(20000), SpinYield::kNever);
  spin.set_machine_probe(busy_machine, 2);
  const Clock::time_point now = Clock::now();
  spin.begin(now);
  EXPECT_TRUE(spin.spinning(now + WaitPolicy::kPreemptedGap));
  EXPECT_TRUE(spin.spinning(now + 2 * WaitPolicy::kPreemptedGap));
  EXPECT_TRUE(spin.spinning(now + microseconds(999)));
  spin.begin(now + milliseconds(1));
  EXPECT_TRUE(spin.spinning(now + milliseconds(1)));
}

TEST(WaitPolicy, BlockSleepsAtTheFirstClockRead) {
  WaitPolicy wait(WaitPolicy::Mode::kBlock, microseconds(20000), SpinYield::kNever);
  const Clock::time_point now = Clock::now();
  wait.begin(now);
  EXPECT_FALSE(wait.spinning(now));
  EXPECT_TRUE(wait.sleeps());
}

TEST(WaitPolicy, SpinNeverSleepsButLooksAtItsPeersEveryMillisecond) {
  WaitPolicy wait(WaitPolicy::Mode::kSpin, microseconds(50), SpinYield::kEveryPoll);
  const Clock::time_point now = Clock::now();
  wait.begin(now);
  EXPECT_TRUE(wait.spinning(now + microseconds(999)));
  EXPECT_FALSE(wait.spinning(now + WaitPolicy::kSpinPhase)) << "a phase ends: the wait looks, then begins again";
  EXPECT_FALSE(wait.sleeps());
  EXPECT_EQ(wait.yield(), SpinYield::kEveryPoll);
}

TEST(WaitPolicy, TheKnobChoosesTheMode) {
  for (const auto& [value, mode] : {std::pair<const char*, int>{"auto", 0}, {"spin", 1}, {"block", 2}}) {
    env::Settings settings(std::map<std::string, std::string>{{"TBCOLL_WAIT", value}});
    EXPECT_EQ(TunerConfig::from_env(settings).wait_mode, mode) << value;
  }
  env::Settings bad(std::map<std::string, std::string>{{"TBCOLL_WAIT", "sometimes"}});
  try {
    TunerConfig::from_env(bad);
    ADD_FAILURE() << "TBCOLL_WAIT=sometimes accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("TBCOLL_WAIT=sometimes"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace tbcoll::transport
