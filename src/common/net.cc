#include "common/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <mutex>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "common/ifname.h"
#include "common/log.h"
#include "common/time.h"
#include "platform/platform.h"
#include "tbcoll/error.hpp"

namespace tbcoll::net {

HostPort parse_host_port(const std::string& text, const char* what) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    throw InvalidArgument(fmt::format("{} {:?} is not host:port", what, text));
  }
  HostPort out;
  out.host = text.substr(0, colon);
  if (out.host.size() >= 2 && out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  std::string port = text.substr(colon + 1);
  char* end = nullptr;
  long value = std::strtol(port.c_str(), &end, 10);
  if (*end != '\0' || value < 0 || value > 65535) {
    throw InvalidArgument(fmt::format("{} {:?}: port {:?} is not a number in 0..65535", what, text, port));
  }
  out.port = static_cast<int>(value);
  return out;
}

void make_fast(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

addrinfo* resolve(const std::string& host, const std::string& port, int flags, Deadline deadline,
                  const std::string& who) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags | AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) == 0) return found;
  hints.ai_flags = flags;
  struct Lookup {
    std::mutex mutex;
    std::condition_variable finished;
    bool done = false;
    bool abandoned = false;
    int rc = 0;
    addrinfo* found = nullptr;
  };
  auto lookup = std::make_shared<Lookup>();
  try {
    std::thread([lookup, host, port, hints] {
      addrinfo* result = nullptr;
      const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
      std::lock_guard<std::mutex> lock(lookup->mutex);
      if (lookup->abandoned) {
        if (rc == 0) freeaddrinfo(result);
        return;
      }
      lookup->rc = rc;
      lookup->found = rc == 0 ? result : nullptr;
      lookup->done = true;
      lookup->finished.notify_all();
    }).detach();
  } catch (const std::system_error& error) {
    throw IoError(fmt::format("{}: cannot resolve {}: no thread for the lookup: {}", who, host, error.what()));
  }
  std::unique_lock<std::mutex> lock(lookup->mutex);
  const bool done = deadline == Deadline::max()
                        ? (lookup->finished.wait(lock, [&] { return lookup->done; }), true)
                        : lookup->finished.wait_until(lock, deadline, [&] { return lookup->done; });
  if (!done) {
    lookup->abandoned = true;
    throw TimeoutError(fmt::format("{}: looking up host {:?} did not finish before the deadline", who, host));
  }
  if (lookup->rc != 0) throw IoError(fmt::format("{}: cannot resolve {}: {}", who, host, gai_strerror(lookup->rc)));
  return lookup->found;
}

int connect_tcp(const HostPort& where, Deadline deadline, const std::string& who, const std::atomic<bool>* cancelled) {
  addrinfo* found = resolve(where.host, std::to_string(where.port), 0, deadline, who);
  std::string last_error = "no address";
  auto backoff = std::chrono::milliseconds(1);
  // A peer may be slow to start, so refusals are retried to the deadline; but a wrong address or port refuses for
  // ever: said once the retries have gone on a while (3 s, or a third of the time to the deadline if less).
  const auto start = Clock::now();
  const auto say_after = std::min<Clock::duration>(std::chrono::seconds(3), (deadline - start) / 3);
  bool said = false;
  while (true) {
    for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
      int fd = platform::open_socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol, /*nonblocking=*/true);
      if (fd < 0) continue;
      int result = connect(fd, ai->ai_addr, ai->ai_addrlen);
      if (result != 0 && errno == EINPROGRESS) {
        pollfd pfd{fd, POLLOUT, 0};
        int ready = 0;
        for (;;) {  // in slices, when something may cancel the wait
          const int left = std::max(1, remaining_ms(deadline));
          ready = poll(&pfd, 1, cancelled != nullptr ? std::min(left, kCancelPollMs) : left);
          if (ready != 0 || cancelled == nullptr || Clock::now() >= deadline) break;
          if (cancelled->load(std::memory_order_acquire)) break;
        }
        int err = 0;
        socklen_t len = sizeof(err);
        if (ready == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
          result = 0;
        } else {
          errno = ready == 1 ? err : ETIMEDOUT;
        }
      }
      if (result == 0) {
        freeaddrinfo(found);
        make_fast(fd);
        return fd;
      }
      last_error = std::strerror(errno);
      close(fd);
      if (cancelled != nullptr && cancelled->load(std::memory_order_acquire)) {
        freeaddrinfo(found);
        check_cancelled(cancelled, who);
      }
    }
    if (Clock::now() + backoff >= deadline) break;
    if (!said && Clock::now() - start >= say_after) {
      said = true;
      log::warn("{}: {}:{} has not accepted a connection for {:.1f} s ({}); retrying until the deadline, {:.0f} s "
                "from now (is the address and port right, and is the other side up?)", who, where.host, where.port,
                std::chrono::duration<double>(Clock::now() - start).count(), last_error,
                std::chrono::duration<double>(deadline - Clock::now()).count());
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
  freeaddrinfo(found);
  throw TimeoutError(fmt::format("{}: cannot connect to {}:{} before the deadline ({})", who, where.host,
                                 where.port, last_error));
}

std::string listen_host(const env::Settings& settings, const std::string& fallback, const std::string& who) {
  const std::string address = settings.get("TBCOLL_SOCKET_ADDR");
  if (!address.empty()) return address;
  const std::string spec = settings.get("TBCOLL_SOCKET_IFNAME");
  if (spec.empty()) return fallback.empty() ? "127.0.0.1" : fallback;
  const std::vector<platform::NetworkInterface> interfaces = platform::network_interfaces();
  std::optional<platform::NetworkInterface> chosen;
  try {
    chosen = ifname::choose(interfaces, spec, /*allow_loopback=*/true);
  } catch (const std::invalid_argument& error) {
    throw InvalidArgument(fmt::format("{}: {}", who, error.what()));
  }
  if (!chosen) {
    throw InvalidArgument(fmt::format("{}: TBCOLL_SOCKET_IFNAME={:?} matches no interface with an address (there are: {})",
                                      who, spec, ifname::describe(interfaces)));
  }
  return chosen->address;
}

std::string local_address(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "127.0.0.1";
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) {
    return "127.0.0.1";
  }
  return host;
}

static void wait_ready(int fd, short events, Deadline deadline, const std::string& who, const char* doing,
                       const std::atomic<bool>* cancelled) {
  pollfd pfd{fd, events, 0};
  for (;;) {
    check_cancelled(cancelled, who);
    const int left = remaining_ms(deadline);
    if (left == 0) throw TimeoutError(fmt::format("{}: timed out {}", who, doing));
    const int ready = poll(&pfd, 1, cancelled != nullptr ? std::min(left, kCancelPollMs) : left);
    if (ready < 0 && errno != EINTR) {
      throw IoError(fmt::format("{}: poll failed {}: {}", who, doing, strerror(errno)));
    }
    if (ready != 0) return;
  }
}

void read_exact(int fd, void* buf, size_t n, Deadline deadline, const std::string& who,
                const std::atomic<bool>* cancelled) {
  char* at = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = recv(fd, at, n, MSG_DONTWAIT);
    if (got > 0) {
      at += got;
      n -= static_cast<size_t>(got);
    } else if (got == 0) {
      throw IoError(fmt::format("{}: connection closed by the other side", who));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      wait_ready(fd, POLLIN, deadline, who, "reading", cancelled);
    } else {
      throw IoError(fmt::format("{}: read failed: {}", who, strerror(errno)));
    }
  }
}

void write_all(int fd, const void* buf, size_t n, Deadline deadline, const std::string& who,
               const std::atomic<bool>* cancelled) {
  const char* at = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t put = send(fd, at, n, MSG_DONTWAIT | platform::send_flags());
    if (put >= 0) {
      at += put;
      n -= static_cast<size_t>(put);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      wait_ready(fd, POLLOUT, deadline, who, "writing", cancelled);
    } else {
      throw IoError(fmt::format("{}: write failed: {}", who, strerror(errno)));
    }
  }
}

int listen_tcp(const std::string& host, std::string* address, const std::string& who) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), "0", &hints, &found);
  if (rc != 0) throw IoError(fmt::format("{}: bad listen address {:?}: {}", who, host, gai_strerror(rc)));
  int fd = platform::open_socket(found->ai_family, SOCK_STREAM, 0, /*nonblocking=*/true);
  if (fd < 0 || bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 128) != 0) {
    const std::string why = strerror(errno);
    freeaddrinfo(found);
    if (fd >= 0) close(fd);
    throw IoError(fmt::format("{}: cannot listen on {}: {}", who, host, why));
  }
  freeaddrinfo(found);
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  const int port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                               : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  *address = host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
  return fd;
}

int accept_tcp(int listen_fd) {
  const int fd = platform::accept_socket(listen_fd, /*nonblocking=*/true);
  if (fd < 0) {
    // Out of descriptors, say: wait a little instead of spinning on a listener that stays readable.
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) poll(nullptr, 0, 10);
    return -1;
  }
  make_fast(fd);
  return fd;
}

}  // namespace tbcoll::net
