// tcp context: a listener per communicator, one socket per peer, and the handshake that admits only the
// job's ranks of this communicator.
#pragma once

#include <memory>

#include "tbcoll/transport.hpp"

namespace tbcoll::tcp {

std::unique_ptr<transport::Context> make_context(const transport::ContextArgs& args);

}  // namespace tbcoll::tcp
