// Set-up phases 4 and 5: the connections, and the fast path (setup.h).
#include <algorithm>

#include "bootstrap/peer_exchange.h"
#include "setup/setup.h"

namespace tbcoll::setup {

Links links_of_one() {
  Links links;
  links.peers.assign(1, nullptr);
  links.max_message.assign(1, SIZE_MAX);
  links.transport_names.assign(1, "self");
  links.host_of.assign(1, 0);
  return links;
}

Links connect_links(Identity identity, LinkPlan& plan, const Devices& devices, Store& store,
                    const std::string& prefix, int rank, int size, Deadline deadline,
                    const std::atomic<bool>* cancelled) {
  bootstrap::exchange_per_peer_addresses(store, prefix, rank, devices, identity.contexts, plan.peers_by_transport,
                                         deadline, cancelled);
  bootstrap::forget_records(store, prefix, rank, size, deadline);
  Links links;
  links.peers.assign(static_cast<size_t>(size), nullptr);
  links.max_message.assign(static_cast<size_t>(size), SIZE_MAX);
  links.transport_names = plan.transport_names;
  links.host_of = plan.host_of;
  links.hosts = plan.hosts;
  links.spin_yield = plan.spin_yield;
  for (auto& [name, peers] : plan.peers_by_transport) {
    const size_t max_message = bootstrap::device_named(devices, name).capabilities().max_message_bytes;
    auto endpoints = identity.contexts[name]->connect(peers, deadline);
    for (auto& endpoint : endpoints) {
      links.max_message[static_cast<size_t>(endpoint->peer())] = std::max<size_t>(1, max_message);
      links.peers[static_cast<size_t>(endpoint->peer())] = endpoint.get();
      links.owned_endpoints.push_back(std::move(endpoint));
    }
    links.contexts.push_back(std::move(identity.contexts[name]));
  }
  return links;
}

transport::CollectiveFastPath* fast_path_of(const Links& links, const LinkPlan& plan, const Devices& devices,
                                            const std::vector<bootstrap::Published>& everyone) {
  if (plan.peers_by_transport.size() != 1 || links.contexts.size() != 1) return nullptr;
  const std::string& name = plan.peers_by_transport.begin()->first;
  // TBCOLL_TRANSPORT set on one rank only would otherwise give that rank a fast path its peers do not take.
  for (size_t a = 0; a < everyone.size(); ++a) {
    for (size_t b = a + 1; b < everyone.size(); ++b) {
      if (transport_between(devices, everyone[a], everyone[b]) != name) return nullptr;
    }
  }
  return links.contexts[0]->fast_path();
}

}  // namespace tbcoll::setup
