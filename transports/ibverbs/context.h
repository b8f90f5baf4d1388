// ibverbs context: one communicator's endpoints, over the connections of the rank's ports (one per device it
// uses), one connection per rail to each peer.
#pragma once

#include <memory>
#include <vector>

#include "tbcoll/transport.hpp"
#include "transports/ibverbs/port.h"
#include "transports/ibverbs/routes.h"

namespace tbcoll::ibverbs {

/// self: this rank's routes and budgets; ports: one per device in them. stripe_bytes: from this size a message
/// is cut across a peer's rails.
std::unique_ptr<transport::Context> make_context(std::vector<std::shared_ptr<Port>> ports, ContextAddress self,
                                                 size_t stripe_bytes, const transport::ContextArgs& args);

}  // namespace tbcoll::ibverbs
