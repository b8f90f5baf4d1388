#include "tools/run/sweeper.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <vector>

#include "platform/platform.h"
#include "transports/shm/stale_segments.h"

namespace tbcoll::run {

int start_sweeper() {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);  // ranks must not hold it open
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid > 0) {
    close(fds[0]);
    return fds[1];
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
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto any_alive = [&] {
    for (int32_t rank_pid : pids) {
      if (tbcoll::platform::process_exists(rank_pid)) return true;
    }
    return false;
  };
  while (any_alive() && std::chrono::steady_clock::now() < until) usleep(10000);
  for (const std::string& name : tbcoll::platform::shm_list()) {
    int owner = 0;
    if (tbcoll::shm::segment_owner(name, &owner) && std::count(pids.begin(), pids.end(), owner) > 0) {
      tbcoll::platform::shm_remove(name);
    }
  }
  _exit(0);
}

void report_rank(int fd, pid_t pid) {
  if (fd < 0) return;
  const int32_t reported = static_cast<int32_t>(pid);
  ssize_t ignored = write(fd, &reported, sizeof(reported));
  (void)ignored;
}

bool crypto_loadable() {
  for (const std::string& name : tbcoll::platform::crypto_libraries()) {
    if (void* handle = dlopen(name.c_str(), RTLD_LAZY | RTLD_LOCAL)) {
      dlclose(handle);
      return true;
    }
  }
  return false;
}

}  // namespace tbcoll::run
