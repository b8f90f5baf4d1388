// The algorithm table (see registry.h). Each row's schedule lives in its own file, which draws it and counts
// its cost; the one-line descriptions here are what tbcoll-info prints.
#include "algorithms/registry.h"

#include <mutex>

#include <fmt/format.h>

#include "algorithms/algorithms.h"
#include "algorithms/cost.h"
#include "signature.h"
#include "tuner.h"

namespace tbcoll::algo {
namespace {

ByteRange direct_range(const TunerConfig& tuning, int) { return up_to(tuning.direct_max_bytes); }

// The binomial tree's log2(n) steps beat the chain's pipeline for small messages; with two ranks both are one
// message, and the tree sends it whole.
ByteRange binomial_range(const TunerConfig& tuning, int world_size) {
  return world_size == 2 ? kAllSizes : up_to(tuning.tree_max_bytes);
}

void barrier(Exec& exec, const Args&) { barrier_dissemination(exec); }

// Rows the tuner never picks on its own: all_to_allv's direct (the ranks' byte counts differ, so ranks choosing
// by size would not match); TBCOLL_ALGO forces them.
ByteRange forced_only(const TunerConfig&, int) { return {0, 0}; }

// Issue 15's all_reduce/all_gather algorithms: the cost model picks them where it predicts them cheapest
// (benchmarks/tuner_sweep.sh measures that choice against every forced one); with TBCOLL_TUNER=ranges (size
// ranges only), direct and ring keep the sizes they had, and these run only when forced.
ByteRange by_model(const TunerConfig& tuning, int) { return tuning.use_model ? kAllSizes : ByteRange{0, 0}; }

std::string needs_hosts_with_several_ranks(const CallShape& call) {
  if (call.hosts <= 1) {
    return fmt::format("all {} ranks are on one host (ranks with different TBCOLL_HOST_ID are on different hosts)",
                       call.world_size);
  }
  if (call.hosts >= call.world_size) {
    return fmt::format("each of the {} hosts has one rank, so there is nothing to combine inside a host", call.hosts);
  }
  return "";
}

std::vector<Algorithm> built_in() {
  return {
      {OpKind::kAllReduce, "direct", "every rank sends its input to every other, each reduces all n in rank order: "
       "1 step, (n-1)S sent per rank", all_reduce_direct, direct_range, nullptr, cost_all_reduce_direct},
      // Issue 15: ahead of ring, which stays each collective's last row (it takes every size).
      {OpKind::kAllReduce, "tree", "double binary tree, each tree half the data, chunked: reduce up, broadcast "
       "down: 2 ceil(log2 n) steps, about S sent per rank", all_reduce_tree, by_model, nullptr, cost_all_reduce_tree},
      {OpKind::kAllReduce, "recursive_doubling", "swap and combine with r XOR 2^k (non-powers of two folded): "
       "log2 n steps (+2), S sent per step", all_reduce_recursive_doubling, by_model, nullptr,
       cost_all_reduce_recursive_doubling},
      {OpKind::kAllReduce, "halving_doubling", "Rabenseifner: reduce-scatter by recursive halving, all-gather by "
       "recursive doubling (non-powers of two folded): 2 log2 n steps (+2), 2(n-1)/n S sent per rank",
       all_reduce_halving_doubling, by_model, nullptr, cost_all_reduce_halving_doubling},
      {OpKind::kAllReduce, "mesh", "one-shot over a full mesh: every rank sends its input to every peer at once, "
       "chunked, and reduces all n in rank order: 1 step, (n-1)S sent per rank over n-1 links",
       all_reduce_mesh, by_model, nullptr, cost_all_reduce_mesh},
      {OpKind::kAllReduce, "hierarchical", "reduce to one leader per host, ring of the leaders across hosts, back "
       "inside the host: 2 + 2(H-1) steps for H hosts, 2(H-1) S across hosts in all", all_reduce_hierarchical,
       by_model, needs_hosts_with_several_ranks, cost_all_reduce_hierarchical},
      {OpKind::kAllReduce, "ring", "reduce-scatter then all-gather around the ring, chunked and pipelined: 2(n-1) "
       "steps, 2(n-1)/n S sent per rank", all_reduce_ring, nullptr, nullptr, cost_all_reduce_ring},
      {OpKind::kAllGather, "direct", "every rank sends its block to every other: 1 step, (n-1)/n S sent per rank",
       all_gather_direct, direct_range, nullptr, cost_all_gather_direct},
      {OpKind::kAllGather, "hierarchical", "gather at one leader per host, ring of the leaders with whole hosts' "
       "blocks, back inside the host: 2 + (H-1) steps for H hosts, (H-1)/H S received per leader",
       all_gather_hierarchical, by_model, needs_hosts_with_several_ranks, cost_all_gather_hierarchical},
      {OpKind::kAllGather, "recursive_doubling", "swap everything gathered so far with r XOR 2^k (non-powers of "
       "two folded): log2 n steps (+2), (n-1)/n S received per rank", all_gather_recursive_doubling, by_model,
       nullptr, cost_all_gather_recursive_doubling},
      {OpKind::kAllGather, "ring", "blocks forwarded around the ring, chunked: n-1 steps, (n-1)/n S sent per rank",
       all_gather_ring, nullptr, nullptr, cost_all_gather_ring},
      {OpKind::kReduceScatter, "direct", "block p of every rank sent to rank p, reduced there in rank order: 1 step, "
       "(n-1)/n S sent per rank", reduce_scatter_direct, nullptr, nullptr, cost_reduce_scatter_direct},
      {OpKind::kReduce, "direct", "every rank sends its input to the root, which reduces in rank order: 1 step, the "
       "root receives (n-1)S", reduce_direct, nullptr, nullptr, cost_reduce_direct},
      {OpKind::kBroadcast, "binomial", "binomial tree from the root: ceil(log2 n) steps of S", broadcast_tree,
       binomial_range, nullptr, cost_broadcast_binomial},
      {OpKind::kBroadcast, "chain", "root -> next -> ... chunked and pipelined: n-2 + S/chunk chunk times, every "
       "link carries S once", broadcast_chain, nullptr, nullptr, cost_broadcast_chain},
      {OpKind::kBarrier, "dissemination", "round k: token to r+2^k, from r-2^k: ceil(log2 n) steps, no payload",
       barrier, nullptr, nullptr, cost_barrier_dissemination},
      // all_to_all, all_to_allv, gather, scatter (S: a rank's whole send buffer; the root's for gather/scatter).
      {OpKind::kAllToAll, "direct", "every rank posts its n-1 sends and receives at once: 1 step, (n-1)/n S sent "
       "per rank", all_to_all_direct, direct_range},
      {OpKind::kAllToAll, "pairwise", "step k: block to r+k, block from r-k: n-1 steps, (n-1)/n S sent per rank",
       all_to_all_pairwise},
      {OpKind::kAllToAllv, "direct", "every rank posts its n-1 sends and receives at once: 1 step (only when "
       "forced: the ranks' sizes differ)", all_to_allv_direct, forced_only},
      {OpKind::kAllToAllv, "pairwise", "step k: block to r+k, block from r-k: n-1 steps, each byte sent once",
       all_to_allv_pairwise},
      {OpKind::kGather, "binomial", "binomial tree to the root, subtrees' blocks forwarded: ceil(log2 n) steps, the "
       "root receives (n-1)/n S", gather_binomial, binomial_range},
      {OpKind::kGather, "direct", "every rank sends its block to the root: 1 step, the root receives (n-1)/n S in "
       "n-1 messages", gather_direct},
      {OpKind::kScatter, "binomial", "binomial tree from the root, subtrees' blocks forwarded: ceil(log2 n) steps, "
       "the root sends (n-1)/n S", scatter_binomial, binomial_range},
      {OpKind::kScatter, "direct", "the root sends every rank its block: 1 step, the root sends (n-1)/n S in n-1 "
       "messages", scatter_direct},
  };
}

struct Table {
  std::mutex mutex;
  std::vector<Algorithm> rows = built_in();
};

Table& table() {
  static Table instance;
  return instance;
}

}  // namespace

std::vector<Algorithm> algorithms_for(OpKind kind) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<Algorithm> out;
  for (const Algorithm& row : t.rows) {
    if (row.kind == kind) out.push_back(row);
  }
  return out;
}

std::vector<Algorithm> all_algorithms() {
  std::vector<Algorithm> out;
  for (OpKind kind : collectives()) {
    for (const Algorithm& row : algorithms_for(kind)) out.push_back(row);
  }
  return out;
}

void register_algorithm(const Algorithm& row) {
  if (row.run == nullptr || row.name == nullptr || row.name[0] == '\0') {
    throw InvalidArgument("an algorithm row needs a name and a schedule");
  }
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  unsigned rows_of_kind = 0;
  for (const Algorithm& existing : t.rows) {
    if (existing.kind != row.kind) continue;
    ++rows_of_kind;
    if (std::string(existing.name) == row.name) {
      throw InvalidArgument(fmt::format("{} already has an algorithm named {:?}", op_kind_name(row.kind), row.name));
    }
  }
  if (rows_of_kind >= kMaxSchedules) {
    throw InvalidArgument(fmt::format("{} has {} algorithms already, the most a signature can tell apart",
                                      op_kind_name(row.kind), rows_of_kind));
  }
  t.rows.push_back(row);
}

const char* self_algorithm_name() { return "self"; }

bool parse_collective(const std::string& name, OpKind* kind) {
  static const std::pair<const char*, OpKind> names[] = {
      {"all_reduce", OpKind::kAllReduce},         {"allreduce", OpKind::kAllReduce},
      {"all_gather", OpKind::kAllGather},         {"allgather", OpKind::kAllGather},
      {"reduce_scatter", OpKind::kReduceScatter}, {"reducescatter", OpKind::kReduceScatter},
      {"reduce", OpKind::kReduce},                {"broadcast", OpKind::kBroadcast},
      {"bcast", OpKind::kBroadcast},              {"barrier", OpKind::kBarrier},
      {"all_to_all", OpKind::kAllToAll},          {"alltoall", OpKind::kAllToAll},
      {"all_to_allv", OpKind::kAllToAllv},        {"alltoallv", OpKind::kAllToAllv},
      {"gather", OpKind::kGather},                {"scatter", OpKind::kScatter}};
  for (const auto& [text, value] : names) {
    if (name == text) {
      *kind = value;
      return true;
    }
  }
  return false;
}

const std::vector<OpKind>& collectives() {
  static const std::vector<OpKind> kinds = {OpKind::kAllReduce, OpKind::kAllGather, OpKind::kReduceScatter,
                                            OpKind::kReduce,    OpKind::kBroadcast, OpKind::kBarrier,
                                            OpKind::kAllToAll,  OpKind::kAllToAllv, OpKind::kGather,
                                            OpKind::kScatter};
  return kinds;
}

}  // namespace tbcoll::algo
