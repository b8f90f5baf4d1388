// Whether a peer process has exited. A pidfd turns readable when the process exits, even before its parent
// reaps it (kill(pid, 0) still succeeds on a zombie); kill() where pidfds are missing. A pid of this process
// (ranks that are threads) never counts as exited.
#pragma once

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <utility>

namespace tbcoll::shm {

class ProcessWatch {
 public:
  explicit ProcessWatch(int pid) : pid_(pid) {
    if (pid_ != getpid()) fd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  }
  ProcessWatch(ProcessWatch&& other) noexcept : pid_(other.pid_), fd_(std::exchange(other.fd_, -1)) {}
  ProcessWatch& operator=(ProcessWatch&& other) noexcept {
    std::swap(pid_, other.pid_);
    std::swap(fd_, other.fd_);
    return *this;
  }
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;
  ~ProcessWatch() {
    if (fd_ >= 0) close(fd_);
  }

  bool exited() const {
    if (fd_ >= 0) {
      pollfd pfd{fd_, POLLIN, 0};
      return poll(&pfd, 1, 0) > 0;
    }
    return pid_ != getpid() && kill(pid_, 0) != 0 && errno == ESRCH;
  }

 private:
  int pid_;
  int fd_ = -1;
};

}  // namespace tbcoll::shm
