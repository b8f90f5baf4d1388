// Which cables (rails) join two ranks, and whether a device has room for them: decided from what both ranks'
// contexts published, so both decide alike (the communicator asks Device::can_connect_addresses on both sides).
//
// A rank's routes come from a device matrix (device_matrix.h: its row, one list of devices per peer, indexed by
// the peers' world ranks, PeerInfo::instance) or, without one, "every peer over these devices" (the first usable
// device, or the first TBCOLL_IB_RAILS of them). The k-th device of each side's list for the other is the k-th
// rail. A device's queue pair budget (TBCOLL_IB_MAX_QPS: Apple allows about 10 per device in a process) goes to
// the peers in the order of their world ranks: a peer past it is not reached over ibverbs on that device.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "transports/ibverbs/port.h"

namespace tbcoll::ibverbs {

/// What an ibverbs context publishes, and the rank's own view of its routes.
struct ContextAddress {
  int instance = -1;               ///< the rank's world rank (PeerInfo::instance)
  std::vector<std::string> ports;  ///< Port::address() of each device the rank uses
  std::map<std::string, int> budget;  ///< queue pairs allowed per device (0: no limit of ours)
  bool every_peer = true;             ///< routes: every peer over `devices`
  std::vector<std::string> devices;   ///< every_peer: the devices, in rail order
  std::map<int, std::vector<std::string>> routes;  ///< !every_peer: peer world rank -> devices (none: not ibverbs)

  /// The devices this rank uses to reach world rank `peer` (empty: none).
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

/// The rails between self and peer, or none, with *why_not (may be null) saying why: no cable in the matrix, or
/// a device's queue pair budget spent on peers of lower world rank. Symmetric.
std::vector<Rail> rails_between(const ContextAddress& self, const ContextAddress& peer, std::string* why_not);

}  // namespace tbcoll::ibverbs
