// The alpha-beta cost model: a predicted time per algorithm and call, from which the tuner picks the cheapest
// algorithm that can run a call (tuner.h). Pure functions of plain data, unit-tested in tests/unit/cost_test.cc.
//
// A call's time is counted from four quantities of its schedule, each on its critical path:
//   steps         messages in sequence (each pays alpha, the one-way latency of a message);
//   link bytes    bytes through the busiest link direction (each pays beta, the link's seconds per byte; a
//                 rank's links to different peers run in parallel, as on a full mesh of Thunderbolt cables or
//                 the link emulation's per-peer links);
//   rank bytes    bytes the busiest rank pushes through its transport, over all its links together (each pays
//                 rank_beta: what the transport stack itself costs per byte, the CPU copying through tcp, say);
//   reduce bytes  bytes of input the busiest rank reduces (each pays gamma);
//   messages      messages the busiest rank sends and receives (each pays overhead: LogP's o, the CPU time of
//                 posting and completing one message; a direct exchange among n ranks pays it 2(n-1) times in
//                 its one step, a pipelined schedule once per chunk);
//   averages      rank bytes and messages of the average rank: where a machine runs c ranks per CPU (crowding),
//                 a CPU does the work of c ranks, so the job cannot finish before c times the average rank's
//                 work (recursive doubling's 4 messages among 3 ranks, on 2 CPUs, beat direct's 6); rank bytes
//                 and messages below stand for the larger of the busiest rank's and c times the average's.
//   time = steps * alpha + link_bytes * beta + rank_bytes * rank_beta + reduce_bytes * gamma + messages * overhead
// where a schedule pipelined over k chunks overlaps the wire with the rank's CPU (its transport and reduction):
// max(link, rank + reduce), plus the rest / k.
//   window        bytes a pipelined schedule keeps in flight on a link at most (the receives it posts ahead into
//                 slots, freed one slot at a time). Where a link moves a message only into a posted receive (the
//                 link emulation, an RDMA rendezvous), a slot is free again a round trip after it was posted:
//                 the receive's readiness reaches the sender, the slot's bytes come back. So the link carries
//                 at most one window per 2 alpha + slot * beta, and L link bytes take no less than
//                 (L / window - 1) * (2 alpha + slot * beta) + window * beta: the bandwidth term once the window
//                 covers the round trip's bandwidth-delay product, more below it. The link emulation charges
//                 no trip for the readiness (it holds a message from when its receive is posted, so a slot is
//                 free again alpha + slot * beta after it was posted), and tcp and ibverbs take bytes ahead of
//                 the receives (socket and bounce buffers): on those the term is an upper bound. The schedules
//                 size their windows so that it does not bind on the presets' links.
//   staged        bytes of buffers a schedule that does not pipeline (recursive doubling, halving-doubling, direct)
//                 holds at once: it receives whole messages, then reduces them, then sends the result. Past the
//                 last-level cache (CostParams::cache_bytes) every one of those passes goes to memory, where a
//                 pipelined schedule reduces and forwards each chunk while it is still in cache: its rank and
//                 reduce terms count twice. Measured on tcp, 2 ranks, 16-64 MiB (32 MiB L3): halving-doubling,
//                 recursive doubling and direct took 1.8-2.1x the time the other terms predict, the ring and the
//                 tree 0.9-1.1x; the f32 sum kernel (tbcoll_reduce_bench) does 26.5 GB/s on 256 KiB, 5.8 on 64 MiB.
//
// Where the figures come from (communicator.cc): alpha and rank_beta from the transports' Capabilities
// (latency_us, bandwidth_gbps) of the pairs' transports, the worst pair of each kind (inside a host, between
// hosts), plus 1 us per step for the core's own work; overhead from the transports' message_overhead_us. Where a
// machine runs more ranks than it has CPUs for them (crowding c = ranks / CPUs > 1), each message also costs a
// switch to another process (5 us: the peer it wakes runs on a CPU some rank gave up; fitted to tcp on 2 CPUs
// with 3, 4 and 8 ranks, where a small all-reduce took about 7.5 us per message sent, whatever its steps), and
// gamma grows by c, each rank's share of a CPU; the link
// emulation adds its latency
// to alpha and sets beta (it adds to the real transport's time, delay.h); TBCOLL_LINK_ALPHA_US and TBCOLL_LINK_GBPS
// override alpha and beta of the links between hosts (of every link when the job runs on one host). gamma is a fixed 10
// GB/s (the reduce kernels in L2/L3 here).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

#include "algorithms/registry.h"

namespace tbcoll::algo {

/// One kind of link's figures, in seconds.
struct LinkCost {
  double alpha = 5e-6;   ///< one-way latency of a message
  double beta = 0;       ///< seconds per byte through one link direction (0: links are not the bottleneck)
  double rank_beta = 0;  ///< seconds per byte a rank sends, over all its links together
  double overhead = 0;   ///< CPU seconds a rank spends per message it sends or receives
  double crowding = 1;   ///< ranks per CPU on the most crowded machine (>= 1): ranks that share CPUs share work
};

struct CostParams {
  LinkCost intra;                   ///< between ranks of one host
  LinkCost inter;                   ///< between ranks of different hosts
  double gamma = 1e-10;             ///< seconds per byte of input reduced
  size_t chunk_bytes = 256 * 1024;  ///< the pipelining chunk of ring, chain and tree schedules
  /// The last-level cache the staged buffers of a schedule that does not pipeline must fit (see above). One
  /// figure for every rank, so that all of them pick alike: 32 MiB, this machine's L3 and about what the
  /// M-series' shared L2 and system cache hold.
  double cache_bytes = 32.0 * 1024 * 1024;
  int hosts = 1;                    ///< distinct hosts in the communicator
  int ranks_per_host = 1;           ///< the most ranks on one host
  std::string source;               ///< where the figures came from, for --explain and the logs

  /// The links a flat schedule (one that ignores hosts) waits on: between hosts when there are several.
  const LinkCost& flat() const { return hosts > 1 ? inter : intra; }
  /// "alpha 5.0 us, beta 0.133 ns/B (7.50 GB/s) per link, ... (source)".
  std::string describe() const;
};

/// What the model counts of one schedule (see above); time() prices it on link.
struct Traffic {
  double steps = 0;
  double link_bytes = 0;
  double rank_bytes = 0;
  double reduce_bytes = 0;
  double messages = 0;

  /// Chunks a pipelined schedule (ring, tree, mesh, chain) streams through: the wire then carries one chunk while
  /// the rank's CPU pushes another through its transport and reduces a third, and the slower of the two sets the
  /// pace (the transport's copies and the reduction share the rank's CPU, so those two add up); the rest adds its
  /// share of one chunk (the pipeline's fill). 1: one after the other, all terms add up.
  double chunks = 1;
  /// Messages and rank bytes of the average rank; < 0: as many as the busiest (every rank alike).
  double average_messages = -1;
  double average_rank_bytes = -1;
  /// Bytes of buffers a schedule that does not pipeline holds at once (send, receive, scratch); 0 for pipelined.
  double staged = 0;
  /// Bytes a pipelined schedule keeps in flight on its busiest link, in slots of window_slot bytes (see above);
  /// 0: as many as it sends (no limit).
  double window = 0;
  double window_slot = 0;

  /// Time for the link bytes through one link: beta per byte, or the window's round trips where it is short.
  double link_seconds(const LinkCost& link) const {
    const double bandwidth = link_bytes * link.beta;
    if (window <= 0 || link_bytes <= window) return bandwidth;
    const double round_trip = 2 * link.alpha + window_slot * link.beta;
    return std::max(bandwidth, (link_bytes / window - 1) * round_trip + window * link.beta);
  }

  double time(const LinkCost& link, double gamma, double cache_bytes = 0) const {
    // Ranks that share CPUs share their work: the busiest rank's, or c times the average rank's.
    auto crowded = [&](double busiest, double average) {
      return std::max(busiest, (average < 0 ? busiest : average) * std::max(1.0, link.crowding));
    };
    // Buffers past the cache: each pass of the whole message goes to memory (see staged above).
    const double passes = cache_bytes > 0 && staged > cache_bytes ? 2 : 1;
    const double link_time = link_seconds(link);
    const double rank_time = passes * crowded(rank_bytes, average_rank_bytes) * link.rank_beta;
    const double reduce_time = passes * reduce_bytes * gamma;
    const double slowest = std::max(link_time, rank_time + reduce_time);
    const double sum = link_time + rank_time + reduce_time;
    return steps * link.alpha + slowest + (sum - slowest) / std::max(1.0, chunks) +
           crowded(messages, average_messages) * link.overhead;
  }

};

/// Bytes mesh keeps in flight per peer (all_reduce_mesh.cc posts its receives this far ahead): more than the
/// round-trip bandwidth-delay product of the longest link tbcoll targets, TCP over Thunderbolt (2 x 300 us x
/// 2.5 GB/s = 1.5 MB; Thunderbolt RDMA and 10 GbE: under 100 KB), so that mesh's window does not bind there.
constexpr size_t kMeshWindowBytes = size_t{2} << 20;
/// Chunks of chunk_bytes mesh keeps posted per peer: kMeshWindowBytes of them, at least 2 (one reduced while the
/// next arrives).
inline size_t mesh_depth(size_t chunk_bytes) {
  const size_t chunk = std::max<size_t>(1, chunk_bytes);
  return std::max<size_t>(2, (kMeshWindowBytes + chunk - 1) / chunk);
}
/// Reduce-scatter receives the ring keeps posted, into scratch slots of one chunk (all_reduce_ring.cc).
constexpr size_t kRingSlots = 8;

/// ceil(log2 n) for n >= 1.
int ceil_log2(int n);
/// floor(log2 n) for n >= 1.
int floor_log2(int n);

// ---- the algorithms' rows (S = call.bytes, n = world size; formulas in cost.cc) ----
double cost_all_reduce_direct(const CallShape& call, const CostParams& params);
double cost_all_reduce_ring(const CallShape& call, const CostParams& params);
double cost_all_gather_direct(const CallShape& call, const CostParams& params);
double cost_all_gather_ring(const CallShape& call, const CostParams& params);
double cost_reduce_scatter_direct(const CallShape& call, const CostParams& params);
double cost_reduce_direct(const CallShape& call, const CostParams& params);
double cost_broadcast_binomial(const CallShape& call, const CostParams& params);
double cost_broadcast_chain(const CallShape& call, const CostParams& params);
double cost_barrier_dissemination(const CallShape& call, const CostParams& params);

// The exchanges (S: a rank's whole send buffer for all_to_all, 0 for all_to_allv, whose sizes differ between
// ranks; the root's whole buffer for gather and scatter). Their traits leave the choice to the size ranges; the
// model prices them for --explain.
double cost_all_to_all_direct(const CallShape& call, const CostParams& params);
double cost_all_to_all_pairwise(const CallShape& call, const CostParams& params);
double cost_gather_direct(const CallShape& call, const CostParams& params);
double cost_gather_binomial(const CallShape& call, const CostParams& params);

// ---- the schedules beyond the ring and the direct exchange. Each handles non-powers of two as its schedule
// does (fold the extra ranks in and out: two more steps of S). ----
/// all_reduce tree: NCCL's double binary tree, two trees of S/2 each, pipelined in chunks.
double cost_all_reduce_tree(const CallShape& call, const CostParams& params);
/// all_reduce recursive_doubling: log2 n exchanges of the whole buffer.
double cost_all_reduce_recursive_doubling(const CallShape& call, const CostParams& params);
/// all_reduce halving_doubling (Rabenseifner): reduce-scatter by recursive halving, all-gather by doubling.
double cost_all_reduce_halving_doubling(const CallShape& call, const CostParams& params);
/// all_reduce mesh: one-shot, every rank sends its input to every peer at once.
double cost_all_reduce_mesh(const CallShape& call, const CostParams& params);
/// all_reduce hierarchical: reduce inside each host (shm), ring between the hosts' leaders, broadcast back.
double cost_all_reduce_hierarchical(const CallShape& call, const CostParams& params);
/// all_gather recursive_doubling: log2 n exchanges of doubling size.
double cost_all_gather_recursive_doubling(const CallShape& call, const CostParams& params);
/// all_gather hierarchical: gather inside each host, ring between leaders, broadcast back inside the host.
double cost_all_gather_hierarchical(const CallShape& call, const CostParams& params);

}  // namespace tbcoll::algo
