// Link emulation: a decorator that makes any transport's endpoints look like a slower link, so the inference
// example and the benchmarks can show what a Thunderbolt-TCP-like or Thunderbolt-RDMA-like link does to them on
// one machine (tc netem is not available here). The settings and presets are in emulation.h.
//
// Each endpoint models the link from its peer to this rank (one direction of one peer pair; the peer's endpoint
// models the other direction). A message of B bytes that the underlying transport delivered at time t occupies
// the link from max(t, the end of the previous message on the link) for B / bandwidth (serialisation: messages
// sent back to back queue behind each other), and its receive completes latency after that. Latencies of
// messages in flight together overlap, as on a real link. The arrival time is taken at the first test() of any
// receive of the endpoint that sees the bytes in (each test looks at the pending receives of the endpoint in
// posting order, up to the first whose bytes are not in).
//
// A failure that comes over the link (the peer closed, finished or died, a reset, a mismatching message) is
// reported only once the messages that arrived before it have waited out their emulated time, as a real link
// delivers what was sent before a close first: a sender may send and destroy its communicator at once. The
// failure itself pays no emulated time, so a wait for it lasts at most the held messages' remaining delay (a
// local abort too); destroying a communicator never waits for its links.
//
// The emulated time is added to the underlying transport's own: a message is delivered no earlier than
// latency + B / bandwidth after it was sent, and later by however long the real transport took (tcp loopback
// moves ~3-4 GB/s here, so caps well below that dominate; tb5-rdma's 7.5 GB/s does not). Sends are not
// delayed. Messages stay in order. With emulation on, the communicator wraps every endpoint and turns the
// whole-collective fast paths off (they bypass endpoints).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>

#include "tbcoll/transport.hpp"
#include "transports/delay/emulation.h"

namespace tbcoll::transport {

/// inner itself when link is off. receives_waiting: one counter shared by every endpoint of a communicator (the
/// receives still waiting for their bytes; while there are any, waits nap in short slices to stamp them on time).
std::unique_ptr<Endpoint> with_emulation(std::unique_ptr<Endpoint> inner, const LinkEmulation& link,
                                         std::shared_ptr<std::atomic<int>> receives_waiting);

}  // namespace tbcoll::transport
