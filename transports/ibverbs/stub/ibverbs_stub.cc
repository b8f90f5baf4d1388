// Built instead of the ibverbs transport when TBCOLL_WITH_IBVERBS=OFF (or no infiniband/verbs.h to build
// against): the device is simply not available, and neither are the raw verbs floors.
#include "transports/ibverbs/floors.h"
#include "transports/devices.h"

namespace tbcoll::transport {
std::shared_ptr<Device> make_ibverbs_device() { return nullptr; }
}  // namespace tbcoll::transport

namespace tbcoll::ibverbs {
Floors system_floors(const FloorOptions&, const PeerExchange& exchange) {
  Floors floors;
  const std::string why = "this build has no ibverbs transport (configure with libibverbs-dev installed)";
  exchange("ERR " + why);  // stay in step with a peer whose build has it
  floors.why_not = why;
  return floors;
}
}  // namespace tbcoll::ibverbs
