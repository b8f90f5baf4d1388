// Rendezvous records that authenticate themselves (bootstrap/store_auth.h): with a job secret a rewritten record
// fails the set-up naming its key, whatever store carries it; without one, a store tbcoll did not open is warned
// about.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/harness.h"
#include "common/auth.h"
#include "tbcoll/store.hpp"

namespace tbcoll {
namespace {

// A store someone else runs (as torch's TCPStore is to tbcoll): forwards to one in memory; when `rewrite` names a
// key, whoever reads it gets a value an attacker rewrote (one byte changed, as a relay's address would be).
class ForeignStore final : public Store {
 public:
  using Store::get;
  void set(const std::string& key, const std::vector<uint8_t>& value, Deadline deadline) override {
    inner_->set(key, value, deadline);
  }
  std::vector<uint8_t> get(const std::string& key, Deadline deadline) override {
    std::vector<uint8_t> value = inner_->get(key, deadline);
    if (!rewrite.empty() && key == rewrite && !value.empty()) {
      value[value.size() / 3] ^= 0x01;
      ++rewritten;
    }
    return value;
  }
  int64_t add(const std::string& key, int64_t delta, Deadline deadline) override {
    return inner_->add(key, delta, deadline);
  }
  std::string rewrite;
  std::atomic<int> rewritten{0};

 private:
  std::shared_ptr<Store> inner_ = make_in_memory_store();
};

// n ranks as threads over `store`, each with `secret` (none when empty); every rank's init error ("" on success),
// and, where init succeeded, an all_reduce's check.
std::vector<std::string> join(const std::shared_ptr<Store>& store, int n, const std::string& secret,
                              const std::string& token = "tbcoll") {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back([&, r] {
      errors[r] = test::error_of([&] {
        Config config;
        config.rank = r;
        config.world_size = n;
        config.store = store;
        config.token = token;
        config.transport = "tcp";
        config.timeout_s = 5;
        if (!secret.empty()) config.knobs["TBCOLL_SECRET"] = secret;
        Communicator comm = Communicator::init(config);
        float x = 1;
        comm.all_reduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
        if (x != static_cast<float>(n)) throw InvalidUsage("wrong sum");
      });
    });
  }
  for (std::thread& rank : ranks) rank.join();
  return errors;
}

TEST(RecordAuth, ARewrittenPeerRecordFailsTheSetUpNamingIt) {
  if (!auth::available()) GTEST_SKIP() << "no libcrypto: no secret";
  auto store = std::make_shared<ForeignStore>();
  store->rewrite = "tbcoll/peer/0";
  const std::vector<std::string> errors = join(store, 2, "a-job-secret-of-some-length");
  EXPECT_GT(store->rewritten.load(), 0);
  EXPECT_NE(errors[1].find("[auth] rendezvous record 'tbcoll/peer/0'"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("its MAC does not match"), std::string::npos) << errors[1];
  EXPECT_NE(errors[0], "") << "rank 0 went on without its peer";
}

// The same store unaltered: records pass their check and the job runs. Without the secret, the rewritten record
// is trusted (what the MAC is for: this test shows the attack works there).
TEST(RecordAuth, HonestRecordsPassAndWithoutASecretARewriteGoesUnseen) {
  if (!auth::available()) GTEST_SKIP() << "no libcrypto: no secret";
  EXPECT_EQ(join(std::make_shared<ForeignStore>(), 3, "a-job-secret-of-some-length"),
            (std::vector<std::string>{"", "", ""}));
  auto store = std::make_shared<ForeignStore>();
  store->rewrite = "tbcoll/comm_id";  // a flipped digit: the ranks disagree on the id, not on a MAC
  const std::vector<std::string> errors = join(store, 2, "");
  EXPECT_EQ(errors[1].find("[auth]"), std::string::npos) << errors[1];
}

// Records are bound to their job's token: a record of another job (same secret, same key) is refused.
TEST(RecordAuth, AnotherJobsRecordIsRefused) {
  if (!auth::available()) GTEST_SKIP() << "no libcrypto: no secret";
  auto shared = make_in_memory_store();
  auto rank_of_job = [&](int rank, const char* token) {  // the same secret and store, jobs told apart by token
    Config config;
    config.rank = rank;
    config.world_size = 2;
    config.store = shared;
    config.token = token;
    config.timeout_s = 2;
    config.knobs["TBCOLL_SECRET"] = "a-job-secret-of-some-length";
    return test::error_of([&] { Communicator::init(config); });
  };
  std::thread other_job([&] { rank_of_job(0, "job-one"); });  // publishes rank 0's records, then times out
  const std::string error = rank_of_job(1, "job-two");
  other_job.join();
  EXPECT_NE(error.find("was not written by a rank of this job"), std::string::npos) << error;
}

// Without a secret, rank 0 of a job that meets through a store tbcoll did not open says what that leaves open.
TEST(RecordAuth, AForeignStoreWithoutASecretIsWarnedAbout) {
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(join(std::make_shared<ForeignStore>(), 2, ""), (std::vector<std::string>{"", ""}));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("a store tbcoll did not open"), std::string::npos) << log;
  EXPECT_NE(log.find("TBCOLL_SECRET"), std::string::npos) << log;
}

// Without a secret, a job meeting through tbcoll's own TCP store (a unique id) warns too: another user of the
// machine reaches 127.0.0.1. A job with the secret says nothing of the kind.
TEST(RecordAuth, ATcpStoreWithoutASecretIsWarnedAbout) {
  auto job = [](const std::map<std::string, std::string>& knobs) {
    const UniqueId id = UniqueId::create();
    ::testing::internal::CaptureStderr();
    std::vector<std::string> errors(2);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        Config config = Config::from_env();
        config.knobs = knobs;
        config.timeout_s = 10;
        errors[r] = test::error_of([&] { Communicator::init(id, r, 2, config); });
      });
    }
    for (std::thread& rank : ranks) rank.join();
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
    return log;
  };
  const std::string without = job({});
  EXPECT_NE(without.find("rank 0: no job secret (TBCOLL_SECRET)"), std::string::npos) << without;
  if (!auth::available()) GTEST_SKIP() << "no libcrypto: no secret";
  const std::string with = job({{"TBCOLL_SECRET", "a-job-secret-of-some-length"}});
  EXPECT_EQ(with.find("no job secret"), std::string::npos) << with;
}

}  // namespace
}  // namespace tbcoll
