// ibverbs context: one communicator's endpoints, over the connections of the rank's port on the device.
#pragma once

#include <memory>

#include "tbcoll/transport.h"
#include "transports/ibverbs/port.h"

namespace tbcoll::ibverbs {

std::unique_ptr<transport::Context> make_context(std::shared_ptr<Port> port, const transport::ContextArgs& args);

}  // namespace tbcoll::ibverbs
