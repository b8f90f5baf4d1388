// Built instead of the shm transport when TBCOLL_WITH_SHM=OFF: the device is simply not available.
#include "transports/devices.h"

namespace tbcoll::transport {
std::shared_ptr<Device> make_shm_device() { return nullptr; }
}  // namespace tbcoll::transport
