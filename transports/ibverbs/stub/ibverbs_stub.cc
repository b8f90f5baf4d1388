// Built instead of the ibverbs transport when TBCOLL_WITH_IBVERBS=OFF (or no infiniband/verbs.h to build
// against): the device is simply not available.
#include "transports/devices.h"

namespace tbcoll::transport {
std::shared_ptr<Device> make_ibverbs_device() { return nullptr; }
}  // namespace tbcoll::transport
