// Rank 0's store before authentication: connections that never say hello (or say garbage) cannot exhaust its
// descriptors, hold them long, or flood its log, and real clients are served meanwhile.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/net.h"
#include "common/time.h"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll {
namespace {

size_t open_descriptors() {
  size_t count = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (readdir(dir) != nullptr) ++count;
    closedir(dir);
  }
  return count;
}

// stderr (where the log goes) into a file while alive; text() reads what came.
class CapturedStderr {
 public:
  CapturedStderr() : path_("/tmp/tbcoll-store-log-" + std::to_string(getpid())) {
    std::fflush(stderr);
    saved_ = dup(2);
    FILE* file = std::fopen(path_.c_str(), "w");
    dup2(fileno(file), 2);
    std::fclose(file);
  }
  ~CapturedStderr() {
    restore();
    unlink(path_.c_str());
  }
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
  }
  std::string text() const {
    std::ifstream in(path_);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

 private:
  std::string path_;
  int saved_ = -1;
};

size_t count_of(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

TEST(StoreLimits, SilentConnectionsAreCappedAndRank0KeepsServing) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  constexpr size_t kSilent = 600;
  if (limit.rlim_cur < 2 * kSilent + 64) {
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, 2 * kSilent + 64);
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_cur < 2 * kSilent + 64) GTEST_SKIP() << "descriptor limit " << limit.rlim_cur << " too low";
  TcpStoreServer server("127.0.0.1", 0, "store-token", deadline_after(5), "");
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  auto store = connect_tcp_store(address, "store-token", deadline_after(5), "");
  const size_t before = open_descriptors();
  std::vector<int> silent;
  for (size_t i = 0; i < kSilent; ++i) {
    silent.push_back(net::connect_tcp(net::parse_host_port(address, "test"), deadline_after(5), "test"));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  // Ours are kSilent; the server's side of them must stay at its cap (128), not follow them.
  EXPECT_LE(server.connections(), 128u + 2) << "every silent connection holds a descriptor of rank 0";
  EXPECT_LE(open_descriptors(), before + kSilent + 128 + 8);
  // A new client gets through while the silent ones keep coming (the oldest make room for it).
  const auto start = Clock::now();
  auto late = connect_tcp_store(address, "store-token", deadline_after(5), "");
  late->set("key", {7}, deadline_after(5));
  EXPECT_EQ(store->get("key", deadline_after(5)), std::vector<uint8_t>{7});
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  // Silent connections are let go within 5 s of connecting.
  std::this_thread::sleep_for(std::chrono::milliseconds(5500));
  EXPECT_LE(server.connections(), 3u) << "silent connections held for more than 5 s";
  for (int fd : silent) close(fd);
  EXPECT_EQ(store->add("counter", 1, deadline_after(5)), 1);
}

TEST(StoreLimits, RejectionsAreLoggedAtARate) {
  TcpStoreServer server("127.0.0.1", 0, "store-token", deadline_after(5), "");
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  CapturedStderr captured;
  const std::string garbage(64, '\xff');
  for (int i = 0; i < 200; ++i) {
    const int fd = net::connect_tcp(net::parse_host_port(address, "test"), deadline_after(5), "test");
    net::write_all(fd, garbage.data(), garbage.size(), deadline_after(5), "test");
    char reply[64];
    (void)!read(fd, reply, sizeof(reply));  // the rejection, then the close
    close(fd);
  }
  for (auto until = Clock::now() + std::chrono::seconds(5); server.rejected_connections() < 200 && Clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server.rejected_connections(), 200u);
  auto store = connect_tcp_store(address, "store-token", deadline_after(5), "");
  store->set("key", {1}, deadline_after(5));
  captured.restore();
  const std::string log = captured.text();
  EXPECT_LE(count_of(log, "rejected a connection"), 5u) << log.substr(0, 2000);
  EXPECT_GE(count_of(log, "rejected a connection"), 1u) << "the first ones are still logged";
}

}  // namespace
}  // namespace tbcoll
