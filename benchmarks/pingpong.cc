#include "benchmarks/pingpong.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <cstring>
#include <chrono>
#include <stdexcept>
#include <vector>

#include "common/env.h"
#include "common/net.h"
#include "common/time.h"
#include "platform/platform.h"

namespace tbcoll::bench {
namespace {

using Clock = std::chrono::steady_clock;

void die(const char* what) { throw IoError(std::string("pingpong: ") + what + ": " + strerror(errno)); }

// Busy-polls (or blocks in poll) until n bytes arrived.
void read_n(int fd, char* buf, size_t n, bool busy, PhaseDeadline& deadline) {
  size_t got = 0;
  while (got < n) {
    deadline.check("a message from the other rank");
    if (!busy) {
      pollfd pfd{fd, POLLIN, 0};
      const int ready = poll(&pfd, 1, 100);
      if (ready < 0 && errno != EINTR) die("poll");
      if (ready <= 0) {
        deadline.check_now("a message from the other rank");
        continue;
      }
    }
    ssize_t r = recv(fd, buf + got, n - got, MSG_DONTWAIT);
    if (r > 0) got += static_cast<size_t>(r);
    else if (r == 0) die("peer closed");
    else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) die("recv");
  }
}

void write_n(int fd, const char* buf, size_t n, PhaseDeadline& deadline) {
  size_t put = 0;
  while (put < n) {
    deadline.check("room to send to the other rank");
    ssize_t w = send(fd, buf + put, n - put, platform::send_flags() | MSG_DONTWAIT);
    if (w > 0) {
      put += static_cast<size_t>(w);
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pfd{fd, POLLOUT, 0};  // full: sleep until there is room, as a blocking send would
      if (poll(&pfd, 1, 100) == 0) deadline.check_now("room to send to the other rank");
    } else if (w < 0 && errno != EINTR) {
      die("send");
    }
  }
}

double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

// Median one-way latency for size-byte messages; rank 0 times round trips.
double latency(int fd, bool lead, size_t size, int trips, bool receiver_busy) {
  PhaseDeadline deadline;
  std::vector<char> buf(size, 1);
  std::vector<double> rtt;
  for (int i = -trips / 10; i < trips; ++i) {
    if (lead) {
      auto start = Clock::now();
      write_n(fd, buf.data(), size, deadline);
      read_n(fd, buf.data(), size, true, deadline);
      if (i >= 0) rtt.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    } else {
      read_n(fd, buf.data(), size, receiver_busy, deadline);
      write_n(fd, buf.data(), size, deadline);
    }
  }
  return lead ? median(rtt) / 2 : 0;
}

}  // namespace

PhaseDeadline::PhaseDeadline() : at_(deadline_after(env::get_double("TBCOLL_TIMEOUT"))) {}

void PhaseDeadline::check(const char* what) {
  if ((++calls_ & 255) == 0) check_now(what);
}

void PhaseDeadline::check_now(const char* what) {
  if (Clock::now() < at_) return;
  throw TimeoutError(std::string("floor measurement: timed out waiting for ") + what + " (TBCOLL_TIMEOUT)");
}

// Where rank 1 reaches rank 0: the interface rank 0 was told to use (TBCOLL_SOCKET_ADDR), else the host of the
// rendezvous rank 0 serves (TBCOLL_ROOT), else this machine.
std::string rank0_host() {
  const std::string socket_addr = env::get("TBCOLL_SOCKET_ADDR");
  if (!socket_addr.empty()) return socket_addr;
  const std::string root = env::get("TBCOLL_ROOT");
  return root.empty() ? "127.0.0.1" : net::parse_host_port(root, "TBCOLL_ROOT").host;
}

PingPongResult raw_tcp_floor(Communicator& comm) {
  PingPongResult result;
  const int rank = comm.rank();
  int port = 0;
  int listener = -1;
  char host[256] = {};
  if (rank == 0) {
    listener = platform::open_socket(AF_INET6, SOCK_STREAM, 0, false);  // any interface, IPv4 too: rank 1 may be elsewhere
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    int off = 0;
    setsockopt(listener, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listener, 1) != 0) die("listen");
    socklen_t len = sizeof(addr);
    getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin6_port);
    std::strncpy(host, rank0_host().c_str(), sizeof(host) - 1);
  }
  comm.broadcast(&port, &port, 1, DataType::kInt32, 0);
  comm.broadcast(host, host, sizeof(host), DataType::kUint8, 0);
  int fd = -1;
  if (rank == 0) {
    PhaseDeadline deadline;
    pollfd pfd{listener, POLLIN, 0};
    while (poll(&pfd, 1, 100) == 0) deadline.check_now("the other rank to connect");
    fd = platform::accept_socket(listener, false);
    close(listener);
  } else if (rank == 1) {
    fd = net::connect_tcp({host, port}, Clock::now() + std::chrono::seconds(30), "pingpong: connecting to rank 0");
    const int flags = fcntl(fd, F_GETFL);  // connect_tcp leaves it non-blocking; the measurements poll themselves
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  }
  if (rank <= 1) {
    if (fd < 0) die("accept");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const bool lead = rank == 0;
    result.round_trips = 20000;
    result.one_way_8b_us = latency(fd, lead, 8, result.round_trips, true);
    result.one_way_1k_us = latency(fd, lead, 1024, result.round_trips, true);
    result.one_way_8b_blocking_us = latency(fd, lead, 8, 2000, false);
    // One stream, rank 0 -> rank 1, from and into buffers of the given size (cycled through), so the floor
    // is shown both for cache-resident buffers and for DRAM-resident ones like a large collective's.
    auto stream = [&](size_t buffer_bytes, size_t total) {
      PhaseDeadline deadline;
      std::vector<char> buffer(buffer_bytes, 7);
      std::vector<double> rates;
      for (int run = 0; run < 3; ++run) {
        auto start = Clock::now();
        if (lead) {
          for (size_t sent = 0; sent < total; sent += buffer_bytes) write_n(fd, buffer.data(), buffer_bytes, deadline);
          char ack;
          read_n(fd, &ack, 1, false, deadline);
          rates.push_back(total / std::chrono::duration<double>(Clock::now() - start).count() / 1e9);
        } else {
          for (size_t got = 0; got < total;) {
            deadline.check("the stream from the other rank");
            size_t at = got % buffer_bytes;
            ssize_t r = recv(fd, buffer.data() + at, std::min(buffer_bytes - at, total - got), MSG_DONTWAIT);
            if (r == 0) die("stream recv: peer closed");
            if (r > 0) {
              got += static_cast<size_t>(r);
            } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
              pollfd pfd{fd, POLLIN, 0};  // empty: sleep until data, as a blocking recv would
              if (poll(&pfd, 1, 100) == 0) deadline.check_now("the stream from the other rank");
            } else if (errno != EINTR) {
              die("stream recv");
            }
          }
          char ack = 1;
          write_n(fd, &ack, 1, deadline);
        }
      }
      return lead ? median(rates) : 0.0;
    };
    result.stream_bytes = size_t{512} << 20;
    result.stream_gbps = stream(size_t{1} << 20, result.stream_bytes);
    result.stream_large_gbps = stream(size_t{64} << 20, result.stream_bytes);
    // Both directions at once, as a 2-rank all-reduce moves its data: one thread per rank, non-blocking
    // sends and receives interleaved, until both ranks sent and received `total` bytes.
    auto both_ways = [&](size_t buffer_bytes, size_t total) {
      PhaseDeadline deadline;
      std::vector<char> out(buffer_bytes, 5), in(buffer_bytes);
      int flags = fcntl(fd, F_GETFL, 0);
      fcntl(fd, F_SETFL, flags | O_NONBLOCK);
      std::vector<double> rates;
      for (int run = 0; run < 3; ++run) {
        size_t sent = 0, got = 0;
        auto start = Clock::now();
        while (sent < total || got < total) {
          deadline.check("the other rank's half of the exchange");
          if (sent < total) {
            size_t at = sent % buffer_bytes;
            ssize_t w = send(fd, out.data() + at, std::min(buffer_bytes - at, total - sent), platform::send_flags());
            if (w > 0) sent += static_cast<size_t>(w);
            else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) die("send");
          }
          if (got < total) {
            size_t at = got % buffer_bytes;
            ssize_t r = recv(fd, in.data() + at, std::min(buffer_bytes - at, total - got), 0);
            if (r > 0) got += static_cast<size_t>(r);
            else if (r == 0) die("peer closed");
            else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) die("recv");
          }
        }
        rates.push_back(total / std::chrono::duration<double>(Clock::now() - start).count() / 1e9);
      }
      fcntl(fd, F_SETFL, flags);
      return lead ? median(rates) : 0.0;
    };
    result.bidir_gbps = both_ways(size_t{1} << 20, size_t{256} << 20);
    result.bidir_large_gbps = both_ways(size_t{64} << 20, size_t{256} << 20);
    close(fd);
  }
  comm.barrier();
  return result;
}

}  // namespace tbcoll::bench
