// Small socket helpers shared by the TCP store and the TCP transport: host:port parsing, connect with a
// deadline, and exact reads/writes on non-blocking sockets that honour a deadline.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "common/env.h"
#include "tbcoll/deadline.hpp"

struct addrinfo;

namespace tbcoll::net {

struct HostPort {
  std::string host;
  int port = 0;
};

/// Parses "host:port" or "[v6]:port"; throws InvalidArgument naming what is wrong.
HostPort parse_host_port(const std::string& text, const char* what);

/// getaddrinfo for TCP (hints: any family, SOCK_STREAM, ai_flags = flags) that gives up at the deadline. Numeric
/// hosts are converted directly; names are looked up on a helper thread, which is abandoned (it frees its own
/// result) when the deadline passes first: a lookup can take many seconds (an unreachable DNS server, mDNS
/// names). Free the list with freeaddrinfo. Throws IoError (unknown name, no thread) or TimeoutError.
addrinfo* resolve(const std::string& host, const std::string& port, int flags, Deadline deadline,
                  const std::string& who);

/// Connects a TCP socket (TCP_NODELAY, non-blocking, close-on-exec). Retries refused connections until the
/// deadline (the peer may not listen yet). Returns the fd; throws TimeoutError/IoError, InvalidUsage once
/// `cancelled` is set (see check_cancelled).
int connect_tcp(const HostPort& where, Deadline deadline, const std::string& who,
                const std::atomic<bool>* cancelled = nullptr);

/// The address a rank listens on and advertises: TBCOLL_SOCKET_ADDR if set, else the first address of an interface
/// TBCOLL_SOCKET_IFNAME chooses (common/ifname.h), else `fallback` (the address that reached the rendezvous).
/// Throws InvalidArgument naming who, the setting and the interfaces there are when nothing matches.
std::string listen_host(const env::Settings& settings, const std::string& fallback, const std::string& who);

/// Local address (numeric host) a connected socket uses, e.g. to listen on the interface that reaches the root.
std::string local_address(int fd);

/// Reads exactly n bytes; throws IoError on EOF/error, TimeoutError past the deadline, InvalidUsage once
/// `cancelled` is set.
void read_exact(int fd, void* buf, size_t n, Deadline deadline, const std::string& who,
                const std::atomic<bool>* cancelled = nullptr);
/// Writes exactly n bytes (never raising SIGPIPE); throws like read_exact.
void write_all(int fd, const void* buf, size_t n, Deadline deadline, const std::string& who,
               const std::atomic<bool>* cancelled = nullptr);

/// Sets O_NONBLOCK and TCP_NODELAY.
void make_fast(int fd);

/// A non-blocking, close-on-exec TCP listener on the numeric address host (port 0: any free port). Returns the fd
/// and sets *address to "host:port" ("[v6]:port") as peers dial it. Throws IoError naming who and why.
int listen_tcp(const std::string& host, std::string* address, const std::string& who);
/// Accepts one waiting connection of a non-blocking listener as a non-blocking, close-on-exec, TCP_NODELAY socket;
/// -1 when none is waiting (or on a transient error, after a short pause when descriptors run out).
int accept_tcp(int listen_fd);

}  // namespace tbcoll::net
