// The platform layer (src/platform), whichever flavour this build has: what the rest of tbcoll relies on.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "common/copy.h"
#include "platform/platform.h"

namespace tbcoll::platform {
namespace {

TEST(Platform, ShmNamesFitMacOsAndNameTheirOwner) {
  for (int pid : {1, 4194304, 0x7fffffff}) {
    for (uint64_t key : {uint64_t{0}, ~uint64_t{0}}) {
      const std::string name = shm_name(pid, key);
      EXPECT_LE(name.size(), kMaxShmNameChars) << name;
      EXPECT_EQ(name[0], '/');
      int owner = 0;
      ASSERT_TRUE(shm_name_owner(name, &owner)) << name;
      EXPECT_EQ(owner, pid);
      EXPECT_TRUE(shm_name_owner(name.substr(1), &owner)) << "without the slash, as directory listings give it";
    }
  }
  int owner = 0;
  for (const char* other : {"/tbcoll-f0000ffc-12-0011223344556677-0", "/sem.x", "/tb123456-1-00000000000g", ""}) {
    EXPECT_FALSE(shm_name_owner(other, &owner)) << other;
  }
}

// The sweep finds segments through shm_list: /dev/shm on Linux, the registry where segments cannot be listed.
TEST(Platform, CreatedSegmentsAreListedUntilRemoved) {
  const std::string name = shm_name(static_cast<int>(getpid()), 0x5e97e57);
  const int fd = shm_create(name);
  ASSERT_GE(fd, 0) << name;
  EXPECT_EQ(shm_reserve(fd, 4096), 0);
  void* base = shm_map(fd, 4096);
  ASSERT_NE(base, nullptr);
  std::vector<std::string> listed = shm_list();
  EXPECT_NE(std::find(listed.begin(), listed.end(), name), listed.end()) << name << " not listed";
  EXPECT_LT(shm_create(name), 0) << "a second create of the same name must fail";
  EXPECT_EQ(shm_remove(name), 0);
  listed = shm_list();
  EXPECT_EQ(std::find(listed.begin(), listed.end(), name), listed.end()) << name << " still listed";
  EXPECT_LT(shm_open_existing(name), 0);
}

TEST(Platform, ListeningSocketsAreToldApart) {
  const int listener = open_socket(AF_INET, SOCK_STREAM, 0, /*nonblocking=*/false);
  const int unbound = open_socket(AF_INET, SOCK_STREAM, 0, /*nonblocking=*/true);
  ASSERT_GE(listener, 0);
  ASSERT_GE(unbound, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  EXPECT_TRUE(is_listening_socket(listener));
  EXPECT_FALSE(is_listening_socket(unbound));
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int client = open_socket(AF_INET, SOCK_STREAM, 0, /*nonblocking=*/false);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  EXPECT_FALSE(is_listening_socket(client));
  const int accepted = accept_socket(listener, /*nonblocking=*/false);
  ASSERT_GE(accepted, 0);
  EXPECT_FALSE(is_listening_socket(accepted));
  for (int fd : {listener, unbound, client, accepted}) close(fd);
}

TEST(Platform, ProcessWatchSeesAnExit) {
  EXPECT_FALSE(ProcessWatch(static_cast<int>(getpid())).exited()) << "ranks that are threads never exit";
  const pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  ASSERT_GT(child, 0);
  ProcessWatch watch(child);
  EXPECT_FALSE(watch.exited());
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(watch.exited());
  EXPECT_TRUE(watch.exited()) << "and keeps saying so";
  EXPECT_FALSE(process_exists(child));
}

TEST(Platform, WaitOnAddressReturnsOnWakeOrTimeout) {
  std::atomic<uint32_t> word{7};
  auto start = std::chrono::steady_clock::now();
  wait_on_address(&word, 7, 2000);  // nobody wakes it: back within about the timeout
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  wait_on_address(&word, 8, 10'000'000);  // not the value: returns at once
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  if (!wait_on_address_wakes()) GTEST_SKIP() << "the " << flavour() << " flavour sleeps instead of waiting";
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    word.store(8);
    wake_address(&word);
  });
  start = std::chrono::steady_clock::now();
  while (word.load() == 7) wait_on_address(&word, 7, 5'000'000);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4)) << "woken, not timed out";
  waker.join();
}

TEST(Platform, ClocksAndNames) {
  const auto coarse = coarse_now(), precise = std::chrono::steady_clock::now();
  EXPECT_LT(std::chrono::abs(precise - coarse), std::chrono::milliseconds(100)) << "the same clock";
  ASSERT_FALSE(verbs_libraries().empty());
  EXPECT_FALSE(verbs_libraries().front().empty());
  int major = -1, minor = -1;
  EXPECT_EQ(macos_version(&major, &minor), std::string(flavour()) == "darwin");
  EXPECT_TRUE(std::string(flavour()) == "linux" || std::string(flavour()) == "darwin" ||
              std::string(flavour()) == "posix");
  EXPECT_FALSE(kernel_id().empty());
  EXPECT_EQ(shm_domain(), shm_domain());
}

// The cache size decides where copies stream past the cache (stream_from_bytes): read from the system where it
// says, nothing made up where it does not.
TEST(Platform, LastLevelCacheSize) {
  const size_t bytes = last_level_cache_bytes();
  EXPECT_GE(stream_from_bytes(), size_t{16} << 20) << "never below 16 MiB";
  EXPECT_EQ(stream_from_bytes(), stream_from_bytes()) << "decided once";
  if (std::string(flavour()) == "posix") {
    EXPECT_EQ(bytes, 0u) << "the posix flavour cannot know";
    return;
  }
  if (bytes == 0) GTEST_SKIP() << "this system reports no cache size (sysconf, sysfs or sysctl)";
  EXPECT_GE(bytes, size_t{256} << 10) << "an L3 or L2 of at least 256 KiB";
  EXPECT_EQ(bytes % 1024, 0u);
  EXPECT_GE(stream_from_bytes(), bytes / 2) << "a message that fits half the cache is not streamed";
}

}  // namespace
}  // namespace tbcoll::platform
