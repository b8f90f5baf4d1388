// Notices (src/notices.h) against a store that answers, and against one that has gone silent: its host vanished,
// so nothing resets or closes the connection and every request waits out its deadline (a half-open connection;
// tests/multihost/netns_test.sh halfopen makes one for real). A waiting call's look at the store must end by the
// call's deadline, and the telling after a timeout must take the short budget.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "notices.h"
#include "tbcoll/error.hpp"

namespace tbcoll {
namespace {

// Answers nothing: each request blocks until its deadline, then times out, as the TCP client does when the store's
// host vanished. Records the deadlines it was given.
class SilentStore final : public Store {
 public:
  void set(const std::string&, const std::vector<uint8_t>&, Deadline deadline) override { wait_out(deadline); }
  std::vector<uint8_t> get(const std::string&, Deadline deadline) override {
    wait_out(deadline);
    return {};
  }
  using Store::get;
  int64_t add(const std::string&, int64_t, Deadline deadline) override {
    wait_out(deadline);
    return 0;
  }

  int requests() {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }
  Deadline latest_deadline() {
    std::lock_guard<std::mutex> lock(mutex_);
    return latest_;
  }

 private:
  void wait_out(Deadline deadline) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++requests_;
      latest_ = std::max(latest_, deadline);
    }
    std::this_thread::sleep_until(deadline);
    throw TimeoutError("[store] silent: no answer before the deadline");
  }

  std::mutex mutex_;
  int requests_ = 0;
  Deadline latest_{};
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(Notices, APeersNoticeReachesTheOthers) {
  auto store = make_in_memory_store();
  Notices zero, one;
  zero.attach(store, "job", 0);
  one.attach(store, "job", 1);
  one.publish(Notices::Kind::kBroken, 3, "rank 1: all_reduce failed: timed out waiting for peer 2");
  EXPECT_NO_THROW(zero.check_now(2, true));  // broke at call 3: call 2 is not concerned
  try {
    zero.check_now(3, true);
    ADD_FAILURE() << "the notice of rank 1 was not seen";
  } catch (const RemoteError& error) {
    EXPECT_NE(std::string(error.what()).find("peer 1 failed"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("timed out waiting for peer 2"), std::string::npos) << error.what();
  }
}

// Rank 1 finished its part of call 4, failed in call 5 and reset its connections: rank 0, still in call 4, lost
// the connection to it. The reason is rank 1's notice, although it concerns a later call (a waiting look, which
// cannot know the connection is gone, does not take it).
TEST(Notices, APeerThatClosedItsConnectionInALaterCallGivesTheReason) {
  auto store = make_in_memory_store();
  Notices zero, one;
  zero.attach(store, "job", 0);
  one.attach(store, "job", 1);
  one.publish(Notices::Kind::kBroken, 5, "rank 1: broadcast failed: [tcp] rank 1: peer 2 closed the connection");
  EXPECT_NO_THROW(zero.check_now(4, true)) << "call 4 is not concerned while its connections stand";
  try {
    zero.await_reason(4, true);
    ADD_FAILURE() << "the notice of rank 1 was not taken as the reason";
  } catch (const RemoteError& error) {
    EXPECT_NE(std::string(error.what()).find("peer 1 failed"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("peer 2 closed the connection"), std::string::npos) << error.what();
  }
}

// Ranks 0 and 1 both waited for rank 2 (its host vanished) and timed out in call 5: each names rank 2 and keeps the
// other's timeout as context, not as the reason; a rank still waiting is told at once, and a peer that failed
// otherwise, or timed out in an earlier call, is the reason.
TEST(Notices, PeersThatTimedOutTooAreContextNotTheReason) {
  auto store = make_in_memory_store();
  Notices zero, one, two;
  zero.attach(store, "job", 0);
  one.attach(store, "job", 1);
  two.attach(store, "job", 2);
  one.publish(Notices::Kind::kTimedOut, 5, "timed out waiting for peer 2 (receive of 4096 B)");
  EXPECT_EQ(zero.check_after_timeout(5, true, Notices::kLateBudget),
            "peer 1 too: timed out waiting for peer 2 (receive of 4096 B)");
  try {
    two.check(5, true, Clock::now() + std::chrono::seconds(1));
    ADD_FAILURE() << "a waiting rank was not told";
  } catch (const RemoteError& error) {
    EXPECT_NE(std::string(error.what()).find("peer 1 gave up in call 5 and takes part in no further call: timed out "
                                             "waiting for peer 2"), std::string::npos) << error.what();
  }
  try {
    zero.check_after_timeout(6, true, Notices::kLateBudget);  // rank 1 timed out before call 6
    ADD_FAILURE() << "an earlier timeout was not the reason";
  } catch (const RemoteError& error) {
    EXPECT_NE(std::string(error.what()).find("peer 1 gave up in call 5"), std::string::npos) << error.what();
  }
  two.publish(Notices::Kind::kBroken, 5, "rank 2: all_reduce failed: out of memory");
  try {
    zero.check_after_timeout(5, true, Notices::kLateBudget);
    ADD_FAILURE() << "a peer that failed otherwise was not the reason";
  } catch (const RemoteError& error) {
    EXPECT_NE(std::string(error.what()).find("peer 2 failed and takes part in no further call: rank 2: all_reduce "
                                             "failed: out of memory"), std::string::npos) << error.what();
  }
}

TEST(Notices, AWaitingCallsLookAtASilentStoreIsShortAndEndsByItsDeadline) {
  auto store = std::make_shared<SilentStore>();
  Notices notices;
  notices.attach(store, "job", 1);
  // The call has 50 ms left: the look gives up then, not a budget later.
  auto start = Clock::now();
  Deadline until = start + std::chrono::milliseconds(50);
  EXPECT_NO_THROW(notices.check(7, true, until));
  EXPECT_EQ(store->requests(), 1);
  EXPECT_LE(store->latest_deadline(), until);
  EXPECT_LT(seconds_since(start), 0.6) << "the look outlived the call's deadline";
  // Far from the deadline each look takes at most kLookBudget (data arriving meanwhile waits no longer), and the
  // looks go on until the store has been silent for kBudget in all; then it is not asked again.
  const auto silent_from = start;
  int looks = 1;
  while (Clock::now() - silent_from < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(Notices::kInterval);
    start = Clock::now();
    EXPECT_NO_THROW(notices.check(8, true, start + std::chrono::seconds(30)));
    if (store->requests() == looks) break;  // given up: no request
    looks = store->requests();
    EXPECT_LE(store->latest_deadline(), start + Notices::kLookBudget + std::chrono::milliseconds(5));
  }
  const double silence = seconds_since(silent_from);
  EXPECT_GE(silence, 0.9) << "given up after " << looks << " looks";
  EXPECT_LT(silence, 4.0) << "still asking after " << looks << " looks";
  EXPECT_GE(looks, 5);
  EXPECT_NO_THROW(notices.check_now(9, true));
  EXPECT_EQ(store->requests(), looks);
  // A call already at its deadline does not ask at all.
  Notices late;
  late.attach(store, "job", 2);
  EXPECT_NO_THROW(late.check(1, true, Clock::now()));
  EXPECT_EQ(store->requests(), looks);
}

TEST(Notices, TellingAfterATimeoutTakesTheShortBudget) {
  auto store = std::make_shared<SilentStore>();
  Notices notices;
  notices.attach(store, "job", 1);
  auto start = Clock::now();
  notices.publish(Notices::Kind::kBroken, 4, "rank 1: all_reduce failed: timed out", Notices::kLateBudget);
  EXPECT_LE(store->latest_deadline(), start + Notices::kLateBudget + std::chrono::milliseconds(50));
  EXPECT_LT(seconds_since(start), 0.8);
  // Given up: neither telling nor looking waits again.
  start = Clock::now();
  notices.publish(Notices::Kind::kBroken, 5, "again");
  EXPECT_NO_THROW(notices.check_now(5, true));
  EXPECT_EQ(store->requests(), 1);
  EXPECT_LT(seconds_since(start), 0.1);
}

}  // namespace
}  // namespace tbcoll
