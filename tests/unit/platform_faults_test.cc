// The platform layer under the faults a cluster meets (a peer killed, a launcher killed outright, a wake that
// never comes), whichever flavour this build has: the posix flavour's bounded sleeps, guard process and kill()
// watch are what macOS-like systems run, and a regression in them must show here, without namespaces or a
// launcher. Real processes (fork), deadlines generous enough for a loaded machine: these check that something
// happens, not how fast.
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "platform/platform.h"

namespace tbcoll::platform {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPatience = std::chrono::seconds(20);

// Reads one pid from a pipe (the child writes it), -1 if the pipe closes first.
pid_t read_pid(int fd) {
  pid_t pid = -1;
  return read(fd, &pid, sizeof(pid)) == static_cast<ssize_t>(sizeof(pid)) ? pid : -1;
}

// Waits until fd reads EOF (every writer gone): true, or false after kPatience.
bool closes_within_patience(int fd) {
  const auto give_up = Clock::now() + kPatience;
  while (Clock::now() < give_up) {
    pollfd entry{fd, POLLIN, 0};
    if (poll(&entry, 1, 100) <= 0) continue;
    char byte;
    if (read(fd, &byte, 1) == 0) return true;
  }
  return false;
}

// A peer that is not this process's child (ranks watch each other, their launcher reaps them): killed, it is seen
// as exited once its parent reaps it, by the pidfd, the kqueue or kill().
TEST(PlatformFaults, APeerKilledElsewhereIsSeenToExit) {
  int pids[2];
  ASSERT_EQ(pipe(pids), 0);
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    const pid_t peer = fork();
    if (peer == 0) {
      for (;;) pause();
    }
    (void)!write(pids[1], &peer, sizeof(peer));
    int status = 0;
    _exit(waitpid(peer, &status, 0) == peer ? 0 : 1);  // reaps it, as a launcher does
  }
  close(pids[1]);
  const pid_t peer = read_pid(pids[0]);
  close(pids[0]);
  ASSERT_GT(peer, 0);
  ProcessWatch watch(peer);
  EXPECT_FALSE(watch.exited()) << "a running peer";
  ASSERT_EQ(kill(peer, SIGKILL), 0);
  const auto give_up = Clock::now() + kPatience;
  while (!watch.exited() && Clock::now() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(watch.exited()) << "the " << flavour() << " watch never saw pid " << peer << " exit";
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// A stopped peer (SIGSTOP, a Mac asleep) is alive: the watch must not call it dead (the deadline is what ends a
// wait on it).
TEST(PlatformFaults, AStoppedPeerIsNotDead) {
  const pid_t peer = fork();
  ASSERT_GE(peer, 0);
  if (peer == 0) {
    for (;;) pause();
  }
  ProcessWatch watch(peer);
  ASSERT_EQ(kill(peer, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(watch.exited());
  EXPECT_TRUE(process_exists(peer));
  kill(peer, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(peer, &status, 0), peer);
  EXPECT_TRUE(watch.exited());
}

// The launcher killed outright (kill -9: no signal handler, no clean-up) takes its ranks with it: a parent-death
// signal on Linux, the guard process of the other flavours. The rank holds the write end of a pipe; EOF on the
// read end means the rank is gone (reaped or not).
TEST(PlatformFaults, RanksDieWithALauncherKilledOutright) {
  int rank_alive[2], pids[2];
  ASSERT_EQ(pipe(rank_alive), 0);
  ASSERT_EQ(pipe(pids), 0);
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    close(rank_alive[0]);
    close(pids[0]);
    if (!prepare_parent_death_guard()) _exit(2);
    const pid_t rank = fork();
    if (rank == 0) {
      setpgid(0, 0);
      arm_parent_death_guard();
      // The guard's pipe closes at exec (a rank that never execs would hold the launcher's end itself).
      execlp("sleep", "sleep", "300", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(rank_alive[1]);
    (void)!write(pids[1], &rank, sizeof(rank));
    for (;;) pause();
  }
  close(rank_alive[1]);
  close(pids[1]);
  const pid_t rank = read_pid(pids[0]);
  close(pids[0]);
  ASSERT_GT(rank, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the rank has exec'd, its guard (if any) runs
  EXPECT_TRUE(process_exists(rank));
  ASSERT_EQ(kill(launcher, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  const bool gone = closes_within_patience(rank_alive[0]);
  close(rank_alive[0]);
  if (!gone) kill(-rank, SIGKILL);  // no orphan left behind by a failing test
  EXPECT_TRUE(gone) << "the " << flavour() << " flavour left rank " << rank << " running after its launcher died";
}

// A waiter whose peer changes the word and dies before any wake (or a flavour whose wakes are no-ops) sees the
// change within a bounded sleep: never a hang. The word lives in memory both processes map, as shm's queues do.
TEST(PlatformFaults, AChangeWithoutAWakeEndsTheWaitWhereWakesAreNoOps) {
  if (wait_on_address_wakes()) {
    GTEST_SKIP() << "the " << flavour() << " flavour sleeps until woken: a change needs its wake";
  }
  void* shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto* word = new (shared) std::atomic<uint32_t>(7);
  const pid_t peer = fork();
  ASSERT_GE(peer, 0);
  if (peer == 0) {
    usleep(20000);
    word->store(8);
    _exit(0);  // no wake_address: the waiter must notice anyway
  }
  const auto start = Clock::now();
  while (word->load() == 7 && Clock::now() - start < kPatience) wait_on_address(word, 7, 10'000'000);
  EXPECT_EQ(word->load(), 8u);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5)) << "one wait slept through its whole timeout";
  int status = 0;
  waitpid(peer, &status, 0);
  munmap(shared, 4096);
}

}  // namespace
}  // namespace tbcoll::platform
