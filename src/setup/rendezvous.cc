// Set-up phase 1: the rendezvous store and the communicator id (setup.h).

#include <fmt/format.h>

#include "bootstrap/open_store.h"
#include "common/net.h"
#include "setup/setup.h"

namespace tbcoll::setup {

Rendezvous open_rendezvous(const Config& config, const env::Settings& settings, const std::string& secret,
                           Deadline deadline, const std::atomic<bool>* cancelled) {
  Rendezvous out;
  const int rank = config.rank;
  if (config.store) {
    out.store = config.store;
    out.server = config.server;
  } else {
    if (config.root.empty()) {
      throw InvalidArgument(fmt::format("rank {}: no rendezvous: set TBCOLL_ROOT=host:port (rank 0 listens there; "
                                        "tbcoll-run sets it), or meet through a unique id (tbcollGetUniqueId, "
                                        "UniqueId::create) or a store (C++: Config::store)", rank));
    }
    net::HostPort root = net::parse_host_port(config.root, "TBCOLL_ROOT");
    if (rank == 0) {
      // Only on the address the ranks are told (TBCOLL_ROOT), unless asked for every interface.
      const int listener = bootstrap::take_inherited_listener(root.port);
      const std::string listen_host = settings.get_int("TBCOLL_STORE_LISTEN_ALL") != 0 ? "0.0.0.0" : root.host;
      out.server = listener >= 0
                       ? std::make_shared<TcpStoreServer>(listener, config.token, secret)
                       : std::make_shared<TcpStoreServer>(listen_host, root.port, config.token, deadline, secret);
    }
    out.store = connect_tcp_store(config.root, config.token, deadline, secret);
  }
  // Listen on the interface that reaches the rendezvous (127.0.0.1 for in-process stores).
  out.bind_host = out.store->local_address();
  // One communicator id for the handshakes, chosen by rank 0.
  if (rank == 0) {
    out.comm_id = random_u64();
    out.store->set(config.prefix + "/comm_id", bootstrap::bytes_of(std::to_string(out.comm_id)), deadline);
  } else {
    out.comm_id = bootstrap::read_comm_id(*out.store, config.prefix, rank, config.world_size, deadline, cancelled);
  }
  return out;
}

}  // namespace tbcoll::setup
