// What a unique id advertises, and the environment every test of this binary runs in.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/ifname.h"
#include "platform/platform.h"
#include "tbcoll/tbcoll.h"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll::test {
namespace {

// Unique ids advertise the machine's first non-loopback interface: the tests of this binary keep their
// rendezvous on loopback (none of them sets TBCOLL_SOCKET_IFNAME itself), except those below, which only listen.
class LoopbackIds : public ::testing::Environment {
 public:
  void SetUp() override {
    if (std::getenv("TBCOLL_SOCKET_IFNAME") == nullptr) setenv("TBCOLL_SOCKET_IFNAME", "lo", 1);
  }
};
const auto* const kLoopbackIds = ::testing::AddGlobalTestEnvironment(new LoopbackIds);

// Sets a variable (or unsets it, for nullptr) for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    had_ = std::getenv(name) != nullptr;
    value != nullptr ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { had_ ? setenv(name_, saved_.c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::string saved_;
  bool had_ = false;
};

std::string host_of(const std::string& root) {
  std::string host = root.substr(0, root.rfind(':'));
  if (!host.empty() && host.front() == '[') host = host.substr(1, host.size() - 2);
  return host;
}

TEST(UniqueIdAddress, AdvertisesTheFirstNonLoopbackInterfaceAsNcclDoes) {
  ScopedEnv no_ifname("TBCOLL_SOCKET_IFNAME", nullptr);
  ScopedEnv no_addr("TBCOLL_SOCKET_ADDR", nullptr);
  const auto interfaces = platform::network_interfaces();
  const auto expected = ifname::choose(interfaces, "", /*allow_loopback=*/false);
  if (!expected) GTEST_SKIP() << "this machine has no interface but loopback: " << ifname::describe(interfaces);
  const UniqueId id = UniqueId::create();  // listens there; nothing connects
  EXPECT_EQ(host_of(id.root()), expected->address) << "interfaces: " << ifname::describe(interfaces);
  EXPECT_FALSE(ifname::is_loopback_address(host_of(id.root())));
  tbcollUniqueId c_id;
  ASSERT_EQ(tbcollGetUniqueId(&c_id), tbcollSuccess);
  EXPECT_EQ(host_of(UniqueId::from_string(c_id.internal).root()), expected->address) << "the C call alike";
}

TEST(UniqueIdAddress, FollowsTbcollSocketIfnameAndAddr) {
  {
    ScopedEnv ifname("TBCOLL_SOCKET_IFNAME", "lo");
    ScopedEnv no_addr("TBCOLL_SOCKET_ADDR", nullptr);
    EXPECT_EQ(host_of(UniqueId::create().root()), "127.0.0.1");
  }
  ScopedEnv addr("TBCOLL_SOCKET_ADDR", "127.0.0.2");
  EXPECT_EQ(host_of(UniqueId::create().root()), "127.0.0.2");
}

}  // namespace
}  // namespace tbcoll::test
