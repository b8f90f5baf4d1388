// Config::from_env as a newcomer meets it: torch's variables, a half-described job, a typo in a transport or a
// knob's name, and a process that nothing launched.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/log.h"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll::test {
namespace {

// Clears every variable from_env reads for the test's scope, then restores them.
class CleanEnv {
 public:
  CleanEnv() {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      saved_.push_back(value != nullptr ? std::optional<std::string>(value) : std::nullopt);
      unsetenv(name);
    }
  }
  ~CleanEnv() {
    for (size_t i = 0; i < saved_.size(); ++i) {
      saved_[i] ? setenv(kNames[i], saved_[i]->c_str(), 1) : unsetenv(kNames[i]);
    }
  }

 private:
  static constexpr const char* kNames[] = {
      "TBCOLL_RANK", "TBCOLL_WORLD_SIZE", "TBCOLL_ROOT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
      "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
      "TBCOLL_TRANSPORT", "TBCOLL_TIMEUOT"};
  std::vector<std::optional<std::string>> saved_;
};

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(FromEnv, ReadsTorchsVariablesWhenTbcollsAreAbsent) {
  CleanEnv clean;
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "3", 1);
  setenv("MASTER_ADDR", "10.1.2.3", 1);
  setenv("MASTER_PORT", "29500", 1);
  Config config = Config::from_env();
  EXPECT_EQ(config.rank, 1);
  EXPECT_EQ(config.world_size, 3);
  EXPECT_EQ(config.root, "10.1.2.3:29501") << "torch's store holds MASTER_PORT itself";
  EXPECT_TRUE(env::job_in_environment());
  setenv("TBCOLL_ROOT", "h:1", 1);
  setenv("TBCOLL_RANK", "2", 1);
  config = Config::from_env();
  EXPECT_EQ(config.root, "h:1") << "TBCOLL_ROOT wins";
  EXPECT_EQ(config.rank, 2) << "TBCOLL_RANK wins";
  setenv("MASTER_PORT", "http", 1);
  unsetenv("TBCOLL_ROOT");
  EXPECT_NE(error_of([] { Config::from_env(); }).find("MASTER_PORT=\"http\" is not a port"), std::string::npos);
}

TEST(FromEnv, RankAloneIsNotTorchsPair) {
  CleanEnv clean;
  setenv("RANK", "1", 1);  // a generic name: without WORLD_SIZE it is not torch's
  EXPECT_FALSE(env::job_in_environment());
  const Config config = Config::from_env();
  EXPECT_EQ(config.rank, 0);
  EXPECT_EQ(config.world_size, 1);
}

TEST(FromEnv, AHalfDescribedJobNamesWhatIsMissing) {
  CleanEnv clean;
  setenv("TBCOLL_WORLD_SIZE", "2", 1);
  std::string message = error_of([] { Config::from_env(); });
  EXPECT_NE(message.find("TBCOLL_WORLD_SIZE=2 is set but no rank (TBCOLL_RANK"), std::string::npos) << message;
  unsetenv("TBCOLL_WORLD_SIZE");
  setenv("TBCOLL_RANK", "1", 1);
  message = error_of([] { Config::from_env(); });
  EXPECT_NE(message.find("TBCOLL_RANK=1 is set but no world size (TBCOLL_WORLD_SIZE"), std::string::npos) << message;
  setenv("TBCOLL_WORLD_SIZE", "1", 1);
  message = error_of([] { Config::from_env(); });
  EXPECT_NE(message.find("TBCOLL_RANK=1 is out of range for TBCOLL_WORLD_SIZE=1"), std::string::npos) << message;
  unsetenv("TBCOLL_RANK");
  const Config one = Config::from_env();  // a world of one, asked for
  EXPECT_EQ(one.rank, 0);
  EXPECT_EQ(one.world_size, 1);
}

// Any registered transport may be named (a plug-in's too, loaded later): the environment refuses only what no
// name can be; the set-up names the transports there are (Transports.AnUnknownNameListsTheRegisteredOnes).
TEST(FromEnv, ATransportNameIsAWord) {
  CleanEnv clean;
  setenv("TBCOLL_TRANSPORT", "tcp shm", 1);
  const std::string message = error_of([] { Config::from_env(); });
  EXPECT_NE(message.find("TBCOLL_TRANSPORT=\"tcp shm\" is not a transport's name"), std::string::npos) << message;
  for (const char* name : {"ibverbs", "infiniband", "my-transport_2"}) {
    setenv("TBCOLL_TRANSPORT", name, 1);
    EXPECT_EQ(error_of([] { Config::from_env(); }), "") << name;
  }
}

TEST(FromEnv, ALoneRankThatNothingLaunchedIsAnnounced) {
  CleanEnv clean;
  Config config = Config::from_env();
  ::testing::internal::CaptureStderr();
  { Communicator alone = Communicator::init(config); }
  std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("this process runs alone, as rank 0 of 1"), std::string::npos) << said;
  setenv("TBCOLL_WORLD_SIZE", "1", 1);
  config = Config::from_env();
  ::testing::internal::CaptureStderr();
  { Communicator asked = Communicator::init(config); }
  said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(said.find("runs alone"), std::string::npos) << "TBCOLL_WORLD_SIZE=1 asks for it: " << said;
}

TEST(EnvNames, MisspeltVariablesAreFoundWithASuggestion) {
  const std::vector<std::string> unknown = env::unknown_variables(
      {"PATH", "TBCOLL_TIMEUOT", "TBCOLL_TIMEOUT", "TBCOLL_LOCAL_RANK", "TBCOLL_DEMO_MODEL", "TBCOLL_XYZZY_PLUGH"});
  ASSERT_EQ(unknown.size(), 2u);
  EXPECT_EQ(unknown[0], "TBCOLL_TIMEUOT (did you mean TBCOLL_TIMEOUT?)");
  EXPECT_EQ(unknown[1], "TBCOLL_XYZZY_PLUGH");
}

TEST(EnvNames, TheEnvironmentIsCheckedOnceAtFromEnv) {
  CleanEnv clean;
  setenv("TBCOLL_TIMEUOT", "3", 1);
  env::check_environment_again();  // once per process: another test of this process may have been first
  ::testing::internal::CaptureStderr();
  Config::from_env();
  Config::from_env();
  const std::string said = ::testing::internal::GetCapturedStderr();
  const std::string warning = "TBCOLL_TIMEUOT (did you mean TBCOLL_TIMEOUT?) is not a tbcoll variable";
  ASSERT_NE(said.find(warning), std::string::npos) << said;
  EXPECT_EQ(said.find(warning, said.find(warning) + 1), std::string::npos) << "said twice: " << said;
}

TEST(EnvNames, SecretsAreNeverPrintable) {
  EXPECT_EQ(env::printable("TBCOLL_SECRET", "hunter2hunter2"), "(set, 14 bytes)");
  EXPECT_EQ(env::printable("TBCOLL_TOKEN", "abc"), "(set, 3 bytes)");
  EXPECT_EQ(env::printable("TBCOLL_TIMEOUT", "3"), "3");
}

}  // namespace
}  // namespace tbcoll::test

namespace tbcoll::test {
namespace {

TEST(LogMasking, SecretsNeverReachALogLine) {
  EXPECT_EQ(log::masked("token a1b2c3d4e5 and a1b2c3d4e5 again", {"a1b2c3d4e5"}), "token *** and *** again");
  EXPECT_EQ(log::masked("tbcoll WARN: hi", {"tbcoll"}), "tbcoll WARN: hi") << "short values are no secrets";
  setenv("TBCOLL_SECRET", "s3cr3t-value-42", 1);
  ::testing::internal::CaptureStderr();
  log::write(log::Level::kWarn, "handshake with s3cr3t-value-42 failed");
  const std::string said = ::testing::internal::GetCapturedStderr();
  unsetenv("TBCOLL_SECRET");
  EXPECT_EQ(said.find("s3cr3t"), std::string::npos) << said;
  EXPECT_NE(said.find("handshake with *** failed"), std::string::npos) << said;
}

}  // namespace
}  // namespace tbcoll::test
