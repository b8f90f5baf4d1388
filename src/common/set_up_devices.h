// The devices of one communicator's set-up: what the core asks for before it makes its contexts. Declared here for
// the core, defined by the transports (with the link emulation, transports/delay/device.cc): the core's one call
// into transports/ besides the registry's public available_devices(). Internal to the library: plug-ins see
// available_devices() alone.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tbcoll/transport.hpp"

namespace tbcoll::transport {

/// The devices of one communicator's set-up: available_devices(), each wrapped in the link emulation that the
/// communicator's knobs (Config::knobs) or the environment ask for (TBCOLL_LINK_EMULATION, TBCOLL_LINK_DELAY_US).
/// A wrapped device reports the emulated link in its capabilities (latency_us includes it, link_bandwidth_gbps is
/// its cap) and its contexts offer no fast path. Throws InvalidArgument for a bad emulation setting.
struct SetUpDevices {
  std::vector<std::shared_ptr<Device>> devices;
  bool emulated = false;
  std::string emulation = "off";        ///< what is emulated, as logs and tools show it
  std::string emulation_token = "off";  ///< a canonical text of it, for records of what was measured on it
};
SetUpDevices devices_for(const std::map<std::string, std::string>& knobs);

}  // namespace tbcoll::transport
