// A loopback TCP port for the multi-process tests' rendezvous (TBCOLL_ROOT), header-only: the multiproc binary
// does not link the collective tests' harness.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace tbcoll::test {

/// A TCP port on 127.0.0.1 that was free a moment ago, taken below the kernel's ephemeral range (32768 up on
/// Linux, 49152 up on macOS) so that no outgoing connection of a test running beside this one is given it before
/// the rank that listens on it binds it. Processes start at different points of the range (by pid), and a port
/// that cannot be bound now is skipped.
inline int free_port() {
  static unsigned next = 10000 + static_cast<unsigned>(getpid()) % 9973;
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int candidate = static_cast<int>(next);
    next = next + 1 >= 20000 ? 10000 : next + 1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(candidate));
    const bool bound = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    if (fd >= 0) close(fd);
    if (bound) return candidate;
  }
  return 0;
}

/// A socket listening on 127.0.0.1:P whose next port P + 1 was free a moment ago, or -1; `port` is set to P.
/// P is taken below the kernel's ephemeral range (32768 up on Linux, 49152 up on macOS), where no other test's
/// connection or free_port() lands, so P + 1 stays free unless something binds it by number.
inline int listen_below_ephemeral(int& port) {
  static unsigned next = 20000 + static_cast<unsigned>(getpid()) % 6000 * 2;
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int candidate = static_cast<int>(next);
    next = next + 2 >= 32000 ? 20000 : next + 2;
    int fds[2] = {socket(AF_INET, SOCK_STREAM, 0), socket(AF_INET, SOCK_STREAM, 0)};
    bool bound = true;
    for (int i = 0; i < 2; ++i) {
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(candidate + i));
      bound = bound && fds[i] >= 0 && bind(fds[i], reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    }
    if (fds[1] >= 0) close(fds[1]);
    if (bound && listen(fds[0], 1) == 0) {
      port = candidate;
      return fds[0];
    }
    if (fds[0] >= 0) close(fds[0]);
  }
  return -1;
}

}  // namespace tbcoll::test
