// A transport built outside the library as its own shared object (modules/mailbox_transport.cc, against the public
// headers alone), loaded by path before the suites list their transports: the conformance suite
// (transport/conformance_test.cc, built into this binary unchanged) runs over it, and so do communicators. The
// loader's refusals name the file and what is wrong; TBCOLL_TRANSPORT_PLUGINS loads the same way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "collectives/harness.h"
#include "multiproc/output.h"
#include "tbcoll/transport.hpp"

namespace tbcoll::test {
namespace {

// Loaded at start-up: INSTANTIATE_TEST_SUITE_P's lists (test_transports()) are read when the tests register, in
// main, after every static initialiser of the binary has run.
const std::string loaded[] = {transport::load_plugin(TBCOLL_MAILBOX_PLUGIN),
                               transport::load_plugin(TBCOLL_UNIXSOCK_PLUGIN)};

TEST(Plugin, ItsTransportIsRegisteredUnderItsName) {
  EXPECT_EQ(loaded[0], "mailbox");
  EXPECT_EQ(loaded[1], "unixsock");
  std::vector<std::string> names = test_transports();
  for (const char* name : {"mailbox", "unixsock"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

class PluginTransport : public ::testing::TestWithParam<std::string> {};

TEST_P(PluginTransport, CommunicatorsRunOverIt) {
  RankOptions options;
  options.transport = GetParam();
  run_ranks(3, options, [](Communicator& comm) {
    EXPECT_EQ(comm.transport_name((comm.rank() + 1) % comm.size()), GetParam());
    std::vector<float> data(1001, static_cast<float>(comm.rank() + 1));
    comm.all_reduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
    for (float x : data) ASSERT_EQ(x, 6.0f);
    std::vector<int32_t> all(3);
    const int32_t mine = comm.rank() * 10;
    comm.all_gather(&mine, all.data(), 1, DataType::kInt32);
    EXPECT_EQ(all, (std::vector<int32_t>{0, 10, 20}));
    int32_t value = comm.rank() == 2 ? 77 : 0;
    comm.broadcast(&value, &value, 1, DataType::kInt32, 2);
    EXPECT_EQ(value, 77);
    comm.barrier();
  });
}
INSTANTIATE_TEST_SUITE_P(Plugin, PluginTransport, ::testing::Values("mailbox", "unixsock"));

TEST(Plugin, AnotherInterfaceVersionIsRefusedNamingBoth) {
  const std::string error = error_of([] { transport::load_plugin(TBCOLL_WRONG_VERSION_PLUGIN); });
  EXPECT_NE(error.find(TBCOLL_WRONG_VERSION_PLUGIN), std::string::npos) << error;
  EXPECT_NE(error.find("built for transport interface version " + std::to_string(transport::kInterfaceVersion + 100) +
                       "; this library has version " + std::to_string(transport::kInterfaceVersion)),
            std::string::npos)
      << error;
}

TEST(Plugin, WhatIsNoPluginIsRefusedNamingTheFile) {
  const std::string missing = error_of([] { transport::load_plugin("/nonexistent/transport.so"); });
  EXPECT_NE(missing.find("transport plug-in /nonexistent/transport.so: cannot be loaded"), std::string::npos)
      << missing;
  const std::string twice = error_of([] { transport::load_plugin(TBCOLL_MAILBOX_PLUGIN); });
  EXPECT_NE(twice.find(std::string("transport plug-in ") + TBCOLL_MAILBOX_PLUGIN +
                       ": a transport named \"mailbox\" is registered already"),
            std::string::npos)
      << twice;
}

// The environment's way: tbcoll-info, a program of the installed library, lists the plug-in's transport, and a
// plug-in it cannot load is named.
// What tbcoll-info prints, then "exit N".
std::string info_with_plugins(const std::string& plugins) {
  const CommandOutput out = run_command("TBCOLL_TRANSPORT_PLUGINS='" + plugins + "' " TBCOLL_INFO_PATH);
  return out.text + "exit " + std::to_string(out.status);
}

TEST(Plugin, TheEnvironmentLoadsIt) {
  const std::string listed = info_with_plugins(std::string(TBCOLL_MAILBOX_PLUGIN) + ":" + TBCOLL_UNIXSOCK_PLUGIN);
  EXPECT_NE(listed.find("\n  mailbox    ~"), std::string::npos) << listed;
  EXPECT_NE(listed.find("\n  unixsock   ~"), std::string::npos) << listed;
  EXPECT_EQ(listed.find("cannot be loaded"), std::string::npos) << listed;
  EXPECT_NE(listed.find("exit 0"), std::string::npos) << listed;
  const std::string refused = info_with_plugins(TBCOLL_WRONG_VERSION_PLUGIN);
  EXPECT_NE(refused.find("tbcoll-info: transport plug-in " TBCOLL_WRONG_VERSION_PLUGIN
                         ": was built for transport interface version"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.find("exit 1"), std::string::npos) << refused << " (a refusal is an error, not a crash)";
}

}  // namespace
}  // namespace tbcoll::test
