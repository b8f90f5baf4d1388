#include "tools/run/flight.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tools/run/common.h"

namespace tbcoll::run {
namespace {

constexpr const char* kDoctor = "tbcoll-doctor";

bool is_flight_name(const std::string& name) {
  const std::string suffix = ".flight";
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Writes text to stderr, "tbcoll-run: " before each line (a last line without a newline gets one).
void print_prefixed(const std::string& text) {
  size_t start = 0;
  while (start < text.size()) {
    size_t newline = text.find('\n', start);
    if (newline == std::string::npos) newline = text.size();
    std::fprintf(stderr, "tbcoll-run: %.*s\n", static_cast<int>(newline - start), text.c_str() + start);
    start = newline + 1;
  }
}

// Runs `doctor dir`, its stdout and stderr together into `output`; its wait status, or -1 if it could not start.
int run_doctor(const std::string& doctor, const std::string& dir, std::string& output) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[1]);
    const int dev_null = open("/dev/null", O_RDONLY);
    if (dev_null >= 0) dup2(dev_null, STDIN_FILENO);
    execl(doctor.c_str(), doctor.c_str(), dir.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return -1;
  }
  char buffer[4096];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) != 0;) {
    if (n > 0) {
      output.append(buffer, static_cast<size_t>(n));
    } else if (errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

// Where flight files of a host's ranks are: dir, or the library's default there.
std::string place(const std::string& dir) {
  return dir.empty() ? "${TMPDIR:-/tmp}/tbcoll-flight-<uid> (the default; TBCOLL_FLIGHT_DIR sets another)" : dir;
}

}  // namespace

std::string make_flight_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  std::string pattern = base + "/tbcoll-run-flight-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {  // mkdtemp makes it with mode 0700
    std::fprintf(stderr,
                 "tbcoll-run: cannot make a directory for the flight files under %s: %s (the ranks write "
                 "theirs to their default directory)\n",
                 base.c_str(), std::strerror(errno));
    return "";
  }
  return pattern;
}

bool has_flight_files(const std::string& dir) {
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) return false;
  bool found = false;
  for (const dirent* entry; !found && (entry = readdir(listing)) != nullptr;) found = is_flight_name(entry->d_name);
  closedir(listing);
  return found;
}

void remove_if_empty(const std::string& dir) {
  if (!dir.empty()) rmdir(dir.c_str());  // refused (ENOTEMPTY) when anything is left in it
}

std::string find_doctor(const char* argv0) {
  const std::string self = own_path(argv0);
  const size_t slash = self.rfind('/');
  if (slash != std::string::npos) {
    const std::string beside = self.substr(0, slash + 1) + kDoctor;
    if (access(beside.c_str(), X_OK) == 0) return beside;
  }
  return own_path(kDoctor);  // searches PATH
}

void report_flight_files(const std::string& dir, const char* argv0) {
  const std::string doctor = find_doctor(argv0);
  if (doctor.empty()) {
    std::fprintf(stderr,
                 "tbcoll-run: the flight files are kept in %s (no tbcoll-doctor beside tbcoll-run or on PATH "
                 "to read them)\n",
                 dir.c_str());
    return;
  }
  std::string output;
  const int status = run_doctor(doctor, dir, output);
  std::fprintf(stderr, "tbcoll-run: what the ranks' flight files say (%s %s):\n", doctor.c_str(), dir.c_str());
  std::string indented;
  for (size_t start = 0; start < output.size();) {
    const size_t newline = output.find('\n', start);
    const size_t end = newline == std::string::npos ? output.size() : newline + 1;
    indented += "  " + output.substr(start, end - start);
    start = end;
  }
  print_prefixed(indented);
  if (status < 0) {
    std::fprintf(stderr, "tbcoll-run: cannot run %s: %s\n", doctor.c_str(), std::strerror(errno));
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "tbcoll-run: %s %s %d\n", doctor.c_str(),
                 WIFEXITED(status) ? "exited with status" : "was killed by signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  }
  std::fprintf(stderr, "tbcoll-run: the flight files are kept in %s\n", dir.c_str());
}

std::string remote_flight_note(const std::vector<std::pair<std::string, std::vector<int>>>& ranks_of_host,
                               const std::string& dir) {
  std::string where;
  for (const auto& [host, ranks] : ranks_of_host) {
    std::string list;
    for (int r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
    where += std::string(where.empty() ? "" : "; ") + (ranks.size() == 1 ? "rank " : "ranks ") + list + " on " + host;
  }
  return "the ranks wrote their flight files on their own hosts (" + where + "), in " + place(dir) +
         " there; copy them into one directory and run tbcoll-doctor on it for a verdict";
}

}  // namespace tbcoll::run
