// tbcoll-run: start N ranks of a program on this machine, a tiny single-host mpirun.
//
//   tbcoll-run -n N [--tag-output] [--timeout S] [-x NAME=VALUE]... [--] prog args...
//
// Every rank runs in its own process group, so a signal reaches the rank's whole subtree, and gets
// TBCOLL_RANK, TBCOLL_WORLD_SIZE, TBCOLL_LOCAL_RANK, TBCOLL_LOCAL_SIZE, TBCOLL_ROOT (127.0.0.1 and a
// free port) and TBCOLL_TOKEN; rank 0 also inherits the socket the launcher bound and listens on at that port
// (TBCOLL_ROOT_FD), so no other process can take the port before rank 0 serves the store. The first rank to
// fail ends the job: every rank's group gets SIGTERM, then SIGKILL after 3 s (or as soon as all ranks are gone,
// for what is left in their groups), and the launcher exits with the failing rank's status (128+signal if it
// was killed). SIGINT, SIGTERM, SIGHUP
// and SIGQUIT are forwarded the same way and make the launcher exit with 128+signal; a second one
// kills at once. SIGTSTP (ctrl-Z) stops every rank's group and then the launcher; SIGCONT continues them.
// Ranks die with the launcher (platform::arm_parent_death_guard: PR_SET_PDEATHSIG on Linux, a guard process
// elsewhere). Started from a terminal's foreground, ranks ignore SIGTTOU, so
// `stty tostop` does not stop them at their first line. Signals reach the single poll() loop through a self-pipe;
// children are reaped with waitpid(WNOHANG); tagged output is written only when the target has room, so a
// stalled reader never blocks the loop. When the job is over, shared-memory segments of ranks that died during
// set-up are removed. Targets poll() cannot watch (terminals and devices on macOS: POLLNVAL) are written with
// blocking writes. Deliberately standalone: POSIX, the standard library, the platform layer and that header-only
// sweep only.

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "platform/platform.h"
#include "transports/shm/stale_segments.h"

namespace {

constexpr int kMaxRanks = 1024;
constexpr int kExitLauncherError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitTimeout = 124;
constexpr int kExitCannotExecute = 127;
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
constexpr size_t kMaxLineBytes = size_t{64} * 1024;  // a longer line is split so memory stays bounded
constexpr size_t kMaxOutbox = size_t{1} << 20;          // tagged output waiting for a slow reader, per target
constexpr double kMaxTimeoutSeconds = 1e8;

using Clock = std::chrono::steady_clock;
constexpr auto kKillGrace = std::chrono::seconds(3);    // SIGTERM -> SIGKILL
constexpr auto kOutputGrace = std::chrono::seconds(1);  // for pipes still held open by leftovers

struct Options {
  int world_size = 0;
  bool tag_output = false;
  double timeout_s = 0;                // 0: no time limit
  std::vector<std::string> extra_env;  // NAME=VALUE from -x
  std::vector<char*> prog_argv;        // null-terminated
  std::string bind_to = "auto";        // core | none | auto (core when ranks <= usable CPUs)
  std::string secret;                  // --secret: the job secret; empty: drawn per job (TBCOLL_SECRET)
};

void print_usage(FILE* out) {
  std::fputs(
      "usage: tbcoll-run -n N [options] [--] prog [args...]\n"
      "Starts N copies of prog on this machine as tbcoll ranks 0..N-1.\n"
      "  -n, -np N           number of ranks (1..1024, required)\n"
      "  --tag-output        prefix every output line with \"[RANK] \"\n"
      "  --timeout SECONDS   kill the job and exit 124 if it runs longer\n"
      "  -x NAME=VALUE       set an extra environment variable in every rank (repeatable; the\n"
      "                      variables tbcoll-run sets below, the token excepted, cannot be overridden)\n"
      "  --bind-to core|none pin rank i to the i-th usable CPU, as mpirun does (default: core when\n"
      "                      there are at least as many CPUs as ranks, else none)\n"
      "  --secret SECRET     the job secret the ranks prove to each other (TBCOLL_SECRET); default: one\n"
      "                      drawn per job, unless TBCOLL_SECRET or TBCOLL_SECRET_FILE is set\n"
      "  -h, --help          show this help\n"
      "Ranks get TBCOLL_RANK, TBCOLL_WORLD_SIZE, TBCOLL_LOCAL_RANK, TBCOLL_LOCAL_SIZE, TBCOLL_ROOT,\n"
      "TBCOLL_TOKEN and TBCOLL_SECRET (random unless already set). The first failing rank stops the job and its\n"
      "status becomes the exit status (128+signal if it was killed by a signal). SIGINT, SIGTERM,\n"
      "SIGHUP and SIGQUIT are forwarded to every rank; ctrl-Z stops the ranks with the launcher.\n",
      out);
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "tbcoll-run: %s\n", message.c_str());
  print_usage(stderr);
  return kExitUsage;
}

// Fills `opts` from the command line; returns an exit code when the launcher should stop right away.
std::optional<int> parse_args(int argc, char** argv, Options& opts) {
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; ++i) {
    std::string arg = argv[i];
    std::string value;
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      print_usage(stdout);
      return 0;
    }
    if (arg == "--tag-output") {
      opts.tag_output = true;
      continue;
    }
    if (arg.rfind("--timeout=", 0) == 0) {
      value = arg.substr(arg.find('=') + 1);
      arg = "--timeout";
    } else if (arg == "-n" || arg == "-np" || arg == "--timeout" || arg == "-x" || arg == "--bind-to" ||
               arg == "--secret") {
      if (i + 1 >= argc) return usage_error("option " + arg + " needs a value");
      value = argv[++i];
    } else {
      return usage_error("unknown option " + arg);
    }
    char* end = nullptr;
    errno = 0;
    if (arg == "--secret") {
      if (value.empty()) return usage_error("--secret needs a non-empty value");
      opts.secret = value;
    } else if (arg == "--bind-to") {
      if (value != "core" && value != "none") return usage_error("--bind-to expects core or none, got '" + value + "'");
      opts.bind_to = value;
    } else if (arg == "-x") {
      if (value.find('=') == std::string::npos || value[0] == '=') {
        return usage_error("-x expects NAME=VALUE, got '" + value + "'");
      }
      opts.extra_env.push_back(value);
    } else if (arg == "--timeout") {
      opts.timeout_s = std::strtod(value.c_str(), &end);
      // Capped: far beyond it, the deadline's nanosecond count would overflow (and land in the past).
      if (value.empty() || *end != '\0' || errno != 0 || !std::isfinite(opts.timeout_s) || opts.timeout_s <= 0 ||
          opts.timeout_s > kMaxTimeoutSeconds) {
        return usage_error("bad timeout '" + value + "' (expected seconds in (0, 1e8])");
      }
    } else {
      long n = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || errno != 0 || n < 1 || n > kMaxRanks) {
        return usage_error("bad number of ranks '" + value + "' (expected 1.." + std::to_string(kMaxRanks) + ")");
      }
      opts.world_size = static_cast<int>(n);
    }
  }
  if (opts.world_size == 0) return usage_error("the number of ranks (-n N) is required");
  if (i >= argc) return usage_error("no program to run");
  opts.prog_argv.assign(argv + i, argv + argc);
  opts.prog_argv.push_back(nullptr);
  return std::nullopt;
}

// ---- helpers ---------------------------------------------------------------------------------------------

int g_signal_pipe[2] = {-1, -1};
volatile std::sig_atomic_t g_caught[NSIG] = {};

// Only records the signal and wakes the poll loop.
void on_signal(int sig) {
  int saved_errno = errno;
  g_caught[sig] = 1;
  unsigned char byte = 0;
  ssize_t ignored = write(g_signal_pipe[1], &byte, 1);  // pipe full: a wake-up is already pending
  (void)ignored;
  errno = saved_errno;
}

// Both ends close-on-exec, so no rank inherits another rank's pipe or the launcher's. The read end,
// always ours, is non-blocking; the write end only if asked (a rank's stdout must block).
bool make_pipe(int fds[2], bool nonblocking_write) {
  if (pipe(fds) != 0) return false;
  for (int k = 0; k < 2; ++k) {
    fcntl(fds[k], F_SETFD, FD_CLOEXEC);
    if (k == 0 || nonblocking_write) fcntl(fds[k], F_SETFL, fcntl(fds[k], F_GETFL) | O_NONBLOCK);
  }
  return true;
}

void close_pipe(int fds[2]) {
  for (int k = 0; k < 2; ++k) {
    if (fds[k] >= 0) close(fds[k]);
  }
}


std::optional<std::string> random_token(size_t bytes = 8) {
  std::vector<unsigned char> random(bytes);
  if (!tbcoll::platform::random_bytes(random.data(), random.size())) return std::nullopt;
  std::string hex;
  char pair[3];
  for (unsigned char byte : random) {
    std::snprintf(pair, sizeof(pair), "%02x", byte);
    hex += pair;
  }
  return hex;
}

// Whether the ranks can load libcrypto for the secret's HMAC (src/common/auth.cc loads the same libraries).
bool crypto_loadable() {
  for (const std::string& name : tbcoll::platform::crypto_libraries()) {
    if (void* handle = dlopen(name.c_str(), RTLD_LAZY | RTLD_LOCAL)) {
      dlclose(handle);
      return true;
    }
  }
  return false;
}

// A socket listening on 127.0.0.1 and a port the kernel picked, for rank 0's store (close-on-exec: only rank 0
// gets it, see spawn). Handing over the bound socket leaves no window for another process to take the port.
int open_root_listener() {
  int fd = tbcoll::platform::open_socket(AF_INET, SOCK_STREAM, 0, /*nonblocking=*/false);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, SOMAXCONN) != 0) {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

int port_of(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  return ntohs(addr.sin_port);
}

// ---- the launcher ----------------------------------------------------------------------------------------

// One of a rank's output pipes in --tag-output mode, with the bytes of its unfinished line.
struct Stream {
  int fd = -1;         // read end, -1 once closed
  int target_fd = -1;  // the launcher's stdout or stderr
  int rank = -1;
  std::string pending;
};

struct Rank {
  pid_t pid = -1;      // also its process group id; -1 if never started
  std::string prefix;  // "[RANK] "
  Stream out, err;
};

class Launcher {
 public:
  explicit Launcher(Options opts) : opts_(std::move(opts)), ranks_(opts_.world_size), launcher_pid_(getpid()) {}

  int run() {
    if (!install_signal_handlers() || !setup_environment()) return kExitLauncherError;
    for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
      if (isatty(fd) && tcgetpgrp(fd) == getpgrp()) foreground_ = true;
      pollfd probe{fd, POLLOUT, 0};
      pollable_[fd] = !(poll(&probe, 1, 0) >= 0 && (probe.revents & POLLNVAL) != 0);
    }
    if (!tbcoll::platform::prepare_parent_death_guard()) {
      std::fprintf(stderr, "tbcoll-run: cannot prepare the guard that stops ranks if we die: %s\n",
                   std::strerror(errno));
      return kExitLauncherError;
    }
    if (opts_.tag_output) raise_fd_limit(2 * opts_.world_size + 64);
    start_sweeper();  // without it (fork failed) the sweeps below and in the ranks' peers remain
    spawn_all();
    if (opts_.timeout_s > 0) {
      job_deadline_ =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opts_.timeout_s));
    }
    loop();
    for (Rank& rank : ranks_) {
      close_stream(rank.out);
      close_stream(rank.err);
    }
    // A rank killed during set-up (by us, or by anyone) leaves its shared-memory segment, which is unlinked
    // only once every peer mapped it: remove those whose owner is gone.
    if (int removed = tbcoll::shm::remove_stale_segments(); removed > 0) {
      std::fprintf(stderr, "tbcoll-run: removed %d shared-memory segment(s) of ranks that died during set-up\n",
                   removed);
    }
    return exit_code_.value_or(0);
  }

 private:
  // A launcher killed outright (SIGKILL) cannot sweep: its ranks die with it (parent-death guard) and those still
  // in set-up leave their segments. So a sweeper process, in a session of its own (signals to the launcher's
  // group or terminal do not reach it), holds the read end of a pipe the launcher reports every rank's pid on.
  // When the pipe closes (the launcher ended, however), it waits for those ranks to be gone (at most a few
  // seconds) and removes the segments they own. After a normal end it finds nothing left and exits at once.
  void start_sweeper() {
    int fds[2];
    if (pipe(fds) != 0) return;
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);  // ranks must not hold it open
    const pid_t pid = fork();
    if (pid < 0) {
      close_pipe(fds);
      return;
    }
    if (pid > 0) {
      close(fds[0]);
      sweeper_fd_ = fds[1];
      return;
    }
    setsid();
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGPIPE}) signal(sig, SIG_IGN);
    // Nothing of the launcher's stays open here (its output pipes must close when it exits).
    const int dev_null = open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) dup2(dev_null, fd);
    rlimit limit{};
    const long open_max = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                              ? static_cast<long>(std::min<rlim_t>(limit.rlim_cur, 65536))
                              : 65536;
    for (int fd = 3; fd < open_max; ++fd) {
      if (fd != fds[0]) close(fd);
    }
    std::vector<int32_t> pids;
    for (;;) {
      int32_t pid_of_rank = 0;
      const ssize_t got = read(fds[0], &pid_of_rank, sizeof(pid_of_rank));
      if (got == static_cast<ssize_t>(sizeof(pid_of_rank))) {
        pids.push_back(pid_of_rank);
      } else if (got == 0 || (got < 0 && errno != EINTR)) {
        break;  // the launcher is gone (a short read cannot happen: 4-byte writes to a pipe are atomic)
      }
    }
    const auto until = Clock::now() + std::chrono::seconds(5);
    auto any_alive = [&] {
      for (int32_t rank_pid : pids) {
        if (tbcoll::platform::process_exists(rank_pid)) return true;
      }
      return false;
    };
    while (any_alive() && Clock::now() < until) usleep(10000);
    for (const std::string& name : tbcoll::platform::shm_list()) {
      int owner = 0;
      if (tbcoll::shm::segment_owner(name, &owner) && std::count(pids.begin(), pids.end(), owner) > 0) {
        tbcoll::platform::shm_remove(name);
      }
    }
    _exit(0);
  }

  bool install_signal_handlers() {
    if (!make_pipe(g_signal_pipe, true)) {
      std::perror("tbcoll-run: pipe");
      return false;
    }
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigemptyset(&handled_set_);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGTSTP, SIGCONT}) {
      sigaction(sig, nullptr, &original_action_[sig]);
      // A signal ignored when we started (nohup, `&` in a script) stays ignored, for the ranks too.
      if (sig != SIGCHLD && original_action_[sig].sa_handler == SIG_IGN) continue;
      sigaction(sig, &action, nullptr);
      sigaddset(&handled_set_, sig);
    }
    // Writing tagged output to a closed pipe must not kill the launcher and orphan the ranks.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &original_action_[SIGPIPE]);
    return true;
  }

  // Variables shared by all ranks go into our own environment, which fork() passes on; execvp()
  // then searches the PATH the ranks will see. -x comes first so it cannot override TBCOLL_RANK & co.
  bool setup_environment() {
    for (const std::string& assignment : opts_.extra_env) {
      size_t eq = assignment.find('=');
      setenv(assignment.substr(0, eq).c_str(), assignment.c_str() + eq + 1, 1);
    }
    if (!std::getenv("TBCOLL_TOKEN")) {
      std::optional<std::string> token = random_token();
      if (!token) {
        std::fprintf(stderr, "tbcoll-run: cannot read /dev/urandom: %s\n", std::strerror(errno));
        return false;
      }
      setenv("TBCOLL_TOKEN", token->c_str(), 1);
    }
    // The job secret: --secret, else the caller's, else one drawn for this job (where the ranks can use one).
    if (!opts_.secret.empty()) {
      setenv("TBCOLL_SECRET", opts_.secret.c_str(), 1);
      unsetenv("TBCOLL_SECRET_FILE");
    } else if (!std::getenv("TBCOLL_SECRET") && !std::getenv("TBCOLL_SECRET_FILE")) {
      std::optional<std::string> secret = crypto_loadable() ? random_token(32) : std::nullopt;
      if (secret) {
        setenv("TBCOLL_SECRET", secret->c_str(), 1);
      } else {
        std::fprintf(stderr, "tbcoll-run: no OpenSSL libcrypto here: the job runs without a secret (only its token)\n");
      }
    }
    root_listener_ = open_root_listener();
    const int port = root_listener_ >= 0 ? port_of(root_listener_) : -1;
    if (port < 0) {
      std::fprintf(stderr, "tbcoll-run: cannot listen on a free TCP port of 127.0.0.1: %s\n", std::strerror(errno));
      return false;
    }
    std::string size = std::to_string(opts_.world_size);
    setenv("TBCOLL_WORLD_SIZE", size.c_str(), 1);
    setenv("TBCOLL_LOCAL_SIZE", size.c_str(), 1);
    setenv("TBCOLL_ROOT", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
    return true;
  }

  static void raise_fd_limit(rlim_t wanted) {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= wanted) return;
    limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
    setrlimit(RLIMIT_NOFILE, &limit);
  }

  void spawn_all() {
    // Signals wait until every rank is started and in our tables; the children restore the mask.
    sigset_t original_mask;
    sigprocmask(SIG_BLOCK, &handled_set_, &original_mask);
    int dev_null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    for (int r = 0; r < opts_.world_size; ++r) {
      // Rank 0 reads our stdin unless it is a terminal: a background process group reading the
      // terminal would be stopped by SIGTTIN.
      int stdin_fd = (r == 0 && !isatty(STDIN_FILENO)) ? STDIN_FILENO : dev_null;
      if (!spawn(r, stdin_fd, original_mask)) {
        std::fprintf(stderr, "tbcoll-run: cannot start rank %d: %s\n", r, std::strerror(errno));
        begin_abort(SIGTERM, kExitLauncherError);
        break;
      }
    }
    if (dev_null >= 0) close(dev_null);
    close(root_listener_);  // rank 0 has its own copy
    root_listener_ = -1;
    unsetenv("TBCOLL_ROOT_FD");
    sigprocmask(SIG_SETMASK, &original_mask, nullptr);
  }

  bool spawn(int r, int stdin_fd, const sigset_t& child_mask) {
    Rank& rank = ranks_[r];
    rank.prefix = "[" + std::to_string(r) + "] ";
    int out_pipe[2] = {-1, -1};
    int err_pipe[2] = {-1, -1};
    if (opts_.tag_output && (!make_pipe(out_pipe, false) || !make_pipe(err_pipe, false))) {
      int saved = errno;
      close_pipe(out_pipe);
      errno = saved;
      return false;
    }
    std::string rank_str = std::to_string(r);
    setenv("TBCOLL_RANK", rank_str.c_str(), 1);
    setenv("TBCOLL_LOCAL_RANK", rank_str.c_str(), 1);
    if (r == 0) {
      setenv("TBCOLL_ROOT_FD", std::to_string(root_listener_).c_str(), 1);
    } else {
      unsetenv("TBCOLL_ROOT_FD");
    }
    pid_t pid = fork();
    if (pid == 0) {
      if (r == 0) fcntl(root_listener_, F_SETFD, 0);  // rank 0 serves the store on it (not close-on-exec)
      bind_rank(r);
      exec_rank(stdin_fd, out_pipe[1], err_pipe[1], child_mask);  // never returns
    }
    int saved = errno;
    if (pid < 0) {
      close_pipe(out_pipe);
      close_pipe(err_pipe);
      errno = saved;
      return false;
    }
    if (opts_.tag_output) {
      close(out_pipe[1]);
      close(err_pipe[1]);
      rank.out = Stream{out_pipe[0], STDOUT_FILENO, r, {}};
      rank.err = Stream{err_pipe[0], STDERR_FILENO, r, {}};
    }
    setpgid(pid, pid);  // the child does it too: whichever runs first wins the race, and both agree
    if (sweeper_fd_ >= 0) {
      const int32_t reported = static_cast<int32_t>(pid);
      ssize_t ignored = write(sweeper_fd_, &reported, sizeof(reported));
      (void)ignored;
    }
    rank.pid = pid;
    rank_of_pid_[pid] = r;
    ++running_;
    return true;
  }

  // In the child: pin rank r to one CPU of the launcher's affinity set. Spinning ranks that share a core hand
  // off only when one yields, so two ranks left on one core by the scheduler run ~100x slower.
  // No affinity (macOS): nothing to do; the ranks ask for fast cores themselves (platform::prefer_fast_cores).
  void bind_rank(int r) {
    if (opts_.bind_to == "none") return;
    const std::vector<int> usable = tbcoll::platform::allowed_cpus();
    const int cpus = static_cast<int>(usable.size());
    if (cpus == 0 || (opts_.bind_to == "auto" && opts_.world_size > cpus)) return;
    tbcoll::platform::bind_to_cpu(usable[static_cast<size_t>(r % cpus)]);
  }

  // In the child between fork() and exec: restore the signal state the launcher started with.
  [[noreturn]] void exec_rank(int stdin_fd, int out_fd, int err_fd, const sigset_t& child_mask) {
    for (int sig : kForwardedSignals) sigaction(sig, &original_action_[sig], nullptr);
    for (int sig : {SIGCHLD, SIGPIPE, SIGTSTP, SIGCONT}) sigaction(sig, &original_action_[sig], nullptr);
    // A rank's process group is not the terminal's foreground group even when the launcher's is: under
    // `stty tostop` its first write to the terminal would stop it. It writes as the foreground job it belongs to.
    if (foreground_) signal(SIGTTOU, SIG_IGN);
    sigprocmask(SIG_SETMASK, &child_mask, nullptr);
    setpgid(0, 0);
    // A launcher killed outright (SIGKILL) cannot stop the job: the kernel does it for us. If it died already,
    // between fork() and here, give up.
    tbcoll::platform::arm_parent_death_guard();
    if (getppid() != launcher_pid_) _exit(kExitLauncherError);
    if (stdin_fd >= 0 && stdin_fd != STDIN_FILENO) dup2(stdin_fd, STDIN_FILENO);
    if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
    execvp(opts_.prog_argv[0], opts_.prog_argv.data());
    char message[1024];
    int len = std::snprintf(message, sizeof(message), "tbcoll-run: cannot execute %s: %s\n", opts_.prog_argv[0],
                            std::strerror(errno));
    ssize_t ignored = write(STDERR_FILENO, message, std::min(static_cast<size_t>(len), sizeof(message) - 1));
    (void)ignored;
    _exit(kExitCannotExecute);
  }

  void loop() {
    std::optional<Clock::time_point> output_deadline;
    std::vector<pollfd> fds;
    std::vector<Stream*> streams;  // streams[i] belongs to fds[i + 1]
    for (;;) {
      auto now = Clock::now();
      if (job_deadline_ && !aborting_ && now >= *job_deadline_) {
        std::fprintf(stderr, "tbcoll-run: job timed out after %g s, terminating all ranks\n", opts_.timeout_s);
        begin_abort(SIGTERM, kExitTimeout);
      }
      if (aborting_ && !killed_ && now >= kill_at_) {
        std::fprintf(stderr, "tbcoll-run: ranks still running %lld s after being told to stop, sending SIGKILL\n",
                     static_cast<long long>(kKillGrace.count()));
        kill_all();
      }
      // An aborted job leaves nothing behind: once every rank has exited, whatever is still in their
      // process groups (children that outlived their rank) is killed too.
      if (running_ == 0 && aborting_ && !killed_) kill_all();
      if (running_ == 0 && !output_deadline) output_deadline = now + kOutputGrace;
      if (output_deadline && now >= *output_deadline) {
        // Pipes still held open by leftovers of the ranks: stop reading them.
        for (Rank& rank : ranks_) {
          close_stream(rank.out);
          close_stream(rank.err);
        }
      }

      fds.assign(1, pollfd{g_signal_pipe[0], POLLIN, 0});
      streams.clear();
      for (Rank& rank : ranks_) {
        for (Stream* stream : {&rank.out, &rank.err}) {
          // A target whose reader lags holds its ranks back through their pipes, as without --tag-output.
          if (stream->fd < 0 || outbox_[stream->target_fd].size() >= kMaxOutbox) continue;
          fds.push_back(pollfd{stream->fd, POLLIN, 0});
          streams.push_back(stream);
        }
      }
      const size_t first_target = fds.size();
      for (int target : {STDOUT_FILENO, STDERR_FILENO}) {
        if (!outbox_[target].empty() && pollable_[target]) fds.push_back(pollfd{target, POLLOUT, 0});
      }
      const bool output_waiting = fds.size() > first_target;
      bool streams_open = false;
      for (Rank& rank : ranks_) streams_open = streams_open || rank.out.fd >= 0 || rank.err.fd >= 0;
      // Done when every rank exited and its output is out. After an abort, output still queued for a stalled
      // reader is given up at the output deadline; a normal end waits for the reader, as the ranks would have.
      if (running_ == 0 && !streams_open && (!output_waiting || (aborting_ && output_deadline &&
                                                                  now >= *output_deadline))) {
        break;
      }

      std::optional<Clock::time_point> wake = output_deadline;
      if (job_deadline_ && !aborting_) wake = std::min(wake.value_or(*job_deadline_), *job_deadline_);
      if (aborting_ && !killed_) wake = std::min(wake.value_or(kill_at_), kill_at_);
      int timeout_ms = -1;
      if (wake) {
        auto ms = std::chrono::ceil<std::chrono::milliseconds>(*wake - now).count();
        timeout_ms = static_cast<int>(std::clamp<long long>(ms, 0, 60'000));
      }

      int ready = poll(fds.data(), fds.size(), timeout_ms);
      if (ready < 0 && errno != EINTR) {
        std::perror("tbcoll-run: poll");
        if (!exit_code_) exit_code_ = kExitLauncherError;
        kill_all();
      }
      unsigned char drain[256];
      while (read(g_signal_pipe[0], drain, sizeof(drain)) > 0) {
      }
      handle_signals();
      reap();
      for (size_t i = 0; ready > 0 && i < streams.size(); ++i) {
        if (fds[i + 1].revents != 0) read_stream(*streams[i]);
      }
      for (size_t i = first_target; ready > 0 && i < fds.size(); ++i) {
        if (fds[i].revents != 0) flush_target(fds[i].fd);
      }
      for (int target : {STDOUT_FILENO, STDERR_FILENO}) {
        if (!pollable_[target]) flush_target(target);
      }
    }
  }

  void handle_signals() {
    for (int sig : kForwardedSignals) {
      if (!g_caught[sig]) continue;
      g_caught[sig] = 0;
      if (aborting_) {
        std::fprintf(stderr, "tbcoll-run: caught signal %d (%s) while stopping the job, killing all ranks\n", sig,
                     strsignal(sig));
        kill_all();
      } else {
        std::fprintf(stderr, "tbcoll-run: caught signal %d (%s), forwarding to all ranks\n", sig, strsignal(sig));
        begin_abort(sig, 128 + sig);
      }
    }
    g_caught[SIGCHLD] = 0;  // reap() runs on every wake-up anyway
    // Job control (ctrl-Z, then fg or bg): the terminal stops only our process group, and each rank has a group
    // of its own, so stop the ranks first, then ourselves; once continued, continue them.
    if (g_caught[SIGTSTP]) {
      g_caught[SIGTSTP] = 0;
      g_caught[SIGCONT] = 0;
      signal_groups(SIGSTOP);
      raise(SIGSTOP);  // returns once someone continues us
      signal_groups(SIGCONT);
    }
    if (g_caught[SIGCONT]) {  // continued after a stop we did not see coming (kill -STOP): the ranks too
      g_caught[SIGCONT] = 0;
      signal_groups(SIGCONT);
    }
  }

  void reap() {
    int status = 0;
    for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
      auto it = rank_of_pid_.find(pid);
      if (it == rank_of_pid_.end() || (!WIFEXITED(status) && !WIFSIGNALED(status))) continue;
      int r = it->second;
      --running_;
      // Only the first failure is news; the ones after it are our own doing.
      if ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || aborting_) continue;
      int code;
      if (WIFEXITED(status)) {
        code = WEXITSTATUS(status);
        std::fprintf(stderr, "tbcoll-run: rank %d exited with status %d\n", r, code);
      } else {
        code = 128 + WTERMSIG(status);
        std::fprintf(stderr, "tbcoll-run: rank %d killed by signal %d (%s)\n", r, WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
      }
      begin_abort(SIGTERM, code);
    }
  }

  void read_stream(Stream& stream) {
    if (stream.fd < 0) return;
    char buffer[64 * 1024];
    ssize_t n = read(stream.fd, buffer, sizeof(buffer));
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) return close_stream(stream);
    stream.pending.append(buffer, static_cast<size_t>(n));
    emit_lines(stream, false);
  }

  // Writes what the target takes now: PIPE_BUF bytes at a time while poll() says it has room, so a write never
  // blocks even on a descriptor in blocking mode. A reader that went away (EPIPE) drops the target.
  void flush_target(int target) {
    std::string& box = outbox_[target];
    for (int chunks = 0; !box.empty() && chunks < 256; ++chunks) {
      pollfd pfd{target, POLLOUT, 0};
      if (pollable_[target] && (poll(&pfd, 1, 0) <= 0 || (pfd.revents & POLLOUT) == 0)) {
        if ((pfd.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) drop_target(target);
        return;
      }
      ssize_t n = write(target, box.data(), std::min<size_t>(box.size(), PIPE_BUF));
      if (n > 0) {
        box.erase(0, static_cast<size_t>(n));
      } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        return;
      } else {
        drop_target(target);
        return;
      }
    }
  }

  // Our stdout or stderr has no reader any more: close the ranks' pipes to it as well, so their next
  // write fails (SIGPIPE) just as it would have without --tag-output.
  void drop_target(int target_fd) {
    target_gone_[target_fd] = true;
    outbox_[target_fd].clear();
    for (Rank& rank : ranks_) {
      for (Stream* stream : {&rank.out, &rank.err}) {
        if (stream->target_fd == target_fd) close_stream(*stream, false);
      }
    }
  }

  // Queues each complete line with the rank's prefix for the target. Lines from different ranks never
  // interleave mid-line. At EOF an unterminated last line gets a newline.
  void emit_lines(Stream& stream, bool at_eof) {
    const std::string& prefix = ranks_[stream.rank].prefix;
    std::string& out = outbox_[stream.target_fd];
    size_t start = 0;
    for (size_t newline; (newline = stream.pending.find('\n', start)) != std::string::npos; start = newline + 1) {
      out += prefix;
      out.append(stream.pending, start, newline + 1 - start);
    }
    stream.pending.erase(0, start);
    if (!stream.pending.empty() && (at_eof || stream.pending.size() >= kMaxLineBytes)) {
      out += prefix + stream.pending + '\n';
      stream.pending.clear();
    }
    if (target_gone_[stream.target_fd]) out.clear();
    flush_target(stream.target_fd);
  }

  void close_stream(Stream& stream, bool flush = true) {
    if (stream.fd < 0) return;
    if (flush) emit_lines(stream, true);
    stream.pending.clear();
    close(stream.fd);
    stream.fd = -1;
  }

  // Ends the job: `sig` to every rank's process group, SIGKILL after the grace period.
  void begin_abort(int sig, int exit_code) {
    if (!exit_code_) exit_code_ = exit_code;
    if (aborting_) return;
    aborting_ = true;
    kill_at_ = Clock::now() + kKillGrace;
    signal_groups(sig);
    signal_groups(SIGCONT);  // a stopped rank acts on the signal only once it runs again
  }

  void kill_all() {
    aborting_ = killed_ = true;
    signal_groups(SIGKILL);
  }

  // Groups of ranks that already exited are included: they may still hold the rank's children.
  void signal_groups(int sig) const {
    for (const Rank& rank : ranks_) {
      if (rank.pid > 0) killpg(rank.pid, sig);
    }
  }

  Options opts_;
  std::vector<Rank> ranks_;
  pid_t launcher_pid_;
  int root_listener_ = -1;  // listening socket for rank 0's store, until every rank is started
  int sweeper_fd_ = -1;     // write end of the sweeper's pipe (start_sweeper); closed when we exit
  bool foreground_ = false;  // the launcher runs in the foreground of the terminal its output goes to
  // Tagged output not yet written, per target (our stdout, stderr): written when poll() says the target takes
  // more, so a slow or stalled reader never blocks the launcher (signals, failures and the timeout go on).
  std::string outbox_[3];
  bool target_gone_[3] = {false, false, false};
  // Whether poll() can watch our stdout/stderr: macOS answers POLLNVAL for terminals and other devices, which are
  // then written with (blocking) writes as they come.
  bool pollable_[3] = {true, true, true};
  std::unordered_map<pid_t, int> rank_of_pid_;
  int running_ = 0;
  std::optional<int> exit_code_;  // set by the first event that ends the job early
  bool aborting_ = false;
  bool killed_ = false;  // SIGKILL sent to every group
  Clock::time_point kill_at_;
  std::optional<Clock::time_point> job_deadline_;
  sigset_t handled_set_{};
  struct sigaction original_action_[NSIG] = {};
};

}  // namespace

int main(int argc, char** argv) {
  // Pipes created below must never become fd 0-2, or dup2() in the child would clobber them.
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) < 0) open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
  }
  Options opts;
  if (std::optional<int> code = parse_args(argc, argv, opts)) return *code;
  return Launcher(std::move(opts)).run();
}
