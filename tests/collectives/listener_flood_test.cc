// A flood of silent connections on a rank's tcp data listener during set-up (tcp/admission.h): the honest peer
// still gets in and the job runs; a flood that outlasts the deadline is named in the error.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <ctime>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/rendezvous.h"
#include "collectives/harness.h"
#include "common/time.h"
#include "tbcoll/store.hpp"

namespace tbcoll {
namespace {

// Opens `connections` connections to `to` from a child process (its descriptors are not ours) and holds them,
// silent, for `seconds`. Only async-signal-safe calls after fork: the test process has threads.
pid_t flood(const sockaddr_in& to, int connections, int seconds) {
  const pid_t child = fork();
  if (child != 0) return child;
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  for (int i = 0; i < connections; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;
    fcntl(fd, F_SETFL, O_NONBLOCK);
    connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to));  // EINPROGRESS: completes in the backlog
  }
  const timespec hold{seconds, 0};
  nanosleep(&hold, nullptr);
  _exit(0);
}

// An in-memory store that, when rank 0 publishes its record, floods the tcp address in it before anyone can read it;
// rank 1 reads it `late` after that (arriving behind the flood).
class FloodingStore final : public Store {
 public:
  FloodingStore(int connections, int seconds, std::chrono::milliseconds late)
      : connections_(connections), seconds_(seconds), late_(late) {}
  ~FloodingStore() override {
    if (child_ > 0) {
      kill(child_, SIGKILL);
      waitpid(child_, nullptr, 0);
    }
  }
  using Store::get;
  void set(const std::string& key, const std::vector<uint8_t>& value, Deadline deadline) override {
    if (key == "tbcoll/peer/0") {
      const bootstrap::Published record = bootstrap::decode(0, std::string(value.begin(), value.end()));
      const std::string address = record.addresses.at("tcp");
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
      inet_pton(AF_INET, address.substr(0, address.rfind(':')).c_str(), &to.sin_addr);
      child_ = flood(to, connections_, seconds_);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the flood is in the backlog first
    }
    inner_->set(key, value, deadline);
  }
  std::vector<uint8_t> get(const std::string& key, Deadline deadline) override {
    std::vector<uint8_t> value = inner_->get(key, deadline);
    if (key == "tbcoll/peer/0") std::this_thread::sleep_for(late_);
    return value;
  }
  int64_t add(const std::string& key, int64_t delta, Deadline deadline) override {
    return inner_->add(key, delta, deadline);
  }

 private:
  std::shared_ptr<Store> inner_ = make_in_memory_store();
  int connections_;
  int seconds_;
  std::chrono::milliseconds late_;
  pid_t child_ = -1;
};

// Both ranks' init errors ("" on success, after a right all_reduce), over tcp, with `timeout_s`.
std::vector<std::string> join(const std::shared_ptr<Store>& store, double timeout_s) {
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      errors[r] = test::error_of([&] {
        Config config;
        config.rank = r;
        config.world_size = 2;
        config.store = store;
        config.transport = "tcp";
        config.timeout_s = timeout_s;
        Communicator comm = Communicator::init(config);
        float x = static_cast<float>(r + 1);
        comm.all_reduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
        if (x != 3.0f) throw InvalidUsage("wrong sum");
      });
    });
  }
  for (std::thread& rank : ranks) rank.join();
  return errors;
}

// 2000 silent connections held 8 s, rank 1 arriving 4 s after them: rank 0 holds a bounded number of them (it
// took every one, 2000 descriptors, or all it was allowed), rank 1 gets in, and the job runs.
TEST(ListenerFlood, TheHonestPeerGetsInAndTheJobRuns) {
  if (test::entries_of("/proc/self/fd") == 0) GTEST_SKIP() << "no /proc/self/fd to count descriptors";
  std::atomic<bool> done{false};
  size_t most = 0;
  std::thread watch([&] {
    while (!done) {
      most = std::max(most, test::entries_of("/proc/self/fd"));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  ::testing::internal::CaptureStderr();
  const std::vector<std::string> errors =
      join(std::make_shared<FloodingStore>(2000, 8, std::chrono::milliseconds(4000)), 30);
  const std::string log = ::testing::internal::GetCapturedStderr();
  done = true;
  watch.join();
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  EXPECT_LT(most, 300u) << "descriptors held during the flood";
  // Warnings are rate-limited: a burst, then lines counting the rest (not one line per connection).
  size_t lines = 0;
  for (char c : log) lines += c == '\n';
  EXPECT_LT(lines, 40u) << log.substr(0, 4000);
}

// A flood that outlasts the deadline: the error says what came instead of the peer.
TEST(ListenerFlood, AFloodPastTheDeadlineIsNamed) {
  const std::vector<std::string> errors =
      join(std::make_shared<FloodingStore>(2000, 10, std::chrono::milliseconds(2000)), 1.0);
  EXPECT_NE(errors[0].find("did not connect before the deadline"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("other connection(s) reached this rank's listener"), std::string::npos) << errors[0];
}

// The rendezvous store under the same flood: 2000 silent connections on a unique id's store, then a 2-rank job
// meeting there 1.5 s later. Both ranks finish init and all-reduce right, well before their 8 s deadline (a
// store that took new connections at ~128/s would keep the ranks behind the whole flood until they timed out).
TEST(ListenerFlood, TheStoreServesItsRanksBehindAFlood) {
  const UniqueId id = UniqueId::create();
  const std::string root = id.root();
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::stoi(root.substr(root.rfind(':') + 1))));
  inet_pton(AF_INET, root.substr(0, root.rfind(':')).c_str(), &to.sin_addr);
  const pid_t child = flood(to, 2000, 10);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const auto start = Clock::now();
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      errors[r] = test::error_of([&] {
        Config config = Config::from_env();
        config.timeout_s = 8;
        config.transport = "tcp";
        Communicator comm = Communicator::init(id, r, 2, config);
        float x = static_cast<float>(r + 1);
        comm.all_reduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
        if (x != 3.0f) throw InvalidUsage("wrong sum");
      });
    });
  }
  for (std::thread& rank : ranks) rank.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  EXPECT_LT(seconds, 8.0);
}

}  // namespace
}  // namespace tbcoll
