// Which ports of two ranks share a cable, told by the subnets of their IPv4 addresses: each Thunderbolt cable is a
// link with a subnet of its own (mlx.distributed_config gives each a /30), so a peer is reached over the port whose
// subnet holds one of the peer's ports' addresses, and the other way round (llama.cpp picks its device so). Pure:
// the transport's routes (routes.h) and tbcoll-rdma-check decide with it alike.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tbcoll::ibverbs {

/// A usable port's device, IPv4 address and prefix length (-1: unknown, taken as the address alone).
struct Net {
  std::string device;
  std::string ipv4;
  int prefix = -1;
  bool apple = false;  ///< one of Apple's Thunderbolt ports: a subnet shared by several is ambiguous
};

/// Whether each port's subnet holds the other's address: the same cable (or the same switched network).
bool joined(const Net& a, const Net& b);

/// "rdma_en2 192.168.0.1/30, rdma_en3 ..." (or "no usable port").
std::string nets_text(const std::vector<Net>& nets);

/// The cables between two ranks, as (lower rank's device, higher rank's device), in the lower rank's order, at
/// most `rails`: computed from the lower rank's side so both ranks get the same pairs. None, with *why naming both
/// ranks (lower_name, higher_name) and their ports, when no port shares a subnet, or when one subnet holds several
/// of Apple's ports (which cable is which cannot be told); elsewhere (one switched network) ports pair in order.
std::vector<std::pair<std::string, std::string>> cables_by_subnet(const std::vector<Net>& lower,
                                                                  const std::string& lower_name,
                                                                  const std::vector<Net>& higher,
                                                                  const std::string& higher_name, int rails,
                                                                  std::string* why);

}  // namespace tbcoll::ibverbs
