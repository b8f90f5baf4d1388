// The bounded secret-file reader (see secret_file.h).
#include "common/secret_file.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace tbcoll::secret_file {
namespace {

std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Reads to EOF, at most kMaxSecretBytes + 1 bytes (one more tells a file too long), waiting for a pipe's writer
// until the deadline.
std::string read_bounded(int fd, bool pipe, std::string* contents) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kSecretPipeSeconds);
  char buffer[512];
  for (;;) {
    if (pipe) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "its writer sent no end within " + std::to_string(kSecretPipeSeconds) + " s";
      pollfd pfd{fd, POLLIN, 0};
      const int ready = poll(&pfd, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno != EINTR) return std::string("cannot read it: ") + std::strerror(errno);
      if (ready <= 0) continue;
    }
    const ssize_t got = ::read(fd, buffer, sizeof(buffer));
    if (got < 0) {
      if (errno == EINTR || (pipe && errno == EAGAIN)) continue;
      return std::string("cannot read it: ") + std::strerror(errno);
    }
    if (got == 0) return "";
    contents->append(buffer, static_cast<size_t>(got));
    if (contents->size() > kMaxSecretBytes) return "is longer than " + std::to_string(kMaxSecretBytes) + " bytes";
  }
}

}  // namespace

Read read(const std::string& path) {
  Read out;
  // O_NONBLOCK: opening a FIFO without a writer would otherwise wait for one forever.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    out.error = std::string("cannot read it: ") + std::strerror(errno);
    return out;
  }
  struct stat info {};
  if (fstat(fd, &info) != 0) {
    out.error = std::string("cannot read it: ") + std::strerror(errno);
  } else if (!S_ISREG(info.st_mode) && !S_ISFIFO(info.st_mode)) {
    out.error = S_ISDIR(info.st_mode) ? "is a directory" : "is not a regular file or a pipe (a device or a socket)";
  } else if (info.st_uid != geteuid() && info.st_uid != 0) {
    out.error = "is owned by uid " + std::to_string(info.st_uid) + ", not by this user (uid " +
                std::to_string(geteuid()) + ") or root: its owner could have chosen the secret";
  } else if ((info.st_mode & 077) != 0) {
    out.error = "is open to group or others (mode " + mode_text(info.st_mode) + "): chmod 600 " + path;
  } else if (S_ISREG(info.st_mode) && static_cast<unsigned long long>(info.st_size) > kMaxSecretBytes) {
    out.error = "is longer than " + std::to_string(kMaxSecretBytes) + " bytes (" + std::to_string(info.st_size) + ")";
  } else {
    if (S_ISREG(info.st_mode)) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    out.error = read_bounded(fd, S_ISFIFO(info.st_mode), &out.secret);
  }
  close(fd);
  if (out.error.empty()) {
    if (!out.secret.empty() && out.secret.back() == '\n') out.secret.pop_back();
    if (!out.secret.empty() && out.secret.back() == '\r') out.secret.pop_back();
    if (out.secret.empty()) out.error = "is empty";
  }
  if (!out.error.empty()) out.secret.clear();
  return out;
}

}  // namespace tbcoll::secret_file
