// Set-up phase 3: every rank's record, and what they decide alike on every rank (setup.h).
#include <algorithm>

#include <fmt/format.h>

#include "common/cpu.h"
#include "common/log.h"
#include "setup/setup.h"

namespace tbcoll::setup {

using bootstrap::Published;

std::vector<Published> read_records(Store& store, const std::string& prefix, int rank, const Published& self,
                                    Deadline deadline, const std::atomic<bool>* cancelled) {
  const int size = self.world_size;
  std::vector<Published> everyone(static_cast<size_t>(size));
  everyone[static_cast<size_t>(rank)] = self;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    Published& other = everyone[static_cast<size_t>(peer)];
    other = bootstrap::decode(peer,
                              bootstrap::text_of(store.get(fmt::format("{}/peer/{}", prefix, peer), deadline, cancelled)));
    if (other.world_size != size) {
      throw InvalidUsage(fmt::format("rank {}: peer {} was started with world size {}, this rank with {}", rank, peer,
                                     other.world_size, size));
    }
  }
  return everyone;
}

// The first device (best first, the build's order) that both published and that can join them.
std::string transport_between(const Devices& devices, const Published& a, const Published& b, std::string* why_not) {
  for (const auto& device : devices) {
    const std::string& name = device->name();
    if (a.addresses.count(name) != 0 && b.addresses.count(name) != 0 && device->can_connect(a.info, b.info) &&
        device->can_connect_addresses(a.info, a.addresses.at(name), b.info, b.addresses.at(name), why_not)) {
      return name;
    }
  }
  return "";
}

LinkPlan plan_links(const Devices& devices, const std::vector<Published>& everyone, int rank,
                    const std::string& forced) {
  const int size = static_cast<int>(everyone.size());
  const Published& self = everyone[static_cast<size_t>(rank)];
  LinkPlan plan;
  plan.transport_names.assign(static_cast<size_t>(size), "self");
  std::vector<std::vector<int>> same_machine_cpus;  // of the peers that run on this kernel
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    const Published& other = everyone[static_cast<size_t>(peer)];
    if (other.kernel == self.kernel) same_machine_cpus.push_back(other.cpus);
    std::string why_not;
    const std::string chosen = transport_between(devices, self, other, &why_not);
    if (chosen.empty()) {
      throw InvalidArgument(fmt::format("rank {}: no transport can reach peer {}{}{}", rank, peer,
                                        forced.empty() ? "" : " with TBCOLL_TRANSPORT=" + forced,
                                        why_not.empty() ? "" : " (" + why_not + ")"));
    }
    plan.peers_by_transport[chosen].push_back({peer, other.addresses.at(chosen), "", other.info});
    plan.transport_names[static_cast<size_t>(peer)] = chosen;
  }
  std::vector<std::string> host_ids;  // by host number
  plan.host_of.assign(static_cast<size_t>(size), 0);
  std::vector<std::vector<int>> cpus_by_rank;
  std::vector<std::string> kernel_by_rank;
  for (int p = 0; p < size; ++p) {
    const Published& one = everyone[static_cast<size_t>(p)];
    const auto known = std::find(host_ids.begin(), host_ids.end(), one.info.host_id);
    plan.host_of[static_cast<size_t>(p)] = static_cast<int>(known - host_ids.begin());
    if (known == host_ids.end()) host_ids.push_back(one.info.host_id);
    cpus_by_rank.push_back(one.cpus);
    kernel_by_rank.push_back(one.kernel);
  }
  plan.hosts = static_cast<int>(host_ids.size());
  plan.crowding = machine_crowding(cpus_by_rank, kernel_by_rank);
  plan.spin_yield = spin_yield_policy(self.cpus, same_machine_cpus, plan.crowding > 1);
  plan.same_machine_peers = static_cast<int>(same_machine_cpus.size());
  return plan;
}

}  // namespace tbcoll::setup
