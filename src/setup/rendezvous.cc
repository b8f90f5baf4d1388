// Set-up phase 1: the rendezvous store and the communicator id (setup.h).

#include <mutex>

#include <fmt/format.h>

#include "bootstrap/open_store.h"
#include "bootstrap/store_auth.h"
#include "common/log.h"
#include "common/net.h"
#include "setup/setup.h"

namespace tbcoll::setup {

namespace {

// A job whose store others can reach (anything but one in this process's memory) and that has no secret: said
// once per process, since splits and later communicators meet through the same store.
void warn_without_secret(bool foreign_store, const std::string& where) {
  static std::once_flag once;
  std::call_once(once, [&] {
    if (foreign_store) {
      log::warn("rank 0: the rendezvous runs through a store tbcoll did not open (torch's TCPStore, a Python store) "
                "and no job secret is set: whoever reaches that store can rewrite the ranks' records and redirect or "
                "alter their data. Set TBCOLL_SECRET_FILE or TBCOLL_SECRET on every rank; see docs/security.md");
    } else {
      log::warn("rank 0: no job secret (TBCOLL_SECRET): whoever reaches this job's rendezvous store (reached here "
                "through {}; another user of this machine included) can join with the token, rewrite the ranks' "
                "records and alter their data. tbcoll-run draws a secret per job; with another launcher, give every "
                "rank TBCOLL_SECRET_FILE; see docs/security.md", where);
    }
  });
}

}  // namespace

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
  if (secret.empty() && rank == 0 && !(config.store && bootstrap::is_in_memory(*config.store))) {
    warn_without_secret(config.store && !bootstrap::is_tcp_client(*config.store), out.store->local_address());
  }
  // With a secret, records carry a MAC whatever store carries them (store_auth.h).
  out.store = bootstrap::authenticated(out.store, secret, config.token);
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
