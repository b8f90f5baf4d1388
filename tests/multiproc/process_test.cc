// Real processes: tbcoll-run and OpenMPI's mpirun launching the checking program, and a SIGKILLed rank.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collectives/harness.h"
#include "multiproc/output.h"
#include "multiproc/ports.h"
#include "multiproc/segments.h"
#include "platform/platform.h"

namespace {

using tbcoll::test::count_of;
using tbcoll::test::free_port;
using tbcoll::test::segments_of;

struct Result {
  int status = -1;
  std::string output;
};

Result run_shell(const std::string& command) {
  Result result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof(buf), pipe)) > 0) result.output.append(buf, got);
  int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

class Launch : public ::testing::TestWithParam<int> {};

TEST_P(Launch, TbcollRunChecksCollectives) {
  // Processes on one host: shared memory by default.
  int n = GetParam();
  Result result = run_shell(std::string(TBCOLL_RUN_PATH) + " -n " + std::to_string(n) + " --timeout 120 -- " +
                      TBCOLL_TEST_PROG_PATH + " check 1");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_EQ(count_of(result.output, ": OK (0 wrong)"), n) << result.output;
}

TEST_P(Launch, TbcollRunOverShmWithoutCrossMemoryAttach) {
  // Where ptrace rules forbid process_vm_readv, shm falls back to copies through the segment.
  int n = GetParam();
  Result result = run_shell(std::string(TBCOLL_RUN_PATH) + " -n " + std::to_string(n) +
                      " -x TBCOLL_TRANSPORT=shm -x TBCOLL_SHM_CMA=0 -- " + TBCOLL_TEST_PROG_PATH + " check 1");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_EQ(count_of(result.output, ": OK (0 wrong)"), n) << result.output;
}

TEST_P(Launch, TbcollRunOverTcpChecksCollectives) {
  int n = GetParam();
  Result result = run_shell(std::string(TBCOLL_RUN_PATH) + " -n " + std::to_string(n) + " -x TBCOLL_TRANSPORT=tcp -- " +
                      TBCOLL_TEST_PROG_PATH + " check 1");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_EQ(count_of(result.output, ": OK (0 wrong)"), n) << result.output;
}

TEST_P(Launch, TbcollRunChecksSendRecvOverShmAndTcp) {
  // The point-to-point check the RDMA test layer (tools/test-rdma-qemu.sh) runs over ibverbs, here on shm and tcp.
  int n = GetParam();
  for (const char* transport : {"shm", "tcp"}) {
    Result result = run_shell(std::string(TBCOLL_RUN_PATH) + " -n " + std::to_string(n) +
                        " --timeout 120 -x TBCOLL_TRANSPORT=" + transport + " -- " + TBCOLL_TEST_PROG_PATH +
                        " sendrecv 1");
    EXPECT_EQ(result.status, 0) << transport << "\n" << result.output;
    EXPECT_EQ(count_of(result.output, ": sendrecv OK (0 wrong)"), n) << transport << "\n" << result.output;
  }
}

TEST_P(Launch, MpirunChecksCollectives) {
  if (run_shell("command -v mpirun").status != 0) GTEST_SKIP() << "mpirun not installed (tools/setup.sh installs openmpi-bin)";
  int n = GetParam();
  std::string root = "127.0.0.1:" + std::to_string(free_port());
  Result result = run_shell("timeout 120 mpirun --allow-run-as-root --oversubscribe --mca btl self,tcp -np " +
                      std::to_string(n) + " -x TBCOLL_ROOT=" + root + " -x TBCOLL_TRANSPORT=tcp " +
                      TBCOLL_TEST_PROG_PATH + " check 1");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_EQ(count_of(result.output, ": OK (0 wrong)"), n) << result.output;
}

INSTANTIATE_TEST_SUITE_P(Ranks, Launch, ::testing::Values(2, 3));

// Ranks that share a CPU yield it while they spin (else each hand-off waits for the scheduler), at every poll
// when there are more ranks than CPUs (two ranks on one CPU); ranks pinned to CPUs of their own do not. The
// decision is logged at INFO level, and more ranks than CPUs is warned about once.
TEST(Processes, RanksSharingACpuYieldWhileSpinning) {
  const std::vector<int> allowed = tbcoll::platform::allowed_cpus();
  if (allowed.empty()) GTEST_SKIP() << "no CPU affinity on this platform (" << tbcoll::platform::flavour() << ")";
  Result shared = run_shell("taskset -c " + std::to_string(allowed[0]) + " " + TBCOLL_RUN_PATH +
                      " -n 2 -x TBCOLL_DEBUG=INFO -- " + TBCOLL_TEST_PROG_PATH + " check 1");
  EXPECT_EQ(shared.status, 0) << shared.output;
  EXPECT_EQ(count_of(shared.output, ": OK (0 wrong)"), 2) << shared.output;
  EXPECT_EQ(count_of(shared.output, "spinning waits yield at every poll"), 2) << shared.output;
  EXPECT_EQ(count_of(shared.output, "rank 0: a machine of this job runs 2 ranks per CPU"), 1) << shared.output;
  if (allowed.size() < 2) GTEST_SKIP() << "one CPU: every rank shares it";
  Result own = run_shell(std::string(TBCOLL_RUN_PATH) + " -n 2 --bind-to core -x TBCOLL_DEBUG=INFO -- " +
                   TBCOLL_TEST_PROG_PATH + " check 1");
  EXPECT_EQ(own.status, 0) << own.output;
  EXPECT_EQ(count_of(own.output, "spinning waits never yield"), 2) << own.output;
  EXPECT_EQ(count_of(own.output, "ranks per CPU it lets them use"), 0) << own.output;
}

// Two pretend hosts of two ranks each: shm inside a host, tcp across, in one communicator.
TEST(Processes, MixedHostsUseShmInsideAndTcpAcross) {
  Result result = run_shell(std::string(TBCOLL_RUN_PATH) + " -n 4 -- " + TBCOLL_TEST_PROG_PATH + " mixed");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_EQ(count_of(result.output, ": OK (0 wrong)"), 4) << result.output;
  EXPECT_NE(result.output.find("rank 0 transports self,shm,tcp,tcp"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("rank 3 transports tcp,tcp,shm,self"), std::string::npos) << result.output;
}

// The hierarchical all_reduce and all_gather where they are meant to run: shm inside each pretend host, tcp
// between the leaders (2 + 2 ranks, and 2 + 3).
TEST(Processes, HierarchicalOverShmInsideAndTcpAcross) {
  for (int n : {4, 5}) {
    Result result = run_shell(std::string(TBCOLL_RUN_PATH) + " -n " + std::to_string(n) +
                        " -x TBCOLL_ALGO=hierarchical -x TBCOLL_TIMEOUT=60 -- " + TBCOLL_TEST_PROG_PATH + " mixed");
    EXPECT_EQ(result.status, 0) << result.output;
    EXPECT_EQ(count_of(result.output, ": OK (0 wrong)"), n) << result.output;
    EXPECT_NE(result.output.find("rank 0 transports self,shm,tcp,tcp"), std::string::npos) << result.output;
  }
}

// A rank with a /dev/shm of its own (a container sharing the host's pids and network but not its IPC mount)
// cannot open its peers' segments: the ranks use TCP instead of failing at set-up.
TEST(Processes, RanksWithSeparateDevShmFallBackToTcp) {
  if (run_shell("unshare --mount sh -c 'mount -t tmpfs tmpfs /dev/shm' 2>&1").status != 0) {
    GTEST_SKIP() << "cannot make a private /dev/shm here (needs root and unshare)";
  }
  const std::string prog = std::string(TBCOLL_TEST_PROG_PATH) + " transports";
  Result result = run_shell(std::string(TBCOLL_RUN_PATH) + " -n 2 -x TBCOLL_TIMEOUT=20 -- sh -c 'if [ $TBCOLL_RANK = 1 ]; " +
                      "then exec unshare --mount sh -c \"mount -t tmpfs tmpfs /dev/shm && exec " + prog +
                      "\"; else exec " + prog + "; fi'");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_EQ(count_of(result.output, ": OK (0 wrong)"), 2) << result.output;
  EXPECT_NE(result.output.find("rank 0 transports self,tcp"), std::string::npos) << result.output;
}

// Rank 0 hosts the store; a communicator split from the job's first one keeps it running after that one is
// destroyed (a split of the child rendezvouses through it).
TEST(Processes, SplitChildOutlivesItsParent) {
  Result result = run_shell(std::string(TBCOLL_RUN_PATH) + " -n 3 -x TBCOLL_TIMEOUT=20 -- " + TBCOLL_TEST_PROG_PATH +
                      " split_after_parent");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_EQ(count_of(result.output, ": OK (0 wrong)"), 3) << result.output;
}

TEST(Processes, MismatchedCountsFailWithAClearError) {
  Result result = run_shell(std::string(TBCOLL_RUN_PATH) + " -n 2 -x TBCOLL_TIMEOUT=20 -- " + TBCOLL_TEST_PROG_PATH +
                      " mismatch");
  EXPECT_NE(result.status, 0);
  EXPECT_NE(result.output.find("does not match the peer's call"), std::string::npos) << result.output;
}

// Starts n ranks directly (not through tbcoll-run, which would kill the survivors itself), each writing its
// output to a file; rank `victim` SIGKILLs itself mid-run; the others must exit with a clear error well
// within the deadline.
class KilledRank : public ::testing::TestWithParam<std::string> {};

TEST_P(KilledRank, MakesTheOthersFailWithinTheDeadlineAndLeavesNoSegments) {
  const int n = 3, victim = 2;
  std::string root = "127.0.0.1:" + std::to_string(free_port());
  std::string dir = ::testing::TempDir();
  std::vector<pid_t> pids;
  auto start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < n; ++rank) {
    std::string log = dir + "/kill_rank" + std::to_string(rank) + ".log";
    pid_t pid = fork();
    if (pid == 0) {
      FILE* out = std::freopen(log.c_str(), "w", stderr);
      (void)out;
      dup2(fileno(stderr), STDOUT_FILENO);
      setenv("TBCOLL_RANK", std::to_string(rank).c_str(), 1);
      setenv("TBCOLL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("TBCOLL_ROOT", root.c_str(), 1);
      setenv("TBCOLL_TIMEOUT", "15", 1);
      setenv("TBCOLL_TRANSPORT", GetParam().c_str(), 1);
      execl(TBCOLL_TEST_PROG_PATH, TBCOLL_TEST_PROG_PATH, "die", std::to_string(victim).c_str(), nullptr);
      _exit(127);
    }
    pids.push_back(pid);
  }
  // Reaped as they exit, as a launcher does: where the platform watches peers with kill() alone (posix), a killed
  // rank left a zombie would look alive to the others until the deadline.
  std::vector<int> statuses(n, 0);
  for (int left = n; left > 0; --left) {
    int status = 0;
    const pid_t done = waitpid(-1, &status, 0);
    const auto it = std::find(pids.begin(), pids.end(), done);
    ASSERT_NE(it, pids.end()) << "waitpid: " << done;
    statuses[static_cast<size_t>(it - pids.begin())] = status;
  }
  for (int rank = 0; rank < n; ++rank) {
    const int status = statuses[static_cast<size_t>(rank)];
    std::ifstream in(dir + "/kill_rank" + std::to_string(rank) + ".log");
    std::stringstream text;
    text << in.rdbuf();
    if (rank == victim) {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << text.str();
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << "rank " << rank << ": " << text.str();
      EXPECT_NE(text.str().find("all_reduce"), std::string::npos) << text.str();
      EXPECT_NE(text.str().find("peer"), std::string::npos) << text.str();
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "survivors waited for the deadline";
  EXPECT_EQ(segments_of(pids), std::vector<std::string>{}) << "shared memory left behind";
}

INSTANTIATE_TEST_SUITE_P(Transports, KilledRank,
                         ::testing::ValuesIn(tbcoll::test::test_transports_between_processes()));

// A rank killed during set-up, after creating its segment (unlinked only once every peer mapped it), while rank 2
// never arrives: rank 0 fails at the deadline and removes the dead rank's segment on its way out (not
// leaving it until the next set-up on the machine).
TEST(Processes, RankKilledDuringSetUpLeavesNoSegments) {
  const int n = 3, victim = 1, absent = 2;
  std::string root = "127.0.0.1:" + std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      int null = open("/dev/null", O_WRONLY);
      dup2(null, STDOUT_FILENO);
      dup2(null, STDERR_FILENO);
      setenv("TBCOLL_RANK", std::to_string(rank).c_str(), 1);
      setenv("TBCOLL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("TBCOLL_ROOT", root.c_str(), 1);
      setenv("TBCOLL_TIMEOUT", "2", 1);
      setenv("TBCOLL_TRANSPORT", "shm", 1);
      execl(TBCOLL_TEST_PROG_PATH, TBCOLL_TEST_PROG_PATH, "late", std::to_string(absent).c_str(), "60", nullptr);
      _exit(127);
    }
    pids.push_back(pid);
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (segments_of({pids[victim]}).empty() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(segments_of({pids[victim]}).size(), 1u) << "rank 1 did not reach set-up in time";
  kill(pids[victim], SIGKILL);
  waitpid(pids[victim], nullptr, 0);  // reaped at once, as a launcher would: a zombie still owns its pid
  int status = 0;
  waitpid(pids[0], &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << "rank 0 fails at the deadline";
  EXPECT_EQ(segments_of(pids), std::vector<std::string>{}) << "shared memory left behind";
  kill(pids[absent], SIGKILL);  // still asleep before init: it has no segment
  waitpid(pids[absent], nullptr, 0);
}


}  // namespace

namespace {

// tbcoll-info prints every knob of the table, with its default, and the transports of this build.
TEST(Tools, InfoListsEveryKnobAndTransport) {
  Result result = run_shell(TBCOLL_INFO_PATH);
  EXPECT_EQ(result.status, 0) << result.output;
  for (const char* knob : {"TBCOLL_RANK", "TBCOLL_ROOT", "TBCOLL_TIMEOUT", "TBCOLL_TRANSPORT", "TBCOLL_ALGO",
                           "TBCOLL_DEBUG", "TBCOLL_SPIN_US", "TBCOLL_ONESHOT_MAX_BYTES", "TBCOLL_SHM_CMA"}) {
    EXPECT_NE(result.output.find(knob), std::string::npos) << knob << " missing:\n" << result.output;
  }
  for (const std::string& transport : tbcoll::test::test_transports()) {
    EXPECT_NE(result.output.find(transport), std::string::npos) << transport;
  }
  Result with_value = run_shell(std::string("TBCOLL_TIMEOUT=7 ") + TBCOLL_INFO_PATH);
  EXPECT_NE(with_value.output.find("now 7"), std::string::npos) << "current values are shown:\n" << with_value.output;
}

// Under torchrun (or any env:// launcher) a program of ours finds its rank, size and rendezvous in torch's RANK,
// WORLD_SIZE, MASTER_ADDR and MASTER_PORT; MASTER_PORT itself is held by torch's store (here: this test), so
// tbcoll's rendezvous takes the next port. (Otherwise each process would become rank 0 of 1, silently.)
TEST(Processes, TorchsEnvironmentMakesAJob) {
  int port = 0;
  const int held = tbcoll::test::listen_below_ephemeral(port);  // the next port, tbcoll's, is free too
  ASSERT_GE(held, 0);
  const std::string env = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                          " TBCOLL_TIMEOUT=20 ";
  const std::string prog = std::string(TBCOLL_TEST_PROG_PATH) + " check 1";
  Result result = run_shell("sh -c '" + env + "RANK=1 " + prog + " & " + env + "RANK=0 " + prog +
                      "; first=$?; wait $!; exit $((first | $?))'");
  close(held);
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("rank 0/2: OK (0 wrong)"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("rank 1/2: OK (0 wrong)"), std::string::npos) << result.output;
}

// Secrets are never printed, only that they are set; misspelt variables are named with the knob they resemble; a
// transport built but not usable here says why.
TEST(Tools, InfoMasksSecretsAndNamesUnknownVariables) {
  Result result = run_shell(std::string("TBCOLL_SECRET=hunter2-hunter2-hunter2 TBCOLL_TOKEN=tok-abcdef-123 "
                                  "TBCOLL_TIMEUOT=3 ") + TBCOLL_INFO_PATH);
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_EQ(result.output.find("hunter2"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("tok-abcdef"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("now (set, 23 bytes)"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("TBCOLL_TIMEUOT (did you mean TBCOLL_TIMEOUT?)"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("\n  ibverbs "), std::string::npos) << "ibverbs listed, usable or not:\n"
                                                                   << result.output;
}

}  // namespace

namespace {

// A /dev/shm too small for the segments: shm is not offered, the job runs over tcp and says why (in a private
// mount namespace, so needs root; skipped otherwise).
TEST(Processes, TinyDevShmFallsBackToTcp) {
  if (run_shell("unshare -m true").status != 0) GTEST_SKIP() << "cannot create a mount namespace (not root?)";
  Result result = run_shell(std::string("unshare -m sh -c 'mount -t tmpfs -o size=512k tmpfs /dev/shm && ") +
                      TBCOLL_RUN_PATH + " -n 2 -- " + TBCOLL_TEST_PROG_PATH + " check 1'");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_EQ(count_of(result.output, ": OK (0 wrong)"), 2) << result.output;
  EXPECT_NE(result.output.find("transport shm unavailable"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("is /dev/shm big enough"), std::string::npos) << result.output;
}

}  // namespace
