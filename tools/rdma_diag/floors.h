// The raw verbs floors between two processes: UC (or RC) SEND one-way latency, one queue pair's bandwidth one way
// and both ways at once, measured with plain verbs (no tbcoll protocol) between the same two processes that run
// the collectives, so `tbcoll-perf --pingpong --transport ibverbs` shows how close a collective is to the wire.
// tbcoll-rdma-check prints the same figures from the same code (raw_link.h).
//
// This header needs no verbs headers: tbcoll-perf includes it in every build, and a build without the ibverbs
// transport answers "not measured" (tools/rdma_diag/stub).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tbcoll/error.hpp"
#include "tbcoll/store.hpp"

namespace tbcoll::ibverbs {

/// Swaps a blob with the one peer: both ranks call it the same number of times, in the same order; returns what
/// the peer passed to its call of the same number. Also a barrier. Throws TimeoutError past its deadline.
using PeerExchange = std::function<std::string(const std::string& mine)>;

/// A PeerExchange through a rendezvous store: call n sets <prefix>/<rank>/<n> and reads <prefix>/<peer>/<n>, each
/// within timeout_s. The store must outlive it.
inline PeerExchange store_exchange(std::shared_ptr<Store> store, std::string prefix, int rank, int peer,
                                   double timeout_s) {
  auto calls = std::make_shared<uint64_t>(0);
  return [store, prefix, rank, peer, timeout_s, calls](const std::string& mine) {
    const uint64_t n = (*calls)++;
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(std::min(timeout_s, 1e9)));
    const std::string base = prefix + "/";
    store->set(base + std::to_string(rank) + "/" + std::to_string(n), {mine.begin(), mine.end()}, deadline);
    const std::vector<uint8_t> theirs = store->get(base + std::to_string(peer) + "/" + std::to_string(n), deadline);
    return std::string(theirs.begin(), theirs.end());
  };
}

struct FloorOptions {
  int rank = 0;              ///< 0 or 1: rank 0 leads the timing
  std::string mode = "uc";   ///< uc or rc (TBCOLL_IB_MODE; auto means uc)
  std::string device;        ///< "" = the first device with an active port and an IPv4-mapped GID
  size_t latency_bytes = 8;  ///< at most 4096 (one frame)
  int round_trips = 10000;
  size_t bandwidth_bytes = size_t{1} << 20;  ///< message size of the bandwidth runs
  int messages = 256;                        ///< per direction and run
  double message_timeout_s = 10;             ///< a message that has not arrived by then is lost
};

struct Floors {
  bool measured = false;
  std::string why_not;  ///< when not measured
  std::string device;   ///< this rank's device
  std::string peer_device;
  std::string mode;
  int mtu = 0;                ///< path MTU in bytes
  double one_way_us = 0;      ///< median round trip / 2
  double one_qp_gbps = 0;     ///< rank 0 -> rank 1, one queue pair, GB/s (1e9 B/s)
  double both_ways_gbps = 0;  ///< per direction, both ranks sending at once (the slower direction)
};

/// The floors through the system's verbs library (dlopen). Both ranks call it; it never throws for a missing
/// library, device or a failure of the peer's (measured=false, why_not says what and its fix); TimeoutError only
/// when the exchange itself times out.
Floors system_floors(const FloorOptions& options, const PeerExchange& exchange);

}  // namespace tbcoll::ibverbs
