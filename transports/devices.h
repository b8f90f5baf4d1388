// Factories of the devices compiled into this build (a transport that is not built provides a stub factory
// returning nullptr, so the core never needs an #ifdef).
#pragma once

#include <memory>

#include "tbcoll/transport.hpp"

namespace tbcoll::transport {

std::shared_ptr<Device> make_loopback_device();
std::shared_ptr<Device> make_shm_device();
std::shared_ptr<Device> make_ibverbs_device();
std::shared_ptr<Device> make_tcp_device();

}  // namespace tbcoll::transport
