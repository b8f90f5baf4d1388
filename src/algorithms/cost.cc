// The alpha-beta costs of every algorithm (cost.h). S = call.bytes (the input per rank of all_reduce, reduce,
// broadcast; the gathered or scattered total of all_gather, reduce_scatter), n = world size, C = the chunk.
#include "algorithms/cost.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "algorithms/topology.h"

namespace tbcoll::algo {

int ceil_log2(int n) {
  int steps = 0;
  while ((1 << steps) < n) ++steps;
  return steps;
}

int floor_log2(int n) {
  int steps = 0;
  while ((2 << steps) <= n) ++steps;
  return steps;
}

std::string CostParams::describe() const {
  auto one = [](const LinkCost& link) {
    return fmt::format(
        "alpha {:.1f} us, o {:.2f} us per message, beta {} per link, {} per rank", link.alpha * 1e6, link.overhead * 1e6,
        link.beta > 0 ? fmt::format("{:.2f} GB/s", 1e-9 / link.beta) : std::string("unlimited"),
        link.rank_beta > 0 ? fmt::format("{:.2f} GB/s", 1e-9 / link.rank_beta) : std::string("unlimited"));
  };
  std::string text = hosts > 1 ? fmt::format("between hosts {}; inside a host {}", one(inter), one(intra))
                               : fmt::format("{}", one(intra));
  text +=
      fmt::format("; reduce {:.1f} GB/s; {} host(s), up to {} rank(s) per host", 1e-9 / gamma, hosts, ranks_per_host);
  if (!source.empty()) text += " (" + source + ")";
  return text;
}

namespace {

double n_of(const CallShape& call) { return static_cast<double>(std::max(1, call.world_size)); }
double s_of(const CallShape& call) { return static_cast<double>(call.bytes); }
double elements_of(const CallShape& call) {
  return static_cast<double>(call.bytes / std::max<size_t>(1, dtype_size(call.dtype)));
}
double chunk_of(const CostParams& params, double bytes) {
  return std::min(bytes, static_cast<double>(std::max<size_t>(1, params.chunk_bytes)));
}
// Messages of at most chunk bytes that carry bytes (at least one, even empty).
double pieces(double bytes, double chunk) { return std::max(1.0, std::ceil(bytes / std::max(1.0, chunk))); }

// A ring all-reduce of S among n ranks on link (reduce-scatter then all-gather, 2(n-1) steps). Fewer elements
// than ranks leave blocks empty, and an empty block sends nothing: each non-empty one makes 2(n-1) hops, 4 messages
// at each rank it passes (received and sent, both halves). A segment of more chunks than the ring has slots
// streams through kRingSlots of them (the all-gather's receives are posted behind); with fewer, each step's
// chunks are all posted and the steps' chain is what waits.
double ring_all_reduce(double n, double s, const LinkCost& link, double gamma, double chunk, double elements) {
  if (n <= 1) return 0;
  const double share = (n - 1) / n * s, blocks = std::clamp(elements, 1.0, n), k = pieces(s / n, chunk);
  const double busiest = std::min(4 * (n - 1), 4 * blocks) * k;
  const double average = 4 * (n - 1) * blocks / n * k;
  Traffic traffic{2 * (n - 1), 2 * share, 2 * share, share, busiest, k, average};
  if (k > static_cast<double>(kRingSlots)) {
    traffic.window_slot = s / n / k;
    traffic.window = static_cast<double>(kRingSlots) * traffic.window_slot;
  }
  return traffic.time(link, gamma);
}

// A schedule that does not pipeline, holding `staged` bytes of buffers at once, on the flat links (cost.h).
double unpipelined(Traffic traffic, double staged, const CostParams& params) {
  traffic.staged = staged;
  return traffic.time(params.flat(), params.gamma, params.cache_bytes);
}

// A ring all-gather of S in total among n ranks (n-1 steps of S/n).
double ring_all_gather(double n, double s, const LinkCost& link, double chunk) {
  if (n <= 1) return 0;
  const double share = (n - 1) / n * s;
  return Traffic{n - 1, share, share, 0, 2 * (n - 1) * pieces(s / n, chunk), pieces(s / n, chunk)}.time(link, 0);
}

// A binomial broadcast of S among n ranks: ceil(log2 n) steps of the whole buffer.
double binomial_broadcast(int n, double s, const LinkCost& link) {
  const double steps = ceil_log2(std::max(1, n));
  return Traffic{steps, steps * s, steps * s, 0, steps}.time(link, 0);
}

}  // namespace

// 1 step; every link carries S in parallel; a rank sends (n-1)S and reduces n inputs.
double cost_all_reduce_direct(const CallShape& call, const CostParams& params) {
  const double n = n_of(call), s = s_of(call);
  // Staged: the input, a scratch of n inputs, the result.
  return unpipelined(Traffic{1, s, (n - 1) * s, (n - 1) * s, 2 * (n - 1)}, (n + 2) * s, params);
}

// 2(n-1) steps; 2(n-1)/n S through each link and rank; (n-1)/n S reduced.
double cost_all_reduce_ring(const CallShape& call, const CostParams& params) {
  return ring_all_reduce(n_of(call), s_of(call), params.flat(), params.gamma, chunk_of(params, s_of(call)),
                         elements_of(call));
}

// 1 step; each link carries one block S/n; a rank sends (n-1)/n S.
double cost_all_gather_direct(const CallShape& call, const CostParams& params) {
  const double n = n_of(call), s = s_of(call);
  return Traffic{1, s / n, (n - 1) / n * s, 0, 2 * (n - 1)}.time(params.flat(), params.gamma);
}

double cost_all_gather_ring(const CallShape& call, const CostParams& params) {
  return ring_all_gather(n_of(call), s_of(call), params.flat(), chunk_of(params, s_of(call)));
}

// 1 step; block p of every rank to rank p: S/n per link, (n-1)/n S per rank, reduced at the owner.
double cost_reduce_scatter_direct(const CallShape& call, const CostParams& params) {
  const double n = n_of(call), s = s_of(call);
  return Traffic{1, s / n, (n - 1) / n * s, (n - 1) / n * s, 2 * (n - 1)}.time(params.flat(), params.gamma);
}

// 1 step; the root receives S on each of n-1 links, (n-1)S in all, and reduces it.
double cost_reduce_direct(const CallShape& call, const CostParams& params) {
  const double n = n_of(call), s = s_of(call);
  return Traffic{1, s, (n - 1) * s, (n - 1) * s, n - 1}.time(params.flat(), params.gamma);
}

double cost_broadcast_binomial(const CallShape& call, const CostParams& params) {
  return binomial_broadcast(call.world_size, s_of(call), params.flat());
}

// n-1 steps for the first chunk to reach the end, then the rest of S behind it: every link carries S, plus
// n-2 chunk times of pipeline fill.
double cost_broadcast_chain(const CallShape& call, const CostParams& params) {
  const double n = n_of(call), s = s_of(call);
  if (n <= 1) return 0;
  const double bytes = s + (n - 2) * chunk_of(params, s), k = pieces(s, chunk_of(params, s));
  return Traffic{n - 1, bytes, bytes, 0, 2 * k, k}.time(params.flat(), params.gamma);
}

double cost_barrier_dissemination(const CallShape& call, const CostParams& params) {
  const double rounds = ceil_log2(std::max(1, call.world_size));
  return Traffic{rounds, 0, 0, 0, 2 * rounds}.time(params.flat(), 0);
}

// 1 step: every rank posts its n-1 blocks (S/n each) at once, one per link.
double cost_all_to_all_direct(const CallShape& call, const CostParams& params) {
  const double n = n_of(call), s = s_of(call);
  return Traffic{1, s / n, (n - 1) / n * s, 0, 2 * (n - 1)}.time(params.flat(), 0);
}

// n-1 steps of one block each way.
double cost_all_to_all_pairwise(const CallShape& call, const CostParams& params) {
  const double n = n_of(call), s = s_of(call);
  return Traffic{n - 1, (n - 1) / n * s, (n - 1) / n * s, 0, 2 * (n - 1)}.time(params.flat(), 0);
}

// 1 step: the root receives n-1 blocks (S/n each), one per link; scatter is the same in the other direction.
double cost_gather_direct(const CallShape& call, const CostParams& params) {
  const double n = n_of(call), s = s_of(call);
  return Traffic{1, s / n, (n - 1) / n * s, 0, n - 1, 1, 2 * (n - 1) / n}.time(params.flat(), 0);
}

// ceil(log2 n) steps; the root receives its subtrees' blocks, the largest half of S, (n-1)/n S in all.
double cost_gather_binomial(const CallShape& call, const CostParams& params) {
  const double n = n_of(call), s = s_of(call), steps = ceil_log2(std::max(1, call.world_size));
  return Traffic{steps, s / 2, (n - 1) / n * s, 0, steps, 1, 2 * (n - 1) / n}.time(params.flat(), 0);
}

// Two trees, each carrying S/2, pipelined in chunks: up (reduce) and down (broadcast) ceil(log2 n) levels each.
// A rank sends a half-chunk up to its parent and one down to each child, per tree. Each tree's n-1 edges carry
// one half each way, 4(n-1) halves in all; the busiest rank, an inner node with two children in one tree and a
// leaf in the other, sends 4 halves (2S), and min(n, 4) below 4 ranks (either rank of 2 sends S) (topology.h's
// trees; cost_test checks this against them). The busiest link carries S, plus the pipeline's fill (the first chunk through
// 2 depth hops, the rest behind it); each half is reduced once, S per rank at most. The chunk is the schedule's
// own: at least 32 KiB, at most the chunk knob, about 1/16 of a half (all_reduce_tree.cc).
//
// The phases run in lock-step, though: a rank starts phase i + 1 once its phase i is done, and there, as an inner
// node of one tree, it waits for chunk i from its children, who send it in their own phase i, once their
// children's came. So a phase lasts while one chunk's wave crosses the trees' depth, each level a latency and
// the chunk's bytes: the k phases that send chunks up, depth levels; the phases that bring chunk i - lag down
// (lag = 2 depth + 2, all_reduce_tree.cc), depth - 1 levels, at once with the up-going ones where both run; the
// last result one hop more. Where latency dominates, the wave sets the time, not the pipelined terms.
double cost_all_reduce_tree(const CallShape& call, const CostParams& params) {
  const int world = std::max(1, call.world_size);
  const double n = world, s = s_of(call);
  if (world <= 1) return 0;
  const double busiest = std::min(n, 4.0), total = 4 * (n - 1);  // halves sent, over both trees
  const double depth = tree_depth(world);
  const double chunk = std::min(chunk_of(params, s / 2), std::max(32.0 * 1024, s / 2 / 16));
  const double fill = (2 * depth - 1) * chunk;
  const double k = pieces(s / 2, chunk);  // per tree; each message sent is also received: 2 per half sent
  const double pipelined = Traffic{2 * depth, s + fill, busiest * s / 2 + fill, s, 2 * busiest * k, k,
                                   2 * total / n * k, total / n * s / 2 + fill}
                               .time(params.flat(), params.gamma);
  const double lag = 2 * depth + 2, hops = k * depth + std::min(k, lag) * (depth - 1) + 1;
  const LinkCost& link = params.flat();
  return std::max(pipelined, hops * (link.alpha + chunk * link.beta));
}

// p = 2^floor(log2 n); ranks beyond p fold their input into a partner first and get the result back after (two
// more steps of S); log2 p exchanges of the whole buffer, each reduced. The busiest rank (a partner) sends
// log2 p + 1 messages of S; in all, p log2 p + 2(n - p).
double cost_all_reduce_recursive_doubling(const CallShape& call, const CostParams& params) {
  const int n = std::max(1, call.world_size);
  const double s = s_of(call), rounds = floor_log2(n), p = 1 << floor_log2(n), fold = p == n ? 0 : 1;
  const double sent = p * rounds + 2 * (n - p);  // messages of S
  // Staged: input, result, the partner's message.
  return unpipelined(Traffic{rounds + 2 * fold, (rounds + 2 * fold) * s, (rounds + fold) * s, (rounds + fold) * s,
                             2 * rounds + 2 * fold, 1, 2 * sent / n, sent * s / n},
                     3 * s, params);
}

// Rabenseifner: log2 p halving steps (reduce-scatter: S/2, S/4, ...) and log2 p doubling steps (all-gather):
// 2(p-1)/p S sent, (p-1)/p S reduced; non-powers of two fold in and out as recursive doubling does (the partner
// also sends the result back: S more).
double cost_all_reduce_halving_doubling(const CallShape& call, const CostParams& params) {
  const int n = std::max(1, call.world_size);
  const double s = s_of(call), rounds = floor_log2(n), p = 1 << floor_log2(n), fold = p == n ? 0 : 1;
  const double bytes = 2 * (p - 1) / p * s + 2 * fold * s, busiest = 2 * (p - 1) / p * s + fold * s;
  const double sent = 2 * p * rounds + 2 * (n - p), sent_bytes = (2 * (p - 1) + 2 * (n - p)) * s;
  // Staged: input, result, and a scratch of S for the partner's half (the fold's whole input).
  return unpipelined(Traffic{2 * rounds + 2 * fold, bytes, busiest, (p - 1) / p * s + fold * s,
                             4 * rounds + 2 * fold, 1, 2 * sent / n, sent_bytes / n},
                     3 * s, params);
}

// direct's exchange, chunk by chunk: a message per chunk and peer each way, mesh_depth chunks in flight per link.
double cost_all_reduce_mesh(const CallShape& call, const CostParams& params) {
  const double n = n_of(call), s = s_of(call), chunk = chunk_of(params, s), k = pieces(s, chunk);
  Traffic traffic{1, s, (n - 1) * s, (n - 1) * s, 2 * (n - 1) * k, k};
  traffic.window = std::min(k, static_cast<double>(mesh_depth(params.chunk_bytes))) * chunk;
  traffic.window_slot = chunk;
  return traffic.time(params.flat(), params.gamma);
}

// Inside a host (r ranks): every rank's input to the leader, reduced there (1 step; r-1 inputs); between the H
// leaders: a ring all-reduce of S; back inside the host: a binomial broadcast of S.
double cost_all_reduce_hierarchical(const CallShape& call, const CostParams& params) {
  const double s = s_of(call);
  const int r = std::max(1, params.ranks_per_host), hosts = std::max(1, params.hosts);
  double time = ring_all_reduce(hosts, s, params.inter, params.gamma, chunk_of(params, s), elements_of(call));
  if (r > 1) {
    time += Traffic{1, s, (r - 1) * s, (r - 1) * s, r - 1.0}.time(params.intra, params.gamma);
    time += binomial_broadcast(r, s, params.intra);
  }
  return time;
}

// p = 2^floor(log2 n): log2 p exchanges of 1, 2, 4 ... blocks ((p-1)/p S sent); extra ranks send their block in
// first and receive the whole S after.
double cost_all_gather_recursive_doubling(const CallShape& call, const CostParams& params) {
  const int n = std::max(1, call.world_size);
  const double s = s_of(call), rounds = floor_log2(n), p = 1 << floor_log2(n), fold = p == n ? 0 : 1;
  const double bytes = (p - 1) / p * s + fold * s;
  return Traffic{rounds + 2 * fold, bytes, bytes, 0, 2 * rounds + 2 * fold}.time(params.flat(), params.gamma);
}

// Inside a host: each rank's block to the leader (1 step); between leaders: a ring all-gather of S (each host's
// r blocks as one); back inside the host: a binomial broadcast of S.
double cost_all_gather_hierarchical(const CallShape& call, const CostParams& params) {
  const double s = s_of(call), n = n_of(call);
  const int r = std::max(1, params.ranks_per_host), hosts = std::max(1, params.hosts);
  double time = ring_all_gather(hosts, s, params.inter, chunk_of(params, s));
  if (r > 1) {
    const double block = s / n;
    time += Traffic{1, block, (r - 1) * block, 0, r - 1.0}.time(params.intra, 0);
    time += binomial_broadcast(r, s, params.intra);
  }
  return time;
}

}  // namespace tbcoll::algo
