// TBCOLL_SOCKET_IFNAME's rules (common/ifname.h), as NCCL_SOCKET_IFNAME's, on made-up interface lists, and the
// platform's real list.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>

#include "common/env.h"
#include "common/ifname.h"
#include "common/net.h"
#include "tbcoll/error.hpp"

namespace tbcoll {
namespace {

using platform::NetworkInterface;
using Knobs = std::map<std::string, std::string>;

// A Mac with Wi-Fi, the Thunderbolt bridge and docker, listed as getifaddrs lists them (loopback first).
std::vector<NetworkInterface> mac() {
  return {{"lo0", "127.0.0.1", false, true},      {"lo0", "::1", true, true},
          {"en0", "192.168.1.20", false, false},  {"en0", "2001:db8::20", true, false},
          {"bridge0", "10.0.5.1", false, false},  {"docker0", "172.17.0.1", false, false},
          {"en50", "10.9.9.9", false, false}};
}

std::string chosen(const std::vector<NetworkInterface>& list, const std::string& spec, bool allow_loopback) {
  const auto pick = ifname::choose(list, spec, allow_loopback);
  return pick ? pick->name + " " + pick->address : "none";
}

TEST(IfnameRules, PrefixesExactAndExclusions) {
  const ifname::Filter prefix = ifname::parse("en5,bridge");
  EXPECT_TRUE(ifname::matches(prefix, "en5"));
  EXPECT_TRUE(ifname::matches(prefix, "en50"));
  EXPECT_TRUE(ifname::matches(prefix, "bridge0"));
  EXPECT_FALSE(ifname::matches(prefix, "en0"));
  EXPECT_FALSE(ifname::matches(prefix, "e"));

  const ifname::Filter exact = ifname::parse("=en5");
  EXPECT_TRUE(ifname::matches(exact, "en5"));
  EXPECT_FALSE(ifname::matches(exact, "en50"));

  const ifname::Filter excluded = ifname::parse("^docker,lo");
  EXPECT_TRUE(excluded.exclude);
  EXPECT_FALSE(ifname::matches(excluded, "docker0"));
  EXPECT_FALSE(ifname::matches(excluded, "lo0"));
  EXPECT_TRUE(ifname::matches(excluded, "en0"));

  const ifname::Filter excluded_exact = ifname::parse("^=en0");
  EXPECT_FALSE(ifname::matches(excluded_exact, "en0"));
  EXPECT_TRUE(ifname::matches(excluded_exact, "en01"));

  EXPECT_TRUE(ifname::matches(ifname::parse(""), "anything"));
  for (const char* bad : {"^", "=", "^=", "en0,", ",en0", "en0,,en1"}) {
    EXPECT_THROW(ifname::parse(bad), std::invalid_argument) << bad;
  }
}

TEST(IfnameRules, ChoosesIpv4OfTheFirstMatchAndNeverLoopbackForManyHosts) {
  EXPECT_EQ(chosen(mac(), "bridge", false), "bridge0 10.0.5.1");
  EXPECT_EQ(chosen(mac(), "en", false), "en0 192.168.1.20");  // IPv4 first, in the system's order
  EXPECT_EQ(chosen(mac(), "=en50", false), "en50 10.9.9.9");
  EXPECT_EQ(chosen(mac(), "^en,bridge", false), "docker0 172.17.0.1");  // asked for: docker is not special then
  // Default: the first that is neither loopback nor docker.
  EXPECT_EQ(chosen(mac(), "", false), "en0 192.168.1.20");
  EXPECT_EQ(chosen(mac(), "", true), "en0 192.168.1.20");
  // Loopback only when allowed (a single-host job), and by default only when nothing else has an address.
  EXPECT_EQ(chosen(mac(), "lo", false), "none");
  EXPECT_EQ(chosen(mac(), "lo", true), "lo0 127.0.0.1");
  const std::vector<NetworkInterface> alone = {{"lo", "127.0.0.1", false, true}};
  EXPECT_EQ(chosen(alone, "", true), "lo 127.0.0.1");
  EXPECT_EQ(chosen(alone, "", false), "none");
  EXPECT_EQ(chosen(mac(), "en7", false), "none");
  // IPv6 when the interface has no IPv4 address.
  const std::vector<NetworkInterface> v6 = {{"lo", "127.0.0.1", false, true}, {"eth0", "fd00::2", true, false}};
  EXPECT_EQ(chosen(v6, "eth", false), "eth0 fd00::2");
  EXPECT_EQ(ifname::describe(alone), "lo 127.0.0.1");
  EXPECT_TRUE(ifname::is_loopback_address("127.0.0.1"));
  EXPECT_TRUE(ifname::is_loopback_address("::1"));
  EXPECT_FALSE(ifname::is_loopback_address("10.0.0.1"));
}

TEST(IfnameRules, ThePlatformListsTheLoopbackInterface) {
  const std::vector<NetworkInterface> list = platform::network_interfaces();
  bool loopback = false;
  for (const NetworkInterface& entry : list) {
    EXPECT_FALSE(entry.name.empty());
    EXPECT_FALSE(entry.address.empty());
    loopback = loopback || (entry.loopback && entry.address == "127.0.0.1");
    if (entry.address == "127.0.0.1") {
      EXPECT_EQ(entry.prefix, 8) << "127.0.0.1's netmask is 255.0.0.0";
    }
  }
  EXPECT_TRUE(loopback) << ifname::describe(list);
}

TEST(IfnameRules, ListenHostFollowsTheKnobs) {
  EXPECT_EQ(net::listen_host(env::Settings(), "10.1.1.1", "test"), "10.1.1.1");
  EXPECT_EQ(net::listen_host(env::Settings(Knobs{{"TBCOLL_SOCKET_ADDR", "10.2.2.2"}}), "10.1.1.1", "test"), "10.2.2.2");
  EXPECT_EQ(net::listen_host(env::Settings(Knobs{{"TBCOLL_SOCKET_IFNAME", "=lo"}}), "10.1.1.1", "test"), "127.0.0.1");
  try {
    net::listen_host(env::Settings(Knobs{{"TBCOLL_SOCKET_IFNAME", "nosuchif"}}), "10.1.1.1", "[tcp] rank 3");
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("[tcp] rank 3: TBCOLL_SOCKET_IFNAME=\"nosuchif\" matches no interface"),
              std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("127.0.0.1"), std::string::npos) << error.what();
  }
  EXPECT_THROW(net::listen_host(env::Settings(Knobs{{"TBCOLL_SOCKET_IFNAME", "^"}}), "", "test"), InvalidArgument);
}

}  // namespace
}  // namespace tbcoll
