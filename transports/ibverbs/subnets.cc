#include "transports/ibverbs/subnets.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tbcoll::ibverbs {
namespace {

// Whether ipv4 lies in the subnet of `net` (an unknown prefix: the address itself).
bool in_subnet(const Net& net, const std::string& ipv4) {
  in_addr a{}, b{};
  if (inet_pton(AF_INET, net.ipv4.c_str(), &a) != 1 || inet_pton(AF_INET, ipv4.c_str(), &b) != 1) return false;
  const int prefix = net.prefix < 0 ? 32 : std::min(net.prefix, 32);
  const uint32_t mask = prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix);
  return (ntohl(a.s_addr) & mask) == (ntohl(b.s_addr) & mask);
}

}  // namespace

bool joined(const Net& a, const Net& b) { return in_subnet(a, b.ipv4) && in_subnet(b, a.ipv4); }

std::string nets_text(const std::vector<Net>& nets) {
  std::vector<std::string> out;
  for (const Net& net : nets) {
    out.push_back(net.prefix >= 0 ? fmt::format("{} {}/{}", net.device, net.ipv4, net.prefix)
                                  : fmt::format("{} {}", net.device, net.ipv4));
  }
  return out.empty() ? std::string("no usable port") : fmt::format("{}", fmt::join(out, ", "));
}

std::vector<std::pair<std::string, std::string>> cables_by_subnet(const std::vector<Net>& lower,
                                                                  const std::string& lower_name,
                                                                  const std::vector<Net>& higher,
                                                                  const std::string& higher_name, int rails,
                                                                  std::string* why) {
  std::vector<std::pair<std::string, std::string>> cables;
  std::vector<bool> taken(higher.size(), false);
  for (const Net& mine : lower) {
    int matches = 0;
    size_t first = higher.size();
    for (size_t k = 0; k < higher.size(); ++k) {
      if (!joined(mine, higher[k])) continue;
      ++matches;
      if (first == higher.size() && !taken[k]) first = k;
    }
    int back = 0;
    for (const Net& other : lower) back += first < higher.size() && joined(other, higher[first]);
    const bool apple = mine.apple || (first < higher.size() && higher[first].apple);
    if ((matches > 1 || back > 1) && apple) {
      *why = fmt::format(
          "{} ({}) and {} ({}) share one subnet on several Thunderbolt ports, so which cable joins them is "
          "unknown: give each cable a subnet of its own (mlx.distributed_config gives each a /30), or a device "
          "matrix (TBCOLL_IB_DEVICES, MLX_IBV_DEVICES, or the hostfile's \"rdma\" fields)",
          lower_name, nets_text(lower), higher_name, nets_text(higher));
      return {};
    }
    if (first == higher.size()) continue;
    taken[first] = true;
    cables.emplace_back(mine.device, higher[first].device);
  }
  if (cables.empty()) {
    *why = fmt::format(
        "no RDMA port of {} ({}) shares a subnet with one of {} ({}): no cable joins them (connect one, and give "
        "both ends' interfaces addresses on one subnet), or name the devices in a device matrix",
        lower_name, nets_text(lower), higher_name, nets_text(higher));
  }
  cables.resize(std::min<size_t>(cables.size(), static_cast<size_t>(std::max(1, rails))));
  return cables;
}

}  // namespace tbcoll::ibverbs
