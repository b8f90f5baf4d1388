#include "bootstrap/open_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <climits>

#include <fmt/format.h>

#include "common/env.h"
#include "common/log.h"
#include "common/net.h"

namespace tbcoll::bootstrap {
int take_inherited_listener(int port) {
  static std::atomic<bool> taken{false};
  if (!env::is_set("TBCOLL_ROOT_FD") || taken.exchange(true)) return -1;
  const long long fd = env::get_int("TBCOLL_ROOT_FD");
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  int bound_port = -1;
  if (fd >= 0 && fd <= INT_MAX &&
      getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    if (address.ss_family == AF_INET) bound_port = ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
    if (address.ss_family == AF_INET6) bound_port = ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  }
  if (bound_port != port) {
    log::warn("TBCOLL_ROOT_FD={} is not a socket bound to the root's port {}: ignored", fd, port);
    return -1;
  }
  return static_cast<int>(fd);
}

OpenedStore open_store(const Config& config, Deadline deadline) {
  OpenedStore out;
  if (config.store) {
    out.store = config.store;
    out.server = config.server;
    return out;
  }
  if (config.root.empty()) {
    throw InvalidArgument(
        fmt::format("rank {}: no rendezvous: set TBCOLL_ROOT=host:port (rank 0 listens there), or start the ranks "
                    "with tbcoll-run",
                    config.rank));
  }
  const net::HostPort root = net::parse_host_port(config.root, "TBCOLL_ROOT");
  if (config.rank == 0) {
    const int listener = take_inherited_listener(root.port);
    out.server = listener >= 0 ? std::make_shared<TcpStoreServer>(listener, config.token)
                               : std::make_shared<TcpStoreServer>(root.host, root.port, config.token, deadline);
  }
  out.store = connect_tcp_store(config.root, config.token, deadline);
  return out;
}

}  // namespace tbcoll::bootstrap
