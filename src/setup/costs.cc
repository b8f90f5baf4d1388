// Set-up phase 6's figures: the cost model's view of the communicator's links (setup.h, algorithms/cost.h).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bootstrap/peer_exchange.h"
#include "setup/setup.h"

namespace tbcoll::setup {
namespace {

using bootstrap::Published;

// The worst pair of each kind (inside a host, between hosts), from every pair's transport: each rank computes
// every pair from everyone's records, so every rank gets the same figures. Returns the transports used.
std::vector<std::string> price_pairs(const Devices& devices, const std::vector<Published>& everyone,
                                     algo::CostParams& costs) {
  bool have_intra = false, have_inter = false;
  std::vector<std::string> used;
  for (size_t a = 0; a < everyone.size(); ++a) {
    for (size_t b = a + 1; b < everyone.size(); ++b) {
      const std::string name = transport_between(devices, everyone[a], everyone[b]);
      if (name.empty()) continue;
      if (std::find(used.begin(), used.end(), name) == used.end()) used.push_back(name);
      const transport::Capabilities caps = bootstrap::device_named(devices, name).capabilities();
      const algo::LinkCost pair{caps.latency_us * 1e-6, caps.link_bandwidth_gbps > 0 ? 1e-9 / caps.link_bandwidth_gbps : 0,
                                caps.bandwidth_gbps > 0 ? 1e-9 / caps.bandwidth_gbps : 0,
                                caps.message_overhead_us * 1e-6};
      const bool same_host = everyone[a].info.host_id == everyone[b].info.host_id;
      algo::LinkCost& kind = same_host ? costs.intra : costs.inter;
      bool& have = same_host ? have_intra : have_inter;
      if (!have) kind = pair;
      kind = {std::max(kind.alpha, pair.alpha), std::max(kind.beta, pair.beta),
              std::max(kind.rank_beta, pair.rank_beta), std::max(kind.overhead, pair.overhead)};
      have = true;
    }
  }
  if (!have_intra) costs.intra = costs.inter;
  if (!have_inter) costs.inter = costs.intra;
  return used;
}

// What a step costs beyond the wire: the core's own work per message (requests, polling). Where a machine runs
// more ranks than it has CPUs for them (its spinning waits then yield at every poll, cpu.h), each message also
// costs a switch of process, the ranks sharing a CPU share the work of its messages and transport copies
// (cost.h), and a rank gets only its share of a CPU for the bytes it reduces: gamma grows by ranks / CPUs.
void add_the_cores_work(double crowding, algo::CostParams& costs) {
  constexpr double kStepOverhead = 1e-6, kSwitch = 5e-6;
  const bool oversubscribed = crowding > 1;
  for (algo::LinkCost* kind : {&costs.intra, &costs.inter}) {
    kind->alpha += kStepOverhead;
    kind->overhead += oversubscribed ? kSwitch : 0;
    kind->crowding = crowding;
  }
  costs.gamma *= crowding;
  costs.source += oversubscribed ? fmt::format(" + 1 us per step, 5 us per message, {:.2g} ranks per CPU sharing "
                                               "its work (more ranks than CPUs on a machine)", crowding)
                                 : std::string(" + 1 us per step");
}

// TBCOLL_LINK_ALPHA_US and TBCOLL_LINK_GBPS: the links between hosts (every link on one host).
void apply_knobs(const env::Settings& settings, algo::CostParams& costs) {
  algo::LinkCost& knobbed = costs.hosts > 1 ? costs.inter : costs.intra;
  if (settings.is_set("TBCOLL_LINK_ALPHA_US")) {
    const double alpha_us = settings.get_double("TBCOLL_LINK_ALPHA_US");
    if (!(alpha_us >= 0) || !std::isfinite(alpha_us)) {
      throw InvalidArgument(fmt::format("[env] TBCOLL_LINK_ALPHA_US={} must be a non-negative number", alpha_us));
    }
    knobbed.alpha = alpha_us * 1e-6;
    costs.source += fmt::format(", TBCOLL_LINK_ALPHA_US={:g}", alpha_us);
  }
  if (settings.is_set("TBCOLL_LINK_GBPS")) {
    const double gbps = settings.get_double("TBCOLL_LINK_GBPS");
    if (!(gbps > 0) || !std::isfinite(gbps)) {
      throw InvalidArgument(fmt::format("[env] TBCOLL_LINK_GBPS={} must be a positive number (Gbit/s)", gbps));
    }
    knobbed.beta = 8.0 / (gbps * 1e9);
    costs.source += fmt::format(", TBCOLL_LINK_GBPS={:g}", gbps);
  }
}

}  // namespace

algo::CostParams link_costs(const Devices& devices, const std::vector<Published>& everyone, double crowding,
                            const std::string& emulation, const env::Settings& settings) {
  algo::CostParams costs;
  std::map<std::string, int> per_host;
  for (const Published& rank : everyone) ++per_host[rank.info.host_id];
  costs.hosts = static_cast<int>(per_host.size());
  for (const auto& [host, ranks] : per_host) costs.ranks_per_host = std::max(costs.ranks_per_host, ranks);
  const std::vector<std::string> used = price_pairs(devices, everyone, costs);
  costs.source = fmt::format("the capabilities of {}", fmt::join(used, ", "));
  add_the_cores_work(crowding, costs);
  if (!emulation.empty() && emulation != "off") costs.source += " + link emulation " + emulation;
  apply_knobs(settings, costs);
  if (costs.hosts == 1) costs.inter = costs.intra;
  return costs;
}

std::vector<KnownFastPath> known_fast_paths(const Devices& devices) {
  std::vector<KnownFastPath> known;
  for (const auto& device : devices) {
    for (const auto& algorithm : device->fast_path_algorithms()) known.push_back({device->name(), algorithm});
  }
  return known;
}

}  // namespace tbcoll::setup
