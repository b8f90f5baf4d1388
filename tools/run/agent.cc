#include "tools/run/agent.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/ifname.h"
#include "platform/platform.h"
#include "tools/run/common.h"
#include "transports/shm/stale_segments.h"

namespace tbcoll::run {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kKillGrace = std::chrono::seconds(2);
constexpr int kExitAgentError = 1;
constexpr int kExitCannotExecute = 127;

int g_signal_pipe[2] = {-1, -1};
volatile std::sig_atomic_t g_caught[NSIG] = {};

void on_signal(int sig) {
  int saved_errno = errno;
  g_caught[sig] = 1;
  unsigned char byte = 0;
  ssize_t ignored = write(g_signal_pipe[1], &byte, 1);
  (void)ignored;
  errno = saved_errno;
}

struct Setup {
  std::vector<std::string> env;
  std::string cwd;
  std::string bind = "auto";
  bool serve = false;
  std::string serve_address;
};

class Agent {
 public:
  Agent(int rank, std::string host, std::vector<char*> argv)
      : rank_(rank), host_(std::move(host)), argv_(std::move(argv)) {}

  int run() {
    if (!make_pipe(g_signal_pipe, true)) return fail(std::string("pipe: ") + std::strerror(errno));
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaction(sig, &action, nullptr);
    signal(SIGPIPE, SIG_IGN);  // the launcher's end of our stdout may go: we still have a rank to end
    fcntl(STDIN_FILENO, F_SETFL, fcntl(STDIN_FILENO, F_GETFL) | O_NONBLOCK);

    std::optional<Setup> setup = read_setup();
    if (!setup) return kExitAgentError;  // the launcher went away, or said something we do not understand
    for (const std::string& assignment : setup->env) {
      const size_t eq = assignment.find('=');
      setenv(assignment.substr(0, eq).c_str(), assignment.c_str() + eq + 1, 1);
    }
    if (!setup->cwd.empty()) {
      struct stat info {};
      if (stat(setup->cwd.c_str(), &info) == 0 && S_ISDIR(info.st_mode) && chdir(setup->cwd.c_str()) != 0) {
        std::fprintf(stderr, "tbcoll-run: rank %d on %s: cannot enter %s\n", rank_, host_.c_str(), setup->cwd.c_str());
      }
    }
    std::string ready = kReadyMarker;
    if (setup->serve) {
      std::string address = setup->serve_address;
      if (address.empty()) {
        const std::vector<platform::NetworkInterface> interfaces = platform::network_interfaces();
        const char* spec = std::getenv("TBCOLL_SOCKET_IFNAME");
        std::optional<platform::NetworkInterface> chosen;
        try {
          chosen = ifname::choose(interfaces, spec != nullptr ? spec : "", /*allow_loopback=*/false);
        } catch (const std::invalid_argument& error) {
          return fail(error.what());
        }
        if (!chosen) {
          return fail(std::string("no interface other than loopback has an address") +
                      (spec != nullptr && *spec != '\0' ? " matching TBCOLL_SOCKET_IFNAME=" + std::string(spec) : "") +
                      " for the rendezvous (there are: " + ifname::describe(interfaces) + ")");
        }
        address = chosen->address;
      }
      listener_ = open_listener(address);
      if (listener_ < 0) return fail("cannot listen on " + address + ": " + std::strerror(errno));
      ready += " " + listener_address(listener_);
    }
    ready += "\n";
    if (!write_all(STDOUT_FILENO, ready)) return kExitAgentError;

    std::optional<std::string> root = read_root();
    if (!root) return kExitAgentError;
    setenv("TBCOLL_ROOT", root->c_str(), 1);
    if (listener_ >= 0) setenv("TBCOLL_ROOT_FD", std::to_string(listener_).c_str(), 1);
    export_torch_environment(0);  // torch's store at the root's port + 1, on every host alike
    bind_cpu(setup->bind);
    if (!start()) return fail(std::string("cannot start the rank: ") + std::strerror(errno));
    return watch();
  }

 private:
  int fail(const std::string& message) {
    std::fprintf(stderr, "tbcoll-run: rank %d on host %s: %s\n", rank_, host_.c_str(), message.c_str());
    return kExitAgentError;
  }

  static bool write_all(int fd, const std::string& text) {
    size_t done = 0;
    while (done < text.size()) {
      ssize_t n = write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // The next line of stdin, waiting as long as it takes (the launcher has the deadline); nullopt at EOF or on a
  // signal that ends us.
  std::optional<std::string> next_line() {
    for (;;) {
      const size_t newline = input_.find('\n');
      if (newline != std::string::npos) {
        std::string line = input_.substr(0, newline);
        input_.erase(0, newline + 1);
        return line;
      }
      if (stdin_closed_ || stop_requested()) return std::nullopt;
      pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {g_signal_pipe[0], POLLIN, 0}};
      if (poll(fds, 2, -1) < 0 && errno != EINTR) return std::nullopt;
      drain_signals();
      if (fds[0].revents != 0) read_input();
    }
  }

  void read_input() {
    char buffer[4096];
    for (;;) {
      ssize_t n = read(STDIN_FILENO, buffer, sizeof(buffer));
      if (n > 0) {
        input_.append(buffer, static_cast<size_t>(n));
        if (input_.size() > (size_t{1} << 20)) stdin_closed_ = true;  // not our launcher
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) stdin_closed_ = true;
      return;
    }
  }

  static void drain_signals() {
    unsigned char drain[64];
    while (read(g_signal_pipe[0], drain, sizeof(drain)) > 0) {
    }
  }

  static bool stop_requested() { return g_caught[SIGINT] || g_caught[SIGTERM] || g_caught[SIGHUP] || g_caught[SIGQUIT]; }

  std::optional<Setup> read_setup() {
    Setup setup;
    for (;;) {
      std::optional<std::string> line = next_line();
      if (!line) return std::nullopt;
      const size_t space = line->find(' ');
      const std::string word = line->substr(0, space);
      const std::string value = space == std::string::npos ? "" : unescape(line->substr(space + 1));
      if (word == "go") return setup;
      if (word == "env" && value.find('=') != std::string::npos && value[0] != '=') {
        setup.env.push_back(value);
      } else if (word == "cwd") {
        setup.cwd = value;
      } else if (word == "bind") {
        setup.bind = value;
      } else if (word == "serve") {
        setup.serve = true;
        setup.serve_address = value;
      } else {
        // Only the line's first word: an environment line may carry the job secret.
        fail("unexpected set-up line '" + word + " ...' (tbcoll-run versions differ between hosts?)");
        return std::nullopt;
      }
    }
  }

  std::optional<std::string> read_root() {
    std::optional<std::string> line = next_line();
    if (!line) return std::nullopt;
    if (line->compare(0, 5, "root ") != 0) {
      if (line->compare(0, 5, "kill ") != 0) fail("expected the root's address, got '" + *line + "'");
      return std::nullopt;
    }
    return line->substr(5);
  }

  void bind_cpu(const std::string& mode) {
    const char* local_rank = std::getenv("TBCOLL_LOCAL_RANK");
    const char* local_size = std::getenv("TBCOLL_LOCAL_SIZE");
    if (mode == "none" || local_rank == nullptr || local_size == nullptr) return;
    const std::vector<int> usable = platform::allowed_cpus();
    const int cpus = static_cast<int>(usable.size());
    // auto: only where ranks share a host (pinned, spinning neighbours cannot end up on one core); a host's only
    // rank keeps the whole machine, and "hosts" that are one machine (network namespaces) do not all pile onto
    // its first CPU.
    if (cpus == 0 || (mode == "auto" && (std::atoi(local_size) > cpus || std::atoi(local_size) == 1))) return;
    bind_cpu_ = usable[static_cast<size_t>(std::atoi(local_rank) % cpus)];
  }

  bool start() {
    if (!platform::prepare_parent_death_guard()) return false;
    sigset_t all, original;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &original);
    const pid_t agent = getpid();
    child_ = fork();
    if (child_ == 0) {
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE}) signal(sig, SIG_DFL);
      setpgid(0, 0);
      platform::arm_parent_death_guard();  // the agent killed outright takes the rank with it
      if (getppid() != agent) _exit(kExitAgentError);
      if (bind_cpu_ >= 0) platform::bind_to_cpu(bind_cpu_);
      sigprocmask(SIG_SETMASK, &original, nullptr);
      const int dev_null = open("/dev/null", O_RDONLY);
      if (dev_null >= 0) dup2(dev_null, STDIN_FILENO);
      if (listener_ >= 0) fcntl(listener_, F_SETFD, 0);  // rank 0 serves the store on it
      execvp(argv_[0], argv_.data());
      std::fprintf(stderr, "tbcoll-run: rank %d on host %s: cannot execute %s: %s\n", rank_, host_.c_str(), argv_[0],
                   std::strerror(errno));
      _exit(kExitCannotExecute);
    }
    const int saved = errno;
    if (child_ > 0) setpgid(child_, child_);
    sigprocmask(SIG_SETMASK, &original, nullptr);
    if (listener_ >= 0) close(listener_);
    listener_ = -1;
    errno = saved;
    return child_ > 0;
  }

  // Until the rank exits: ends it on `kill`, EOF or a signal; then sweeps and reports.
  int watch() {
    std::optional<Clock::time_point> kill_at;
    int status = 0;
    for (;;) {
      const pid_t done = waitpid(child_, &status, WNOHANG);
      if (done == child_) break;
      int stop_signal = 0;
      if (stop_requested()) {
        for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
          if (g_caught[sig]) stop_signal = sig;
        }
      }
      for (size_t newline; (newline = input_.find('\n')) != std::string::npos;) {
        const std::string line = input_.substr(0, newline);
        input_.erase(0, newline + 1);
        if (line.compare(0, 5, "kill ") == 0) stop_signal = std::atoi(line.c_str() + 5);
      }
      if (stdin_closed_ && stop_signal == 0) stop_signal = SIGTERM;
      if (stop_signal > 0 && stop_signal < NSIG && !kill_at) {
        killpg(child_, stop_signal);
        killpg(child_, SIGCONT);
        kill_at = Clock::now() + kKillGrace;
      }
      if (kill_at && Clock::now() >= *kill_at) {
        killpg(child_, SIGKILL);
        kill_at = Clock::now() + std::chrono::hours(1);
      }
      pollfd fds[2] = {{g_signal_pipe[0], POLLIN, 0}, {stdin_closed_ ? -1 : STDIN_FILENO, POLLIN, 0}};
      const int timeout_ms = kill_at ? 100 : 1000;
      if (poll(fds, 2, timeout_ms) < 0 && errno != EINTR) break;
      drain_signals();
      if (fds[1].revents != 0) read_input();
    }
    killpg(child_, SIGKILL);  // whatever the rank left in its group
    if (int removed = shm::remove_stale_segments(); removed > 0) {
      std::fprintf(stderr, "tbcoll-run: host %s: removed %d shared-memory segment(s) of ranks that died\n",
                   host_.c_str(), removed);
    }
    if (WIFSIGNALED(status) && !kill_at) {  // a kill of our own is no news
      std::fprintf(stderr, "tbcoll-run: rank %d on host %s killed by signal %d (%s)\n", rank_, host_.c_str(),
                   WTERMSIG(status), strsignal(WTERMSIG(status)));
    }
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : kExitAgentError;
  }

  int rank_;
  std::string host_;
  std::vector<char*> argv_;  // null-terminated
  std::string input_;
  bool stdin_closed_ = false;
  int listener_ = -1;
  int bind_cpu_ = -1;
  pid_t child_ = -1;
};

}  // namespace

int run_agent(int argc, char** argv) {
  // tbcoll-run --agent RANK HOST -- prog args...
  if (argc < 6 || std::strcmp(argv[4], "--") != 0) {
    std::fprintf(stderr, "tbcoll-run: --agent RANK HOST -- PROG [ARGS...] (started by tbcoll-run itself)\n");
    return 2;
  }
  std::vector<char*> prog(argv + 5, argv + argc);
  prog.push_back(nullptr);
  return Agent(std::atoi(argv[2]), argv[3], std::move(prog)).run();
}

}  // namespace tbcoll::run
