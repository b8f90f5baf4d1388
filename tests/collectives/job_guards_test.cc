// Guards at a job's start: a world size far beyond what tbcoll supports fails at once (not after allocating
// gigabytes), and a job across hosts without a secret is warned about.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "bootstrap/rendezvous.h"
#include "collectives/harness.h"
#include "common/auth.h"
#include "common/time.h"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll {
namespace {

size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

TEST(JobGuards, AHugeWorldSizeFailsBeforeAllocating) {
  Config config;
  config.rank = 1;
  config.world_size = 16777216;
  config.root = "127.0.0.1:1";  // nobody there: allocating first would only fail to connect at the deadline
  config.timeout_s = 3;
  const size_t before = resident_bytes();
  const auto start = Clock::now();
  const std::string error = test::error_of([&] { Communicator::init(config); });
  EXPECT_NE(error.find("world size 16777216 is above the 4096 ranks tbcoll supports"), std::string::npos) << error;
  EXPECT_NE(error.find("TBCOLL_WORLD_SIZE"), std::string::npos) << error;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  EXPECT_LT(resident_bytes(), before + (size_t{64} << 20));
  config.world_size = bootstrap::kMaxWorldSize + 1;
  EXPECT_NE(test::error_of([&] { Communicator::init(config); }).find("above the 4096"), std::string::npos);
}

// What rank 0 logs while two ranks, on hosts of their own (TBCOLL_HOST_ID), form a communicator.
std::string log_of_two_host_job(const std::map<std::string, std::string>& knobs) {
  const std::string path = "/tmp/tbcoll-guard-log-" + std::to_string(getpid());
  std::fflush(stderr);
  const int saved = dup(2);
  FILE* file = std::fopen(path.c_str(), "w");
  dup2(fileno(file), 2);
  std::fclose(file);
  auto store = make_in_memory_store();
  std::string errors[2];
  std::thread ranks[2];
  for (int rank = 0; rank < 2; ++rank) {
    ranks[rank] = std::thread([&, rank] {
      Config config;
      config.rank = rank;
      config.world_size = 2;
      config.store = store;
      config.transport = "tcp";
      config.timeout_s = 20;
      config.knobs = knobs;
      config.knobs["TBCOLL_HOST_ID"] = "host-" + std::to_string(rank);
      errors[rank] = test::error_of([&] {
        Communicator comm = Communicator::init(config);
        float value = 1;
        comm.all_reduce(&value, &value, 1, DataType::kFloat32, ReduceOp::kSum);
      });
    });
  }
  for (auto& rank : ranks) rank.join();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::ifstream in(path);
  std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  unlink(path.c_str());
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  return log;
}

TEST(JobGuards, AJobAcrossHostsWithoutASecretIsWarnedAbout) {
  const std::string log = log_of_two_host_job({});
  EXPECT_NE(log.find("this job spans 2 hosts and has no job secret (TBCOLL_SECRET)"), std::string::npos) << log;
  EXPECT_NE(log.find("docs/security.md"), std::string::npos) << log;
  if (!auth::available()) GTEST_SKIP() << "no libcrypto: a job with a secret cannot run";
  const std::string with_secret = log_of_two_host_job({{"TBCOLL_SECRET", "a-secret-for-both-hosts-0123"}});
  EXPECT_EQ(with_secret.find("no job secret"), std::string::npos) << with_secret;
}

}  // namespace
}  // namespace tbcoll
