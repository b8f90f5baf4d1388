// How ibverbs waits pass the time once the core's spin is over (Pace): on Apple's librdma they poll always, as the
// projects that run on Macs do; elsewhere they nap after a quiet spell; both are knobs.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>

#include "common/env.h"
#include "fake_verbs/endpoint_pair.h"
#include "transports/ibverbs/endpoint.h"

namespace tbcoll::ibverbs {
namespace {

using std::chrono::microseconds;
using Knobs = std::map<std::string, std::string>;

TEST(IbverbsPace, ApplePollsAlwaysOthersNapAfterAQuietSpell) {
  const Pace apple = Pace::from(env::Settings(), true);
  EXPECT_EQ(apple.spin_after_traffic, microseconds::max());
  const Pace other = Pace::from(env::Settings(), false);
  EXPECT_EQ(other.spin_after_traffic, microseconds(200));
  EXPECT_EQ(other.nap, microseconds(50));
  const Pace set = Pace::from(env::Settings(Knobs{{"TBCOLL_IB_SPIN_US", "300"}, {"TBCOLL_IB_NAP_US", "20"}}), true);
  EXPECT_EQ(set.spin_after_traffic, microseconds(300));
  EXPECT_EQ(set.nap, microseconds(20));
  EXPECT_EQ(Pace::from(env::Settings(Knobs{{"TBCOLL_IB_SPIN_US", "-1"}}), false).spin_after_traffic, microseconds::max());
  for (const auto& [name, value] : {std::pair<const char*, const char*>{"TBCOLL_IB_SPIN_US", "-2"},
                                    {"TBCOLL_IB_NAP_US", "0"}, {"TBCOLL_IB_NAP_US", "20000"}}) {
    try {
      Pace::from(env::Settings(Knobs{{name, value}}), false);
      ADD_FAILURE() << name << "=" << value << " accepted";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find("TBCOLL_IB_"), std::string::npos) << error.what();
    }
  }
}

// The endpoints a context makes wait as its knobs say (the fake fabric's devices are Apple's).
TEST(IbverbsPace, EndpointsTakeTheirContextsPace) {
  fake::ScopedFabric fabric(fake::Options{});
  auto pair = fake::connect_endpoint_pair();
  EXPECT_EQ(pair->ib(0).pace().spin_after_traffic, microseconds::max());
  auto paced = fake::connect_endpoint_pair({{"TBCOLL_IB_SPIN_US", "100"}, {"TBCOLL_IB_NAP_US", "10"}});
  EXPECT_EQ(paced->ib(1).pace().spin_after_traffic, microseconds(100));
  EXPECT_EQ(paced->ib(1).pace().nap, microseconds(10));
}

}  // namespace
}  // namespace tbcoll::ibverbs
