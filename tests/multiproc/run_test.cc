// Tests of the tbcoll-run launcher: it is started as a real process, its ranks are `sh -c` scripts,
// and the tests check what the ranks saw, what the launcher printed, its exit status, and that no
// rank (or child of a rank) outlives a stopped job.

#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#ifndef TBCOLL_RUN_PATH
#error "TBCOLL_RUN_PATH must name the tbcoll-run executable"
#endif

#include "common/auth.h"
#include "multiproc/output.h"
#include "multiproc/segments.h"

namespace {

using tbcoll::test::count_of;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

struct RunResult {
  int exit_code = -1;  // 128+signal if the launcher itself died by a signal
  std::string out;
  std::string err;
  double seconds = 0;      // from start to exit
  bool timed_out = false;  // the test had to kill the launcher
};

// tbcoll-run started with its stdout and stderr captured through pipes. Signal dispositions are
// reset to the defaults so the test does not depend on how it was started (nohup, `&`).
class Launcher {
 public:
  // `env` entries are NAME=VALUE to set, or NAME to unset, in the launcher's environment.
  // TBCOLL_TOKEN is unset unless `env` sets it.
  explicit Launcher(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    int out_pipe[2];
    int err_pipe[2];
    if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) {
      ADD_FAILURE() << "pipe: " << std::strerror(errno);
      return;
    }
    struct stat st {};
    fstat(out_pipe[0], &st);
    stdout_inode_ = st.st_ino;
    std::vector<std::string> argv_storage = {TBCOLL_RUN_PATH};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& arg : argv_storage) argv.push_back(arg.data());
    argv.push_back(nullptr);
    start_ = Clock::now();
    pid_ = fork();
    if (pid_ == 0) {
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD}) signal(sig, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      unsetenv("TBCOLL_TOKEN");
      for (const std::string& entry : env) {
        size_t eq = entry.find('=');
        if (eq == std::string::npos) {
          unsetenv(entry.c_str());
        } else {
          setenv(entry.substr(0, eq).c_str(), entry.c_str() + eq + 1, 1);
        }
      }
      int dev_null = open("/dev/null", O_RDONLY);
      dup2(dev_null, STDIN_FILENO);
      dup2(out_pipe[1], STDOUT_FILENO);
      dup2(err_pipe[1], STDERR_FILENO);
      close(out_pipe[0]);
      close(err_pipe[0]);
      execv(argv[0], argv.data());
      _exit(126);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    fds_[0] = out_pipe[0];
    fds_[1] = err_pipe[0];
    for (int fd : fds_) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (pid_ < 0) ADD_FAILURE() << "fork: " << std::strerror(errno);
  }

  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  ~Launcher() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }

  pid_t pid() const { return pid_; }
  ino_t stdout_inode() const { return stdout_inode_; }
  const std::string& out() const { return result_.out; }  // stdout collected so far

  // Waits for the launcher to exit without reading its output (a reader that stalls); false on timeout.
  bool wait_exit_without_reading(double timeout_s) {
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    int status = 0;
    while (Clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        result_.seconds = seconds_since(start_);
        result_.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Stops reading the launcher's stdout, as `| head -1` would.
  void close_stdout() {
    if (fds_[0] >= 0) close(fds_[0]);
    fds_[0] = -1;
  }

  // Collects output until `ready(stdout so far)` holds; false if the launcher exits or time runs out.
  bool wait_for_stdout(const std::function<bool(const std::string&)>& ready, double timeout_s = 5) {
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    if (pid_ < 0) return false;
    while (!ready(result_.out)) {
      if (exited_ || Clock::now() >= deadline) return false;
      pump(20);
    }
    return true;
  }

  // Waits for the launcher to exit and its output pipes to close, killing it after `timeout_s`.
  RunResult finish(double timeout_s = 10) {
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (pid_ > 0 && (!exited_ || fds_[0] >= 0 || fds_[1] >= 0)) {
      if (Clock::now() >= deadline) {
        result_.timed_out = true;
        ADD_FAILURE() << "tbcoll-run did not finish within " << timeout_s << " s (exited: " << exited_
                      << "); stdout so far:\n"
                      << result_.out << "stderr so far:\n"
                      << result_.err;
        break;
      }
      pump(20);
    }
    return result_;
  }

 private:
  void pump(int timeout_ms) {
    pollfd pfds[2];
    nfds_t count = 0;
    int owner[2];
    for (int i = 0; i < 2; ++i) {
      if (fds_[i] < 0) continue;
      pfds[count] = pollfd{fds_[i], POLLIN, 0};
      owner[count++] = i;
    }
    if (count > 0 && poll(pfds, count, timeout_ms) > 0) {
      for (nfds_t k = 0; k < count; ++k) {
        if (pfds[k].revents == 0) continue;
        int i = owner[k];
        char buffer[4096];
        ssize_t n = read(fds_[i], buffer, sizeof(buffer));
        if (n > 0) {
          (i == 0 ? result_.out : result_.err).append(buffer, static_cast<size_t>(n));
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          close(fds_[i]);
          fds_[i] = -1;
        }
      }
    } else if (count == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
    }
    int status = 0;
    if (!exited_ && pid_ > 0 && waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      result_.seconds = seconds_since(start_);
      result_.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }

  pid_t pid_ = -1;
  int fds_[2] = {-1, -1};
  ino_t stdout_inode_ = 0;
  bool exited_ = false;
  Clock::time_point start_;
  RunResult result_;
};

RunResult run(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  return Launcher(args, env).finish();
}

// True while `pid` runs. A zombie waiting for its new parent to reap it has already stopped running.
bool process_running(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == EPERM;
  std::ifstream stat_file("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(stat_file, stat)) return true;  // no /proc: kill() is all we know
  size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

// Expects every pid to be gone, allowing a moment for signals already sent to take effect.
void expect_all_gone(const std::vector<pid_t>& pids) {
  auto deadline = Clock::now() + std::chrono::seconds(2);
  for (pid_t pid : pids) {
    while (process_running(pid) && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_FALSE(process_running(pid)) << "process " << pid << " outlived the job";
    if (process_running(pid)) kill(pid, SIGKILL);  // do not leak it into later tests
  }
}

// The pids from every "pid A B ..." line of `out`.
std::vector<pid_t> pids_in(const std::string& out) {
  std::vector<pid_t> pids;
  for (const std::string& line : split_lines(out)) {
    std::istringstream in(line);
    std::string word;
    if (!(in >> word) || word != "pid") continue;
    for (long pid; in >> pid;) pids.push_back(static_cast<pid_t>(pid));
  }
  return pids;
}

// A directory for ranks to leave files in; removed with its contents at the end of the test.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/tbcoll-run-test-XXXXXX";
    if (mkdtemp(pattern)) path_ = pattern;
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::string command = "rm -rf '" + path_ + "'";
    int ignored = std::system(command.c_str());
    (void)ignored;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A rank script for a job of `world_size` ranks: each rank except `bad` starts a background
// `sleep 30` (so it has a child of its own), prints "pid <shell> <sleep>", marks itself ready in
// `dir` and waits; rank `bad` waits until all the others are ready, then runs `action`.
std::string failing_job_script(int world_size, int bad, const std::string& action, const std::string& dir) {
  std::string others;
  for (int r = 0; r < world_size; ++r) {
    if (r != bad) others += " " + std::to_string(r);
  }
  std::string script = "if [ \"$TBCOLL_RANK\" = " + std::to_string(bad) + " ]; then\n";
  script += "  for r in" + others + "; do while [ ! -e " + dir + "/ready.$r ]; do sleep 0.01; done; done\n";
  script += "  " + action + "\nfi\n";
  script += "sleep 30 &\necho \"pid $$ $!\"\n";
  script += "touch " + dir + "/ready.$TBCOLL_RANK\nwait\n";
  return script;
}

// Every rank starts a background `sleep 30`, prints "pid <shell> <sleep>" and waits.
const std::string kWaitingRank = "sleep 30 & echo \"pid $$ $!\"; wait";

// ---- environment -----------------------------------------------------------------------------------------

TEST(TbcollRun, SetsRankEnvironment) {
  const std::string script =
      "echo $TBCOLL_RANK/$TBCOLL_WORLD_SIZE $TBCOLL_ROOT $TBCOLL_TOKEN $TBCOLL_LOCAL_RANK/$TBCOLL_LOCAL_SIZE";
  RunResult result = run({"-n", "3", "--", "sh", "-c", script});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::vector<std::string> lines = split_lines(result.out);
  ASSERT_EQ(lines.size(), 3u) << result.out;
  std::set<std::string> ranks;
  std::set<std::string> roots;
  std::set<std::string> tokens;
  for (const std::string& line : lines) {
    std::istringstream in(line);
    std::string rank;
    std::string root;
    std::string token;
    std::string local;
    ASSERT_TRUE(in >> rank >> root >> token >> local) << line;
    ranks.insert(rank);
    roots.insert(root);
    tokens.insert(token);
    EXPECT_EQ(local, rank) << "local rank/size must equal rank/size on one machine";
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0/3", "1/3", "2/3"}));
  ASSERT_EQ(roots.size(), 1u) << "all ranks must see the same TBCOLL_ROOT";
  const std::string& root = *roots.begin();
  const std::string host = "127.0.0.1:";
  ASSERT_EQ(root.compare(0, host.size(), host), 0) << root;
  std::string port = root.substr(host.size());
  ASSERT_FALSE(port.empty());
  for (char c : port) ASSERT_TRUE(std::isdigit(static_cast<unsigned char>(c))) << root;
  EXPECT_GT(std::stol(port), 0);
  EXPECT_LT(std::stol(port), 65536);
  ASSERT_EQ(tokens.size(), 1u) << "all ranks must see the same TBCOLL_TOKEN";
  const std::string& token = *tokens.begin();
  ASSERT_EQ(token.size(), 16u) << token;
  for (char c : token) EXPECT_TRUE(std::isxdigit(static_cast<unsigned char>(c))) << token;
}

// Rank 0 alone inherits the socket the launcher bound for the store, already listening (the launcher keeps no
// copy): rank 1 can connect to TBCOLL_ROOT while rank 0 runs nothing but a shell.
TEST(TbcollRun, RankZeroInheritsTheListeningRootSocket) {
  const std::string script =
      "if [ \"$TBCOLL_RANK\" = 0 ]; then\n"
      "  echo \"0 $(readlink /proc/$$/fd/$TBCOLL_ROOT_FD | cut -d: -f1)\"; sleep 1\n"
      "else\n"
      "  port=${TBCOLL_ROOT##*:}\n"
      "  if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then c=connected; else c=refused; fi\n"
      "  echo \"$TBCOLL_RANK [$TBCOLL_ROOT_FD] $c\"\n"
      "fi\n";
  RunResult result = run({"-n", "2", "--", "bash", "-c", script});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::vector<std::string> lines = split_lines(result.out);
  std::multiset<std::string> got(lines.begin(), lines.end());
  EXPECT_EQ(got, (std::multiset<std::string>{"0 socket", "1 [] connected"})) << result.out;
}

TEST(TbcollRun, TokenDiffersBetweenJobs) {
  RunResult first = run({"-n", "1", "sh", "-c", "echo $TBCOLL_TOKEN"});
  RunResult second = run({"-n", "1", "sh", "-c", "echo $TBCOLL_TOKEN"});
  ASSERT_EQ(first.exit_code, 0);
  ASSERT_EQ(second.exit_code, 0);
  EXPECT_EQ(first.out.size(), 17u) << first.out;
  EXPECT_NE(first.out, second.out);
}

// A secret per job (64 hex digits) unless given (--secret, or TBCOLL_SECRET / TBCOLL_SECRET_FILE already set), and
// a job of real ranks proves it on every connection (the checks pass over shm and tcp alike).
TEST(TbcollRun, SecretIsDrawnPerJobOrPassedThrough) {
  RunResult first = run({"-n", "2", "sh", "-c", "echo $TBCOLL_SECRET"});
  RunResult second = run({"-n", "1", "sh", "-c", "echo $TBCOLL_SECRET"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  if (first.err.find("no OpenSSL libcrypto") != std::string::npos) GTEST_SKIP() << first.err;
  const std::vector<std::string> lines = split_lines(first.out);
  ASSERT_EQ(lines.size(), 2u) << first.out;
  EXPECT_EQ(lines[0].size(), 64u) << first.out;
  EXPECT_EQ(lines[0], lines[1]) << "every rank of a job has its secret";
  EXPECT_NE(lines[0] + "\n", second.out);
  EXPECT_EQ(run({"-n", "1", "sh", "-c", "echo $TBCOLL_SECRET"}, {"TBCOLL_SECRET=given"}).out, "given\n");
  EXPECT_EQ(run({"-n", "1", "sh", "-c", "echo \"[$TBCOLL_SECRET]\""}, {"TBCOLL_SECRET_FILE=/some/file"}).out, "[]\n");
  RunResult job = run({"-n", "2", "-x", "TBCOLL_TRANSPORT=tcp", "--", TBCOLL_TEST_PROG_PATH, "check", "1"});
  EXPECT_EQ(job.exit_code, 0) << job.err;
}

// The secret never goes on a command line (every user reads those in ps): --secret and -x TBCOLL_SECRET=... are
// refused with the ways that work, and so is an empty TBCOLL_SECRET (it would mean no secret); --secret-file reads
// a file (mode 0600) or a pipe, and no message repeats the secret.
TEST(TbcollRun, SecretStaysOffTheCommandLine) {
  const std::string secret = "do-not-print-this-secret-0123";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"-n", "1", "--secret", secret, "true"},
        std::vector<std::string>{"-n", "1", "--secret=" + secret, "true"},
        std::vector<std::string>{"-n", "1", "-x", "TBCOLL_SECRET=" + secret, "true"}}) {
    RunResult refused = run(args);
    EXPECT_EQ(refused.exit_code, 2) << args[2];
    EXPECT_TRUE(contains(refused.err, "readable by every user")) << refused.err;
    EXPECT_TRUE(contains(refused.err, "--secret-file FILE")) << refused.err;
    EXPECT_FALSE(contains(refused.err + refused.out, secret)) << refused.err;
  }
  for (const char* empty : {"TBCOLL_SECRET=", "TBCOLL_SECRET_FILE="}) {
    RunResult refused = run({"-n", "1", "true"}, {empty});
    EXPECT_EQ(refused.exit_code, 2) << empty;
    EXPECT_TRUE(contains(refused.err, "is set but empty")) << refused.err;
  }
  char path[] = "/tmp/tbcoll-run-secret-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, (secret + "\n").data(), secret.size() + 1), static_cast<ssize_t>(secret.size() + 1));
  close(fd);
  EXPECT_EQ(run({"-n", "2", "--secret-file", path, "sh", "-c", "echo $TBCOLL_SECRET"}).out, secret + "\n" + secret + "\n");
  chmod(path, 0644);
  RunResult open_file = run({"-n", "1", "--secret-file", path, "true"});
  EXPECT_EQ(open_file.exit_code, 2);
  EXPECT_TRUE(contains(open_file.err, "open to group or others (mode 0644)")) << open_file.err;
  EXPECT_FALSE(contains(open_file.err, secret)) << open_file.err;
  unlink(path);
  RunResult device = run({"-n", "1", "--secret-file", "/dev/zero", "true"});
  EXPECT_EQ(device.exit_code, 2);
  EXPECT_TRUE(contains(device.err, "not a regular file or a pipe")) << device.err;
  // A pipe, as `--secret-file <(pass show job)` gives one.
  RunResult piped = run({"-n", "1", "--", "bash", "-c",
                         std::string(TBCOLL_RUN_PATH) + " -n 1 --secret-file <(echo from-a-pipe-0123456789) sh -c "
                         "'echo $TBCOLL_SECRET'"});
  EXPECT_EQ(piped.out, "from-a-pipe-0123456789\n") << piped.err;
}

// The library takes the job secret out of a rank's environment when it loads: the job runs with it, and what the
// rank starts (a shell, a subprocess of the engine) does not inherit it.
TEST(TbcollRun, TheSecretDoesNotReachTheRanksChildren) {
  if (!tbcoll::auth::available()) GTEST_SKIP() << "no libcrypto: no job secret";
  RunResult result = run({"-n", "2", "--", TBCOLL_TEST_PROG_PATH, "secret_child"}, {"TBCOLL_SECRET=a-secret-for-this-job-0123"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(count_of(result.out, "CHILD-HAS-NO-SECRET"), 2) << result.out << result.err;
  EXPECT_EQ(count_of(result.out, ": OK (0 wrong)"), 2) << result.out;
}

TEST(TbcollRun, PassesTokenFromEnvironmentThrough) {
  RunResult result = run({"-n", "2", "sh", "-c", "echo \"[$TBCOLL_TOKEN]\""}, {"TBCOLL_TOKEN=not-hex but kept"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "[not-hex but kept]\n[not-hex but kept]\n");
}

TEST(TbcollRun, ExtraVariablesReachEveryRankButCannotChangeTheRank) {
  RunResult result = run({"-x", "FOO=bar", "-x", "BAZ=a=b", "-np", "2", "--", "sh", "-c",
                          "echo \"$FOO|$BAZ|$TBCOLL_RANK\""});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::vector<std::string> lines = split_lines(result.out);
  std::multiset<std::string> got(lines.begin(), lines.end());
  EXPECT_EQ(got, (std::multiset<std::string>{"bar|a=b|0", "bar|a=b|1"})) << result.out;
}

TEST(TbcollRun, RanksWriteStraightToInheritedStdoutWithoutTagOutput) {
  if (access("/proc/self/fd/1", F_OK) != 0) GTEST_SKIP() << "no /proc to inspect the ranks' descriptors";
  Launcher launcher({"-n", "2", "sh", "-c", "readlink /proc/$$/fd/1"});
  std::string expected = "pipe:[" + std::to_string(launcher.stdout_inode()) + "]";
  RunResult result = launcher.finish();
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, expected + "\n" + expected + "\n");
}

// ---- --tag-output ----------------------------------------------------------------------------------------

TEST(TbcollRun, TagOutputPrefixesEveryLineAndKeepsEachRanksOrder) {
  constexpr int kLines = 300;
  std::string script = "r=$TBCOLL_RANK; echo first-$r; echo err-$r >&2; i=0; ";
  script += "while [ $i -lt " + std::to_string(kLines) + " ]; do echo line-$r-$i; i=$((i+1)); done; ";
  script += "printf 'err-tail-%s' $r >&2; printf 'tail-%s' $r";
  RunResult result = run({"--tag-output", "-n", "3", "--", "sh", "-c", script});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  ASSERT_FALSE(result.out.empty());
  EXPECT_EQ(result.out.back(), '\n') << "a final partial line is flushed as a line";

  std::map<int, std::vector<std::string>> per_rank;
  for (const std::string& line : split_lines(result.out)) {
    ASSERT_GE(line.size(), 4u) << line;
    ASSERT_EQ(line[0], '[') << line;
    ASSERT_EQ(line.compare(2, 2, "] "), 0) << line;
    int rank = line[1] - '0';
    per_rank[rank].push_back(line.substr(4));  // a line under the wrong prefix breaks the comparison below
  }
  ASSERT_EQ(per_rank.size(), 3u) << result.out;
  for (int r = 0; r < 3; ++r) {
    std::vector<std::string> expected = {"first-" + std::to_string(r)};
    for (int i = 0; i < kLines; ++i) expected.push_back("line-" + std::to_string(r) + "-" + std::to_string(i));
    expected.push_back("tail-" + std::to_string(r));
    EXPECT_EQ(per_rank[r], expected) << "rank " << r;
  }

  std::vector<std::string> err_lines = split_lines(result.err);
  std::multiset<std::string> err(err_lines.begin(), err_lines.end());
  EXPECT_EQ(err, (std::multiset<std::string>{"[0] err-0", "[1] err-1", "[2] err-2", "[0] err-tail-0", "[1] err-tail-1",
                                             "[2] err-tail-2"}))
      << result.err;
}

TEST(TbcollRun, TagOutputPassesABrokenStdoutOnToTheRanks) {
  // Without --tag-output `yes` would die of SIGPIPE; with it, the launcher must not keep it running.
  Launcher launcher({"--tag-output", "-n", "2", "--", "yes"});
  ASSERT_TRUE(launcher.wait_for_stdout([](const std::string& out) { return out.size() > 1000; }));
  launcher.close_stdout();
  RunResult result = launcher.finish();
  EXPECT_EQ(result.exit_code, 128 + SIGPIPE) << result.err;
  EXPECT_TRUE(contains(result.err, "killed by signal 13")) << result.err;
}

// ---- failures stop the job -------------------------------------------------------------------------------

TEST(TbcollRun, FailingRankStopsTheJobWithItsStatus) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  RunResult result = run({"-n", "3", "--", "sh", "-c", failing_job_script(3, 1, "exit 3", dir.path())});
  EXPECT_EQ(result.exit_code, 3) << result.err;
  EXPECT_LT(result.seconds, 5) << "the other ranks must be stopped, not waited for";
  EXPECT_TRUE(contains(result.err, "tbcoll-run: rank 1 exited with status 3")) << result.err;
  std::vector<pid_t> pids = pids_in(result.out);
  EXPECT_EQ(pids.size(), 4u) << result.out;  // shell and sleep of ranks 0 and 2
  expect_all_gone(pids);
}

TEST(TbcollRun, RankKilledBySignalStopsTheJob) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  RunResult result = run({"-n", "3", "--", "sh", "-c", failing_job_script(3, 2, "kill -9 $$", dir.path())});
  EXPECT_EQ(result.exit_code, 128 + SIGKILL) << result.err;
  EXPECT_LT(result.seconds, 5);
  EXPECT_TRUE(contains(result.err, "tbcoll-run: rank 2 killed by signal 9")) << result.err;
  EXPECT_EQ(count_of(result.err, "tbcoll-run: rank"), 1) << "only the first failure is reported:\n" << result.err;
  std::vector<pid_t> pids = pids_in(result.out);
  EXPECT_EQ(pids.size(), 4u) << result.out;
  expect_all_gone(pids);
}

// A rank SIGKILLed in the middle of all_reduce calls: its peers fail within milliseconds and exit with status 1,
// often before the launcher collected the killed one; the launcher names the killed rank anyway, every time.
TEST(TbcollRun, NamesTheKilledRankNotThePeersItTookDown) {
  for (int run_number = 0; run_number < 6; ++run_number) {
    RunResult result = run({"-n", "3", "--", TBCOLL_TEST_PROG_PATH, "die", "1"});
    EXPECT_EQ(result.exit_code, 128 + SIGKILL) << result.err;
    EXPECT_TRUE(contains(result.err, "tbcoll-run: rank 1 killed by signal 9")) << "run " << run_number << ":\n"
                                                                                << result.err;
    EXPECT_EQ(count_of(result.err, "tbcoll-run: rank"), 1) << result.err;
  }
}

TEST(TbcollRun, MissingProgramExits127) {
  RunResult result = run({"-n", "2", "--", "/nonexistent/tbcoll-no-such-program", "arg"});
  EXPECT_EQ(result.exit_code, 127);
  EXPECT_TRUE(contains(result.err, "tbcoll-run: cannot execute /nonexistent/tbcoll-no-such-program: ")) << result.err;
  EXPECT_LT(result.seconds, 5);
}

TEST(TbcollRun, FindsProgramsOnPath) {
  RunResult result = run({"-n", "2", "true"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(run({"-n", "2", "false"}).exit_code, 1);
}

TEST(TbcollRun, TimeoutKillsTheJobAndExits124) {
  RunResult result = run({"--timeout", "1", "-n", "2", "--", "sh", "-c", "echo \"pid $$\"; exec sleep 30"});
  EXPECT_EQ(result.exit_code, 124) << result.err;
  EXPECT_GE(result.seconds, 0.9);
  EXPECT_LT(result.seconds, 5);
  EXPECT_TRUE(contains(result.err, "timed out")) << result.err;
  std::vector<pid_t> pids = pids_in(result.out);
  EXPECT_EQ(pids.size(), 2u) << result.out;
  expect_all_gone(pids);
}

// With --tag-output the launcher writes the ranks' output itself: a reader that stops reading must not stop the
// launcher from enforcing the timeout (the launcher must not block in write() until the reader goes on).
TEST(TbcollRun, StalledReaderDoesNotHoldUpTheTimeout) {
  Launcher launcher({"--tag-output", "--timeout", "1", "-n", "1", "--", "sh", "-c", "yes"});
  ASSERT_TRUE(launcher.wait_exit_without_reading(8)) << "still running with its stdout unread";
  RunResult result = launcher.finish();
  EXPECT_EQ(result.exit_code, 124) << result.err;
  EXPECT_LT(result.seconds, 5);
}

// ---- signals sent to the launcher ------------------------------------------------------------------------

// State letter of a process from /proc (R, S, T, ...), or '?' once it is gone.
char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return '?';
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : '?';
}

bool wait_for_state(const std::vector<pid_t>& pids, char state) {
  auto deadline = Clock::now() + std::chrono::seconds(3);
  for (pid_t pid : pids) {
    while (process_state(pid) != state) {
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return true;
}

// On a terminal with `stty tostop`, the ranks (each in a process group of its own) write as the foreground job
// the launcher is, rather than being stopped at their first line until the job times out.
TEST(TbcollRun, RanksWriteToATostopTerminal) {
  if (std::system("command -v script > /dev/null 2>&1") != 0) GTEST_SKIP() << "script(1) not installed";
  const std::string command = "timeout 30 script -qec \"stty tostop; " + std::string(TBCOLL_RUN_PATH) +
                              " -n 2 --timeout 20 -- sh -c 'echo hello from \\$TBCOLL_RANK'; echo rc=\\$?\" /dev/null";
  auto start = Clock::now();
  std::FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buffer[256];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
  pclose(pipe);
  EXPECT_TRUE(contains(out, "hello from 0") && contains(out, "hello from 1")) << out;
  EXPECT_TRUE(contains(out, "rc=0")) << out;
  EXPECT_LT(seconds_since(start), 15) << out;
}

// ctrl-Z reaches only the launcher's process group: it stops its ranks (each in a group of its own) and then
// itself, and continues them when it is continued.
TEST(TbcollRun, StopAndContinueReachTheRanks) {
  Launcher launcher({"-n", "2", "--", "sh", "-c", "echo \"pid $$\"; exec sleep 30"});
  ASSERT_TRUE(launcher.wait_for_stdout([](const std::string& out) { return pids_in(out).size() == 2; }));
  std::vector<pid_t> ranks = pids_in(launcher.out());
  ASSERT_EQ(kill(launcher.pid(), SIGTSTP), 0);
  EXPECT_TRUE(wait_for_state(ranks, 'T')) << "ranks not stopped";
  EXPECT_TRUE(wait_for_state({launcher.pid()}, 'T')) << "launcher not stopped";
  ASSERT_EQ(kill(launcher.pid(), SIGCONT), 0);
  EXPECT_TRUE(wait_for_state(ranks, 'S')) << "ranks not continued";
  ASSERT_EQ(kill(launcher.pid(), SIGTERM), 0);
  RunResult result = launcher.finish();
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  expect_all_gone(ranks);
}

TEST(TbcollRun, RanksDieWithALauncherKilledOutright) {
  Launcher launcher({"-n", "2", "--", "sh", "-c", "echo \"pid $$\"; exec sleep 30"});
  ASSERT_TRUE(launcher.wait_for_stdout([](const std::string& out) { return pids_in(out).size() == 2; }));
  std::vector<pid_t> pids = pids_in(launcher.out());
  ASSERT_EQ(kill(launcher.pid(), SIGKILL), 0);
  launcher.finish();
  expect_all_gone(pids);
}


TEST(TbcollRun, SigtermToLauncherTerminatesEveryRankAndItsChildren) {
  Launcher launcher({"-n", "3", "--", "sh", "-c", kWaitingRank});
  ASSERT_TRUE(launcher.wait_for_stdout([](const std::string& out) { return pids_in(out).size() == 6; }));
  std::vector<pid_t> pids = pids_in(launcher.out());
  for (size_t i = 0; i + 1 < pids.size(); i += 2) {
    EXPECT_EQ(getpgid(pids[i]), pids[i]) << "each rank leads its own process group";
    EXPECT_EQ(getpgid(pids[i + 1]), pids[i]) << "a rank's children stay in its group";
  }
  ASSERT_EQ(kill(launcher.pid(), SIGTERM), 0);
  RunResult result = launcher.finish();
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  EXPECT_LT(result.seconds, 5);
  expect_all_gone(pids);
}

// Stopped while a rank is still in set-up: the ranks die without unlinking their segments (a segment is
// unlinked once every peer mapped it); tbcoll-run removes them when the job is over.
TEST(TbcollRun, JobStoppedDuringSetUpLeavesNoSegments) {
  Launcher launcher({"-n", "2", "-x", "TBCOLL_TRANSPORT=shm", "--", TBCOLL_TEST_PROG_PATH, "late", "1", "30"});
  ASSERT_TRUE(launcher.wait_for_stdout([](const std::string& out) { return pids_in(out).size() == 2; }));
  const std::vector<pid_t> pids = pids_in(launcher.out());
  auto has_segment = [&] { return !tbcoll::test::segments_of(pids).empty(); };
  auto until = Clock::now() + std::chrono::seconds(5);
  while (!has_segment() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(has_segment()) << "rank 0 did not reach set-up";
  ASSERT_EQ(kill(launcher.pid(), SIGTERM), 0);
  RunResult result = launcher.finish();
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  expect_all_gone(pids);
  // tbcoll-run removed rank 0's segment, or a set-up running alongside (tests under ctest -j) swept it first:
  // either way, none is left.
  EXPECT_EQ(tbcoll::test::segments_of(pids), std::vector<std::string>{}) << result.err;
}

// Killed outright (SIGKILL) while a rank is still in set-up: the ranks die with the launcher and cannot unlink
// their segments, and the launcher cannot sweep; its sweeper process, which outlives it, removes them.
TEST(TbcollRun, LauncherKilledOutrightDuringSetUpLeavesNoSegments) {
  Launcher launcher({"-n", "3", "-x", "TBCOLL_TRANSPORT=shm", "--", TBCOLL_TEST_PROG_PATH, "late", "2", "30"});
  ASSERT_TRUE(launcher.wait_for_stdout([](const std::string& out) { return pids_in(out).size() == 3; }));
  const std::vector<pid_t> pids = pids_in(launcher.out());
  auto segments = [&] { return tbcoll::test::segments_of(pids).size(); };
  auto until = Clock::now() + std::chrono::seconds(5);
  while (segments() < 2 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(segments(), 2u) << "ranks 0 and 1 did not reach set-up";
  ASSERT_EQ(kill(launcher.pid(), SIGKILL), 0);
  launcher.finish();
  expect_all_gone(pids);
  until = Clock::now() + std::chrono::seconds(5);
  while (segments() > 0 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(tbcoll::test::segments_of(pids), std::vector<std::string>{});
}

TEST(TbcollRun, ForwardsTheSignalItReceived) {
  Launcher launcher({"-n", "2", "--", "sh", "-c", "trap 'echo got-HUP; exit 0' HUP; " + kWaitingRank});
  ASSERT_TRUE(launcher.wait_for_stdout([](const std::string& out) { return pids_in(out).size() == 4; }));
  ASSERT_EQ(kill(launcher.pid(), SIGHUP), 0);
  RunResult result = launcher.finish();
  EXPECT_EQ(count_of(result.out, "got-HUP\n"), 2) << result.out;
  EXPECT_EQ(result.exit_code, 128 + SIGHUP) << "a stopped job is not a success, even if every rank exited 0";
  expect_all_gone(pids_in(result.out));
}

TEST(TbcollRun, RankIgnoringSigtermIsKilledAfterGracePeriod) {
  Launcher launcher({"-n", "2", "--", "sh", "-c", "trap '' TERM; " + kWaitingRank});
  ASSERT_TRUE(launcher.wait_for_stdout([](const std::string& out) { return pids_in(out).size() == 4; }));
  auto signalled = Clock::now();
  ASSERT_EQ(kill(launcher.pid(), SIGTERM), 0);
  RunResult result = launcher.finish();
  double seconds = seconds_since(signalled);
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  EXPECT_GE(seconds, 2.5) << "SIGKILL comes only after the grace period";
  EXPECT_LT(seconds, 5);
  EXPECT_TRUE(contains(result.err, "sending SIGKILL")) << result.err;
  expect_all_gone(pids_in(result.out));
}

TEST(TbcollRun, ChildIgnoringSigtermDoesNotOutliveItsRank) {
  // The rank's shell dies on SIGTERM at once; its child ignores SIGTERM and must be killed with it.
  Launcher launcher({"-n", "2", "--", "sh", "-c", "(trap '' TERM; exec sleep 30) & echo \"pid $$ $!\"; wait"});
  ASSERT_TRUE(launcher.wait_for_stdout([](const std::string& out) { return pids_in(out).size() == 4; }));
  ASSERT_EQ(kill(launcher.pid(), SIGTERM), 0);
  RunResult result = launcher.finish();
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  expect_all_gone(pids_in(result.out));
}

// ---- command line ----------------------------------------------------------------------------------------

TEST(TbcollRun, BadCommandLinesExit2WithUsage) {
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"-n", "2"},
      {"-n", "2", "--"},
      {"true"},
      {"-n", "0", "true"},
      {"-n", "1025", "true"},
      {"-n", "x", "true"},
      {"-n"},
      {"--bogus", "-n", "1", "true"},
      {"-x", "NOEQUALS", "-n", "1", "true"},
      {"-x", "TBCOLL_RANK=7", "-n", "1", "true"},  // tbcoll-run sets it: it would be ignored
      {"-x", "WORLD_SIZE=3", "-n", "1", "true"},
      {"--hosts", "-oProxyCommand=touch /tmp/x:1", "true"},  // ssh would take it for an option
      {"--timeout", "0", "-n", "1", "true"},
      {"--timeout", "soon", "-n", "1", "true"},
      {"--timeout", "1e10", "-n", "1", "true"},  // its deadline in nanoseconds would overflow
      {"--hosts", "a:0", "true"},
      {"--hosts", "a:1,b:1", "-n", "3", "true"},  // more ranks than slots
      {"--hosts", "a", "--hostfile", "/dev/null", "true"},
      {"--hostfile", "/nonexistent/hosts", "true"},
      {"--hosts", "a", "--connect-timeout", "0", "true"},
      {"--hosts", "a", "--launcher", " ", "true"},
  };
  for (const std::vector<std::string>& args : bad) {
    std::string joined;
    for (const std::string& arg : args) joined += " " + arg;
    RunResult result = run(args);
    EXPECT_EQ(result.exit_code, 2) << "tbcoll-run" << joined;
    EXPECT_TRUE(contains(result.err, "usage: tbcoll-run")) << "tbcoll-run" << joined << "\n" << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1)
        << "one line and a hint, not the whole help: tbcoll-run" << joined << "\n" << result.err;
    EXPECT_TRUE(result.out.empty()) << "tbcoll-run" << joined;
  }
}

TEST(TbcollRun, HelpGoesToStdout) {
  for (const char* flag : {"-h", "--help"}) {
    RunResult result = run({flag});
    EXPECT_EQ(result.exit_code, 0) << flag;
    EXPECT_TRUE(contains(result.out, "usage: tbcoll-run")) << flag;
    EXPECT_TRUE(result.err.empty()) << flag;
  }
}

TEST(TbcollRun, OptionsAfterTheProgramBelongToTheProgram) {
  RunResult result = run({"-n", "1", "echo", "-n", "5", "--tag-output"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "5 --tag-output");
}

}  // namespace
