// Loopback context: in-process mailboxes, for ranks that are threads of one process (tests, size-1 groups).
#pragma once

#include <memory>

#include "tbcoll/transport.hpp"

namespace tbcoll::loopback {

std::unique_ptr<transport::Context> make_context(const transport::ContextArgs& args);

}  // namespace tbcoll::loopback
