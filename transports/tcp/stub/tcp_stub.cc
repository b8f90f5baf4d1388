// Built instead of the TCP transport when TBCOLL_WITH_TCP=OFF: the device is simply not available.
#include "transports/devices.h"

namespace tbcoll::transport {
std::shared_ptr<Device> make_tcp_device() { return nullptr; }
}  // namespace tbcoll::transport
