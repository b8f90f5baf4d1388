// Which cables (rails) join two ranks, and whether a device has room for them: decided from what both ranks'
// contexts published, so both decide alike (the communicator asks Device::can_connect_addresses on both sides).
//
// A rank's routes come from one of three places:
// - a device matrix (device_matrix.h: its row, one list of devices per peer, indexed by the peers' world ranks,
//   PeerInfo::instance; the k-th device of each side's list for the other is the k-th rail);
// - TBCOLL_IB_DEVICES naming devices: every peer over these (the first TBCOLL_IB_RAILS of them), as RoCE NICs that
//   all reach every host;
// - by default, the subnets of the ports' IPv4 addresses: every Thunderbolt cable is a link of its own, so a peer
//   is reached over the port whose subnet holds one of the peer's ports' addresses (and the other way round), as
//   llama.cpp picks its device; up to TBCOLL_IB_RAILS such cables. Where one subnet holds several ports of a rank
//   (link-local 169.254/16 on every Thunderbolt port), which cable reaches which Mac is unknown: on Apple's devices
//   that is an error naming both hosts and the fix (a subnet per cable, or a matrix); elsewhere (one switched
//   network) the ports pair in order.
// A device's queue pair budget (TBCOLL_IB_MAX_QPS: Apple allows about 10 per device; a link takes two) goes to the
// peers in the order of their world ranks: a peer past it is not reached over ibverbs on that device. By subnet,
// a rank does not know which of its lower peers share a device, so the budget is checked once all peers are known
// (Context::connect), and over it init fails naming it.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "transports/ibverbs/port.h"
#include "transports/ibverbs/subnets.h"

namespace tbcoll::ibverbs {

/// What an ibverbs context publishes, and the rank's own view of its routes.
struct ContextAddress {
  int instance = -1;               ///< the rank's world rank (PeerInfo::instance)
  std::vector<std::string> ports;  ///< Port::address() of each device the rank uses
  std::map<std::string, int> budget;  ///< queue pairs allowed per device (0: no limit of ours)
  enum class Kind { kEveryPeer, kMatrix, kSubnets } kind = Kind::kEveryPeer;
  std::vector<std::string> devices;   ///< kEveryPeer: the devices, in rail order
  std::map<int, std::vector<std::string>> routes;  ///< kMatrix: peer world rank -> devices (none: not ibverbs)
  using Net = ibverbs::Net;
  std::vector<Net> nets;  ///< kSubnets: each usable device's IPv4 address and prefix (subnets.h)
  int rails = 1;     ///< kSubnets: cables per peer at most (TBCOLL_IB_RAILS)
  std::string host;  ///< the rank's host name, for messages

  /// The devices this rank uses to reach world rank `peer` (empty: none). Not for kSubnets (rails_between).
  std::vector<std::string> route_to(int peer) const;
  /// How many peers before world rank `peer` this rank reaches over `device` (its place in the device's budget).
  int place_of(int peer, const std::string& device) const;
  /// The published port address of `device`, parsed (InvalidArgument if the rank publishes none).
  PortAddress port_of(const std::string& device) const;
};

std::string encode(const ContextAddress& address);
/// InvalidArgument naming what is malformed.
ContextAddress decode_context_address(const std::string& text);

/// One rail: this rank's device and the peer's port on the same cable.
struct Rail {
  std::string device;
  PortAddress peer;
};

/// The rails between self and peer, or none, with *why_not (may be null) saying why: no cable in the matrix or on a
/// shared subnet, subnets that cannot tell the cables apart, or a device's queue pair budget spent on peers of lower
/// world rank. Symmetric.
std::vector<Rail> rails_between(const ContextAddress& self, const ContextAddress& peer, std::string* why_not);

}  // namespace tbcoll::ibverbs
