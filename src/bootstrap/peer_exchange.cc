#include "bootstrap/peer_exchange.h"

#include <fmt/format.h>


namespace tbcoll::bootstrap {

transport::Device& device_named(const Devices& devices, const std::string& name) {
  for (const auto& device : devices) {
    if (device->name() == name) return *device;
  }
  throw Error(tbcollInternalError, fmt::format("no device named {:?} in this build", name));
}

void exchange_per_peer_addresses(Store& store, const std::string& prefix, int rank, const Devices& devices,
                                 const std::map<std::string, std::unique_ptr<transport::Context>>& contexts,
                                 std::map<std::string, std::vector<transport::PeerAddress>>& plan, Deadline deadline,
                                 const std::atomic<bool>* cancelled) {
  auto key = [&](int from, int to) { return fmt::format("{}/pair/{}/{}", prefix, from, to); };
  std::vector<transport::PeerAddress*> waiting;
  for (auto& [name, peers] : plan) {
    if (!device_named(devices, name).capabilities().per_peer_addresses) continue;
    transport::Context& context = *contexts.at(name);
    for (transport::PeerAddress& peer : peers) {
      const std::string address = context.address_for(peer);
      store.set(key(rank, peer.rank), {address.begin(), address.end()}, deadline);
      waiting.push_back(&peer);
    }
  }
  for (transport::PeerAddress* peer : waiting) {
    const std::vector<uint8_t> bytes = store.get(key(peer->rank, rank), deadline, cancelled);
    peer->for_me.assign(bytes.begin(), bytes.end());
    store.erase(key(peer->rank, rank), deadline);
  }
}

}  // namespace tbcoll::bootstrap
