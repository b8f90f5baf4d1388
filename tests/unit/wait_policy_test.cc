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

TEST(WaitPolicy, AutoSpinsUpToItsCapThenSleeps) {
  WaitPolicy wait(WaitPolicy::Mode::kAuto, microseconds(20000), SpinYield::kNever);
  const Clock::time_point now = Clock::now();
  wait.begin(now);
  EXPECT_TRUE(wait.spinning(now + milliseconds(19)));
  EXPECT_FALSE(wait.spinning(now + milliseconds(20)));
  EXPECT_TRUE(wait.sleeps());
  EXPECT_EQ(wait.describe(), "auto (spin up to 20000 us, then sleep)");
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
