// The fault matrix on the ibverbs transport over the fake fabric (tests/fake_verbs), ranks as threads: the
// analogues of tests/multiproc/fault_test.cc's process faults, injected at the fabric (fake_verbs/faults.h), in UC on
// Apple's strict fabric (what Thunderbolt Macs have) and in RC on a permissive one. 3 ranks run checked
// all-reduces (sizes of 1 to 5 frames, every element checked) with TBCOLL_TIMEOUT=2 and one fault per case. Every
// rank the fault does not stop must end within the deadline + 1.5 s with a typed tbcoll error naming the peer and
// the call, or succeed where the fault is transient; no rank may ever accept wrong data, hang or crash, and no
// thread or descriptor is left. Each case prints a "[ time to error ]" line (fault injected -> the last such
// rank's end), the figures of the README's fault table.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/harness.h"
#include "fake_verbs/fake_verbs.h"
#include "fake_verbs/faults.h"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll::ibverbs {
namespace {

using Clock = std::chrono::steady_clock;
using test::entries_of;

constexpr int kRanks = 3;
constexpr double kTimeoutS = 2;
constexpr double kSlackS = 1.5;

enum class Fault {
  kVanish,
  kPausePastDeadline,
  kPauseBriefly,
  kSlowPeer,
  kCablePulled,
  kCableOutBriefly,
  kQueuePairError
};

// What the ranks the fault does not stop must do.
enum class Verdict {
  kError,    // a typed error naming the peer and the call, within the deadline + slack
  kSuccess,  // every round, every result right
  kEither,   // one of the two on each rank (UC over a briefly pulled cable: frames that never arrive fail the
             // call; a lost credit-only frame that nothing follows may go unnoticed, harmlessly), never wrong data
};

struct Case {
  const char* name;
  Fault fault;
  int victim;  // the rank the fault stops (its own outcome is not judged), -1: none
  Verdict uc, rc;
};

constexpr Verdict kError = Verdict::kError, kSuccess = Verdict::kSuccess;
const Case kCases[] = {
    {"peer vanishes (its thread stops, every frame to and from it lost)", Fault::kVanish, 1, kError, kError},
    {"peer paused past the deadline (its thread stops in the verbs)", Fault::kPausePastDeadline, 1, kError, kError},
    {"peer paused 0.4 s, then resumed", Fault::kPauseBriefly, 1, kSuccess, kSuccess},
    {"slow peer, 1 s within the deadline", Fault::kSlowPeer, 2, kSuccess, kSuccess},
    {"cable pulled between ranks 0 and 1 (frames lost both ways)", Fault::kCablePulled, -1, kError, kError},
    {"cable between ranks 0 and 1 out 0.2 s, then back", Fault::kCableOutBriefly, -1, Verdict::kEither, kSuccess},
    {"rank 1's queue pairs to rank 0 moved to the error state", Fault::kQueuePairError, -1, kError, kError},
};

struct LinkMode {
  const char* name;  // TBCOLL_IB_MODE
  bool apple_strict;
};
void PrintTo(const LinkMode& mode, std::ostream* out) {
  *out << mode.name << (mode.apple_strict ? " Apple-strict" : "");
}

struct Rank {
  std::atomic<ibv_context*> context{nullptr};
  std::atomic<bool> done{false};
  bool completed = false;  // every round ran
  bool typed = false;      // ended by a tbcoll::Error
  std::string error;
  long long wrong = 0;  // elements of results that differ from the reference, in every round that returned
  int rounds = 0;
  Clock::time_point ended;
};

// Rank `rank`'s part: rounds of all_reduce(sum) of 1, 1024 and 5000 floats in turn (one, two and five 4 KiB
// frames), each element a function of rank, index and round, checked exactly.
void run_rank(int rank, const LinkMode& mode, const Case& c, int rounds, Clock::time_point give_up,
              const std::shared_ptr<Store>& store, std::atomic<int>* ready, Rank* out) {
  try {
    Config config;
    config.rank = rank;
    config.world_size = kRanks;
    config.store = store;
    config.transport = "fakeverbs";
    config.timeout_s = kTimeoutS;
    config.knobs = {{"TBCOLL_IB_MODE", mode.name}};
    Communicator comm = Communicator::init(config);
    out->context = fake::context_of_this_thread();
    ++*ready;
    const size_t counts[] = {1, 1024, 5000};
    for (int round = 0; round < rounds && Clock::now() < give_up; ++round) {
      if (c.fault == Fault::kSlowPeer && rank == c.victim && round == 5) {
        std::this_thread::sleep_for(std::chrono::seconds(1));
      }
      const size_t count = counts[round % 3];
      std::vector<float> in(count), result(count, -1.0f);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((rank + 1) * (i % 13 + 1) + round);
      comm.all_reduce(in.data(), result.data(), count, DataType::kFloat32, ReduceOp::kSum);
      for (size_t i = 0; i < count; ++i) {
        const float want = static_cast<float>(kRanks * (kRanks + 1) / 2 * (i % 13 + 1) + kRanks * round);
        out->wrong += result[i] != want;
      }
      out->rounds = round + 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    out->completed = out->rounds == rounds;
    if (!out->completed) out->error = "gave up: rounds still running at the test's limit";
  } catch (const Error& error) {
    out->typed = true;
    out->error = error.what();
  } catch (const std::exception& error) {
    out->error = std::string("not a tbcoll error: ") + error.what();
  }
  out->ended = Clock::now();
  out->done = true;
}

bool all_done(const std::vector<Rank>& ranks, int except) {
  for (int rank = 0; rank < kRanks; ++rank) {
    if (rank != except && !ranks[static_cast<size_t>(rank)].done) return false;
  }
  return true;
}

// The peers a rank's error must name: the one the fault hit (a rank may learn of it from another rank's notice,
// which carries that rank's reason).
std::vector<std::string> peers_to_name(const Case& c, int rank) {
  switch (c.fault) {
    case Fault::kCablePulled:
    case Fault::kCableOutBriefly:
      if (rank == 0) return {"peer 1"};
      if (rank == 1) return {"peer 0"};
      return {"peer 0", "peer 1"};
    case Fault::kQueuePairError:
      return {rank == 1 ? "peer 0" : "peer 1"};
    default:
      return {"peer " + std::to_string(c.victim)};
  }
}

class IbverbsFaultMatrix : public ::testing::TestWithParam<LinkMode> {};

TEST_P(IbverbsFaultMatrix, EveryRankFailsWithinTheDeadlineOrSucceeds) {
  const LinkMode mode = GetParam();
  const std::string column = std::string("ibverbs fake ") + mode.name + (mode.apple_strict ? " (Apple-strict)" : "");
  std::thread([] {}).join();  // a runtime's helper thread that starts with the first thread (TSan's) is no leak
  for (const Case& c : kCases) {
    SCOPED_TRACE(column + ": " + c.name);
    const Verdict outcome = mode.apple_strict ? c.uc : c.rc;
    fake::Options options;
    options.apple_strict = mode.apple_strict;
    fake::reset(options);
    const size_t threads_before = entries_of("/proc/self/task"), fds_before = entries_of("/proc/self/fd");
    const int rounds = outcome == kError ? 1000000 : 60;
    const auto give_up = Clock::now() + std::chrono::seconds(15);
    auto store = make_in_memory_store();
    std::atomic<int> ready{0};
    std::vector<Rank> ranks(kRanks);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < kRanks; ++rank) {
      threads.emplace_back(run_rank, rank, std::cref(mode), std::cref(c), rounds, give_up, store, &ready,
                           &ranks[static_cast<size_t>(rank)]);
    }
    while (ready < kRanks && !all_done(ranks, -1) && Clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ASSERT_EQ(ready, kRanks) << ranks[0].error << " | " << ranks[1].error << " | " << ranks[2].error;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a few rounds run

    ibv_context* victim = c.victim >= 0 ? ranks[static_cast<size_t>(c.victim)].context.load() : nullptr;
    ibv_context* rank0 = ranks[0].context;
    ibv_context* rank1 = ranks[1].context;
    const auto injected = Clock::now();
    switch (c.fault) {
      case Fault::kVanish:
        fake::pause(victim);
        fake::cut(victim);
        break;
      case Fault::kPausePastDeadline:
        fake::pause(victim);
        break;
      case Fault::kPauseBriefly:
        fake::pause(victim);
        std::this_thread::sleep_for(std::chrono::milliseconds(400));
        fake::resume(victim);
        break;
      case Fault::kSlowPeer:
        break;
      case Fault::kCablePulled:
        fake::cut(rank0, rank1);
        break;
      case Fault::kCableOutBriefly:
        fake::cut(rank0, rank1);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        fake::mend(rank0, rank1);
        break;
      case Fault::kQueuePairError:
        EXPECT_EQ(fake::break_queue_pairs(rank1, rank0), 2) << "the link's two lanes";
        break;
    }
    // The others end; then a stopped victim goes on (as a SIGKILL would end it) and must end too.
    const int stopped = outcome == kSuccess ? -1 : c.victim;
    const auto hang_after = injected + std::chrono::duration<double>(kTimeoutS + 8);
    while (!all_done(ranks, stopped) && Clock::now() < hang_after) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (victim != nullptr) fake::resume(victim);
    while (!all_done(ranks, -1) && Clock::now() < hang_after + std::chrono::seconds(5)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (int rank = 0; rank < kRanks; ++rank) {
      if (!ranks[static_cast<size_t>(rank)].done) ADD_FAILURE() << "rank " << rank << " hung";
    }
    for (auto& thread : threads) thread.join();  // (a hung rank: ctest's timeout ends the test)

    double worst = 0;
    int failed = 0;
    for (int rank = 0; rank < kRanks; ++rank) {
      const Rank& r = ranks[static_cast<size_t>(rank)];
      EXPECT_EQ(r.wrong, 0) << "rank " << rank << " accepted wrong data: " << r.error;
      if (rank == stopped) continue;
      const double seconds = std::chrono::duration<double>(r.ended - injected).count();
      worst = std::max(worst, seconds);
      if (outcome == kSuccess || (outcome == Verdict::kEither && r.completed)) {
        EXPECT_TRUE(r.completed) << "rank " << rank << " (" << r.rounds << " rounds): " << r.error;
        continue;
      }
      ++failed;
      EXPECT_FALSE(r.completed) << "rank " << rank;
      EXPECT_TRUE(r.typed) << "rank " << rank << ": " << r.error;
      const std::vector<std::string> peers = peers_to_name(c, rank);
      EXPECT_TRUE(std::any_of(peers.begin(), peers.end(),
                              [&](const std::string& peer) { return r.error.find(peer) != std::string::npos; }))
          << "rank " << rank << " should name " << peers[0] << ": " << r.error;
      EXPECT_NE(r.error.find("all_reduce"), std::string::npos) << "rank " << rank << ": " << r.error;
      EXPECT_LT(seconds, kTimeoutS + kSlackS) << "rank " << rank << ": " << r.error;
      std::printf("  rank %d after %.2f s: %s\n", rank, seconds, r.error.c_str());
    }
    const char* seen = failed == 0                                 ? "success"
                       : failed == kRanks - (stopped >= 0 ? 1 : 0) ? "typed error on every other rank"
                                                                   : "typed error on some ranks, success on the others";
    std::printf("[ time to error ] %s | %s | %s | %.2f s (TBCOLL_TIMEOUT=%g)\n", c.name, column.c_str(), seen, worst,
                kTimeoutS);
    std::fflush(stdout);
    fake::reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // threads told to end are gone
    EXPECT_EQ(entries_of("/proc/self/task"), threads_before) << "threads left behind";
    EXPECT_EQ(entries_of("/proc/self/fd"), fds_before) << "descriptors left behind";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, IbverbsFaultMatrix,
                         ::testing::Values(LinkMode{"uc", true}, LinkMode{"rc", false}),
                         [](const ::testing::TestParamInfo<LinkMode>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tbcoll::ibverbs
