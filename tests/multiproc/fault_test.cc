// The fault matrix, with real processes: 3 ranks of test_prog "steady" (checked all-reduces), TBCOLL_TIMEOUT=2, and
// one fault per case on each transport that joins processes. Each survivor must end within the deadline with a
// typed error naming the peer and the call, or succeed where the fault is transient; no rank hangs or crashes, and
// no segment is left. Each case prints "[ time to error ]" lines (fault injected -> survivors' exit), the figures
// of the README's fault table.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collectives/harness.h"
#include "multiproc/ports.h"
#include "multiproc/segments.h"

namespace {

using Clock = std::chrono::steady_clock;
using tbcoll::test::free_port;
using tbcoll::test::segments_of;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

enum class Fault { kKill, kStopPastDeadline, kStopBriefly, kSlowPeer, kKillRootAfterInit, kKillRootDuringInit, kReset };

// Destroys every established TCP socket of process pid (ss -K: the kernel aborts it, the other end gets a reset).
// Returns how many; 0 where ss or the kernel's socket destruction (CONFIG_INET_DIAG_DESTROY) is missing.
int reset_connections_of(pid_t pid) {
  FILE* list = popen("ss -tnpH state established 2>/dev/null", "r");
  if (list == nullptr) return 0;
  std::vector<std::string> ports;
  char line[1024];
  const std::string owner = "pid=" + std::to_string(pid) + ",";
  while (std::fgets(line, sizeof(line), list) != nullptr) {
    std::istringstream in(line);
    std::string recv_q, send_q, local;
    if (std::string(line).find(owner) == std::string::npos || !(in >> recv_q >> send_q >> local)) continue;
    ports.push_back(local.substr(local.rfind(':') + 1));
  }
  pclose(list);
  int killed = 0;
  for (const std::string& port : ports) {
    const std::string command = "ss -K -tnH 'sport = :" + port + "' 2>/dev/null | grep -q .";
    if (std::system(command.c_str()) == 0) ++killed;
  }
  return killed;
}

struct Case {
  const char* name;
  Fault fault;
  int victim;
  bool transient;  // every rank succeeds
};

class FaultMatrix : public ::testing::TestWithParam<std::string> {};

TEST_P(FaultMatrix, EveryRankFailsWithinTheDeadlineOrSucceeds) {
  const std::string transport = GetParam();
  const int n = 3;
  const double timeout_s = 2;
  const Case cases[] = {{"peer killed (SIGKILL)", Fault::kKill, 1, false},
                        {"peer stopped past the deadline (SIGSTOP)", Fault::kStopPastDeadline, 1, false},
                        {"peer stopped 0.5 s, then SIGCONT", Fault::kStopBriefly, 1, true},
                        {"slow peer, 1 s within the deadline", Fault::kSlowPeer, 2, true},
                        {"rank 0 (the store) killed after init", Fault::kKillRootAfterInit, 0, false},
                        {"rank 0 (the store) killed during init", Fault::kKillRootDuringInit, 0, false},
                        {"connection reset (ss -K of a rank's sockets)", Fault::kReset, 1, false}};
  std::string not_run;  // a case this machine cannot inject: the test counts as skipped (the others still ran)
  for (const Case& c : cases) {
    if (c.fault == Fault::kReset && transport != "tcp") continue;  // shm has no connection to reset
    SCOPED_TRACE(transport + ": " + c.name);
    const std::string root = "127.0.0.1:" + std::to_string(free_port());
    const std::string dir = ::testing::TempDir();
    std::vector<pid_t> pids;
    std::vector<std::string> logs;
    for (int rank = 0; rank < n; ++rank) {
      // Per transport and test process: ctest runs the shm and tcp instances at once, in the same TempDir().
      logs.push_back(dir + "/fault_" + transport + "_" + std::to_string(getpid()) + "_rank" + std::to_string(rank) +
                     ".log");
      unlink(logs.back().c_str());  // not the previous case's "ready"
      const pid_t pid = fork();
      if (pid == 0) {
        FILE* out = std::freopen(logs.back().c_str(), "w", stdout);
        (void)out;
        dup2(fileno(stdout), STDERR_FILENO);
        setenv("TBCOLL_RANK", std::to_string(rank).c_str(), 1);
        setenv("TBCOLL_WORLD_SIZE", std::to_string(n).c_str(), 1);
        setenv("TBCOLL_ROOT", root.c_str(), 1);
        setenv("TBCOLL_TIMEOUT", std::to_string(timeout_s).c_str(), 1);
        setenv("TBCOLL_TRANSPORT", transport.c_str(), 1);
        if (c.fault == Fault::kKillRootDuringInit && rank == 2) _exit(0);  // never arrives: the others wait in init
        if (c.fault == Fault::kSlowPeer) {
          execl(TBCOLL_TEST_PROG_PATH, TBCOLL_TEST_PROG_PATH, "steady", "40", "2", "1000", nullptr);
        } else {
          execl(TBCOLL_TEST_PROG_PATH, TBCOLL_TEST_PROG_PATH, "steady", "200", nullptr);
        }
        _exit(127);
      }
      pids.push_back(pid);
    }
    // Inject the fault: mid-run (after every rank printed "ready" and ran a while), or during init.
    const auto ready_by = Clock::now() + std::chrono::seconds(10);
    auto all_ready = [&] {
      for (int rank = 0; rank < n; ++rank) {
        if (read_file(logs[static_cast<size_t>(rank)]).find("ready") == std::string::npos) return false;
      }
      return true;
    };
    if (c.fault == Fault::kKillRootDuringInit) {
      while (segments_of({pids[0]}).empty() && transport == "shm" && Clock::now() < ready_by) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // ranks 0 and 1 are in set-up
    } else {
      while (!all_ready() && Clock::now() < ready_by) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ASSERT_TRUE(all_ready()) << read_file(logs[0]) << read_file(logs[1]) << read_file(logs[2]);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const auto injected = Clock::now();
    const pid_t victim = pids[static_cast<size_t>(c.victim)];
    switch (c.fault) {
      case Fault::kKill:
      case Fault::kKillRootAfterInit:
      case Fault::kKillRootDuringInit: kill(victim, SIGKILL); break;
      case Fault::kStopPastDeadline: kill(victim, SIGSTOP); break;
      case Fault::kStopBriefly:
        kill(victim, SIGSTOP);
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        kill(victim, SIGCONT);
        break;
      case Fault::kSlowPeer: break;
      case Fault::kReset:
        if (reset_connections_of(victim) == 0) {
          not_run = std::string(c.name) + ": cannot destroy sockets here (ss -K needs root and a kernel with "
                                          "CONFIG_INET_DIAG_DESTROY)";
          for (pid_t pid : pids) kill(pid, SIGKILL);
          for (pid_t pid : pids) waitpid(pid, nullptr, 0);
          continue;
        }
        break;
    }
    // Reap as they end (a launcher would); the stopped victim is killed once the others are done.
    std::vector<int> status(n, -1);
    std::vector<double> seconds(n, 0);
    const auto give_up = Clock::now() + std::chrono::seconds(20);
    for (int left = n; left > 0 && Clock::now() < give_up;) {
      int st = 0;
      const pid_t done = waitpid(-1, &st, WNOHANG);
      if (done <= 0) {
        bool others_done = true;
        for (int rank = 0; rank < n; ++rank) others_done &= rank == c.victim || status[static_cast<size_t>(rank)] != -1;
        if (c.fault == Fault::kStopPastDeadline && others_done) kill(victim, SIGKILL);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        continue;
      }
      const auto it = std::find(pids.begin(), pids.end(), done);
      if (it == pids.end()) continue;
      const size_t rank = static_cast<size_t>(it - pids.begin());
      status[rank] = st;
      seconds[rank] = std::chrono::duration<double>(Clock::now() - injected).count();
      --left;
    }
    for (int rank = 0; rank < n; ++rank) {
      if (status[static_cast<size_t>(rank)] == -1) {
        ADD_FAILURE() << "rank " << rank << " hung";
        kill(pids[static_cast<size_t>(rank)], SIGKILL);
        waitpid(pids[static_cast<size_t>(rank)], nullptr, 0);
      }
    }
    double worst = 0;
    for (int rank = 0; rank < n; ++rank) {
      const int st = status[static_cast<size_t>(rank)];
      const std::string log = read_file(logs[static_cast<size_t>(rank)]);
      if (rank == c.victim && !c.transient && c.fault != Fault::kReset) continue;  // the reset victim fails too
      if (c.fault == Fault::kKillRootDuringInit && rank == 2) continue;  // never started
      worst = std::max(worst, seconds[static_cast<size_t>(rank)]);
      if (c.transient) {
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "rank " << rank << ": " << log;
        EXPECT_NE(log.find("done"), std::string::npos) << "rank " << rank << ": " << log;
        continue;
      }
      EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << "rank " << rank << " (status " << st << "): " << log;
      EXPECT_NE(log.find("tbcoll error"), std::string::npos) << "rank " << rank << ": " << log;
      EXPECT_NE(log.find("peer"), std::string::npos) << "rank " << rank << ": " << log;
      EXPECT_NE(log.find(c.fault == Fault::kKillRootDuringInit ? "init" : "all_reduce"), std::string::npos)
          << "rank " << rank << ": " << log;
      EXPECT_LT(seconds[static_cast<size_t>(rank)], timeout_s + 1.5) << "rank " << rank << ": " << log;
    }
    std::printf("[ time to error ] %s | %s | %s | %.2f s (TBCOLL_TIMEOUT=%g)\n", c.name, transport.c_str(),
                c.transient ? "success" : "typed error on every other rank", worst, timeout_s);
    std::fflush(stdout);
    // Rank 0 killed in set-up leaves its segment (named only once every peer mapped it) and the survivor failed
    // before mapping it: the launcher's sweep removes it (tbcoll-run's, here the test's, as the launcher).
    if (c.fault == Fault::kKillRootDuringInit) tbcoll::shm::remove_stale_segments();
    EXPECT_EQ(segments_of(pids), std::vector<std::string>{}) << "shared memory left behind";
  }
  if (!not_run.empty()) GTEST_SKIP() << not_run << " (every other case ran)";
}

INSTANTIATE_TEST_SUITE_P(Transports, FaultMatrix,
                         ::testing::ValuesIn(tbcoll::test::test_transports_between_processes()));

}  // namespace
