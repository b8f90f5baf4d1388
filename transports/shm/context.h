// shm context: a segment per rank and communicator, mapped by every peer on the host; endpoints are queues in
// it, and when every rank shares the host, the whole-collective fast path (fast_path.h).
#pragma once

#include <memory>

#include "tbcoll/transport.hpp"

namespace tbcoll::shm {

std::unique_ptr<transport::Context> make_context(const transport::ContextArgs& args);

}  // namespace tbcoll::shm
