// UniqueId: a rendezvous store served by the process that created the id, and the init that meets there.
#include <map>
#include <mutex>
#include <random>

#include <fmt/format.h>

#include "common/env.h"
#include "common/ifname.h"
#include "common/net.h"
#include "common/time.h"
#include "communicator.h"
#include "tbcoll/tbcoll.h"

namespace tbcoll {
namespace {

// Store servers started by UniqueId::create, by id. A server runs as long as a communicator anywhere may still
// rendezvous through it (a split needs the store): while a communicator of this process holds it, or a client is
// connected (every communicator keeps its connection while it lives, in whatever process). Servers that neither
// holds any more are stopped at the next create(), so rebuilding communicators does not pile them up.
struct IdServers {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<TcpStoreServer>> unused;  // no rank of this process used the id yet
  std::map<std::string, std::shared_ptr<TcpStoreServer>> used;
};

IdServers& id_servers() {
  static IdServers servers;
  return servers;
}

// The server of id if this process started it, else null.
std::shared_ptr<TcpStoreServer> server_of(const std::string& id) {
  IdServers& servers = id_servers();
  std::lock_guard<std::mutex> lock(servers.mutex);
  auto unused = servers.unused.find(id);
  if (unused != servers.unused.end()) {
    std::shared_ptr<TcpStoreServer> server = std::move(unused->second);
    servers.unused.erase(unused);
    servers.used[id] = server;
    return server;
  }
  auto used = servers.used.find(id);
  return used == servers.used.end() ? nullptr : used->second;
}

// Where the id's store listens, and what the id tells the other ranks: TBCOLL_SOCKET_ADDR, else the interface
// TBCOLL_SOCKET_IFNAME chooses, else (as NCCL) the first interface that is neither loopback nor docker, so ranks on
// other hosts can reach it; loopback only on a machine with nothing else.
std::string id_host() {
  const env::Settings settings;
  if (settings.is_set("TBCOLL_SOCKET_ADDR") || !settings.get("TBCOLL_SOCKET_IFNAME").empty()) {
    return net::listen_host(settings, "127.0.0.1", "[unique id]");
  }
  const auto chosen = ifname::choose(platform::network_interfaces(), "", /*allow_loopback=*/true);
  return chosen ? chosen->address : "127.0.0.1";
}

}  // namespace

UniqueId UniqueId::create() {
  const std::string host = id_host();
  std::random_device random;
  const std::string token = fmt::format("{:08x}{:08x}", random(), random());
  auto server = std::make_unique<TcpStoreServer>(host, 0, token);
  const std::string dialled = host.find(':') != std::string::npos ? "[" + host + "]" : host;  // IPv6
  std::string text = fmt::format("{}:{}\n{}", dialled, server->port(), token);
  if (text.size() >= TBCOLL_UNIQUE_ID_BYTES) throw InvalidArgument("TBCOLL_SOCKET_ADDR is too long for a unique id");
  IdServers& servers = id_servers();
  std::lock_guard<std::mutex> lock(servers.mutex);
  for (auto it = servers.used.begin(); it != servers.used.end();) {  // stop those nobody can need any more
    const bool idle = it->second.use_count() == 1 && it->second->connections() == 0;
    it = idle ? servers.used.erase(it) : std::next(it);
  }
  servers.unused[text] = std::move(server);
  return UniqueId(std::move(text));
}

UniqueId UniqueId::from_string(const std::string& text) {
  const size_t newline = text.find('\n');
  if (newline == std::string::npos || newline == 0 || newline + 1 == text.size() ||
      text.size() >= TBCOLL_UNIQUE_ID_BYTES) {
    throw InvalidArgument("unique id is malformed (not from UniqueId::create or tbcollGetUniqueId)");
  }
  return UniqueId(text);
}

std::string UniqueId::root() const { return text_.substr(0, text_.find('\n')); }
std::string UniqueId::token() const { return text_.substr(text_.find('\n') + 1); }

Communicator Communicator::init(const UniqueId& id, int rank, int size, Config config) {
  config.rank = rank;
  config.world_size = size;
  config.root = id.root();
  config.token = id.token();
  // Checked before anything is sent (init checks them too, but after the store's connection).
  if (size < 1) throw InvalidArgument(fmt::format("world size {} must be at least 1", size));
  if (rank < 0 || rank >= size) throw InvalidArgument(fmt::format("rank {} out of range for world size {}", rank, size));
  const Deadline deadline = deadline_after(config.timeout_s);  // the store's connection included
  if (size > 1) {
    try {
      config.store = connect_tcp_store(config.root, config.token, deadline);
    } catch (const Error& error) {
      rethrow_with_context(error, fmt::format("rank {}: init(world_size={})", rank, size));
    }
  }
  config.server = server_of(id.to_string());
  return init(config, deadline);
}

}  // namespace tbcoll
