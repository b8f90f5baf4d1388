// tbcoll-run: start N ranks of a program on this machine or across hosts, a tiny mpirun.
//
//   tbcoll-run -n N [--tag-output] [--timeout S] [-x NAME=VALUE]... [--] prog args...
//   tbcoll-run --hosts h1:2,h2:2 [--launcher "ssh -o BatchMode=yes"] [-x NAME]... [--] prog args...
//
// Multi-host jobs (--hosts, --hostfile; tools/run/hosts.h) start every rank through an agent command, ssh by
// default: `CMD HOST sh -c 'exec tbcoll-run --agent RANK HOST -- prog args'` (tools/run/agent.h), which takes
// the rank's environment over its stdin, serves the rendezvous on rank 0's host (its address on
// TBCOLL_SOCKET_IFNAME's interface, never loopback) and ends the rank when its stdin closes. Locally such a rank
// is its agent command's process; what follows holds for both kinds, with the differences marked "remote".
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
// Ranks die with the launcher (platform::arm_parent_death_guard: a parent-death signal on Linux, a guard process
// elsewhere). Started from a terminal's foreground, ranks ignore SIGTTOU, so
// `stty tostop` does not stop them at their first line. Signals reach the single poll() loop through a self-pipe;
// children are reaped with waitpid(WNOHANG); tagged output is written only when the target has room, so a
// stalled reader never blocks the loop. When the job is over, shared-memory segments of ranks that died during
// set-up are removed. Local ranks write their flight files (src/flight/flight_file.h) into a directory of the
// job's (TBCOLL_FLIGHT_DIR, unless set); when the job fails, tbcoll-doctor's verdict on them follows our own
// messages (tools/run/flight.h). Targets poll() cannot watch (terminals and devices on macOS: POLLNVAL) are written
// with blocking writes. Deliberately standalone: POSIX, the standard library, the platform layer and that header-only
// sweep only.

#include <arpa/inet.h>
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
#include "tools/run/agent.h"
#include "tools/run/common.h"
#include "tools/run/flight.h"
#include "tools/run/options.h"
#include "tools/run/sweeper.h"

extern char** environ;  // POSIX; declared by no header on macOS
#include "transports/shm/stale_segments.h"

namespace {

using tbcoll::run::Options;

constexpr int kExitLauncherError = 1;
constexpr int kExitTimeout = 124;
constexpr int kExitCannotExecute = 127;
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
constexpr size_t kMaxLineBytes = size_t{64} * 1024;  // a longer line is split so memory stays bounded
constexpr size_t kMaxOutbox = size_t{1} << 20;          // tagged output waiting for a slow reader, per target

using Clock = std::chrono::steady_clock;
constexpr auto kKillGrace = std::chrono::seconds(3);    // SIGTERM -> SIGKILL
constexpr auto kRemoteGrace = std::chrono::seconds(4);  // remote: agents end their ranks before we end the agents
constexpr auto kOutputGrace = std::chrono::seconds(1);  // for pipes still held open by leftovers

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

using tbcoll::run::close_pipe;
using tbcoll::run::make_pipe;

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
  std::string prefix;  // "[RANK] ", remote "[RANK HOST] ", or empty without --tag-output
  Stream out, err;
  // Remote: the host, the write end of the agent's stdin (-1 once closed) and whether the agent said it runs.
  int host = -1;
  int control_fd = -1;
  bool ready = false;
};

class Launcher {
 public:
  Launcher(Options opts, const char* argv0)
      : opts_(std::move(opts)),
        ranks_(opts_.world_size),
        launcher_pid_(getpid()),
        remote_(opts_.hosts.has_value()),
        argv0_(argv0) {
    if (remote_) {
      const std::vector<int> placed = tbcoll::run::place_ranks(*opts_.hosts, opts_.world_size);
      for (int r = 0; r < opts_.world_size; ++r) ranks_[r].host = placed[static_cast<size_t>(r)];
      device_matrix_ = tbcoll::run::rank_device_matrix(*opts_.hosts, placed);  // checked in parse_options
    }
  }

  int run() {
    const int code = run_job();
    finish_flight_files(code);
    return code;
  }

 private:
  int run_job() {
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
    if (opts_.tag_output || remote_) raise_fd_limit(3 * opts_.world_size + 64);
    if (!remote_) sweeper_fd_ = tbcoll::run::start_sweeper();  // failing, the other sweeps remain
    spawn_all();
    if (remote_) connect_deadline_ = Clock::now() + seconds(opts_.connect_timeout_s);
    if (opts_.timeout_s > 0) {
      job_deadline_ = Clock::now() + seconds(opts_.timeout_s);
    }
    loop();
    for (Rank& rank : ranks_) {
      close_stream(rank.out);
      close_stream(rank.err);
    }
    // A rank killed during set-up (by us, or by anyone) leaves its shared-memory segment, which is unlinked
    // only once every peer mapped it: remove those whose owner is gone (remote: each agent does it on its host).
    if (remote_) return exit_code_.value_or(0);
    if (int removed = tbcoll::shm::remove_stale_segments(); removed > 0) {
      std::fprintf(stderr, "tbcoll-run: removed %d shared-memory segment(s) of ranks that died during set-up\n",
                   removed);
    }
    return exit_code_.value_or(0);
  }

  static Clock::duration seconds(double value) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(value));
  }

  const std::string& host_name(const Rank& rank) const { return opts_.hosts->hosts[static_cast<size_t>(rank.host)].name; }

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
      const std::string token = tbcoll::run::random_token();
      if (token.empty()) {
        std::fprintf(stderr, "tbcoll-run: cannot read /dev/urandom: %s\n", std::strerror(errno));
        return false;
      }
      setenv("TBCOLL_TOKEN", token.c_str(), 1);
    }
    // The job secret: --secret-file's, else the caller's, else one drawn for this job (where the ranks can use one).
    if (!opts_.secret.empty()) {
      setenv("TBCOLL_SECRET", opts_.secret.c_str(), 1);
      unsetenv("TBCOLL_SECRET_FILE");
    } else if (!std::getenv("TBCOLL_SECRET") && !std::getenv("TBCOLL_SECRET_FILE")) {
      const std::string secret = tbcoll::run::crypto_loadable() ? tbcoll::run::random_token(32) : "";
      if (!secret.empty()) {
        setenv("TBCOLL_SECRET", secret.c_str(), 1);
      } else {
        std::fprintf(stderr, "tbcoll-run: no OpenSSL libcrypto here: the job runs without a secret (only its token)\n");
      }
    }
    std::string size = std::to_string(opts_.world_size);
    setenv("TBCOLL_WORLD_SIZE", size.c_str(), 1);
    if (remote_) return true;  // the agents get their environment over their stdin (see remote_setup)
    root_listener_ = tbcoll::run::open_listener("127.0.0.1");
    const std::string root = root_listener_ >= 0 ? tbcoll::run::listener_address(root_listener_) : "";
    if (root.empty()) {
      std::fprintf(stderr, "tbcoll-run: cannot listen on a free TCP port of 127.0.0.1: %s\n", std::strerror(errno));
      return false;
    }
    setenv("TBCOLL_LOCAL_SIZE", size.c_str(), 1);
    setenv("TBCOLL_ROOT", root.c_str(), 1);
    torch_master_port_ = tbcoll::run::free_port("127.0.0.1");
    // The ranks' flight files (tools/run/flight.h): a directory of this job's, unless the user chose one.
    if (const char* chosen = std::getenv("TBCOLL_FLIGHT_DIR"); chosen != nullptr && *chosen != '\0') {
      flight_dir_ = chosen;
    } else if (!(flight_dir_ = tbcoll::run::make_flight_dir()).empty()) {
      own_flight_dir_ = true;
      setenv("TBCOLL_FLIGHT_DIR", flight_dir_.c_str(), 1);
    }
    return true;
  }

  // A failed job: what the ranks' flight files say (remote: where they are). Our directory goes when the ranks
  // left nothing in it.
  void finish_flight_files(int code) {
    const bool failed = code != 0 && !rank_of_pid_.empty();
    const bool agent_ran = std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& rank) { return rank.ready; });
    if (remote_ && failed && agent_ran) {
      std::vector<std::pair<std::string, std::vector<int>>> ranks_of_host;
      for (int r = 0; r < opts_.world_size; ++r) {
        auto it = std::find_if(ranks_of_host.begin(), ranks_of_host.end(),
                               [&](const auto& entry) { return entry.first == host_name(ranks_[r]); });
        if (it == ranks_of_host.end()) it = ranks_of_host.insert(ranks_of_host.end(), {host_name(ranks_[r]), {}});
        it->second.push_back(r);
      }
      const char* dir = std::getenv("TBCOLL_FLIGHT_DIR");
      const std::string note = tbcoll::run::remote_flight_note(ranks_of_host, dir != nullptr ? dir : "");
      std::fprintf(stderr, "tbcoll-run: %s\n", note.c_str());
    }
    if (remote_ || flight_dir_.empty()) return;
    if (failed && tbcoll::run::has_flight_files(flight_dir_)) tbcoll::run::report_flight_files(flight_dir_, argv0_);
    if (own_flight_dir_) tbcoll::run::remove_if_empty(flight_dir_);
  }

  // Remote: what agent r is told before it starts its rank (tools/run/common.h): the hostfile's variables, the -x
  // ones, every TBCOLL_* variable of ours, then the rank's own, which nothing overrides.
  std::string remote_setup(int r) const {
    using tbcoll::run::escape;
    const tbcoll::run::HostList& list = *opts_.hosts;
    std::string out;
    // The hostfile's "rdma" matrix first: a TBCOLL_IB_DEVICES given any other way comes later and wins.
    if (!device_matrix_.empty()) out += "env " + escape("TBCOLL_IB_DEVICES=" + device_matrix_) + "\n";
    for (const std::string& assignment : list.env) out += "env " + escape(assignment) + "\n";
    for (const std::string& assignment : opts_.extra_env) out += "env " + escape(assignment) + "\n";
    for (char** entry = environ; *entry != nullptr; ++entry) {
      // Not those that name one host's things (an address, an identity, a descriptor): -x passes them on.
      const std::string name = std::string(*entry).substr(0, std::string(*entry).find('='));
      if (name.compare(0, 7, "TBCOLL_") != 0 || name == "TBCOLL_ROOT" || name == "TBCOLL_ROOT_FD" ||
          name == "TBCOLL_HOST_ID" || name == "TBCOLL_SOCKET_ADDR" || name.compare(0, 13, "TBCOLL_LOCAL_") == 0) {
        continue;
      }
      out += "env " + escape(*entry) + "\n";
    }
    int local_rank = 0, local_size = 0;
    for (int k = 0; k < opts_.world_size; ++k) {
      if (ranks_[k].host != ranks_[r].host) continue;
      if (k < r) ++local_rank;
      ++local_size;
    }
    for (const auto& [name, value] :
         {std::pair<std::string, std::string>{"TBCOLL_RANK", std::to_string(r)},
          {"TBCOLL_LOCAL_RANK", std::to_string(local_rank)},
          {"TBCOLL_LOCAL_SIZE", std::to_string(local_size)}}) {
      out += "env " + escape(name + "=" + value) + "\n";
    }
    char cwd[4096];
    if (getcwd(cwd, sizeof(cwd)) != nullptr) out += "cwd " + escape(cwd) + "\n";
    out += "bind " + opts_.bind_to + "\n";
    if (r == 0) out += "serve " + escape(list.hosts[static_cast<size_t>(ranks_[r].host)].address) + "\n";
    return out + "go\n";
  }

  // Remote: the agent command of rank r, `CMD HOST sh -c '<command>'`. ssh joins its arguments into one line for
  // the remote shell, so for ssh the command is one quoted word (and ssh gives up connecting at the connect
  // timeout); any other agent command gets it as separate arguments.
  std::vector<std::string> agent_command(int r) const {
    using tbcoll::run::shell_quote;
    const std::string& host = host_name(ranks_[r]);
    std::string command = "exec " + shell_quote(opts_.agent_path) + " --agent " + std::to_string(r) + " " +
                          shell_quote(host) + " --";
    for (char* const* arg = opts_.prog_argv.data(); *arg != nullptr; ++arg) command += " " + shell_quote(*arg);
    std::vector<std::string> words;
    for (size_t at = 0; (at = opts_.launcher.find_first_not_of(" \t", at)) != std::string::npos;) {
      const size_t end = opts_.launcher.find_first_of(" \t", at);
      words.push_back(opts_.launcher.substr(at, end == std::string::npos ? std::string::npos : end - at));
      at = end;
    }
    const std::string program = words[0].substr(words[0].rfind('/') == std::string::npos ? 0 : words[0].rfind('/') + 1);
    if (program == "ssh") {
      const long connect_s = std::max(1L, static_cast<long>(std::ceil(opts_.connect_timeout_s)));
      words.insert(words.end(), {"-o", "ConnectTimeout=" + std::to_string(connect_s), host, "sh -c " + shell_quote(command)});
    } else {
      words.insert(words.end(), {host, "sh", "-c", command});
    }
    return words;
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
      // terminal would be stopped by SIGTTIN. Remote ranks read nothing (their agent's stdin is ours to write).
      int stdin_fd = (r == 0 && !isatty(STDIN_FILENO) && !remote_) ? STDIN_FILENO : dev_null;
      if (!spawn(r, stdin_fd, original_mask)) {
        std::fprintf(stderr, "tbcoll-run: cannot start rank %d: %s\n", r, std::strerror(errno));
        begin_abort(SIGTERM, kExitLauncherError);
        break;
      }
    }
    if (dev_null >= 0) close(dev_null);
    if (root_listener_ >= 0) close(root_listener_);  // rank 0 has its own copy
    root_listener_ = -1;
    unsetenv("TBCOLL_ROOT_FD");
    sigprocmask(SIG_SETMASK, &original_mask, nullptr);
  }

  bool spawn(int r, int stdin_fd, const sigset_t& child_mask) {
    Rank& rank = ranks_[r];
    if (opts_.tag_output) rank.prefix = "[" + std::to_string(r) + (remote_ ? " " + host_name(rank) : "") + "] ";
    int out_pipe[2] = {-1, -1};
    int err_pipe[2] = {-1, -1};
    int control_pipe[2] = {-1, -1};
    // Remote ranks' output always comes through us: we look for the agent's ready line in it.
    const bool piped = opts_.tag_output || remote_;
    if ((piped && (!make_pipe(out_pipe, false) || !make_pipe(err_pipe, false))) ||
        (remote_ && !make_pipe(control_pipe, true))) {
      int saved = errno;
      close_pipe(out_pipe);
      close_pipe(err_pipe);
      errno = saved;
      return false;
    }
    std::vector<std::string> agent_words;
    std::vector<char*> agent_argv;
    if (remote_) {
      agent_words = agent_command(r);
      for (std::string& word : agent_words) agent_argv.push_back(word.data());
      agent_argv.push_back(nullptr);
      fcntl(control_pipe[0], F_SETFL, fcntl(control_pipe[0], F_GETFL) & ~O_NONBLOCK);  // the agent's stdin
      stdin_fd = control_pipe[0];
    }
    std::string rank_str = std::to_string(r);
    setenv("TBCOLL_RANK", rank_str.c_str(), 1);
    setenv("TBCOLL_LOCAL_RANK", rank_str.c_str(), 1);
    if (!remote_) tbcoll::run::export_torch_environment(torch_master_port_);  // RANK, MASTER_ADDR, ... for torch
    if (r == 0) {
      setenv("TBCOLL_ROOT_FD", std::to_string(root_listener_).c_str(), 1);
    } else {
      unsetenv("TBCOLL_ROOT_FD");
    }
    pid_t pid = fork();
    if (pid == 0) {
      if (r == 0 && !remote_) fcntl(root_listener_, F_SETFD, 0);  // rank 0 serves the store on it (not close-on-exec)
      if (!remote_) bind_rank(r);  // remote: the agent binds its rank
      exec_rank(stdin_fd, out_pipe[1], err_pipe[1], child_mask,
                remote_ ? agent_argv.data() : opts_.prog_argv.data());  // never returns
    }
    int saved = errno;
    if (pid < 0) {
      close_pipe(out_pipe);
      close_pipe(err_pipe);
      close_pipe(control_pipe);
      errno = saved;
      return false;
    }
    if (piped) {
      close(out_pipe[1]);
      close(err_pipe[1]);
      rank.out = Stream{out_pipe[0], STDOUT_FILENO, r, {}};
      rank.err = Stream{err_pipe[0], STDERR_FILENO, r, {}};
    }
    if (remote_) {
      close(control_pipe[0]);
      rank.control_fd = control_pipe[1];
      send_control(rank, remote_setup(r));
    }
    setpgid(pid, pid);  // the child does it too: whichever runs first wins the race, and both agree
    tbcoll::run::report_rank(sweeper_fd_, pid);
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
  [[noreturn]] void exec_rank(int stdin_fd, int out_fd, int err_fd, const sigset_t& child_mask, char* const* argv) {
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
    execvp(argv[0], argv);
    char message[1024];
    int len = std::snprintf(message, sizeof(message), "tbcoll-run: cannot execute %s: %s\n", argv[0],
                            std::strerror(errno));
    ssize_t ignored = write(STDERR_FILENO, message, std::min(static_cast<size_t>(len), sizeof(message) - 1));
    (void)ignored;
    _exit(kExitCannotExecute);
  }

  // What the job's clocks call for now: the job and connect deadlines, the kill after the grace, the end of
  // reading leftovers' output.
  void act_on_deadlines(Clock::time_point now, std::optional<Clock::time_point>& output_deadline) {
    if (job_deadline_ && !aborting_ && now >= *job_deadline_) {
      std::fprintf(stderr, "tbcoll-run: job timed out after %g s, terminating all ranks\n", opts_.timeout_s);
      begin_abort(SIGTERM, kExitTimeout);
    }
    if (connect_deadline_ && !aborting_ && now >= *connect_deadline_) {
      for (const Rank& rank : ranks_) {
        if (rank.ready || rank.pid < 0) continue;
        std::fprintf(stderr,
                     "tbcoll-run: host %s (rank %d) did not answer within %g s: unreachable, or its agent command "
                     "(%s) hangs\n", host_name(rank).c_str(), rank.pid < 0 ? -1 : rank_index(rank),
                     opts_.connect_timeout_s, opts_.launcher.c_str());
      }
      begin_abort(SIGTERM, kExitLauncherError);
    }
    if (aborting_ && !killed_ && now >= kill_at_) {
      if (remote_ && !agents_signalled_) {
        // The agents had their grace to end their ranks; now the agent commands themselves.
        agents_signalled_ = true;
        signal_groups(SIGTERM);
        kill_at_ = now + kKillGrace;
      } else {
        std::fprintf(stderr, "tbcoll-run: ranks still running %lld s after being told to stop, sending SIGKILL\n",
                     static_cast<long long>(kKillGrace.count()));
        kill_all();
      }
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
  }

  // poll()'s timeout: until the nearest deadline that applies, at most a minute; -1 without one.
  int poll_timeout_ms(Clock::time_point now, const std::optional<Clock::time_point>& output_deadline) const {
    std::optional<Clock::time_point> wake = output_deadline;
    if (job_deadline_ && !aborting_) wake = std::min(wake.value_or(*job_deadline_), *job_deadline_);
    if (connect_deadline_ && !aborting_) wake = std::min(wake.value_or(*connect_deadline_), *connect_deadline_);
    if (aborting_ && !killed_) wake = std::min(wake.value_or(kill_at_), kill_at_);
    int timeout_ms = -1;
    if (wake) {
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(*wake - now).count();
      timeout_ms = static_cast<int>(std::clamp<long long>(ms, 0, 60'000));
    }
    return timeout_ms;
  }

  void loop() {
    std::optional<Clock::time_point> output_deadline;
    std::vector<pollfd> fds;
    std::vector<Stream*> streams;  // streams[i] belongs to fds[i + 1]
    for (;;) {
      auto now = Clock::now();
      act_on_deadlines(now, output_deadline);
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

      const int timeout_ms = poll_timeout_ms(now, output_deadline);
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

  // Every rank that ended since the last call is collected first, then one failure is named: a rank killed by a
  // signal before one that exited with an error status (ranks that lose a peer exit with an error within
  // milliseconds, and can be collected in the same pass as the peer that was killed), else the lowest rank.
  void reap() {
    int status = 0;
    std::vector<std::pair<int, int>> failed;  // (rank, status)
    for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
      auto it = rank_of_pid_.find(pid);
      if (it == rank_of_pid_.end() || (!WIFEXITED(status) && !WIFSIGNALED(status))) continue;
      int r = it->second;
      --running_;
      Rank& rank = ranks_[r];
      close_control(rank);
      if (remote_ && !rank.ready && !aborting_) {
        // Not ready yet: either the agent's ready line is still in the pipe (a rank that ran and ended before we
        // read it) or the agent command ended before the agent ran, and the host was not reached. What is in the
        // pipes (the ready line, ssh's own words) is read first.
        for (Stream* stream : {&rank.err, &rank.out}) {
          for (int chunk = 0; chunk < 16 && stream->fd >= 0; ++chunk) {
            pollfd probe{stream->fd, POLLIN, 0};
            if (poll(&probe, 1, 0) <= 0) break;
            read_stream(*stream);
          }
        }
      }
      if (remote_ && !rank.ready && !aborting_) {
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        std::fprintf(stderr, "tbcoll-run: cannot start rank %d on host %s: the agent command (%s %s ...) %s %d%s\n",
                     r, host_name(rank).c_str(), opts_.launcher.c_str(), host_name(rank).c_str(),
                     WIFEXITED(status) ? "exited with status" : "was killed by signal",
                     WIFEXITED(status) ? code : WTERMSIG(status),
                     code == kExitCannotExecute ? " (is tbcoll-run installed at the same path there? --agent-path)" : "");
        begin_abort(SIGTERM, kExitLauncherError);
        continue;
      }
      // Only the first failure is news; the ones after it are our own doing.
      if ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || aborting_) continue;
      failed.emplace_back(r, status);
    }
    if (failed.empty() || aborting_) return;
    auto cause = std::min_element(failed.begin(), failed.end(), [](const auto& a, const auto& b) {
      return std::make_pair(!WIFSIGNALED(a.second), a.first) < std::make_pair(!WIFSIGNALED(b.second), b.first);
    });
    report_failure(cause->first, cause->second);
  }

  void report_failure(int r, int status) {
    int code;
    const std::string where = remote_ ? " (host " + host_name(ranks_[r]) + ")" : "";
    if (WIFEXITED(status)) {
      code = WEXITSTATUS(status);
      std::fprintf(stderr, "tbcoll-run: rank %d%s exited with status %d\n", r, where.c_str(), code);
    } else {
      code = 128 + WTERMSIG(status);
      std::fprintf(stderr, "tbcoll-run: rank %d killed by signal %d (%s)\n", r, WTERMSIG(status),
                   strsignal(WTERMSIG(status)));
    }
    begin_abort(SIGTERM, code);
  }

  void read_stream(Stream& stream) {
    if (stream.fd < 0) return;
    char buffer[64 * 1024];
    ssize_t n = read(stream.fd, buffer, sizeof(buffer));
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) return close_stream(stream);
    stream.pending.append(buffer, static_cast<size_t>(n));
    Rank& rank = ranks_[stream.rank];
    if (remote_ && !rank.ready && &stream == &rank.out) take_ready_line(rank, stream);
    emit_lines(stream, false);
  }

  // Remote: the agent's ready line (rank 0's with the rendezvous address) is ours, not the rank's output; what
  // came before it (a login banner, say) goes out as usual.
  void take_ready_line(Rank& rank, Stream& stream) {
    const size_t at = stream.pending.find(tbcoll::run::kReadyMarker);
    if (at == std::string::npos || (at > 0 && stream.pending[at - 1] != '\n')) return;
    const size_t newline = stream.pending.find('\n', at);
    if (newline == std::string::npos) return;
    std::string line = stream.pending.substr(at, newline - at);
    stream.pending.erase(at, newline + 1 - at);
    rank.ready = true;
    if (std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& each) { return each.ready; })) {
      connect_deadline_.reset();
    }
    if (rank_index(rank) != 0) return;
    const size_t space = line.find(' ');
    if (space == std::string::npos) {
      std::fprintf(stderr, "tbcoll-run: the agent of rank 0 on host %s named no rendezvous address (another "
                   "version of tbcoll-run there?)\n", host_name(rank).c_str());
      return begin_abort(SIGTERM, kExitLauncherError);
    }
    const std::string root = line.substr(space + 1);
    for (Rank& each : ranks_) send_control(each, "root " + root + "\n");
  }

  int rank_index(const Rank& rank) const { return static_cast<int>(&rank - ranks_.data()); }

  // Remote: a line for the agent. Lines are few and short (a pipe holds 64 KiB); an agent that is gone or not
  // reading gets nothing more.
  void send_control(Rank& rank, const std::string& text) {
    if (rank.control_fd < 0) return;
    size_t done = 0;
    while (done < text.size()) {
      ssize_t n = write(rank.control_fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return close_control(rank);
      done += static_cast<size_t>(n);
    }
  }

  static void close_control(Rank& rank) {
    if (rank.control_fd >= 0) close(rank.control_fd);
    rank.control_fd = -1;
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
    if (remote_) {
      // Each running agent ends its rank (the signal, then SIGKILL) and sweeps its host, then exits, and so does
      // its agent command; one that never ran has no rank: its command is ended now.
      kill_at_ = Clock::now() + kRemoteGrace;
      for (Rank& rank : ranks_) {
        if (rank.ready) {
          send_control(rank, "kill " + std::to_string(sig) + "\n");
          close_control(rank);
        } else if (rank.pid > 0) {
          close_control(rank);
          killpg(rank.pid, SIGTERM);
        }
      }
      return;
    }
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
  int torch_master_port_ = 0;  // MASTER_PORT for torch's store (env://), free on 127.0.0.1 at start
  int sweeper_fd_ = -1;     // write end of the sweeper's pipe (tools/run/sweeper.h); closed when we exit
  bool remote_;              // ranks on hosts, through agents
  const char* argv0_;              // how we were started: tbcoll-doctor is looked for beside it
  std::string flight_dir_;         // local ranks' TBCOLL_FLIGHT_DIR: ours, or the user's; empty: their default
  bool own_flight_dir_ = false;    // made for this job: removed when the ranks leave it empty
  bool agents_signalled_ = false;  // remote abort: the agent commands got SIGTERM after the agents' grace
  std::optional<Clock::time_point> connect_deadline_;  // remote: every agent must have said it runs by then
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
  std::string device_matrix_;     // remote: the hostfile's "rdma" matrix for the ranks (TBCOLL_IB_DEVICES), or ""
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
  if (argc > 1 && std::strcmp(argv[1], "--agent") == 0) return tbcoll::run::run_agent(argc, argv);
  Options opts;
  if (std::optional<int> code = tbcoll::run::parse_args(argc, argv, opts)) return *code;
  return Launcher(std::move(opts), argv[0]).run();
}
