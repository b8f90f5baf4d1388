// Link emulation: a decorator that makes any transport's endpoints look like a slower link, so the inference
// example and the benchmarks can show what a Thunderbolt-TCP-like (~300 us) or Thunderbolt-RDMA-like (~5-10 us)
// link does to them on one machine (tc netem is not available here).
//
// Every receive completes `delay` after the underlying transport delivered it, measured from the first test()
// of any receive of that endpoint that saw it delivered (each test looks at all pending receives of the
// endpoint, so delays of messages in flight together overlap as on a real link). Sends are not delayed.
// Messages stay in order. With TBCOLL_LINK_DELAY_US
// set, the communicator wraps every endpoint and turns the whole-collective fast paths off (they bypass
// endpoints).
#pragma once

#include <chrono>
#include <memory>

#include "tbcoll/transport.h"

namespace tbcoll::transport {

std::unique_ptr<Endpoint> with_delay(std::unique_ptr<Endpoint> inner, std::chrono::microseconds delay);

}  // namespace tbcoll::transport
