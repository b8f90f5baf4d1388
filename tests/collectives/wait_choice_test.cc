// Which wait a communicator chooses (TBCOLL_WAIT=auto, TBCOLL_SPIN_US=auto): a short spin where every peer is over
// shm (a sleeping rank is woken by its peer's futex wake), a long one where a peer is over tcp, the knob over both.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "collectives/harness.h"
#include "communicator.h"

namespace tbcoll::test {
namespace {

std::string wait_of(const std::string& transport, const std::map<std::string, std::string>& knobs = {}) {
  std::string described[2];
  RankOptions options{transport, ""};
  options.knobs = knobs;
  run_ranks(2, options, [&](Communicator& comm) {
    described[comm.rank()] = CommunicatorAccess::impl(comm).wait_policy.describe();
  });
  EXPECT_EQ(described[0], described[1]) << transport;
  return described[0];
}

TEST(WaitChoice, AutoSpinsBrieflyOverShmAndLongOverTcp) {
  EXPECT_EQ(wait_of("shm"), "auto (spin up to 300 us, then sleep; sleep at once on busy CPUs)");
  EXPECT_EQ(wait_of("tcp"), "auto (spin up to 20000 us, then sleep; sleep at once on busy CPUs)");
  EXPECT_EQ(wait_of("loopback"), "auto (spin up to 20000 us, then sleep; sleep at once on busy CPUs)");
}

TEST(WaitChoice, TheKnobSetsTheSpinWhateverTheTransport) {
  EXPECT_EQ(wait_of("shm", {{"TBCOLL_SPIN_US", "700"}}),
            "auto (spin up to 700 us, then sleep; sleep at once on busy CPUs)");
  EXPECT_EQ(wait_of("tcp", {{"TBCOLL_SPIN_US", "700"}}),
            "auto (spin up to 700 us, then sleep; sleep at once on busy CPUs)");
  EXPECT_EQ(wait_of("shm", {{"TBCOLL_WAIT", "spin"}}), "spin");
}

}  // namespace
}  // namespace tbcoll::test
